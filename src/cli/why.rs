//! `kubectl media why`: why a pod's claims stay Pending, device by device. Gathers the objects
//! (from the cluster or `-f` files), hands them to [`crate::explain::pod`], and renders the
//! [`Diagnosis`] ([`render`], in the words of [`words`]) as text, JSON or YAML
//! (docs/why-format.md).
//!
//! Exit codes: 0 nothing blocks the claims, 3 some claim cannot be allocated, 4 undecided (what
//! could rule the nodes out was not read), 1 errors, 2 usage errors.

mod render;
pub(crate) mod words;

use clap::Args;

use crate::cli::output::{self, RenderError};
use crate::cli::table::Width;
use crate::cli::{Error, FileArgs, Global, Io};
use crate::explain::allocate::{DEFAULT_MINOR, Features};
use crate::explain::findings::{ClaimState, Diagnosis, Note, TargetKind};
use crate::explain::pod::{self, Input, Target};
use crate::explain::target;
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
  kubectl media why transcode-0 -o json | jq .verdict.code

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
const SCHEMA: &str = "kubectl-media/why/v2";

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

/// Why the target or `--kubernetes-version` is refused (exit 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WhyArgError {
    #[error("invalid target {0:?} (hint: give a pod as NAME or pod/NAME, a claim as claim/NAME)")]
    Target(String),
    #[error("cannot explain a {0:?} (hint: give a pod as NAME or pod/NAME, a claim as claim/NAME)")]
    Kind(String),
    // resource.k8s.io/v1, the only API version read, is served from 1.34.
    #[error(
        "Kubernetes 1.{0} is not explained: its DRA API is older than resource.k8s.io/v1, which \
         is served from 1.34 (valid: 1.34 and later)"
    )]
    OldVersion(u32),
    #[error("invalid Kubernetes version {0:?} (valid: e.g. 1.34, 1.35.2, 36)")]
    Version(String),
}

/// `34`, `1.34`, `v1.34.2` → 34.
fn parse_minor(text: &str) -> Result<u32, WhyArgError> {
    let trimmed = text.trim_start_matches('v');
    let minor = match trimmed.split('.').collect::<Vec<_>>().as_slice() {
        [minor] => minor.parse().ok(),
        ["1", minor, ..] => minor.parse().ok(),
        _ => None,
    };
    match minor {
        Some(m) if (34..100).contains(&m) => Ok(m),
        Some(m) if (20..34).contains(&m) => Err(WhyArgError::OldVersion(m)),
        _ => Err(WhyArgError::Version(text.to_owned())),
    }
}

/// What a target names.
fn parse_target(text: &str, namespace: &str) -> Result<Target, WhyArgError> {
    let (kind, name) = match text.split_once('/') {
        Some((kind, name)) => (Some(kind), name),
        None => (None, text),
    };
    if name.is_empty() || name.contains('/') {
        return Err(WhyArgError::Target(text.to_owned()));
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
        Some(other) => Err(WhyArgError::Kind(other.to_owned())),
    }
}

/// Whether a slice holds a device with taints.
fn stores_taints(objects: &Objects) -> bool {
    objects
        .slices
        .iter()
        .flat_map(|slice| &slice.spec.devices)
        .any(|device| !device.taints().is_empty())
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
    parse_target(&args.target, "default")?;
    let sources = args.input.sources()?;
    let from_cluster = sources.is_none();
    let (objects, unread, mut missing, namespace, minor) = match sources {
        Some(sources) => read_files(args, global, io, &sources)?,
        None => gather_cluster(args, global)?,
    };
    let target = parse_target(&args.target, &namespace)?;
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
    // The same for DRADeviceTaints (off by default before 1.36): the server drops `taints`
    // from every device with the gate off (dropDisabledDRADeviceTaintsFields).
    let taints_seen = from_cluster
        && args.kubernetes_version.is_none()
        && !features.device_taints
        && stores_taints(&objects);
    features.device_taints |= taints_seen;
    features.selectors_new = !from_cluster;
    let input = Input {
        objects: &objects,
        target: &target,
        features,
        unread: &unread,
        every_device: args.output == Some(WhyFormat::Wide),
        threads: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
    };
    let same = same_input(args, &global.kube);
    let from_files = !same.files.is_empty();
    let explained = pod::explain(&input);
    // As in caps: objects that could not be read are warnings, before anything else; when the
    // one asked about is among them, the error says so, once.
    if !matches!(explained, Err(pod::TargetError::Unparsed { .. })) {
        let warn = global.color.for_stderr();
        for note in &objects.notes {
            crate::cli::warn(io.stderr, &warn, note);
        }
    }
    let mut diagnosis =
        explained.map_err(|e| not_found(e, &objects, global, &namespace, &same, from_files))?;
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
                if diagnosis.kind == TargetKind::Pod {
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
        diagnosis
            .notes
            .push(Note::SlicesUnread { why: m.why.clone() });
    }
    if consumable_seen {
        diagnosis.notes.push(Note::ConsumableCapacityAssumed);
    }
    if taints_seen {
        diagnosis.notes.push(Note::DeviceTaintsAssumed);
    }
    if minor.is_none() {
        diagnosis.notes.push(Note::DefaultGates);
    }
    let text = match args.output {
        Some(WhyFormat::Json) => {
            let mut text = serde_json::to_string_pretty(&render::record(&diagnosis, &same)?)
                .map_err(RenderError::from)?;
            text.push('\n');
            text
        }
        // kubectl's YAML quoting (PCI addresses such as "0000:00:02.0" stay strings for YAML
        // 1.1 readers), as caps writes it.
        Some(WhyFormat::Yaml) => crate::cli::yaml::to_string(&render::record(&diagnosis, &same)?),
        _ => render::render(
            &diagnosis,
            &same,
            &global.color.for_stdout(),
            Width::of_stdout().limit(),
        ),
    };
    output::write_all(io.stdout, &text)?;
    let (blocked, undecided) = (diagnosis.blocked, undecided(&diagnosis));
    io.release(diagnosis);
    io.release(objects);
    if blocked {
        return Err(Error::Blocked);
    }
    if undecided {
        return Err(Error::Undecided);
    }
    Ok(())
}

