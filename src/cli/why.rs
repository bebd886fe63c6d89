//! `kubectl media why`: why a pod's claims stay Pending, device by device. Gathers the pod,
//! its claims, their templates and classes, every ResourceSlice, the other claims'
//! allocations, the nodes and the pod's events (from the cluster, or `-f` files), hands them to
//! [`crate::explain::pod`], and renders the [`Diagnosis`] as text, or as JSON/YAML in the
//! schema docs/why-format.md documents.
//!
//! Exit codes: 0 when nothing in the fleet blocks the claims (allocated, or allocatable now), 3
//! when some claim cannot be allocated, 4 when the devices allow them but what could still rule
//! the nodes out was not read (no verdict is built on data we lack), 1 for errors (ResourceSlices
//! or DeviceClasses that cannot be read among them), 2 for usage errors.

use std::fmt::Write as _;

use clap::Args;
use owo_colors::{OwoColorize, Style};

use crate::cli::output::{self, RenderError};
use crate::cli::style::Styles;
use crate::cli::table::{Cell, Grid, TableStyle, Width, pieces};
use crate::cli::{Error, FileArgs, Global, Io};
use crate::explain::allocate::{DEFAULT_MINOR, Features};
use crate::explain::pod::{self, ClaimState, Diagnosis, Input, ReasonKind, Target};
use crate::fleet::cluster::{Cluster, ClusterError, ListRequest, Namespaces};
use crate::fleet::files;
use crate::fleet::objects::{Kind, Kinds, Objects};

/// Every line fits 70 columns: clap wraps longer ones at the terminal's width (at most 100), man
/// at 80 columns less its indent, and a command wrapped onto two lines breaks when copied. The
/// long `kubectl get` is split into three, and continuations end their line with a `\\`.
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
  kubectl get pods,nodes,events -A -o yaml > pods.yaml
  kubectl get resourceclaims,resourceclaimtemplates -A -o yaml \\
    > claims.yaml
  kubectl get deviceclasses,resourceslices -o yaml > devices.yaml
  kubectl media why transcode-0 -n media \\
    -f pods.yaml -f claims.yaml -f devices.yaml

Exit status:
  0  nothing blocks the claims: allocated, or allocatable now
  3  a claim cannot be allocated (the explanation says why)
  4  undecided: the devices allow the claims, but what could still
     rule the nodes out was not read (the notes say what), or a
     selector uses what kubectl media does not evaluate
  1  an error (the pod not found; ResourceSlices or DeviceClasses
     that cannot be read)
  2  a usage error";

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
        Some(m) if (34..100).contains(&m) => Ok(m),
        // resource.k8s.io/v1, the only API version read, is served from 1.34.
        Some(m) if (20..34).contains(&m) => Err(format!(
            "Kubernetes 1.{m} is not explained: its DRA API is older than resource.k8s.io/v1, \
             which is served from 1.34 (valid: 1.34 and later)"
        )),
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

/// Whether a slice holds a device with `allowMultipleAllocations` set.
fn stores_shareable(objects: &Objects) -> bool {
    objects
        .slices
        .iter()
        .flat_map(|slice| &slice.spec.devices)
        .any(|device| device.allow_multiple_allocations.is_some())
}

