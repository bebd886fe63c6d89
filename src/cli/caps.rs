//! `kubectl media caps`: what every GPU in the fleet states, at a glance. Collects the
//! ResourceSlices (from the cluster or `-f` files), builds the [`Inventory`], and renders it as a
//! table, a wide table with one column per capability, JSON or YAML records, or a summary.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::IsTerminal;

use clap::Args;
use serde::Serialize;

use crate::catalogue::{self, Capability, Group, Identity};
use crate::cli::output::{self, RenderError};
use crate::cli::table::{Cell, Grid, Paint, TableStyle, Width};
use crate::cli::{CapabilityFlags, Error, Global, Io};
use crate::fleet::cluster::Cluster;
use crate::fleet::files::{self, Source};
use crate::fleet::inventory::{self, Counts, Drift, Filter, Gpu, Inventory, Status};
use crate::fleet::objects::{Kind, Kinds, Objects};

/// Deletes the agent's pod on one node (the DaemonSet makes a new one, with a new claim); the
/// node name follows.
const AGENT_POD_DELETE: &str = "kubectl -n liken-system delete pod -l app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName";

const EXAMPLES: &str = "\
Examples:
  # Every GPU and what its driver states
  kubectl media caps

  # The GPUs that decode 10-bit HEVC and scale 10-bit frames, with a count
  kubectl media caps --decode HEVCMain10 --scale 10bit

  # How many GPUs and nodes state each capability, and which models drift
  kubectl media caps --summary

  # One column per capability; or records for scripts
  kubectl media caps -o wide
  kubectl media caps -o json | jq '.[] | select(.attributes.decodeAV1Main10)'

  # From saved objects instead of a cluster
  kubectl get resourceslices -o yaml > fleet.yaml
  kubectl media caps -f fleet.yaml";

/// Lists every GPU's statements from the media.liken.sh slices, beside liken's render nodes.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXAMPLES)]
pub struct CapsArgs {
    /// Read objects from this file instead of the cluster (kubectl get -o yaml|json output,
    /// Lists, multi-document YAML); repeat for several, - for standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub files: Vec<String>,

    /// Only the GPUs of this node; repeat or give a comma list.
    #[arg(long, value_name = "NODE", value_delimiter = ',')]
    pub node: Vec<String>,

    #[command(flatten)]
    pub capabilities: CapabilityFlags,

    /// Per capability, how many GPUs and nodes state it; then the models that drift.
    #[arg(long)]
    pub summary: bool,

    /// Output format: wide adds one column per capability; json and yaml print one record per
    /// GPU with every attribute.
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    pub output: Option<CapsFormat>,

    /// Print no header row and no notes below the table.
    #[arg(long)]
    pub no_headers: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CapsFormat {
    /// The table plus one column per capability.
    Wide,
    /// One JSON record per GPU.
    Json,
    /// One YAML record per GPU.
    Yaml,
}

impl CapsArgs {
    /// The filter the flags ask for.
    pub(crate) fn filter(&self) -> Result<Filter, catalogue::UnknownCapability> {
        let mut capabilities = self.capabilities.parse()?;
        capabilities.sort();
        capabilities.dedup();
        Ok(Filter {
            nodes: self.node.clone(),
            capabilities,
        })
    }

