//! What to explain: the pod or claim asked about, found among the objects, or an error that
//! says why not (with close names and the namespace where the name is).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::allocate::Features;
use super::claims::{Entry, claim_state, claim_users, meta_is, pod_claims};
use super::findings::{ClaimProblem, ClaimState, TargetKind, Unchecked};
use super::model;
use crate::fleet::objects::{Kind, Objects, Unparsed};

/// What to explain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Pod { namespace: String, name: String },
    Claim { namespace: String, name: String },
}

impl Target {
    pub(super) fn namespace(&self) -> &str {
        match self {
            Target::Pod { namespace, .. } | Target::Claim { namespace, .. } => namespace,
        }
    }
}

/// The analysis' inputs besides the objects.
pub(crate) struct Input<'a> {
    pub objects: &'a Objects,
    pub target: &'a Target,
    pub features: Features,
    /// Kinds that could not be read (for example no permission), with the reason: the
    /// diagnosis says what it lacks because of each.
    pub unread: &'a [(Kind, String)],
    /// Keep every device's line, for `-o wide`.
    pub every_device: bool,
    /// Threads the nodes and requests are evaluated on (the machine's cores); the diagnosis is
    /// the same for any number.
    pub threads: usize,
}

/// Why there is nothing to explain.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("pod {namespace}/{name} not found{hint}", hint = not_found_hint(.similar, .elsewhere, "pod", .namespace))]
    PodNotFound {
        namespace: String,
        name: String,
        similar: Vec<String>,
        elsewhere: Vec<String>,
    },
    #[error("resourceclaim {namespace}/{name} not found{hint}", hint = not_found_hint(.similar, .elsewhere, "claim", .namespace))]
    ClaimNotFound {
        namespace: String,
        name: String,
        similar: Vec<String>,
        elsewhere: Vec<String>,
    },
    /// The object asked about, or one it names, is in the input but does not have its kind's
    /// shape: the answer would be built on a misreading (or say "not found").
    #[error(
        "{of}{unparsed} (hint: that field must have the type the Kubernetes API gives it; `kubectl get {plural} -n {namespace} {name} -o yaml` shows the object as the API server keeps it)",
        of = .of.as_deref().map(|of| format!("cannot explain {of}: ")).unwrap_or_default(),
        plural = .unparsed.kind.plural(),
        namespace = .unparsed.namespace,
        name = crate::text::elide(&.unparsed.name, 300),
    )]
    Unparsed {
        unparsed: Unparsed,
        /// `pod ns/name`, when the object that does not parse is one the target names.
        of: Option<String>,
    },
    #[error(
        "pod {namespace}/{name} has no resource claims (spec.resourceClaims is empty), so DRA does not hold it (hint: kubectl describe pod -n {namespace} {name})"
    )]
    NoClaims { namespace: String, name: String },
    /// A kind without which no claim can be evaluated (ResourceSlices, DeviceClasses) could not
    /// be read: a verdict without it would be built on data we lack.
    #[error("cannot explain {target} without {plural}: {why} (hint: {hint})")]
    Unreadable {
        /// `pod ns/name` or `claim ns/name`.
        target: String,
        plural: &'static str,
        why: String,
        hint: String,
    },
}

/// `similar names: A, B; e.g. kubectl media why FLAG EXAMPLE -n NAMESPACE`: the hint of a
/// name not found, with `example` (in `namespace`) as the command to run.
pub(crate) fn similar_names_hint(
    names: &[String],
    flag: &str,
    example: &str,
    namespace: &str,
) -> String {
    format!(
        "similar names: {}; e.g. kubectl media why {flag}{example} -n {namespace}",
        names.join(", ")
    )
}