/// Runs `why`.
pub(crate) fn run(args: &WhyArgs, global: &Global, io: &mut Io<'_>) -> Result<(), Error> {
    // The namespace is settled after reading (see `target_namespace`).
    parse_target(&args.target, "default").map_err(Error::Usage)?;
    let sources = args.input.sources()?;
    let from_cluster = sources.is_none();
    let (objects, unread, mut missing, namespace, minor) = if let Some(sources) = sources {
        let objects = files::read(&sources, io.stdin)?;
        let namespace = target_namespace(&objects, &args.target, &global.kube, true, || {
            context_namespace(&global.kube)
        })?;
        // Files hold what the user saved: a kind with no object may simply not have been saved.
        let missing: Vec<Missing> = [
            (Kind::ResourceClaim, objects.claims.is_empty()),
            (Kind::ResourceSlice, objects.slices.is_empty()),
            (Kind::DeviceClass, objects.classes.is_empty()),
        ]
        .into_iter()
        .filter(|(_, none)| *none)
        .map(|(kind, _)| Missing {
            kind,
            why: "the files hold none".to_owned(),
            hint: format!(
                "save them too: kubectl get {}{} -o yaml > {}.yaml, and add -f {}.yaml",
                kind.plural(),
                if kind.namespaced() { " -A" } else { "" },
                kind.plural(),
                kind.plural()
            ),
        })
        .collect();
        let mut unread = Vec::new();
        if objects.claim_templates.is_empty() {
            unread.push((
                Kind::ResourceClaimTemplate,
                "the files hold none; add them with -f, saved with kubectl get resourceclaimtemplates -A -o yaml"
                    .to_owned(),
            ));
        }
        if objects.claims.is_empty() {
            // Other claims may hold the devices: what they hold is not known.
            unread.push((
                Kind::ResourceClaim,
                "the files hold none; add them with -f, saved with kubectl get resourceclaims -A -o yaml"
                    .to_owned(),
            ));
        }
        if objects.nodes.is_empty() {
            unread.push((
                Kind::Node,
                "the files hold none; add them with -f, saved with kubectl get nodes -o yaml"
                    .to_owned(),
            ));
        }
        let release = args.kubernetes_version.unwrap_or(DEFAULT_MINOR);
        if objects.taint_rules.is_empty() && Features::for_minor(release).device_taint_rules {
            unread.push((
                Kind::DeviceTaintRule,
                "the files hold none; add them with -f, saved with kubectl get devicetaintrules -o yaml"
                    .to_owned(),
            ));
        }
        (objects, unread, missing, namespace, args.kubernetes_version)
    } else {
        gather_cluster(args, global)?
    };
    let target = parse_target(&args.target, &namespace).map_err(Error::Usage)?;
    let minor = args.kubernetes_version.or(minor);
    let mut features = Features::for_minor(minor.unwrap_or(DEFAULT_MINOR));
    // The release's defaults are not the cluster's gates: on 1.34 and 1.35, where
    // DRAConsumableCapacity is off by default, a server that stored allowMultipleAllocations
    // has it on (with it off, it drops the field: dropDisabledDRAConsumableCapacityFields).
    let consumable_seen = from_cluster
        && args.kubernetes_version.is_none()
        && !features.consumable_capacity
        && stores_shareable(&objects);
    features.consumable_capacity |= consumable_seen;
    features.selectors_new = !from_cluster;
    let input = Input {
        objects: &objects,
        target: &target,
        features,
        unread: &unread,
        every_device: args.output == Some(WhyFormat::Wide),
    };
    let same = same_input(args, &global.kube);
    let from_files = !same.files.is_empty();
    // From files without -n the namespace was not the user's choice: close names come from
    // every namespace the files hold, as with -A; so do they with -n when that namespace has
    // none. (The name itself in another namespace keeps its `add -n` hint.) The files are all
    // there is: no hint points at the cluster.
    let in_files = |similar: &[String], elsewhere: &[String]| {
        from_files
            && !global.kube.all_namespaces
            && elsewhere.is_empty()
            && (global.kube.namespace.is_none() || similar.is_empty())
    };
    let explained = pod::explain(&input);
    // As in caps: objects that could not be read are warnings, before anything else; when the
    // one asked about is among them, the error says so, once.
    if !matches!(explained, Err(pod::TargetError::Unparsed { .. })) {
        let warn = global.color.for_stderr();
        for note in &objects.notes {
            crate::cli::warn(io.stderr, &warn, note);
        }
    }
    let mut diagnosis = explained.map_err(|e| match e {
        pod::TargetError::PodNotFound {
            name,
            similar,
            elsewhere,
            ..
        } if in_files(&similar, &elsewhere) => {
            let metas = objects.pods.iter().map(|p| &p.metadata);
            let close = pod::similar(metas, None, &name);
            let asked = shown_target(&global.kube, &namespace, &name);
            Error::NotFound(carry(&not_in_files("pod", "", &asked, &close), &same))
        }
        pod::TargetError::ClaimNotFound {
            name,
            similar,
            elsewhere,
            ..
        } if in_files(&similar, &elsewhere) => {
            let metas = objects.claims.iter().map(|c| &c.metadata);
            let close = pod::similar(metas, None, &name);
            let asked = shown_target(&global.kube, &namespace, &name);
            Error::NotFound(carry(
                &not_in_files("resourceclaim", "claim/", &asked, &close),
                &same,
            ))
        }
        // With -A the name is in no namespace at all: said so, with close names from all.
        pod::TargetError::PodNotFound { name, .. } if global.kube.all_namespaces => {
            let metas = objects.pods.iter().map(|p| &p.metadata);
            let close = pod::similar(metas, None, &name);
            Error::NotFound(carry(&in_no_namespace("pod", "", &name, &close), &same))
        }
        pod::TargetError::ClaimNotFound { name, .. } if global.kube.all_namespaces => {
            let metas = objects.claims.iter().map(|c| &c.metadata);
            let close = pod::similar(metas, None, &name);
            Error::NotFound(carry(
                &in_no_namespace("resourceclaim", "claim/", &name, &close),
                &same,
            ))
        }
        // The hint's command reads what this run read, as the next steps' do.
        pod::TargetError::PodNotFound { .. } | pod::TargetError::ClaimNotFound { .. } => {
            Error::NotFound(carry(&e.to_string(), &same))
        }
        e => Error::Why(Box::new(e)),
    })?;
    // Without devices or classes no claim can be evaluated, and without claims a claim the pod
    // names is not known to be missing: one line, not a verdict built on what was not read.
    // (The pod, and whether it has claims, are said first.)
    let evaluates = diagnosis
        .claims
        .iter()
        .any(|c| matches!(c.state, ClaimState::Pending | ClaimState::NotCreated));
    // Claims that are not there are "missing" only if claims were read at all.
    let names_a_claim = diagnosis
        .claims
        .iter()
        .any(|c| c.state == ClaimState::Missing && c.claim.is_some());
    let needed = |kind: Kind| match kind {
        Kind::ResourceClaim => names_a_claim,
        _ => evaluates,
    };
    if let Some(i) = missing.iter().position(|m| needed(m.kind)) {
        let m = missing.swap_remove(i);
        return Err(Error::Why(Box::new(pod::TargetError::Unreadable {
            target: format!(
                "{} {}",
                if diagnosis.kind == "Pod" {
                    "pod"
                } else {
                    "claim"
                },
                diagnosis.name
            ),
            plural: m.kind.plural(),
            why: m.why,
            hint: m.hint,
        })));
    }
    // Not needed for this diagnosis, but the slices would have shown more.
    for m in missing.iter().filter(|m| m.kind == Kind::ResourceSlice) {
        diagnosis.notes.push(format!(
            "resourceslices were not read ({}): the allocated devices' GPU addresses and render nodes are not shown",
            m.why
        ));
    }
    // A suggested `kubectl media why|caps` reads what this run read: from files, the same files.
    for step in &mut diagnosis.next_steps {
        *step = carry(step, &same);
    }
    if consumable_seen {
        diagnosis.notes.push(
            "DRAConsumableCapacity taken as on: the API server stored allowMultipleAllocations, which it drops with the gate off".to_owned(),
        );
    }
    if minor.is_none() {
        diagnosis.notes.push(
            "feature gates as in Kubernetes 1.36 (DRAConsumableCapacity, DRADeviceTaints and DRAPartitionableDevices on); pass --kubernetes-version for another release".to_owned(),
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
        _ => render(
            &diagnosis,
            &global.color.for_stdout(),
            Width::of_stdout().limit(),
        ),
    };
    output::write_all(io.stdout, &text)?;
    if diagnosis.blocked {
        return Err(Error::Blocked);
    }
    if undecided(&diagnosis) {
        return Err(Error::Undecided);
    }
    Ok(())
}

/// Whether the devices allow the claims but something that could still block them was not
/// read, or this evaluator could not decide a claim (exit code 4): the verdict is not that
/// nothing blocks them.
fn undecided(d: &Diagnosis) -> bool {
    let evaluated = d.attempt_error.as_ref().is_some_and(|e| e.undecided)
        || d.nodes.as_ref().is_some_and(|n| n.allocatable > 0);
    !d.blocked && evaluated && !d.unchecked.is_empty()
}

/// The flags that make a suggested `kubectl media why` or `caps` read what this run read.
#[derive(Debug, Default, PartialEq, Eq)]
struct SameInput {
    /// The same `-f` (and `-R`) when this run read files: without them the suggestion would ask
    /// the cluster. Each quoted for the shell when it needs to be.
    files: Vec<String>,
    /// `--kubernetes-version`, when given (`why` only: `caps` has no such flag), else the
    /// answer could differ.
    version: Option<String>,
    /// From a cluster, `--kubeconfig` and `--context` when given: without them the suggestion
    /// would read the current context's cluster.
    connection: Vec<String>,
}

/// What a suggested command must add to read what this run read.
fn same_input(args: &WhyArgs, kube: &crate::cli::KubeArgs) -> SameInput {
    let files = args.input.same_files();
    let mut connection = Vec::new();
    if files.is_empty() {
        if let Some(kubeconfig) = &kube.kubeconfig {
            connection.push(format!(
                "--kubeconfig {}",
                crate::cli::shell_word(&kubeconfig.to_string_lossy())
            ));
        }
        if let Some(context) = &kube.context {
            connection.push(format!("--context {}", crate::cli::shell_word(context)));
        }
    }
    SameInput {
        files,
        version: args
            .kubernetes_version
            .map(|minor| format!("--kubernetes-version 1.{minor}")),
        connection,
    }
}

/// `text` with what [`SameInput`] holds added to each `kubectl media why` or `kubectl media
/// caps` command in it, before the punctuation that ends its clause.
fn carry(text: &str, same: &SameInput) -> String {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for span in crate::cli::table::command_spans(text) {
        let command = &text[span.clone()];
        let bare = command.trim_start_matches(['(', '`', '\'', '"']);
        let flags: Vec<&String> = if bare.starts_with("kubectl media why ") {
            same.files
                .iter()
                .chain(&same.connection)
                .chain(&same.version)
                .collect()
        } else if bare.starts_with("kubectl media caps") {
            same.files.iter().chain(&same.connection).collect()
        } else {
            continue;
        };
        let end = span.start
            + command
                .trim_end_matches([',', ';', ':', ')', '.', '`', '\'', '"'])
                .len();
        out.push_str(&text[from..end]);
        for flag in flags {
            out.push(' ');
            out.push_str(flag);
        }
        from = end;
    }
    out.push_str(&text[from..]);
    out
}

/// `-A` and `name` is in no namespace: the message, with the closest of `close` (each
/// `namespace/name`) as the example to run.
fn in_no_namespace(what: &str, prefix: &str, name: &str, close: &[String]) -> String {
    let hint = match close.first().and_then(|c| c.split_once('/')) {
        Some((namespace, candidate)) => {
            pod::similar_names_hint(close, prefix, candidate, namespace)
        }
        None => format!("check the name, or list them with kubectl get {what}s -A"),
    };
    format!("{what} {name} not found in any namespace (hint: {hint})")
}

/// The name asked for as a not-found message shows it: with its namespace when -n gave one.
fn shown_target(kube: &crate::cli::KubeArgs, namespace: &str, name: &str) -> String {
    match kube.namespace {
        Some(_) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// From files, `asked` is not there: the close names the files hold (each `namespace/name`)
/// and an example that names its namespace; without any, what to check. Never a cluster
/// command: the files are what was asked about.
fn not_in_files(what: &str, prefix: &str, asked: &str, close: &[String]) -> String {
    let hint = match close.first().and_then(|c| c.split_once('/')) {
        Some((namespace, candidate)) => {
            pod::similar_names_hint(close, prefix, candidate, namespace)
        }
        None => format!(
            "no {what} in the files has a similar name: check the name, or add the file that \
             holds it with -f"
        ),
    };
    format!("{what} {asked} not found in the files (hint: {hint})")
}

/// A kind `why` cannot do without that could not be read.
struct Missing {
    kind: Kind,
    /// Why not: the API server's refusal, or that the files hold none.
    why: String,
    hint: String,
}

fn record(diagnosis: &Diagnosis) -> Result<serde_json::Value, RenderError> {
    let mut value = serde_json::to_value(diagnosis)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("schema".into(), SCHEMA.into());
    }
    Ok(value)
}

/// The namespaces that hold an object of the target's kind and name, sorted.
fn namespaces_of<'o>(objects: &'o Objects, target: &str) -> Vec<&'o str> {
    let Ok(target) = parse_target(target, "default") else {
        return Vec::new();
    };
    let (kind, mut namespaces): (Kind, Vec<&str>) = match &target {
        Target::Pod { name, .. } => (
            Kind::Pod,
            objects
                .pods
                .iter()
                .filter(|p| p.metadata.name.as_deref() == Some(name))
                .filter_map(|p| p.metadata.namespace.as_deref())
                .collect(),
        ),
        Target::Claim { name, .. } => (
            Kind::ResourceClaim,
            objects
                .claims
                .iter()
                .filter(|c| c.metadata.name.as_deref() == Some(name))
                .filter_map(|c| c.metadata.namespace.as_deref())
                .collect(),
        ),
    };
    // One that does not parse is there too: the error about it needs its namespace.
    let name = match &target {
        Target::Pod { name, .. } | Target::Claim { name, .. } => name,
    };
    namespaces.extend(
        objects
            .unparsed
            .iter()
            .filter(|u| u.kind == kind && u.name == *name && !u.namespace.is_empty())
            .map(|u| u.namespace.as_str()),
    );
    namespaces.sort_unstable();
    namespaces.dedup();
    namespaces
}