/// Reads the objects from files: what they lack is noted (or, for what `why` cannot do
/// without, reported when needed), never fetched from a cluster.
fn read_files(
    args: &WhyArgs,
    global: &Global,
    io: &mut Io<'_>,
    sources: &[files::Source],
) -> Result<Gathered, Error> {
    let objects = files::read(sources, io.stdin)?;
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
    Ok((objects, unread, missing, namespace, args.kubernetes_version))
}

/// A target that is not found, as the error says it: close names from where they can be, and a
/// hint whose command reads what this run read.
fn not_found(
    e: pod::TargetError,
    objects: &Objects,
    global: &Global,
    namespace: &str,
    same: &SameInput,
    from_files: bool,
) -> Error {
    // From files the namespace was not chosen (no -n), or holds no close name: close names come
    // from every namespace the files hold, and no hint points at the cluster.
    let in_files = |similar: &[String], elsewhere: &[String]| {
        from_files
            && !global.kube.all_namespaces
            && elsewhere.is_empty()
            && (global.kube.namespace.is_none() || similar.is_empty())
    };
    match e {
        pod::TargetError::PodNotFound {
            name,
            similar,
            elsewhere,
            ..
        } if in_files(&similar, &elsewhere) => {
            let metas = objects.pods.iter().map(|p| &p.metadata);
            let close = pod::similar(metas, None, &name);
            let asked = shown_target(&global.kube, namespace, &name);
            Error::NotFound(carry(&not_in_files("pod", "", &asked, &close), same))
        }
        pod::TargetError::ClaimNotFound {
            name,
            similar,
            elsewhere,
            ..
        } if in_files(&similar, &elsewhere) => {
            let metas = objects.claims.iter().map(|c| &c.metadata);
            let close = pod::similar(metas, None, &name);
            let asked = shown_target(&global.kube, namespace, &name);
            Error::NotFound(carry(
                &not_in_files("resourceclaim", "claim/", &asked, &close),
                same,
            ))
        }
        // With -A the name is in no namespace at all: said so, with close names from all.
        pod::TargetError::PodNotFound { name, .. } if global.kube.all_namespaces => {
            let metas = objects.pods.iter().map(|p| &p.metadata);
            let close = pod::similar(metas, None, &name);
            Error::NotFound(carry(&in_no_namespace("pod", "", &name, &close), same))
        }
        pod::TargetError::ClaimNotFound { name, .. } if global.kube.all_namespaces => {
            let metas = objects.claims.iter().map(|c| &c.metadata);
            let close = pod::similar(metas, None, &name);
            Error::NotFound(carry(
                &in_no_namespace("resourceclaim", "claim/", &name, &close),
                same,
            ))
        }
        // The hint's command reads what this run read, as the next steps' do.
        pod::TargetError::PodNotFound { .. } | pod::TargetError::ClaimNotFound { .. } => {
            Error::NotFound(carry(&e.to_string(), same))
        }
        e => Error::Why(Box::new(e)),
    }
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
            target::similar_names_hint(close, prefix, candidate, namespace)
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
            target::similar_names_hint(close, prefix, candidate, namespace)
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
                    Err(e) => return Err(e.into()),
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
    // Only the kubeconfig: no certificate read, no exec plugin run, nothing sent.
    match crate::kubeconfig::context_namespace(&kube.connection().source) {
        Ok(namespace) => Ok(namespace.unwrap_or_else(|| "default".to_owned())),
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
        let target = parse_target(&args.target, &namespace)?;
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
        let target = parse_target(&args.target, &namespace)?;
        if let Target::Claim { namespace, name } = &target {
            // The events that matter are the pod's, which uses the claim.
            let user = objects
                .claims
                .iter()
                .find(|c| {
                    c.metadata.name.as_deref() == Some(name)
                        && c.metadata.namespace.as_deref() == Some(namespace)
                })
                .and_then(|claim| crate::explain::claims::claim_users(claim, &objects).0.into_iter().next());
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
                .to_string()
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
                .to_string()
                .contains("served from 1.34")
        );
    }
}
