//! `media-capabilities probe`: for every GPU, its identity, what the driver stated, the attributes
//! the agent would publish and any failure — what a user would otherwise piece together from
//! vainfo. Collecting is `ProbeSource`; this module only renders, to any writer.

use crate::agent::cli::{OutputFormat, ProbeArgs};
use crate::agent::probing::{Isolation, ProbeCommand, ProbeError, ProbeSource, Probed};
use crate::catalogue::{Attribute, Capability};
use crate::node::device::{AttrValue, GpuDevice, describe};
use crate::node::failure::FailureKind;
use crate::node::sysfs::{PciIdentity, Roots};
use crate::node::va::report::Report;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

/// Why `probe` could not show anything.
#[derive(Debug, thiserror::Error)]
pub enum ProbeCmdError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("find this program to run probes with: {0}")]
    CurrentExe(std::io::Error),
    #[error("write output: {0}")]
    Write(#[from] std::io::Error),
    #[error("render output: {0}")]
    Render(String),
    #[error("interrupted; every probe child was killed")]
    Interrupted,
    #[error(
        "no recorded probes in {0} (hint: `media-capabilities probe -o json > FILE` on a GPU node \
         records one; the format is in docs/report-format.md)"
    )]
    NoRecords(PathBuf),
}

/// Builds the probe source `args` describe: recorded probes with `--from`, else live ones.
pub fn source(args: &ProbeArgs) -> Result<ProbeSource, ProbeCmdError> {
    if let Some(from) = &args.from {
        return Ok(ProbeSource::Recorded(from.clone()));
    }
    let p = &args.probing;
    Ok(ProbeSource::Live {
        roots: Roots {
            dev: p.dev_root.clone(),
            sys: p.sys_root.clone(),
        },
        pci_ids: p.pci_ids.clone(),
        only: args.render_node.clone(),
        isolation: Isolation {
            command: ProbeCommand::current_exe().map_err(ProbeCmdError::CurrentExe)?,
            timeout: p.probe_timeout,
            parallel: p.probe_parallel,
            overrides: p.va_driver.clone(),
        },
    })
}

/// Runs `probe` and writes its output to `out`. When `interrupted` completes first (Ctrl-C,
/// SIGTERM), the probing is abandoned: every probe child is killed with its process group, and
/// nothing is printed.
pub async fn run(
    args: &ProbeArgs,
    out: &mut dyn Write,
    interrupted: impl std::future::Future<Output = ()>,
) -> Result<(), ProbeCmdError> {
    let source = source(args)?;
    let probed = tokio::select! {
        probed = source.probe() => probed?,
        () = interrupted => return Err(ProbeCmdError::Interrupted),
    };
    if let (Some(from), true) = (&args.from, probed.is_empty()) {
        return Err(ProbeCmdError::NoRecords(from.clone()));
    }
    for record in &probed {
        tracing::info!(
            "{}",
            crate::node::device::log_line(&describe(&record.node(), &record.outcome()))
        );
    }
    render(&probed, args.output, args.from.as_deref(), out)
}

/// One GPU as `-o json|yaml` prints it; `--from` reads it back (it ignores `name` and
/// `attributes`, which it derives again).
#[derive(Serialize)]
struct Shown<'a> {
    name: &'a str,
    render_node: &'a PathBuf,
    pci: &'a PciIdentity,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<&'a Report>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<&'a str>,
    /// The failure's kind, so that `--from` reads it back as the same failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_kind: Option<FailureKind>,
    attributes: BTreeMap<&'static str, serde_json::Value>,
}

fn json_value(value: &AttrValue) -> serde_json::Value {
    match value {
        AttrValue::Bool(b) => serde_json::Value::Bool(*b),
        AttrValue::String(s) => serde_json::Value::String(s.clone()),
    }
}

/// The table's first line with `--from`.
const REPLAYED: &str = "Recorded probes (--from), replayed: not this machine's GPUs.";