/// The namespace the target is looked up in, among the objects read, as kubectl's flags mean
/// it:
/// - `-A` (which wins over `-n`, as in kubectl) looks in every namespace: the one that holds
///   the target's name; an error naming them when several do (no namespace is chosen for the
///   user); when none does, as without `-A`, so that the error says where else to look;
/// - else `-n`;
/// - else, from files (`from_files`), the namespace of the files' only object of that name,
///   as `kubectl get -f` takes the objects' own namespaces;
/// - else `in_effect`: the context's namespace, else `default`.
fn target_namespace(
    objects: &Objects,
    target: &str,
    kube: &crate::cli::KubeArgs,
    from_files: bool,
    in_effect: impl FnOnce() -> Result<String, Error>,
) -> Result<String, Error> {
    let namespaces = namespaces_of(objects, target);
    if kube.all_namespaces {
        match namespaces.as_slice() {
            [only] => return Ok((*only).to_owned()),
            [] => {}
            several => {
                let what = match parse_target(target, "default") {
                    Ok(Target::Claim { name, .. }) => format!("resourceclaim {name}"),
                    Ok(Target::Pod { name, .. }) => format!("pod {name}"),
                    Err(e) => return Err(Error::Usage(e)),
                };
                return Err(Error::Ambiguous(format!(
                    "{what} is in {} namespaces: {} (hint: choose one with -n, without -A)",
                    several.len(),
                    several.join(", ")
                )));
            }
        }
    }
    if let Some(namespace) = &kube.namespace {
        return Ok(namespace.clone());
    }
    match namespaces.as_slice() {
        [only] if from_files => Ok((*only).to_owned()),
        _ => in_effect(),
    }
}