pub(super) fn not_found_hint(
    similar: &[String],
    elsewhere: &[String],
    what: &str,
    namespace: &str,
) -> String {
    let flag = if what == "pod" { "" } else { "claim/" };
    match (similar.first(), elsewhere.first()) {
        (_, Some(namespace)) => format!(
            " (hint: a {what} of that name is in the namespace {namespace}: add -n {namespace}{more})",
            more = if elsewhere.len() > 1 {
                format!("; also in {}", elsewhere[1..].join(", "))
            } else {
                String::new()
            }
        ),
        (Some(first), None) => format!(
            " (hint: {})",
            similar_names_hint(similar, flag, first, namespace)
        ),
        (None, None) => format!(
            " (hint: check the name and -n, or list them with kubectl get {what}s)",
            what = if what == "pod" {
                "pod"
            } else {
                "resourceclaim"
            }
        ),
    }
}

/// Up to three names close to `name` in `namespace`, closest first; with no namespace (`-A`),
/// in every namespace, each as `namespace/name`.
pub(crate) fn similar<'m>(
    metas: impl Iterator<Item = &'m ObjectMeta>,
    namespace: Option<&str>,
    name: &str,
) -> Vec<String> {
    let mut scored: Vec<(usize, String)> = metas
        .filter(|m| namespace.is_none_or(|ns| m.namespace.as_deref().unwrap_or("default") == ns))
        .filter_map(|m| {
            let candidate = m.name.as_deref()?;
            let distance = strsim::levenshtein(candidate, name);
            let close = distance <= name.len().max(3) / 3
                || candidate.starts_with(name)
                || name.starts_with(candidate);
            let shown = match namespace {
                Some(_) => candidate.to_owned(),
                None => format!(
                    "{}/{candidate}",
                    m.namespace.as_deref().unwrap_or("default")
                ),
            };
            close.then_some((distance, shown))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

pub(super) fn elsewhere<'m>(
    metas: impl Iterator<Item = &'m ObjectMeta>,
    name: &str,
) -> Vec<String> {
    let mut namespaces: Vec<String> = metas
        .filter(|m| m.name.as_deref() == Some(name))
        .filter_map(|m| m.namespace.clone())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    namespaces
}

/// The target, found: its kind, the pod (when there is one) and the claims to explain.
pub(super) struct Found<'o> {
    pub kind: TargetKind,
    pub name: &'o str,
    pub pod: Option<&'o Pod>,
    /// The claims to explain, each with where it stands.
    pub entries: Vec<Entry<'o>>,
    /// For `why claim/NAME`: the pods that use the claim.
    pub used_by: Vec<String>,
    /// For `why claim/NAME`: what of the pod that uses the claim could not be read.
    pub unread_user: Option<Unchecked>,
}

/// Finds the target among the objects, or says why it cannot be explained.
pub(super) fn resolve<'o>(input: &Input<'o>) -> Result<Found<'o>, TargetError> {
    match input.target {
        Target::Pod { name, .. } => resolve_pod(input, name),
        Target::Claim { name, .. } => resolve_claim(input, name),
    }
}

/// An object of the input that did not parse, by identity: one asked about is the error.
pub(super) fn unparsed_error(
    input: &Input<'_>,
    kind: Kind,
    name: &str,
    of: Option<String>,
) -> Option<TargetError> {
    let namespace = input.target.namespace();
    // The last of duplicates, as a map built from the list would keep.
    input
        .objects
        .unparsed
        .iter()
        .rev()
        .find(|u| u.kind == kind && u.namespace == namespace && u.name == name)
        .map(|u| TargetError::Unparsed {
            unparsed: u.clone(),
            of,
        })
}

