//! `kubectl media why`: why a pod's claims stay Pending, device by device. Gathers the pod,
//! its claims, their templates and classes, every ResourceSlice, the other claims'
//! allocations, the nodes and the pod's events (from the cluster, or `-f` files), hands them to
//! [`crate::explain::pod`], and renders the [`Diagnosis`] as text, or as JSON/YAML in the
//! schema docs/why-format.md documents.
//!
//! Exit codes: 0 when nothing in the fleet blocks the claims (allocated, or allocatable now), 3
//! when some claim cannot be allocated, 1 for errors, 2 for usage errors.

use std::fmt::Write as _;

use clap::Args;
use owo_colors::OwoColorize;

use crate::cli::output::{self, RenderError};
use crate::cli::style::Styles;
use crate::cli::{Error, FileArgs, Global, Io};
use crate::explain::allocate::Features;
use crate::explain::pod::{self, ClaimState, Diagnosis, Input, ReasonKind, Target};
use crate::fleet::cluster::{Cluster, ClusterError, ListRequest, Namespaces};
use crate::fleet::files;
use crate::fleet::objects::{Kind, Kinds, Objects};

const EXAMPLES: &str = "\
Examples:
  # Why the pod transcode-0 stays Pending
  kubectl media why transcode-0 -n media

  # One claim, whoever uses it
  kubectl media why claim/decode-gpu -n media

  # Every device's verdict, or a record for scripts
  kubectl media why transcode-0 -o wide
  kubectl media why transcode-0 -o json | jq .verdict

  # From saved objects instead of a cluster
  kubectl get pods,resourceclaims,resourceclaimtemplates,deviceclasses,resourceslices,nodes,events -A -o yaml > state.yaml
  kubectl media why transcode-0 -n media -f state.yaml";

/// The version of the JSON and YAML schema (docs/why-format.md).
const SCHEMA: &str = "kubectl-media/why/v1";

/// Explain, device by device, why a pod's (or a claim's) devices are not allocated.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXAMPLES)]
pub struct WhyArgs {
    /// The pod (NAME or pod/NAME), or a claim (claim/NAME).
    #[arg(value_name = "POD|claim/NAME")]
    pub target: String,

    #[command(flatten)]
    pub input: FileArgs,

    /// Output format: wide lists every device; json and yaml print the diagnosis as a record.
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    pub output: Option<WhyFormat>,