/// Writes the probes in `format`; `recorded` is where they were read from with `--from`, which
/// the table says first: its render nodes and libva's words are another machine's, replayed.
pub(crate) fn render(
    probed: &[Probed],
    format: OutputFormat,
    recorded: Option<&std::path::Path>,
    out: &mut dyn Write,
) -> Result<(), ProbeCmdError> {
    let devices: Vec<GpuDevice> = probed
        .iter()
        .map(|p| describe(&p.node(), &p.outcome()))
        .collect();
    let shown: Vec<Shown<'_>> = probed
        .iter()
        .zip(&devices)
        .map(|(p, d)| Shown {
            name: &d.name,
            render_node: &p.render_node,
            pci: &p.pci,
            report: p.report.as_ref(),
            failure: d.failure.as_ref().map(|f| f.text.as_str()),
            failure_kind: d.failure.as_ref().map(|f| f.kind),
            attributes: d
                .attributes
                .iter()
                .map(|(k, v)| (*k, json_value(v)))
                .collect(),
        })
        .collect();
    match format {
        OutputFormat::Json => {
            let text = serde_json::to_string_pretty(&shown)
                .map_err(|e| ProbeCmdError::Render(e.to_string()))?;
            writeln!(out, "{text}")?;
        }
        OutputFormat::Yaml => {
            let text =
                serde_yaml::to_string(&shown).map_err(|e| ProbeCmdError::Render(e.to_string()))?;
            write!(out, "{text}")?;
        }
        OutputFormat::Table => {
            if probed.is_empty() {
                writeln!(out, "no PCI render nodes found")?;
            }
            if recorded.is_some() {
                writeln!(out, "{REPLAYED}\n")?;
            }
            for (index, (p, d)) in probed.iter().zip(&devices).enumerate() {
                if index > 0 {
                    writeln!(out)?;
                }
                table(p, d, recorded.is_some(), out)?;
            }
        }
    }
    Ok(())
}

fn text_attr(device: &GpuDevice, attribute: crate::catalogue::Identity) -> String {
    match device.get(Attribute::Identity(attribute)) {
        Some(AttrValue::String(s)) => s.clone(),
        Some(AttrValue::Bool(b)) => b.to_string(),
        None => "-".into(),
    }
}

fn table(p: &Probed, d: &GpuDevice, recorded: bool, out: &mut dyn Write) -> std::io::Result<()> {
    use crate::catalogue::{Group, Identity};
    writeln!(out, "GPU {}", d.name)?;
    let field =
        |out: &mut dyn Write, label: &str, value: &str| writeln!(out, "  {label:<15} {value}");
    field(out, "render node:", &p.render_node.display().to_string())?;
    field(out, "PCI address:", &p.pci.address)?;
    field(
        out,
        "vendor:product:",
        &format!("{}:{}", p.pci.vendor, p.pci.product),
    )?;
    field(out, "kernel driver:", &p.pci.driver)?;
    field(out, "name:", &text_attr(d, Identity::Name))?;
    field(out, "VA driver:", &text_attr(d, Identity::VaDriver))?;
    if let Some(report) = &p.report {
        if let Some(version) = &report.va_api_version {
            field(out, "VA-API:", version)?;
        }
        if let Some(driver) = &report.driver_override {
            field(out, "forced driver:", driver)?;
        }
    }
    for (name, full) in &d.trimmed {
        writeln!(out, "  ({name} trimmed to 64 bytes from {full:?})")?;
    }
    if let Some(failure) = &d.failure {
        writeln!(out, "  FAILED: {failure}")?;
    }
    writeln!(out, "  capabilities:")?;
    for group in Group::ALL {
        let yes: Vec<&str> = group
            .capabilities()
            .filter(|c| d.capability(*c))
            .map(Capability::value)
            .collect();
        let list = if yes.is_empty() {
            "-".to_string()
        } else {
            yes.join(" ")
        };
        writeln!(out, "    {:<7} {list}", group.as_str())?;
    }
    let Some(report) = &p.report else {
        return Ok(());
    };
    writeln!(out, "  driver statements:")?;
    let mut profiles: Vec<(String, Vec<String>)> = Vec::new();
    for config in &report.configs {
        let profile = config.profile.to_string();
        let mut entry = config.entrypoint.to_string();
        if let Some(rt) = config.rt_format {
            let rt = serde_json::to_value(rt)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            entry = format!("{entry} (RTFormat {rt})");
        }
        match profiles.iter_mut().find(|(p, _)| *p == profile) {
            Some((_, entries)) => entries.push(entry),
            None => profiles.push((profile, vec![entry])),
        }
    }
    let width = profiles.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
    for (profile, entries) in &profiles {
        writeln!(out, "    {profile:<width$}  {}", entries.join(", "))?;
    }
    for (label, surfaces) in [
        ("VideoProc surface formats", &report.video_proc),
        ("AV1 surface formats", &report.av1_surfaces),
    ] {
        if let Some(s) = surfaces {
            match &s.error {
                Some(error) => writeln!(out, "    {label}: {error}")?,
                None => {
                    let formats: Vec<String> = s.formats.iter().map(ToString::to_string).collect();
                    writeln!(out, "    {label}: {}", formats.join(" "))?;
                }
            }
        }
    }
    for warning in &report.warnings {
        writeln!(out, "    warning: {warning}")?;
    }
    if !report.messages.is_empty() {
        if recorded {
            writeln!(out, "  libva said, when it was recorded:")?;
        } else {
            writeln!(out, "  libva said:")?;
        }
        for message in &report.messages {
            writeln!(out, "    {message}")?;
        }
    }
    Ok(())
}