pub(super) fn resolve_pod<'o>(
    input: &Input<'o>,
    name: &'o String,
) -> Result<Found<'o>, TargetError> {
    let objects = input.objects;
    let namespace = input.target.namespace();
    let unparsed_error = |kind, name: &str, of| unparsed_error(input, kind, name, of);
    if let Some(e) = unparsed_error(Kind::Pod, name, None) {
        return Err(e);
    }
    let pod = objects
        .pods
        .iter()
        .find(|p| meta_is(&p.metadata, namespace, name))
        .ok_or_else(|| TargetError::PodNotFound {
            namespace: namespace.to_owned(),
            name: name.clone(),
            similar: similar(
                objects.pods.iter().map(|p| &p.metadata),
                Some(namespace),
                name,
            ),
            elsewhere: elsewhere(objects.pods.iter().map(|p| &p.metadata), name),
        })?;
    let mut entries = pod_claims(pod, objects);
    let of = || Some(format!("pod {namespace}/{name}"));
    for entry in &entries {
        let claim = entry
            .claim_name
            .as_deref()
            .filter(|_| entry.claim.is_none())
            .and_then(|c| c.split_once('/'))
            .and_then(|(_, claim)| unparsed_error(Kind::ResourceClaim, claim, of()));
        let template = entry
            .template
            .as_deref()
            .filter(|_| entry.spec.is_none())
            .and_then(|t| unparsed_error(Kind::ResourceClaimTemplate, t, of()));
        if let Some(e) = claim.or(template) {
            return Err(e);
        }
    }
    if input
        .unread
        .iter()
        .any(|(k, _)| *k == Kind::ResourceClaimTemplate)
    {
        // A template not among the objects may exist: it was not read.
        for entry in entries.iter_mut().filter(|e| {
            e.state == ClaimState::NotCreated && e.spec.is_none() && e.template.is_some()
        }) {
            entry.problem = Some(ClaimProblem::NotCreatedTemplateUnread {
                entry: entry.name.clone(),
                namespace: namespace.to_owned(),
                template: entry.template.clone().unwrap_or_default(),
            });
        }
    }
    if entries.is_empty() {
        return Err(TargetError::NoClaims {
            namespace: namespace.to_owned(),
            name: name.clone(),
        });
    }
    Ok(Found {
        kind: TargetKind::Pod,
        name,
        pod: Some(pod),
        entries,
        used_by: Vec::new(),
        unread_user: None,
    })
}

pub(super) fn resolve_claim<'o>(
    input: &Input<'o>,
    name: &'o String,
) -> Result<Found<'o>, TargetError> {
    let objects = input.objects;
    let namespace = input.target.namespace();
    let unparsed_error = |kind, name: &str, of| unparsed_error(input, kind, name, of);
    let mut unread_user = None;
    if let Some(e) = unparsed_error(Kind::ResourceClaim, name, None) {
        return Err(e);
    }
    let claim = objects
        .claims
        .iter()
        .find(|c| meta_is(&c.metadata, namespace, name))
        .ok_or_else(|| TargetError::ClaimNotFound {
            namespace: namespace.to_owned(),
            name: name.clone(),
            similar: similar(
                objects.claims.iter().map(|c| &c.metadata),
                Some(namespace),
                name,
            ),
            elsewhere: elsewhere(objects.claims.iter().map(|c| &c.metadata), name),
        })?;
    let mut entry = Entry {
        name: name.clone(),
        claim: Some(claim),
        claim_name: Some(model::claim_name(claim)),
        template: None,
        spec: Some(&claim.spec),
        state: claim_state(claim, None, false),
        problem: None,
    };
    // The pod that uses the claim: its node filters decide where the claim can be
    // allocated, and its events are the scheduler's words about it.
    let users = claim_users(claim, objects);
    let pods_read = !objects.pods.is_empty() && !input.unread.iter().any(|(k, _)| *k == Kind::Pod);
    let allocated = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .is_some();
    match (users.0.first(), users.1) {
        (Some(_), Some(_)) => {}
        // Named, but not read: its node filters are not known.
        (Some(user), None) => unread_user = Some(Unchecked::UserUnread { pod: user.clone() }),
        (None, _) if !pods_read => unread_user = Some(Unchecked::NoPods),
        // Nothing uses it: the scheduler allocates a claim only for a pod it schedules.
        (None, _) if !allocated => {
            entry.problem = Some(ClaimProblem::Unused {
                namespace: namespace.to_owned(),
                name: name.clone(),
            });
        }
        (None, _) => {}
    }
    Ok(Found {
        kind: TargetKind::ResourceClaim,
        name,
        pod: users.1,
        entries: vec![entry],
        used_by: users.0,
        unread_user,
    })
}