    /// Flags that cannot go together, as a usage message.
    pub(crate) fn conflict(&self) -> Option<String> {
        if self.summary && self.output == Some(CapsFormat::Wide) {
            return Some(
                "--summary has no wide form (hint: drop -o wide, or use -o json for the figures)"
                    .into(),
            );
        }
        if self.no_headers && matches!(self.output, Some(CapsFormat::Json | CapsFormat::Yaml)) {
            return Some("--no-headers applies to tables only (hint: drop --no-headers with -o json or -o yaml)".into());
        }
        None
    }
}

/// Runs `caps`: reads the slices, builds the inventory, renders it.
pub(crate) fn run(args: &CapsArgs, global: &Global, io: &mut Io<'_>) -> Result<(), Error> {
    if let Some(conflict) = args.conflict() {
        return Err(Error::Usage(conflict));
    }
    let filter = args.filter()?;
    // Only slices: a file may hold pods, claims and events too, which caps passes over unread.
    let mut objects = Objects::wanting(Kinds::only(&[Kind::ResourceSlice]));
    if args.files.is_empty() {
        let connection = global.kube.connection();
        // One worker drives the requests; pages are parsed on the runtime's blocking threads
        // while the next one is fetched (see `Cluster::list`).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        runtime.block_on(async {
            let cluster = Cluster::connect(&connection).await?;
            cluster.list_slices(&mut objects).await
        })?;
    } else {
        let sources: Vec<Source> = args.files.iter().map(|f| Source::parse(f)).collect();
        files::read_into(&mut objects, &sources, io.stdin)?;
    }
    let warn = global.color.for_stderr();
    for note in &objects.notes {
        let _ = writeln!(
            io.stderr,
            "{} {note}",
            owo_colors::OwoColorize::style(&"warning:", warn.warning)
        );
    }
    let inventory = inventory::build(objects.slices);
    // As kubectl: an empty table is a line on stderr; JSON and YAML stay parseable (`[]`).
    let table = !matches!(args.output, Some(CapsFormat::Json | CapsFormat::Yaml));
    if inventory.gpus.is_empty() && table {
        let _ = writeln!(io.stderr, "No media.liken.sh or liken.sh devices found.");
        return Ok(());
    }
    let text = match args.output {
        Some(CapsFormat::Json) | Some(CapsFormat::Yaml) => {
            let value = if args.summary {
                serde_json::to_value(summary_record(&inventory, &filter))
            } else {
                serde_json::to_value(records(&inventory, &filter))
            }
            .map_err(RenderError::from)?;
            if args.output == Some(CapsFormat::Json) {
                let mut text = serde_json::to_string_pretty(&value).map_err(RenderError::from)?;
                text.push('\n');
                text
            } else {
                serde_yaml::to_string(&value).map_err(RenderError::from)?
            }
        }
        _ => {
            let style = TableStyle {
                colored: global.color.for_stdout().colored,
                width: table_width(),
                no_headers: args.no_headers,
            };
            if args.summary {
                render_summary(&inventory, &filter, &style)
            } else {
                render_table(
                    &inventory,
                    &filter,
                    args.output == Some(CapsFormat::Wide),
                    &style,
                )
            }
        }
    };
    output::write_all(io.stdout, &text)?;
    Ok(())
}

/// `COLUMNS` when set (tests and scripts set it), else the terminal's width when standard output
/// is one, else no limit.
fn table_width() -> Width {
    match std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<u16>().ok())
    {
        Some(columns) if columns > 0 => Width::Columns(columns),
        _ if std::io::stdout().is_terminal() => Width::Terminal,
        _ => Width::Unlimited,
    }
}

/// The compact statement of a GPU: `decode AV1 H264 · encode H264 · scale 8 10`.
pub(crate) fn compact(gpu: &Gpu) -> String {
    let mut parts = Vec::new();
    for group in Group::ALL {
        let labels: Vec<&str> = group
            .capabilities()
            .filter(|&c| gpu.states(c) == Some(true))
            .map(Capability::label)
            .collect();
        if !labels.is_empty() {
            parts.push(format!("{group} {}", labels.join(" ")));
        }
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(" · ")
    }
}

/// The short status word of a row.
pub(crate) fn status_word(gpu: &Gpu) -> &'static str {
    match (&gpu.status, gpu.drift) {
        (Status::Described, None) => "ok",
        (Status::Described, Some(_)) => "drift",
        (Status::ProbeFailed, _) => "probe failed",
        (Status::Incomplete { .. }, _) => "incomplete",
        (
            Status::NotDescribed {
                agent_on_node: true,
            },
            _,
        ) => "not probed",
        (
            Status::NotDescribed {
                agent_on_node: false,
            },
            _,
        ) => "no agent",
    }
}

fn status_paint(gpu: &Gpu) -> Option<Paint> {
    match (&gpu.status, gpu.drift) {
        (Status::Described, None) => None,
        (Status::Described, Some(_)) | (Status::Incomplete { .. }, _) => Some(Paint::Yellow),
        (Status::ProbeFailed, _) | (Status::NotDescribed { .. }, _) => Some(Paint::Red),
    }
}

fn dash(value: Option<&str>) -> String {
    value.filter(|v| !v.is_empty()).unwrap_or("-").to_string()
}