    /// The cluster's Kubernetes minor version (34, 1.35...), for its feature-gate defaults
    /// [default: the API server's; 1.36 with -f].
    #[arg(long, value_name = "VERSION", value_parser = parse_minor)]
    pub kubernetes_version: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WhyFormat {
    /// The explanation plus every device's verdict.
    Wide,
    /// The diagnosis as JSON.
    Json,
    /// The diagnosis as YAML.
    Yaml,
}

/// `34`, `1.34`, `v1.34.2` → 34.
fn parse_minor(text: &str) -> Result<u32, String> {
    let trimmed = text.trim_start_matches('v');
    let minor = match trimmed.split('.').collect::<Vec<_>>().as_slice() {
        [minor] => minor.parse().ok(),
        ["1", minor, ..] => minor.parse().ok(),
        _ => None,
    };
    match minor {
        Some(m) if (20..100).contains(&m) => Ok(m),
        _ => Err(format!(
            "invalid Kubernetes version {text:?} (valid: e.g. 1.34, 1.35.2, 36)"
        )),
    }
}

/// What a target names.
fn parse_target(text: &str, namespace: &str) -> Result<Target, String> {
    let (kind, name) = match text.split_once('/') {
        Some((kind, name)) => (Some(kind), name),
        None => (None, text),
    };
    if name.is_empty() || name.contains('/') {
        return Err(format!(
            "invalid target {text:?} (hint: give a pod as NAME or pod/NAME, a claim as claim/NAME)"
        ));
    }
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    match kind.map(str::to_ascii_lowercase).as_deref() {
        None | Some("pod" | "pods" | "po") => Ok(Target::Pod { namespace, name }),
        Some(
            "claim"
            | "claims"
            | "resourceclaim"
            | "resourceclaims"
            | "resourceclaim.resource.k8s.io",
        ) => Ok(Target::Claim { namespace, name }),
        Some(other) => Err(format!(
            "cannot explain a {other:?} (hint: give a pod as NAME or pod/NAME, a claim as claim/NAME)"
        )),
    }
}

/// Runs `why`.
pub(crate) fn run(args: &WhyArgs, global: &Global, io: &mut Io<'_>) -> Result<(), Error> {
    // The namespace is settled after reading: with -f, the files' own namespace when the name
    // is unique there.
    parse_target(&args.target, "default").map_err(Error::Usage)?;
    let (objects, unread, namespace, minor) = if let Some(sources) = args.input.sources()? {
        let objects = files::read(&sources, io.stdin)?;
        let namespace = match &global.kube.namespace {
            Some(namespace) => namespace.clone(),
            None => only_namespace(&objects, &args.target).unwrap_or_else(|| "default".to_owned()),
        };
        (objects, Vec::new(), namespace, args.kubernetes_version)
    } else {
        gather_cluster(args, global)?
    };
    // As in caps: objects that could not be read are warnings, before anything else.
    let warn = global.color.for_stderr();
    for note in &objects.notes {
        let _ = writeln!(io.stderr, "{} {note}", "warning:".style(warn.warning));
    }
    let target = parse_target(&args.target, &namespace).map_err(Error::Usage)?;
    let minor = args.kubernetes_version.or(minor);
    let features = Features::for_minor(minor.unwrap_or(36));
    let input = Input {
        objects: &objects,
        target: &target,
        features,
        unread: &unread,
        every_device: args.output == Some(WhyFormat::Wide),
    };
    let mut diagnosis = pod::explain(&input).map_err(|e| Error::Why(Box::new(e)))?;
    if minor.is_none() {
        diagnosis.notes.push(
            "feature gates as in Kubernetes 1.36 (DRAConsumableCapacity and DRADeviceTaints on); pass --kubernetes-version for another release".to_owned(),
        );
    }
    let text = match args.output {
        Some(WhyFormat::Json) => {
            let mut text =
                serde_json::to_string_pretty(&record(&diagnosis)?).map_err(RenderError::from)?;
            text.push('\n');
            text
        }
        // kubectl's YAML quoting (PCI addresses such as "0000:00:02.0" stay strings for YAML
        // 1.1 readers), as caps writes it.
        Some(WhyFormat::Yaml) => crate::cli::yaml::to_string(&record(&diagnosis)?),
        _ => render(&diagnosis, &global.color.for_stdout()),
    };
    output::write_all(io.stdout, &text)?;
    if diagnosis.blocked {
        return Err(Error::Blocked);
    }
    Ok(())
}

fn record(diagnosis: &Diagnosis) -> Result<serde_json::Value, RenderError> {
    let mut value = serde_json::to_value(diagnosis)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("schema".into(), SCHEMA.into());
    }
    Ok(value)
}

/// With -f and no -n: the namespace of the only object of that name in the files.
fn only_namespace(objects: &Objects, target: &str) -> Option<String> {
    let target = parse_target(target, "default").ok()?;
    let mut namespaces: Vec<&str> = match &target {
        Target::Pod { name, .. } => objects
            .pods
            .iter()
            .filter(|p| p.metadata.name.as_deref() == Some(name))
            .filter_map(|p| p.metadata.namespace.as_deref())
            .collect(),
        Target::Claim { name, .. } => objects
            .claims
            .iter()
            .filter(|c| c.metadata.name.as_deref() == Some(name))
            .filter_map(|c| c.metadata.namespace.as_deref())
            .collect(),
    };
    namespaces.sort_unstable();
    namespaces.dedup();
    match namespaces.as_slice() {
        [only] => Some((*only).to_owned()),
        _ => None,
    }
}

type Gathered = (Objects, Vec<(Kind, String)>, String, Option<u32>);