/// The namespace of the kubeconfig's context (`--context`, else the current one; the pod's in
/// a cluster), else `default` when there is no kubeconfig at all, as kubectl takes it for `-f`.
/// A kubeconfig that cannot be used is an error, as in kubectl. Read only when the files do not
/// settle the namespace.
fn context_namespace(kube: &crate::cli::KubeArgs) -> Result<String, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    match runtime.block_on(crate::kubeconfig::load(&kube.connection().source)) {
        Ok(config) => Ok(config.default_namespace),
        Err(crate::kubeconfig::KubeconfigError::Missing { .. }) => Ok("default".to_owned()),
        Err(e) => Err(Error::Cluster(e.into())),
    }
}

type Gathered = (
    Objects,
    Vec<(Kind, String)>,
    Vec<Missing>,
    String,
    Option<u32>,
);

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
        // resource.k8s.io/v1 serves DeviceTaintRules from the release whose scheduler applies
        // them (1.37): the server's version is asked first.
        let server_minor = cluster.minor_version().await;
        let taint_rules = async {
            let release = server_minor.unwrap_or(DEFAULT_MINOR);
            match Features::for_minor(release).device_taint_rules {
                true => Some(list(Kind::DeviceTaintRule, "all", None).await),
                false => None,
            }
        };
        let (a, b, c, d, e, f, g, h) = tokio::join!(
            list(Kind::ResourceSlice, "all", None),
            list(Kind::DeviceClass, "all", None),
            // Every namespace's: any claim may hold a device.
            list(Kind::ResourceClaim, "all", None),
            list(Kind::ResourceClaimTemplate, "here", None),
            list(Kind::Node, "all", None),
            list(Kind::Event, "here", Some(event_selector)),
            list(Kind::Pod, "here", None),
            taint_rules,
        );
        let results = [a, b, c, d, e, f, g].into_iter().chain(h);
        let mut objects = Objects::wanting(Kinds::only(&Kind::ALL));
        let mut unread = Vec::new();
        let mut missing = Vec::new();
        for (kind, result) in results {
            match result {
                Ok(read) => objects.extend(read),
                Err(e @ ClusterError::Forbidden { .. }) if kind == Kind::ResourceClaim => {
                    // May read the namespace's claims only: the pod's are there; what other
                    // namespaces' claims hold is not known (the diagnosis' note says so).
                    let (_, fallback) = list(Kind::ResourceClaim, "here", None).await;
                    match fallback {
                        Ok(read) => {
                            objects.extend(read);
                            unread.push((kind, e.to_string()));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(ClusterError::Forbidden {
                    verb,
                    resource,
                    message,
                    ..
                }) if matches!(kind, Kind::ResourceSlice | Kind::DeviceClass) => {
                    missing.push(Missing {
                        kind,
                        why: format!("they may not be listed: {message}"),
                        hint: format!(
                            "ask for a role that allows '{verb}' on {resource}; check with kubectl auth can-i {verb} {resource}"
                        ),
                    });
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
        // With -A, the namespace that holds the target (every namespace's pods were listed).
        let cluster_namespace = namespace.clone();
        let namespace = target_namespace(&objects, &args.target, &global.kube, false, || {
            Ok(cluster_namespace)
        })?;
        let target = parse_target(&args.target, &namespace).map_err(Error::Usage)?;
        if let Target::Claim { namespace, name } = &target {
            // The events that matter are the pod's, which uses the claim.
            let user = objects
                .claims
                .iter()
                .find(|c| {
                    c.metadata.name.as_deref() == Some(name)
                        && c.metadata.namespace.as_deref() == Some(namespace)
                })
                .and_then(|claim| pod::claim_users(claim, &objects).0.into_iter().next());
            if let Some(user) = user {
                let pod_name = user.split_once('/').map_or(user.as_str(), |(_, n)| n);
                let selector = format!("involvedObject.kind=Pod,involvedObject.name={pod_name}");
                match list(Kind::Event, "here", Some(selector)).await {
                    (_, Ok(read)) => objects.events.extend(read.events),
                    // Already noted if events may not be listed at all.
                    (_, Err(ClusterError::Forbidden { .. })) => {}
                    (_, Err(e)) => return Err(e.into()),
                }
            }
        }
        Ok((objects, unread, missing, namespace, server_minor))
    })
}

fn target_name(target: &Target) -> &str {
    match target {
        Target::Pod { name, .. } | Target::Claim { name, .. } => name,
    }
}

/// The explanation as text, each line wrapped at `limit` columns (the terminal's; none into a
/// pipe) with a hanging indent under its own indentation, as caps wraps its notes.
fn render(d: &Diagnosis, styles: &Styles, limit: Option<usize>) -> String {
    let mut page = Page {
        out: String::new(),
        limit,
    };
    let plain = Style::new();
    let verdict_style = if d.blocked {
        styles.no
    } else if undecided(d) {
        styles.warning
    } else {
        styles.yes
    };
    page.line(0, 2, &[(&capitalise(&d.verdict), verdict_style)]);
    for claim in &d.claims {
        page.blank();
        let source = match (&claim.claim, &claim.template) {
            (Some(c), Some(t)) => format!(": {c} (from template {t})"),
            (Some(c), None) => format!(": {c}"),
            (None, Some(t)) => format!(" (from template {t})"),
            (None, None) => String::new(),
        };
        let state = match (d.kind, claim.state) {
            ("Pod", state) => state_words(state).to_owned(),
            (_, ClaimState::Reserved) => {
                format!(
                    "allocated and reserved for {}",
                    claim.reserved_for.join(", ")
                )
            }
            (_, ClaimState::Allocated) => "allocated, not reserved for any pod yet".to_owned(),
            (_, state) => state_words(state).to_owned(),
        };
        let title = if d.kind == "Pod" {
            format!("Claim {}{source}: {state}", claim.name)
        } else {
            // `why claim/NAME`: the claim's name is all there is to say of it.
            format!("Claim {}: {state}", d.name)
        };
        page.line(0, 2, &[(&title, styles.header)]);
        if let Some(problem) = &claim.problem {
            page.line(2, 2, &[(&problem.message, styles.no)]);
        }
        if let Some(allocation) = &claim.allocation {
            if let Some(node) = &allocation.node {
                page.line(2, 2, &[(&format!("node {node}"), plain)]);
            }
            for device in &allocation.devices {
                let mut line = format!(
                    "request {}: {}/{}/{}",
                    device.request, device.driver, device.pool, device.device
                );
                if let Some(pci) = &device.pci_bus_id {
                    let _ = write!(line, ", GPU {pci}");
                }
                if let Some(render) = &device.render_node {
                    let _ = write!(line, ", {render}");
                }
                page.line(2, 4, &[(&line, plain)]);
            }
        }
        for request in &claim.requests {
            render_request(&mut page, request, styles);
        }
        for constraint in &claim.constraints {
            page.line(2, 4, &[(&format!("Constraint: {constraint}"), plain)]);
        }
    }
    if let Some(error) = &d.attempt_error {
        page.blank();
        let heading = if error.undecided {
            "Not decided:"
        } else if error.always {
            "Every scheduling attempt fails:"
        } else {
            "Scheduling attempts may fail:"
        };
        page.line(0, 2, &[(heading, styles.header)]);
        page.line(2, 2, &[(&error.message, styles.no)]);
        page.line(2, 2, &[(&error.consequence, plain)]);
    }
    if let Some(nodes) = &d.nodes {
        page.blank();
        let it = if d.kind == "Pod" { "the claims" } else { "it" };
        let heading = if d.unchecked.is_empty() {
            format!(
                "Nodes: {} of {} can allocate {it}",
                nodes.allocatable, nodes.total
            )
        } else {
            format!(
                "Nodes: the devices allow {it} on {} of {} (not everything was checked)",
                nodes.allocatable, nodes.total
            )
        };
        page.line(0, 2, &[(&heading, styles.header)]);
        for outcome in &nodes.outcomes {
            // Continuations line up with the detail, right of the count.
            let text = format!(
                "{:>6}  {}: {}",
                outcome.count,
                outcome.detail,
                pod::shorten(outcome.nodes.clone())
            );
            page.line(2, 8, &[(&text, plain)]);
        }
    }
    if d.scheduler.condition.is_some() || !d.scheduler.events.is_empty() {
        page.blank();
        let heading = match d.used_by.first().filter(|_| d.kind != "Pod") {
            Some(user) => format!("The scheduler says, of pod {user}:"),
            None => "The scheduler says:".to_owned(),
        };
        page.line(0, 2, &[(&heading, styles.header)]);
        if let Some(c) = &d.scheduler.condition {
            let text = format!(
                "PodScheduled={} {}: {}",
                c.status,
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            );
            page.line(2, 4, &[(&text, plain)]);
        }
        for e in &d.scheduler.events {
            let times = if e.count > 1 {
                format!(" (×{})", e.count)
            } else {
                String::new()
            };
            page.line(
                2,
                4,
                &[(&format!("{}{times}: {}", e.reason, e.message), plain)],
            );
        }
    }
    if !d.next_steps.is_empty() {
        page.blank();
        page.line(0, 2, &[("Next steps:", styles.header)]);
        for step in &d.next_steps {
            // Continuations line up with the text, right of the dash.
            page.line(2, 2, &[(&format!("- {step}"), plain)]);
        }
    }
    if !d.notes.is_empty() {
        page.blank();
        for note in &d.notes {
            page.line(0, 2, &[("note:", styles.dim), (&format!(" {note}"), plain)]);
        }
    }
    page.out
}

/// One request of a claim still to allocate: how many devices qualify, why the others do not,
/// and with `-o wide` every device.
fn render_request(page: &mut Page, request: &pod::RequestReport, styles: &Styles) {
    let plain = Style::new();
    let count = if request.allocation_mode == "All" {
        "all matching devices".to_owned()
    } else if request.count == 1 {
        "1 device".to_owned()
    } else {
        format!("{} devices", request.count)
    };
    page.line(
        2,
        2,
        &[(
            &format!(
                "Request {} (class {}, {count}):",
                request.name, request.class
            ),
            plain,
        )],
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
    page.line(4, 2, &[(&qualify, qualify_style)]);
    let mut last_key = None;
    for reason in &request.reasons {
        let key = pod::reason_key(reason);
        let heading_changed = last_key.as_ref() != Some(&key);
        last_key = Some(key);
        let devices = pod::count(reason.devices, "device", "devices");
        let nodes = pod::count(reason.nodes, "node", "nodes");
        match reason.reason {
            ReasonKind::OtherDriver => {
                // `liken.sh devices, where class media-gpu selector #0 wants device.driver ==
                // "media.liken.sh"`: the devices' driver is in the model; the clause says the
                // one wanted.
                let wants = match (&reason.selector, &reason.clause) {
                    (Some(selector), Some(clause)) => format!(", where {selector} wants {clause}"),
                    (None, Some(clause)) => format!(", where the request wants {clause}"),
                    (_, None) => " (another driver)".to_owned(),
                };
                let text = format!("{}{wants}: {devices} on {nodes}", reason.model);
                page.line(4, 2, &[(&text, styles.dim)]);
                continue;
            }
            _ if !heading_changed => {}
            // A reason that comes from a selector: the selector, then what it found.
            ReasonKind::SelectorFalse | ReasonKind::RuntimeError | ReasonKind::CannotEvaluate
                if reason.selector.is_some() || reason.clause.is_some() =>
            {
                let mut text = reason.selector.clone().unwrap_or_default();
                if let Some(clause) = &reason.clause {
                    let _ = write!(text, ": {clause}");
                }
                page.line(4, 2, &[(&text, plain)]);
                page.line(6, 2, &[(&reason.detail, styles.no), (":", plain)]);
            }
            _ => {
                page.line(4, 2, &[(&reason.detail, styles.no), (":", plain)]);
            }
        }
        let held = if reason.claims.is_empty() {
            String::new()
        } else {
            format!(", held by {}", pod::shorten(reason.claims.clone()))
        };
        page.line(
            8,
            2,
            &[(
                &format!("{devices} on {nodes}: {}{held}", reason.model),
                plain,
            )],
        );
    }
    for unknown in &request.unknown_attributes {
        let text = match &unknown.nearest {
            Some(n) => format!(
                "no device has {} ({}); did you mean {n}?",
                unknown.attribute, unknown.selector
            ),
            None => format!("no device has {} ({})", unknown.attribute, unknown.selector),
        };
        page.line(4, 2, &[(&text, styles.warning)]);
    }
    if !request.devices.is_empty() {
        page.line(4, 2, &[("Devices:", plain)]);
        // Aligned as kubectl aligns -o wide: the columns as wide as their widest cell, never
        // cut or wrapped (the last, the verdict, runs past the edge as kubectl's wide rows do).
        let grid = Grid {
            header: ["NODE", "DEVICE", "PCI", "MODEL", "VERDICT"]
                .map(str::to_owned)
                .to_vec(),
            rows: request
                .devices
                .iter()
                .map(|device| {
                    vec![
                        Cell::plain(device.node.clone()),
                        Cell::plain(device.device.clone()),
                        Cell::plain(device.pci_bus_id.clone().unwrap_or_else(|| "-".into())),
                        Cell::plain(device.model.clone()),
                        Cell::plain(device.status.clone()),
                    ]
                })
                .collect(),
            fits: Vec::new(),
        };
        let table = grid.render(&TableStyle {
            colored: styles.colored,
            width: Width::Unlimited,
            notes_width: Width::Unlimited,
            no_headers: false,
        });
        for line in table.lines() {
            page.out.push_str("      ");
            page.out.push_str(line);
            page.out.push('\n');
        }
    }
}

/// Text being rendered: lines wrapped at `limit`.
struct Page {
    out: String,
    limit: Option<usize>,
}

impl Page {
    fn blank(&mut self) {
        self.out.push('\n');
    }

    /// One line: `indent` spaces, then the segments (made terminal-safe), each in its style;
    /// wrapped at the limit between words, continuation lines indented by `indent + hang`. The
    /// plain text is wrapped and the pieces coloured, so that escapes never count as columns nor
    /// span a line break.
    fn line(&mut self, indent: usize, hang: usize, segments: &[(&str, Style)]) {
        let mut text = " ".repeat(indent);
        let mut spans = Vec::with_capacity(segments.len());
        for (segment, style) in segments {
            // Every line of `why` passes here: names and messages from the cluster are shown,
            // never acted on by the terminal.
            let segment = crate::text::terminal_safe(segment);
            spans.push((text.len(), text.len() + segment.len(), *style));
            text.push_str(&segment);
        }
        let pieces = match self.limit {
            Some(limit) => pieces(&text, indent + hang, limit),
            None => vec![(0, text.len(), 0)],
        };
        for (n, (from, to, continued)) in pieces.into_iter().enumerate() {
            if n > 0 {
                self.out.push('\n');
                self.out.push_str(&" ".repeat(continued));
            }
            // The indentation before the first segment, uncoloured.
            if let Some(&(first, _, _)) = spans.first()
                && from < first
            {
                self.out.push_str(&text[from..first.min(to)]);
            }
            for &(start, end, style) in &spans {
                let (a, b) = (start.max(from), end.min(to));
                if a < b {
                    let _ = write!(self.out, "{}", (&text[a..b]).style(style));
                }
            }
        }
        self.out.push('\n');
    }
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
    fn examples_fit_where_help_and_man_wrap() {
        for line in EXAMPLES.lines() {
            assert!(line.chars().count() <= 70, "{line:?}");
        }
    }

    #[test]
    fn suggested_commands_read_what_this_run_read() {
        let args = |files: &[&str], recursive, version| WhyArgs {
            target: "x".into(),
            input: FileArgs {
                files: files.iter().map(|f| f.to_string()).collect(),
                recursive,
            },
            output: None,
            kubernetes_version: version,
        };
        let none = crate::cli::KubeArgs {
            kubeconfig: None,
            context: None,
            namespace: None,
            all_namespaces: false,
            request_timeout: Default::default(),
        };
        let same = same_input(
            &args(&["a.yaml", "my dir/b's.yaml", "-"], true, Some(35)),
            &none,
        );
        assert_eq!(
            same.files,
            [
                "-f",
                "a.yaml",
                "-f",
                r"'my dir/b'\''s.yaml'",
                "-f",
                "-",
                "-R"
            ]
        );
        assert_eq!(same.version.as_deref(), Some("--kubernetes-version 1.35"));
        assert_eq!(
            carry(
                "the claim is used by pod ns/p; for all of the pod's claims: kubectl media why p -n ns",
                &same
            ),
            r"the claim is used by pod ns/p; for all of the pod's claims: kubectl media why p -n ns -f a.yaml -f 'my dir/b'\''s.yaml' -f - -R --kubernetes-version 1.35"
        );
        // Before the punctuation that ends the command's clause; caps takes no version; other
        // commands are left alone.
        let same = same_input(&args(&["a.yaml"], false, Some(35)), &none);
        assert_eq!(
            carry(
                "check it against kubectl media caps -o json, or (kubectl media class ... | kubectl apply -f -).",
                &same
            ),
            "check it against kubectl media caps -o json -f a.yaml, or (kubectl media class ... | kubectl apply -f -)."
        );
        // -R without -f, from the cluster: nothing to add.
        let same = same_input(&args(&[], true, None), &none);
        assert_eq!(same, SameInput::default());
        assert_eq!(
            carry("kubectl media why p -n ns", &same),
            "kubectl media why p -n ns"
        );
        // From a cluster named by flags: the same kubeconfig and context.
        let named = crate::cli::KubeArgs {
            kubeconfig: Some("/tmp/my config".into()),
            context: Some("prod".into()),
            ..none.clone()
        };
        let same = same_input(&args(&[], false, None), &named);
        assert_eq!(
            carry("kubectl media why p -n ns", &same),
            "kubectl media why p -n ns --kubeconfig '/tmp/my config' --context prod"
        );
        // From files they would not matter.
        let same = same_input(&args(&["a.yaml"], false, None), &named);
        assert_eq!(
            carry("kubectl media why p -n ns", &same),
            "kubectl media why p -n ns -f a.yaml"
        );
    }

    #[test]
    fn versions_parse_in_the_forms_people_write() {
        assert_eq!(parse_minor("1.34"), Ok(34));
        assert_eq!(parse_minor("v1.35.2"), Ok(35));
        assert_eq!(parse_minor("36"), Ok(36));
        assert!(parse_minor("2.1").is_err());
        assert!(parse_minor("soon").is_err());
        // Older than resource.k8s.io/v1: refused, saying so.
        assert!(
            parse_minor("1.33")
                .unwrap_err()
                .contains("served from 1.34")
        );
    }
}