/// The table (`-o wide` when `wide`), then the notes that explain its marks.
pub(crate) fn render_table(
    inventory: &Inventory,
    filter: &Filter,
    wide: bool,
    style: &TableStyle,
) -> String {
    let mut header: Vec<String> = ["NODE", "DEVICE", "GPU", "ADDRESS", "DRIVER", "VA DRIVER"]
        .map(String::from)
        .to_vec();
    if wide {
        header.extend(["VENDOR", "PRODUCT"].map(String::from));
        header.extend(Capability::ALL.iter().map(|c| wide_header(*c)));
    } else {
        header.push("CAPABILITIES".into());
    }
    header.push("STATUS".into());
    // Names, addresses and statuses never wrap; the free-text columns share what is left.
    let mut unwrapped = vec![0, 1, 3, 4, header.len() - 1];
    if wide {
        unwrapped.extend(6..header.len() - 1);
    }

    let selected: Vec<&Gpu> = inventory.select(filter).collect();
    let rows = selected
        .iter()
        .map(|gpu| {
            let mut row = vec![
                Cell::plain(gpu.node.as_str()),
                Cell::plain(dash(gpu.device.as_deref())),
                Cell::plain(dash(gpu.name.as_deref())),
                Cell::plain(dash(Some(&gpu.address))),
                Cell::plain(dash(gpu.kernel_driver.as_deref())),
                Cell::plain(dash(gpu.va_driver.as_deref())),
            ];
            if wide {
                row.push(Cell::plain(dash(gpu.vendor.as_deref())));
                row.push(Cell::plain(dash(gpu.product.as_deref())));
                for capability in Capability::ALL {
                    row.push(match (gpu.device.is_some(), gpu.states(capability)) {
                        (false, _) => Cell::plain("-"),
                        (true, Some(true)) => Cell::painted("yes", Some(Paint::Green)),
                        (true, Some(false)) => Cell::plain("no"),
                        (true, None) => Cell::painted("?", Some(Paint::Yellow)),
                    });
                }
            } else {
                row.push(Cell::plain(compact(gpu)));
            }
            let mut status = status_word(gpu).to_string();
            if let Some(index) = gpu.drift {
                let _ = write!(status, " [{}]", index + 1);
            }
            row.push(Cell::painted(status, status_paint(gpu)));
            row
        })
        .collect();
    let grid = Grid {
        header,
        rows,
        unwrapped,
    };
    let mut out = if selected.is_empty() && style.no_headers {
        String::new()
    } else {
        grid.render(style)
    };
    push_notes(&mut out, inventory, &selected, filter, style);
    out
}

/// The notes below a table, after a blank line; none with `--no-headers`.
fn push_notes(
    out: &mut String,
    inventory: &Inventory,
    shown: &[&Gpu],
    filter: &Filter,
    style: &TableStyle,
) {
    if style.no_headers {
        return;
    }
    let notes = notes(inventory, shown, filter);
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            out.push_str(&note);
            out.push('\n');
        }
    }
}

/// `-o wide` column names: the group and the compact label (`DEC HEVC-10`), short enough for
/// 18 columns.
fn wide_header(capability: Capability) -> String {
    let group = match capability.group() {
        Group::Decode => "DEC",
        Group::Encode => "ENC",
        Group::Scale => "SCALE",
    };
    format!("{group} {}", capability.label())
}

const AGENT_LOG: &str = "kubectl -n liken-system logs ds/media-capabilities";