/// Reads what `why` needs from the cluster, concurrently. A kind we may not list is noted
/// (the diagnosis says what it lacks for it), not fatal — except the pod or claim itself.
fn gather_cluster(args: &WhyArgs, global: &Global) -> Result<Gathered, Error> {
    let connection = global.kube.connection();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    runtime.block_on(async {
        let cluster = Cluster::connect(&connection).await?;
        let namespace = cluster.namespace().to_owned();
        let target = parse_target(&args.target, &namespace).map_err(Error::Usage)?;
        // -A looks for the target (and its templates and events) in every namespace.
        let here = global.kube.namespaces(&namespace);
        let all = Namespaces::All;
        let event_selector = match &target {
            Target::Pod { name, .. } => format!("involvedObject.kind=Pod,involvedObject.name={name}"),
            Target::Claim { name, .. } => format!("involvedObject.name={name}"),
        };
        let list = |kind: Kind, namespaces: &'static str, field: Option<String>| {
            let cluster = cluster.clone();
            let here = here.clone();
            let all = all.clone();
            async move {
                let namespaces = if namespaces == "all" { all } else { here };
                let mut objects = Objects::wanting(Kinds::only(&[kind]));
                let result = cluster
                    .list(
                        &ListRequest {
                            kind,
                            namespaces: &namespaces,
                            label_selector: None,
                            field_selector: field.as_deref(),
                        },
                        &mut objects,
                    )
                    .await;
                (kind, result.map(|()| objects))
            }
        };
        // What the analysis cannot do without: the target's own kind.
        let target_kind = match &target {
            Target::Pod { .. } => Kind::Pod,
            Target::Claim { .. } => Kind::ResourceClaim,
        };
        let (a, b, c, d, e, f, g) = tokio::join!(
            list(Kind::ResourceSlice, "all", None),
            list(Kind::DeviceClass, "all", None),
            // Every namespace's: any claim may hold a device.
            list(Kind::ResourceClaim, "all", None),
            list(Kind::ResourceClaimTemplate, "here", None),
            list(Kind::Node, "all", None),
            list(Kind::Event, "here", Some(event_selector)),
            list(Kind::Pod, "here", None),
        );
        let results = [a, b, c, d, e, f, g];
        let mut objects = Objects::wanting(Kinds::only(&Kind::ALL));
        let mut unread = Vec::new();
        for (kind, result) in results {
            match result {
                Ok(read) => objects.extend(read),
                Err(ClusterError::Forbidden { .. }) if kind == Kind::ResourceClaim => {
                    // May read the namespace's claims only: the pod's are there; what other
                    // namespaces' claims hold is not known.
                    let (_, fallback) = list(Kind::ResourceClaim, "here", None).await;
                    match fallback {
                        Ok(read) => {
                            objects.extend(read);
                            unread.push((kind, format!("forbidden outside the namespace {namespace}; devices held by claims of other namespaces are not known to be taken")));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e @ ClusterError::Forbidden { .. }) if kind != target_kind => {
                    unread.push((kind, e.to_string()));
                }
                Err(e) => return Err(e.into()),
            }
        }
        if matches!(target, Target::Pod { .. })
            && !objects.pods.iter().any(|p| {
                Some(target_name(&target)) == p.metadata.name.as_deref()
            })
        {
            // Not here: is a pod of that name in another namespace? (for the hint)
            let selector = format!("metadata.name={}", target_name(&target));
            let (_, elsewhere) = list(Kind::Pod, "all", Some(selector)).await;
            if let Ok(read) = elsewhere {
                objects.pods.extend(read.pods);
            }
        }
        let minor = cluster.minor_version().await;
        let namespace = match global.kube.namespaces(&namespace) {
            Namespaces::All => only_namespace(&objects, &args.target).unwrap_or(namespace),
            Namespaces::One(namespace) => namespace,
        };
        Ok((objects, unread, namespace, minor))
    })
}

fn target_name(target: &Target) -> &str {
    match target {
        Target::Pod { name, .. } | Target::Claim { name, .. } => name,
    }
}

/// The explanation as text.
fn render(d: &Diagnosis, styles: &Styles) -> String {
    let mut out = String::new();
    let heading = |out: &mut String, text: &str| {
        let _ = writeln!(out, "{}", text.style(styles.header));
    };
    let verdict_style = if d.blocked { styles.no } else { styles.yes };
    let _ = writeln!(out, "{}", capitalise(&d.verdict).style(verdict_style));
    for claim in &d.claims {
        let _ = writeln!(out);
        let source = match (&claim.claim, &claim.template) {
            (Some(c), Some(t)) => format!(": {c} (from template {t})"),
            (Some(c), None) => format!(": {c}"),
            (None, Some(t)) => format!(" (from template {t})"),
            (None, None) => String::new(),
        };
        heading(
            &mut out,
            &format!("Claim {}{source}: {}", claim.name, state_words(claim.state)),
        );
        if let Some(problem) = &claim.problem {
            let _ = writeln!(out, "  {}", problem.message.style(styles.no));
        }
        if let Some(allocation) = &claim.allocation {
            if let Some(node) = &allocation.node {
                let _ = writeln!(out, "  node {node}");
            }
            for device in &allocation.devices {
                let mut line = format!(
                    "  request {}: {}/{}/{}",
                    device.request, device.driver, device.pool, device.device
                );
                if let Some(pci) = &device.pci_bus_id {
                    let _ = write!(line, ", GPU {pci}");
                }
                if let Some(render) = &device.render_node {
                    let _ = write!(line, ", {render}");
                }
                let _ = writeln!(out, "{line}");
            }
        }
        for request in &claim.requests {
            let count = if request.allocation_mode == "All" {
                "all matching devices".to_owned()
            } else if request.count == 1 {
                "1 device".to_owned()
            } else {
                format!("{} devices", request.count)
            };
            let _ = writeln!(
                out,
                "  Request {} (class {}, {count}):",
                request.name, request.class
            );
            let qualify = format!(
                "{} of {} devices pass the selectors, {} free{}",
                request.qualifying,
                request.total,
                request.available,
                if request.qualifying > 0 && request.qualifying_nodes.len() <= 3 {
                    format!(" (on {})", request.qualifying_nodes.join(", "))
                } else {
                    String::new()
                }
            );
            let qualify_style = if request.available == 0 {
                styles.no
            } else {
                styles.yes
            };
            let _ = writeln!(out, "    {}", qualify.style(qualify_style));
            let mut last_key = None;
            for reason in &request.reasons {
                let key = pod::reason_key(reason);
                let heading_changed = last_key.as_ref() != Some(&key);
                last_key = Some(key);
                let devices = pod::count(reason.devices, "device", "devices");
                let nodes = pod::count(reason.nodes, "node", "nodes");
                match reason.reason {
                    ReasonKind::OtherDriver => {
                        let _ = writeln!(
                            out,
                            "    {}",
                            format!(
                                "{} of another driver ({}): {devices} on {nodes}",
                                reason.model, reason.detail
                            )
                            .style(styles.dim)
                        );
                        continue;
                    }
                    _ if !heading_changed => {}
                    ReasonKind::SelectorFalse
                    | ReasonKind::RuntimeError
                    | ReasonKind::CannotEvaluate => {
                        let mut text = reason.selector.clone().unwrap_or_default();
                        if let Some(clause) = &reason.clause {
                            let _ = write!(text, ": {clause}");
                        }
                        let _ = writeln!(out, "    {text}");
                        let _ = writeln!(out, "      {}:", reason.detail.style(styles.no));
                    }
                    ReasonKind::Taken => {
                        let _ = writeln!(
                            out,
                            "    {}:",
                            "allocated to other claims, and not shareable".style(styles.no)
                        );
                    }
                    ReasonKind::Untolerated => {
                        let _ = writeln!(out, "    {}:", reason.detail.style(styles.no));
                    }
                }
                let held = if reason.claims.is_empty() {
                    String::new()
                } else {
                    format!(", held by {}", pod::shorten(reason.claims.clone()))
                };
                let _ = writeln!(out, "        {devices} on {nodes}: {}{held}", reason.model);
            }
            for unknown in &request.unknown_attributes {
                let text = match &unknown.nearest {
                    Some(n) => format!(
                        "no device has {} ({}); did you mean {n}?",
                        unknown.attribute, unknown.selector
                    ),
                    None => format!("no device has {} ({})", unknown.attribute, unknown.selector),
                };
                let _ = writeln!(out, "    {}", text.style(styles.warning));
            }
            if !request.devices.is_empty() {
                let _ = writeln!(out, "    Devices:");
                for device in &request.devices {
                    let _ = writeln!(
                        out,
                        "      {}  {}  {}  {}  {}",
                        device.node,
                        device.device,
                        device.pci_bus_id.as_deref().unwrap_or("-"),
                        device.model,
                        device.status
                    );
                }
            }
        }
        for constraint in &claim.constraints {
            let _ = writeln!(out, "  Constraint: {constraint}");
        }
    }
    if let Some(error) = &d.attempt_error {
        let _ = writeln!(out);
        heading(&mut out, "Every scheduling attempt fails:");
        let _ = writeln!(out, "  {}", error.message.style(styles.no));
        let _ = writeln!(out, "  {}", error.consequence);
    }
    if let Some(nodes) = &d.nodes {
        let _ = writeln!(out);
        heading(
            &mut out,
            &format!(
                "Nodes: {} of {} can allocate the claims",
                nodes.allocatable, nodes.total
            ),
        );
        for outcome in &nodes.outcomes {
            let _ = writeln!(
                out,
                "  {:>6}  {}: {}",
                outcome.count,
                outcome.detail,
                pod::shorten(outcome.nodes.clone())
            );
        }
    }
    if d.scheduler.condition.is_some() || !d.scheduler.events.is_empty() {
        let _ = writeln!(out);
        heading(&mut out, "The scheduler says:");
        if let Some(c) = &d.scheduler.condition {
            let _ = writeln!(
                out,
                "  PodScheduled={} {}: {}",
                c.status,
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            );
        }
        for e in &d.scheduler.events {
            let times = if e.count > 1 {
                format!(" (×{})", e.count)
            } else {
                String::new()
            };
            let _ = writeln!(out, "  {}{times}: {}", e.reason, e.message);
        }
    }
    if !d.next_steps.is_empty() {
        let _ = writeln!(out);
        heading(&mut out, "Next steps:");
        for step in &d.next_steps {
            let _ = writeln!(out, "  - {step}");
        }
    }
    if !d.notes.is_empty() {
        let _ = writeln!(out);
        for note in &d.notes {
            let _ = writeln!(out, "{} {note}", "note:".style(styles.dim));
        }
    }
    out
}

fn state_words(state: ClaimState) -> &'static str {
    match state {
        ClaimState::Reserved => "allocated and reserved for the pod",
        ClaimState::Allocated => "allocated, not yet reserved for the pod",
        ClaimState::Pending => "not allocated",
        ClaimState::NotCreated => "not created yet",
        ClaimState::Missing => "missing",
        ClaimState::BeingDeleted => "being deleted",
        ClaimState::NotOwned => "not owned by the pod",
        ClaimState::NotNeeded => "not needed (the claim controller made none)",
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_named_as_kubectl_names_them() {
        assert_eq!(
            parse_target("x", "ns"),
            Ok(Target::Pod {
                namespace: "ns".into(),
                name: "x".into()
            })
        );
        assert_eq!(
            parse_target("pod/x", "ns"),
            Ok(Target::Pod {
                namespace: "ns".into(),
                name: "x".into()
            })
        );
        assert_eq!(
            parse_target("resourceclaims/c", "ns"),
            Ok(Target::Claim {
                namespace: "ns".into(),
                name: "c".into()
            })
        );
        assert!(
            parse_target("deploy/x", "ns")
                .unwrap_err()
                .contains("cannot explain")
        );
        assert!(parse_target("pod/", "ns").is_err());
        assert!(parse_target("a/b/c", "ns").is_err());
    }

    #[test]
    fn versions_parse_in_the_forms_people_write() {
        assert_eq!(parse_minor("1.34"), Ok(34));
        assert_eq!(parse_minor("v1.35.2"), Ok(35));
        assert_eq!(parse_minor("36"), Ok(36));
        assert!(parse_minor("2.1").is_err());
        assert!(parse_minor("soon").is_err());
    }
}