/// One line per kind of mark in the shown rows, with the hint that resolves it, then each
/// drifting model, then the count when a filter is on.
fn notes(inventory: &Inventory, shown: &[&Gpu], filter: &Filter) -> Vec<String> {
    let mut notes = Vec::new();
    let count = |pred: &dyn Fn(&Gpu) -> bool| shown.iter().filter(|g| pred(g)).count();
    let gpus = |n: usize| {
        if n == 1 {
            "1 GPU".to_string()
        } else {
            format!("{n} GPUs")
        }
    };

    let failed = count(&|g| g.status == Status::ProbeFailed);
    if failed > 0 {
        notes.push(format!(
            "probe failed: {}: the agent's query of the VA-API driver failed, so every capability \
             reads false (hint: the failure is in the agent's log: {AGENT_LOG})",
            gpus(failed)
        ));
    }
    let unprobed: BTreeSet<&str> = shown
        .iter()
        .filter(|g| {
            g.status
                == Status::NotDescribed {
                    agent_on_node: true,
                }
        })
        .map(|g| g.node.as_str())
        .collect();
    if !unprobed.is_empty() {
        let nodes: Vec<&str> = unprobed.iter().copied().collect();
        // The agent's render nodes come from a claim allocated once, when its pod started: a GPU
        // that appeared later (hot-plug, a reboot with a new card) is not in its container.
        notes.push(format!(
            "not probed: {} on {}: liken publishes a render node, but the agent on that node \
             describes no GPU at its address: the agent's claim was allocated before this GPU \
             appeared, so its container cannot open it (hint: delete the agent's pod on that \
             node so that its claim is made anew: {AGENT_POD_DELETE}={})",
            gpus(count(&|g| g.status
                == Status::NotDescribed {
                    agent_on_node: true
                })),
            list_nodes(&nodes),
            nodes[0]
        ));
    }
    let agentless: BTreeSet<&str> = shown
        .iter()
        .filter(|g| {
            g.status
                == Status::NotDescribed {
                    agent_on_node: false,
                }
        })
        .map(|g| g.node.as_str())
        .collect();
    if !agentless.is_empty() {
        let nodes: Vec<&str> = agentless.iter().copied().collect();
        notes.push(format!(
            "no agent: {} on {}: liken publishes render nodes there, but no media-capabilities \
             slice (hint: is the agent running there? kubectl -n liken-system get pods -o wide \
             --field-selector spec.nodeName={})",
            gpus(count(&|g| g.status
                == Status::NotDescribed {
                    agent_on_node: false
                })),
            list_nodes(&nodes),
            nodes[0]
        ));
    }
    let incomplete: Vec<&&Gpu> = shown
        .iter()
        .filter(|g| matches!(g.status, Status::Incomplete { .. }))
        .collect();
    if !incomplete.is_empty() {
        let mut missing = BTreeSet::new();
        for gpu in &incomplete {
            if let Status::Incomplete { unreadable } = &gpu.status {
                missing.extend(unreadable.iter().map(|c| c.attribute()));
            }
        }
        notes.push(format!(
            "incomplete: {}: no bool value for {} (hint: published by another version of the \
             agent? see its log: {AGENT_LOG})",
            gpus(incomplete.len()),
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let shown_drift: BTreeSet<usize> = shown.iter().filter_map(|g| g.drift).collect();
    for index in shown_drift {
        notes.push(format!(
            "[{}] {}",
            index + 1,
            describe_drift(&inventory.drift[index])
        ));
    }
    if !filter.is_empty() {
        notes.push(count_line(&inventory.counts(filter), filter));
    }
    notes
}

fn list_nodes(nodes: &[&str]) -> String {
    match nodes.len() {
        0 => String::new(),
        1 => format!("node {}", nodes[0]),
        n if n <= 4 => format!("nodes {}", nodes.join(", ")),
        n => format!("nodes {}, ... ({n} in all)", nodes[..3].join(", ")),
    }
}

/// One line on a drifting model: which capabilities differ, and per variant what it states,
/// where, and with which VA drivers.
pub(crate) fn describe_drift(drift: &Drift) -> String {
    let model = match &drift.name {
        Some(name) => format!("{name} ({}:{})", drift.vendor, drift.product),
        None => format!("{}:{}", drift.vendor, drift.product),
    };
    let differing: Vec<&str> = drift.differing.iter().map(|c| c.attribute()).collect();
    let variants: Vec<String> = drift
        .variants
        .iter()
        .map(|v| {
            // One capability differs: say true or false. Several: name each with its value.
            let stated = match drift.differing.as_slice() {
                [one] => (v.capabilities[*one as usize] == Some(true)).to_string(),
                several => several
                    .iter()
                    .map(|&c| {
                        format!(
                            "{}={}",
                            c.attribute(),
                            v.capabilities[c as usize] == Some(true)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            let nodes: Vec<&str> = v.nodes.iter().map(String::as_str).collect();
            let drivers: Vec<&str> = v.va_drivers.iter().map(String::as_str).collect();
            format!(
                "{stated} on {} GPU{} ({}) with {}",
                v.gpus,
                if v.gpus == 1 { "" } else { "s" },
                list_nodes(&nodes),
                drivers.join(" / ")
            )
        })
        .collect();
    format!(
        "drift: {model} states {} differently: {}",
        differing.join(", "),
        variants.join("; ")
    )
}

fn count_line(counts: &Counts, filter: &Filter) -> String {
    let mut asked: Vec<String> = filter
        .capabilities
        .iter()
        .map(|c| c.attribute().to_string())
        .collect();
    if !filter.nodes.is_empty() {
        asked.insert(0, format!("on {}", filter.nodes.join(", ")));
    }
    format!(
        "{} of {} GPUs on {} of {} nodes ({})",
        counts.matching_gpus,
        counts.gpus,
        counts.matching_nodes,
        counts.nodes,
        asked.join(", ")
    )
}

/// `--summary`: per capability, the GPUs and nodes that state it, then drift.
pub(crate) fn render_summary(inventory: &Inventory, filter: &Filter, style: &TableStyle) -> String {
    let counts = inventory.counts(filter);
    let rows = inventory
        .summary(filter)
        .into_iter()
        .map(|(capability, gpus, nodes)| {
            vec![
                Cell::plain(capability.attribute()),
                Cell::plain(format!("{gpus}/{}", counts.matching_gpus)),
                Cell::plain(format!("{nodes}/{}", counts.matching_nodes)),
            ]
        })
        .collect();
    let grid = Grid {
        header: ["CAPABILITY", "GPUS", "NODES"].map(String::from).to_vec(),
        rows,
        unwrapped: vec![0, 1, 2],
    };
    let mut out = grid.render(style);
    let selected: Vec<&Gpu> = inventory.select(filter).collect();
    push_notes(&mut out, inventory, &selected, filter, style);
    out
}

/// A GPU as `-o json|yaml` prints it: every catalogue attribute, `null` when absent.
#[derive(Serialize)]
pub(crate) struct Record<'a> {
    pub node: &'a str,
    pub device: Option<&'a str>,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
    pub attributes: serde_json::Map<String, serde_json::Value>,
}

pub(crate) fn records<'a>(inventory: &'a Inventory, filter: &'a Filter) -> Vec<Record<'a>> {
    inventory
        .select(filter)
        .map(|gpu| {
            let mut attributes = serde_json::Map::new();
            for identity in Identity::ALL {
                let value = match identity {
                    Identity::Address | Identity::PciBusId => {
                        Some(gpu.address).filter(|a| !a.is_empty())
                    }
                    Identity::Driver => gpu.kernel_driver,
                    Identity::Name => gpu.name,
                    Identity::Product => gpu.product,
                    Identity::Vendor => gpu.vendor,
                    Identity::VaDriver => gpu.va_driver,
                };
                attributes.insert(
                    identity.attribute().to_string(),
                    value.map_or(serde_json::Value::Null, |v| v.as_str().into()),
                );
            }
            for capability in Capability::ALL {
                let value = gpu
                    .states(capability)
                    .map_or(serde_json::Value::Null, Into::into);
                attributes.insert(capability.attribute().to_string(), value);
            }
            Record {
                node: &gpu.node,
                device: gpu.device.as_deref(),
                status: status_word(gpu),
                drift: gpu.drift.map(|i| describe_drift(&inventory.drift[i])),
                attributes,
            }
        })
        .collect()
}

/// `--summary -o json|yaml`.
#[derive(Serialize)]
pub(crate) struct SummaryRecord {
    pub gpus: usize,
    pub nodes: usize,
    pub capabilities: serde_json::Map<String, serde_json::Value>,
    pub drift: Vec<String>,
}

pub(crate) fn summary_record(inventory: &Inventory, filter: &Filter) -> SummaryRecord {
    let counts = inventory.counts(filter);
    let mut capabilities = serde_json::Map::new();
    for (capability, gpus, nodes) in inventory.summary(filter) {
        capabilities.insert(
            capability.attribute().to_string(),
            serde_json::json!({"gpus": gpus, "nodes": nodes}),
        );
    }
    let selected: BTreeSet<usize> = inventory.select(filter).filter_map(|g| g.drift).collect();
    SummaryRecord {
        gpus: counts.matching_gpus,
        nodes: counts.matching_nodes,
        capabilities,
        drift: selected
            .into_iter()
            .map(|i| describe_drift(&inventory.drift[i]))
            .collect(),
    }
}
