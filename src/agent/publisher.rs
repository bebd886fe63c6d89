//! Publishing the node's `media.liken.sh` ResourceSlice and keeping it true.
//!
//! The publisher holds what the slice should contain (from the prober) and what the API server
//! stores (from a watch of only this node's slices: field selectors `spec.nodeName=<node>` and
//! `spec.driver=media.liken.sh`). Whenever the two differ it writes; when they agree it sends
//! nothing, so a steady node costs the API server one idle watch and no writes. This covers:
//!
//! - the first publish, and re-creation after the kubelet's wipe (at kubelet start, and 30 s
//!   after our plugin disappears) or any other deletion;
//! - restoring the slice after an outside edit of its spec or its controller reference (other
//!   metadata, such as labels, finalizers and other owners' references, is left alone and kept
//!   on every update: it does not reach the scheduler);
//! - a new probe result (GPUs appeared or disappeared), bumping `spec.pool.generation` on every
//!   content change, from the stored value, never backwards.
//!
//! **Whose slice it is** is decided from the stored object before writing: a slice of our driver
//! with our name whose immutable fields (`spec.pool.name`, `spec.nodeName`, which
//! kube-apiserver's `ValidateResourceSliceUpdate` refuses to change) differ from ours cannot be
//! updated into ours, so it is deleted (with a uid precondition) and created anew. Another
//! driver's slice with our name is never deleted: that is logged at ERROR and retried (re-read)
//! with backoff, until someone removes it. Nothing else is a reason to delete: a write the API server refuses (422 Invalid content, a
//! ValidatingAdmissionPolicy's 422 or 403, RBAC's 403, 401) leaves the stored slice as it is,
//! is logged once at ERROR with the server's message on one line, counted
//! (`slice_write_refusals_total`), shown on `/readyz`, and retried with backoff.
//!
//! **What the server stored** is checked after each write against what was sent: a field it
//! dropped (`allowMultipleAllocations` with the DRAConsumableCapacity gate off), added (a
//! mutating admission policy or webhook) or changed inside a device is said once (log,
//! `/readyz`, `/metrics`) and no longer compared, so the slice is not rewritten on every watch
//! event. A change the agent cannot leave aside (a device, its name, the pool, the node, the
//! owner) makes the write count as failed: it is retried with backoff, never in a loop.
//!
//! Comparison ignores `generation` and metadata noise (resourceVersion, managedFields, ...).
//! API failures are retried with capped exponential backoff and jitter, forever: an outage is
//! never a reason to exit. A conflict re-reads and retries at once. The watch itself (kube-rs's
//! watcher) re-lists after a broken stream or `410 Gone`. Each problem is logged once when it
//! starts (or its cause changes) and once when it ends, which is when an API request succeeded
//! again, not when the watcher merely restarts. Every API call is bounded by
//! [`API_CALL_TIMEOUT`], so a hung connection is a retried failure and never a wedged loop.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Level, debug, error, info, warn};

use crate::agent::health::{
    DROPPED_FIELD_WARNING, Health, Heartbeat, RefusalLabels, WriteLabels, human,
};
use crate::catalogue::DRIVER;
use crate::node::device::GpuDevice;
use crate::node::slice::{NodeRef, desired, slice_name};
use crate::text::one_line;

/// The first retry delay; doubled at each failure up to the configured maximum.
const INITIAL_BACKOFF: Duration = Duration::from_millis(200);

/// How many conflicts in a row are re-read and retried at once before backing off.
const MAX_IMMEDIATE_RETRIES: usize = 5;

/// The longest one API request may take before it counts as failed. The client itself has no
/// read timeout, so without this a hung connection would stall the publisher for good.
pub(crate) const API_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a server message is quoted in a log line or on `/readyz`.
const MAX_MESSAGE: usize = 400;

/// What went wrong with one API request, as an operator reads it (never a Rust `Debug` dump).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApiCause {
    /// The server answered with an error status.
    Status {
        code: u16,
        reason: String,
        /// The server's message, cut to one line.
        message: String,
        /// How long the server asked to wait before retrying (429, some 503s).
        retry_after: Option<Duration>,
    },
    /// No answer: the connection failed.
    Unreachable { url: String, detail: String },
    /// No answer within [`API_CALL_TIMEOUT`].
    TimedOut { url: String, after: Duration },
    /// Anything else (an answer that could not be read, ...).
    Other(String),
}

impl ApiCause {
    /// From a client error; `url` is the API server's address, named when it cannot be reached.
    pub(crate) fn from_kube(error: &kube::Error, url: &str) -> Self {
        match error {
            kube::Error::Api(status) => ApiCause::Status {
                // Always a Status with the HTTP code, whatever the body was: the client's
                // `crate::api_errors::ReadErrorAnswers` layer makes one of anything else.
                code: status.code,
                reason: status.reason.clone(),
                message: one_line(&status.message, MAX_MESSAGE),
                retry_after: status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s))),
            },
            kube::Error::Service(_) | kube::Error::HyperError(_) => ApiCause::Unreachable {
                url: url.to_string(),
                detail: chain(error),
            },
            other => ApiCause::Other(chain(other)),
        }
    }

    /// From a watcher error.
    fn from_watcher(error: &watcher::Error, url: &str) -> (&'static str, Self) {
        match error {
            watcher::Error::InitialListFailed(e) => ("list", Self::from_kube(e, url)),
            watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
                ("watch", Self::from_kube(e, url))
            }
            watcher::Error::WatchError(status) => (
                "watch",
                ApiCause::Status {
                    code: status.code,
                    reason: status.reason.clone(),
                    message: one_line(&status.message, MAX_MESSAGE),
                    retry_after: None,
                },
            ),
            watcher::Error::NoResourceVersion => ("watch", ApiCause::Other(error.to_string())),
        }
    }

    /// A refusal: the server understood the request and will not accept it as it is
    /// (validation, admission, authorisation). Retrying unchanged does not help until someone
    /// changes the policy, the permissions or the agent.
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(
            self,
            ApiCause::Status {
                code: 400 | 401 | 403 | 413 | 422,
                ..
            }
        )
    }

    /// The API server cannot be reached at all: no connection, or no answer in time. That is one
    /// problem for the whole agent. A server that answers with an error (5xx, 429) is reachable:
    /// that failure belongs to the request, which may well be the only one failing.
    pub(crate) fn is_outage(&self) -> bool {
        matches!(
            self,
            ApiCause::Unreachable { .. } | ApiCause::TimedOut { .. }
        )
    }

    /// How long the server asked to wait before retrying.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiCause::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    fn status(&self) -> Option<(u16, &str)> {
        match self {
            ApiCause::Status { code, reason, .. } => Some((*code, reason)),
            _ => None,
        }
    }

    fn is_conflict(&self) -> bool {
        self.status() == Some((409, "Conflict"))
    }

    fn is_already_exists(&self) -> bool {
        self.status() == Some((409, "AlreadyExists"))
    }

    fn is_not_found(&self) -> bool {
        matches!(self.status(), Some((404, _)))
    }

    /// What kind of failure it is: a problem is logged again only when this changes, so an
    /// outage that moves from "list" to "watch" or from one retry to the next is one problem.
    pub(crate) fn class(&self) -> String {
        match self {
            ApiCause::Status {
                code,
                reason,
                message,
                ..
            } if self.is_refusal() => format!("{code} {reason} {message}"),
            ApiCause::Status { code, reason, .. } => format!("{code} {reason}"),
            ApiCause::Unreachable { .. } => "unreachable".into(),
            ApiCause::TimedOut { .. } => "timeout".into(),
            ApiCause::Other(text) => text.clone(),
        }
    }
}

impl fmt::Display for ApiCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiCause::Status {
                code,
                reason,
                message,
                ..
            } => {
                let refused = if self.is_refusal() { "refused, " } else { "" };
                write!(f, "{refused}{code} {reason}: {message}")
            }
            ApiCause::Unreachable { url, detail } => write!(f, "cannot reach {url}: {detail}"),
            ApiCause::TimedOut { url, after } => {
                write!(f, "no answer from {url} within {}", human(*after))
            }
            ApiCause::Other(text) => f.write_str(text),
        }
    }
}

/// An error and its sources on one line, without repeating a source its parent already quotes.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = one_line(&error.to_string(), MAX_MESSAGE);
    let mut source = error.source();
    while let Some(cause) = source {
        let next = one_line(&cause.to_string(), MAX_MESSAGE);
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    // kube-rs prefixes its own variant names; they say nothing to an operator.
    for prefix in ["ServiceError: ", "HyperError: "] {
        if let Some(rest) = text.strip_prefix(prefix) {
            text = rest.to_string();
        }
    }
    text
}

/// Records that the API server did not work for a request; logs once when such an outage
/// starts, whichever loop meets it first. Returns false (nothing recorded) for a cause that is
/// not an outage: that one is the caller's to report.
pub(crate) fn api_unanswered(health: &Health, url: &str, cause: &ApiCause) -> bool {
    if !cause.is_outage() {
        return false;
    }
    let mut outage = health.api_outage.lock().unwrap_or_else(|e| e.into_inner());
    if outage.is_none() {
        let message = format!("the API server at {url} is not working: {cause}");
        warn!(
            "{message}; the agent keeps serving the kubelet and retries with backoff (logged again when it works)"
        );
        *outage = Some(message);
    }
    true
}

/// Records that the API server answered; logs the end of an outage.
pub(crate) fn api_answered(health: &Health, url: &str) {
    let previous = health
        .api_outage
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(previous) = previous {
        info!("the API server at {url} works again (after: {previous})");
    }
}

/// Why one publish attempt failed (retried; never fatal).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    /// An API request failed: `verb` on `what` (`ResourceSlice <name>`, `Node <name>`).
    #[error("{verb} {what}: {cause}")]
    Api {
        verb: &'static str,
        what: String,
        cause: ApiCause,
    },
    /// The Node does not exist (yet, or any more).
    #[error(
        "Node {node} does not exist, so its slice would be garbage-collected at once; waiting for it (hint: the slice is published when the kubelet registers the node again)"
    )]
    NodeMissing { node: String },
    /// Every immediate retry met a conflict.
    #[error(
        "ResourceSlice {name} kept changing under us ({MAX_IMMEDIATE_RETRIES} conflicts in a row)"
    )]
    Conflicts { name: String },
    /// The server stored something the agent cannot leave aside.
    #[error(
        "the API server stored ResourceSlice {name} otherwise than it was sent: {changes}; writing it again with backoff (hint: a mutating admission policy or webhook changes ResourceSlices: kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations)"
    )]
    StoredOtherwise { name: String, changes: String },
    /// A slice of another driver has our name: not this agent's to change or delete.
    #[error(
        "ResourceSlice {name} belongs to driver {driver}, not {DRIVER}, so this node's slice cannot be published under its name; another driver's object is left alone (hint: see who made it: kubectl get resourceslice {name} -o yaml; delete it if nothing needs it)"
    )]
    NameTaken { name: String, driver: String },
}

impl PublishError {
    /// The refusal, if the API server refused a write.
    pub(crate) fn refusal(&self) -> Option<(&'static str, u16)> {
        match self {
            PublishError::Api { verb, cause, .. } if cause.is_refusal() => {
                cause.status().map(|(code, _)| (*verb, code))
            }
            _ => None,
        }
    }

    fn class(&self) -> String {
        match self {
            PublishError::Api { cause, .. } => cause.class(),
            other => other.to_string(),
        }
    }
}

/// Capped exponential backoff with jitter ("equal jitter": half fixed, half random), so a fleet
/// of agents that lost the API server together does not come back in lockstep.
#[derive(Debug)]
pub(crate) struct Backoff {
    failures: u32,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff from 200 ms that never waits longer than `max`.
    pub(crate) fn new(max: Duration) -> Self {
        Self::starting_at(INITIAL_BACKOFF, max)
    }

    /// A backoff from `initial` that never waits longer than `max`.
    pub(crate) fn starting_at(initial: Duration, max: Duration) -> Self {
        Self {
            failures: 0,
            initial,
            max,
        }
    }

    /// The delay before the next attempt after one more failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let exp = self.initial.saturating_mul(1 << self.failures.min(20));
        self.failures = self.failures.saturating_add(1);
        let capped = exp.min(self.max);
        let half = capped / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Back to the first delay after a success.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Logs a problem once when it starts (or its kind changes) and once when it is over, not per
/// retry.
#[derive(Debug)]
pub(crate) struct Problem {
    what: &'static str,
    /// The kind of the current problem, and its message as first logged.
    current: Option<(String, String)>,
}

impl Problem {
    /// A tracker for one activity (`what`: "publish the ResourceSlice", "watch ...").
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            current: None,
        }
    }

    /// Records a failure whose kind is its message, at WARN; returns whether it was logged.
    pub(crate) fn failed(&mut self, error: &str) -> bool {
        self.report(Level::WARN, error, error)
    }

    /// Records a failure of kind `kind` (logged again only when the kind changes); returns
    /// whether it was logged.
    pub(crate) fn report(&mut self, level: Level, kind: &str, message: &str) -> bool {
        if self
            .current
            .as_ref()
            .is_some_and(|(current, _)| current == kind)
        {
            return false;
        }
        let what = self.what;
        if level == Level::ERROR {
            error!(
                "{what}: {message}; retrying with backoff (logged again only when this changes)"
            );
        } else {
            warn!("{what}: {message}; retrying with backoff (logged again only when this changes)");
        }
        self.current = Some((kind.to_string(), message.to_string()));
        true
    }

    /// Records a success; logs the recovery if there was a problem.
    pub(crate) fn ok(&mut self) {
        if let Some((_, previous)) = self.current.take() {
            info!("{}: works again (after: {previous})", self.what);
        }
    }

    /// Whether a problem is current.
    #[cfg(test)]
    pub(crate) fn is_failing(&self) -> bool {
        self.current.is_some()
    }
}

/// One step of a path into a slice's JSON: an object key, or every element of a list.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    Key(String),
    Each,
}

/// A field of the slice, with list positions generalised (`spec.devices[*].attributes[x]`), so
/// that what is learned from one device applies to every device, now and after a change.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FieldPath(pub Vec<Step>);

impl FieldPath {
    fn key(&self, i: usize) -> Option<&str> {
        match self.0.get(i) {
            Some(Step::Key(k)) => Some(k),
            _ => None,
        }
    }

    /// `allowMultipleAllocations` on the devices: the DRAConsumableCapacity gate's field.
    fn is_gate_field(&self) -> bool {
        self.0.len() == 4 && self.device_field() == Some("allowMultipleAllocations")
    }

    /// The field of a device this path is in (`attributes`, `allowMultipleAllocations`, ...).
    fn device_field(&self) -> Option<&str> {
        (self.key(0) == Some("spec")
            && self.key(1) == Some("devices")
            && self.0.get(2) == Some(&Step::Each))
        .then(|| self.key(3))
        .flatten()
    }

    /// Whether the agent can leave this field aside and still publish what matters: anything
    /// inside a device except its name. A device itself, the pool, the node, the driver and the
    /// owner are what the slice is; a server that changes those is fought (with backoff).
    fn can_be_left_aside(&self) -> bool {
        self.device_field().is_some_and(|field| field != "name")
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for step in &self.0 {
            match step {
                Step::Each => f.write_str("[*]")?,
                Step::Key(k) if k.contains(['.', '/']) || k.is_empty() => write!(f, "[{k}]")?,
                Step::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
            }
            first = false;
        }
        Ok(())
    }
}

/// How the server treated one field of what was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Treatment {
    Dropped,
    Added,
    Changed,
}

/// One field the server stored otherwise than it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub path: FieldPath,
    pub treatment: Treatment,
    /// What the server stored (for an added or changed field), compact JSON.
    pub stored: Option<String>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.treatment, &self.stored) {
            (Treatment::Dropped, _) => write!(f, "{} dropped", self.path),
            (Treatment::Added, Some(v)) => write!(f, "{} added ({})", self.path, one_line(v, 80)),
            (Treatment::Changed, Some(v)) => {
                write!(f, "{} changed (stored {})", self.path, one_line(v, 80))
            }
            (_, None) => write!(f, "{} changed", self.path),
        }
    }
}

/// What of a slice is content: its spec without the pool generation, and who its controller is
/// (the ownerReference with `controller: true`, by apiVersion, kind, name and uid: what garbage
/// collection acts on); empty lists, maps and nulls removed (a real API server omits what is
/// empty). Other owners' references, and how ours is flagged otherwise (`blockOwnerDeletion`, as
/// a policy may set it), are someone else's business, as labels and finalizers are.
fn content(slice: &ResourceSlice) -> Value {
    let mut spec = serde_json::to_value(&slice.spec).unwrap_or(Value::Null);
    if let Some(pool) = spec.get_mut("pool").and_then(Value::as_object_mut) {
        pool.remove("generation");
    }
    let controller = controller_of(&slice.metadata).map(|owner| {
        serde_json::json!({
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
        })
    });
    let mut value = serde_json::json!({ "spec": spec, "controller": controller });
    prune(&mut value);
    value
}

/// The object's controller reference, if it has one (at most one may say `controller: true`).
fn controller_of(metadata: &ObjectMeta) -> Option<&OwnerReference> {
    metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
}

/// The metadata to update `stored` with: the stored object's own, as read-modify-write keeps it
/// (labels, annotations, finalizers, other owners' references, and the resourceVersion that
/// makes the write conditional), with `wanted`'s controller reference in place of a different
/// controller's, or added. A reference to the same controller stays as stored.
fn updated_metadata(stored: &ObjectMeta, wanted: &ObjectMeta) -> ObjectMeta {
    let mut metadata = stored.clone();
    let Some(ours) = controller_of(wanted) else {
        return metadata;
    };
    let same = |owner: &OwnerReference| {
        (&owner.api_version, &owner.kind, &owner.name, &owner.uid)
            == (&ours.api_version, &ours.kind, &ours.name, &ours.uid)
    };
    let owners = metadata.owner_references.get_or_insert_with(Vec::new);
    match owners.iter().position(|o| o.controller == Some(true)) {
        Some(i) if same(&owners[i]) => {}
        Some(i) => owners[i] = ours.clone(),
        None => owners.insert(0, ours.clone()),
    }
    metadata
}

/// Removes nulls, empty lists and empty maps, depth first.
fn prune(value: &mut Value) -> bool {
    match value {
        Value::Null => false,
        Value::Array(items) => {
            items.iter_mut().for_each(|v| {
                prune(v);
            });
            !items.is_empty()
        }
        Value::Object(map) => {
            map.retain(|_, v| prune(v));
            !map.is_empty()
        }
        _ => true,
    }
}

/// The fields the server stored otherwise than `sent`, in path order.
pub(crate) fn stored_changes(sent: &ResourceSlice, stored: &ResourceSlice) -> Vec<Change> {
    let mut changes = Vec::new();
    diff(
        &content(sent),
        &content(stored),
        &mut Vec::new(),
        &mut changes,
    );
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes.dedup_by(|a, b| a.path == b.path);
    changes
}

fn diff(sent: &Value, stored: &Value, at: &mut Vec<Step>, out: &mut Vec<Change>) {
    let compact = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                at.push(Step::Key(key.clone()));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(x, y, at, out),
                    (Some(_), None) => out.push(Change {
                        path: FieldPath(at.clone()),
                        treatment: Treatment::Dropped,
                        stored: None,
                    }),
                    (None, Some(y)) => out.push(Change {
                        path: FieldPath(at.clone()),
                        treatment: Treatment::Added,
                        stored: Some(compact(y)),
                    }),
                    (None, None) => {}
                }
                at.pop();
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            at.push(Step::Each);
            for (x, y) in a.iter().zip(b) {
                diff(x, y, at, out);
            }
            at.pop();
        }
        (a, b) if a != b => out.push(Change {
            path: FieldPath(at.clone()),
            treatment: Treatment::Changed,
            stored: Some(compact(b)),
        }),
        _ => {}
    }
}

/// Removes `path` from `value` wherever it matches.
fn strip(value: &mut Value, path: &[Step]) {
    match (path, value) {
        ([Step::Key(k)], Value::Object(map)) => {
            map.remove(k);
        }
        ([Step::Key(k), rest @ ..], Value::Object(map)) => {
            if let Some(v) = map.get_mut(k) {
                strip(v, rest);
            }
        }
        ([Step::Each, rest @ ..], Value::Array(items)) if !rest.is_empty() => {
            for item in items {
                strip(item, rest);
            }
        }
        _ => {}
    }
}

/// Whether the stored slice says what we want, ignoring the pool generation, metadata other
/// than the controller reference, and the fields in `left_aside` (learned from the server's answers).
pub(crate) fn same_content(
    stored: &ResourceSlice,
    wanted: &ResourceSlice,
    left_aside: &[FieldPath],
) -> bool {
    let (mut a, mut b) = (content(stored), content(wanted));
    for path in left_aside {
        strip(&mut a, &path.0);
        strip(&mut b, &path.0);
    }
    prune(&mut a);
    prune(&mut b);
    a == b
}

/// The immutable field in which the stored slice of our driver differs from ours, if any: such
/// a slice was not made by this agent and cannot be updated into its slice (kube-apiserver
/// refuses to change `spec.pool.name` and `spec.nodeName` on update, and `spec.driver`, which
/// the caller checks first: another driver's slice is never deleted).
pub(crate) fn not_ours(stored: &ResourceSlice, wanted: &ResourceSlice) -> Option<String> {
    let show = |v: Option<&str>| v.map_or_else(|| "unset".to_string(), |v| format!("{v:?}"));
    let fields = [
        (
            "spec.pool.name",
            Some(stored.spec.pool.name.as_str()),
            Some(wanted.spec.pool.name.as_str()),
        ),
        (
            "spec.nodeName",
            stored.spec.node_name.as_deref(),
            wanted.spec.node_name.as_deref(),
        ),
    ];
    fields
        .into_iter()
        .find(|(_, a, b)| a != b)
        .map(|(field, a, b)| format!("its {field} is {}, not {}", show(a), show(b)))
}

/// How the publisher is set up.
#[derive(Clone, Debug)]
pub(crate) struct PublisherConfig {
    /// The node whose slice this is.
    pub node: String,
    /// How often the stored slice is re-read without a watch event (reads only).
    pub resync_interval: Duration,
    /// The cap of the retry backoff.
    pub max_backoff: Duration,
    /// The API server's address, named in errors where it cannot be reached.
    pub api_url: String,
}

/// Publishes and keeps the node's slice; see the module documentation.
pub(crate) struct Publisher {
    config: PublisherConfig,
    name: String,
    slices: Api<ResourceSlice>,
    nodes: Api<Node>,
    health: Arc<Health>,
    heartbeat: Heartbeat,
    /// The stored slice as last seen (watch, list, read or write answer); `None`: absent.
    observed: Option<ResourceSlice>,
    /// The Node's uid, for the ownerReference; re-read before every create.
    node_uid: Option<String>,
    /// The highest pool generation seen or written, so a re-created slice never goes back.
    generation: i64,
    /// The highest pool generation of another slice seen in our pool (a stray being deleted):
    /// ours must be above it, or the scheduler would take the stray for the pool, or count two
    /// slices where the pool says one.
    stray_generation: i64,
    /// Fields the server drops, adds or changes (learned from the last write's answer), left
    /// out of the comparison.
    left_aside: Vec<FieldPath>,
}

impl Publisher {
    /// A publisher for `config.node` using `client`; `heartbeat` tells `/healthz` it progresses.
    pub(crate) fn new(
        client: kube::Client,
        config: PublisherConfig,
        health: Arc<Health>,
        heartbeat: Heartbeat,
    ) -> Self {
        Self {
            name: slice_name(&config.node),
            slices: Api::all(client.clone()),
            nodes: Api::all(client),
            config,
            health,
            heartbeat,
            observed: None,
            node_uid: None,
            generation: 0,
            stray_generation: 0,
            left_aside: Vec::new(),
        }
    }

    /// Runs until the `gpus` sender is dropped. `gpus` holds `None` until the first probe.
    pub(crate) async fn run(mut self, mut gpus: watch::Receiver<Option<Vec<GpuDevice>>>) {
        let selector = format!("spec.nodeName={},spec.driver={DRIVER}", self.config.node);
        let events = watcher::watcher(
            self.slices.clone(),
            watcher::Config::default().fields(&selector),
        )
        .default_backoff();
        let mut events = std::pin::pin!(events);
        let mut init_buffer: Vec<ResourceSlice> = Vec::new();
        let mut listed = false;
        // The watch and the periodic read both follow the stored slice. Only an answer of the
        // API server ends a problem: a list that completed, an event, a successful read. (The
        // watcher's `Init` is not one: it comes before its list request is even sent.)
        let mut watch_problem = Problem::new("follow this node's ResourceSlice");
        let mut publish_problem = Problem::new("publish the ResourceSlice");
        let mut backoff = Backoff::new(self.config.max_backoff);
        let mut retry_at: Option<Instant> = None;
        // The server's Retry-After: not even new content is written before it.
        let mut not_before: Option<Instant> = None;
        let mut resync = tokio::time::interval(self.config.resync_interval);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resync.tick().await; // The first tick is immediate; the watcher lists at start anyway.

        loop {
            // The resync tick wakes the loop at least this often, whatever else happens.
            self.heartbeat.beat(self.config.resync_interval).await;
            let wanted = gpus.borrow().clone();
            if let Some(wanted) = wanted
                && listed
                && retry_at.is_none()
            {
                match self.reconcile(&wanted).await {
                    Ok(()) => {
                        publish_problem.ok();
                        backoff.reset();
                        not_before = None;
                        if Health::set_note(&self.health.refusal, None) {
                            info!("the API server accepts this agent's requests again");
                        }
                    }
                    Err(e) => {
                        self.health.metrics.publish_errors.inc();
                        let message = e.to_string();
                        if let PublishError::Api { cause, .. } = &e
                            && api_unanswered(&self.health, &self.config.api_url, cause)
                        {
                            // Logged once for the whole agent.
                        } else if let Some((verb, code)) = e.refusal() {
                            self.health
                                .metrics
                                .refusals
                                .get_or_create(&RefusalLabels { verb, code })
                                .inc();
                            let what = if matches!(verb, "create" | "update" | "delete") {
                                "writes"
                            } else {
                                "requests"
                            };
                            Health::set_note(
                                &self.health.refusal,
                                Some(format!(
                                    "the API server refuses this agent's {what}: {message}"
                                )),
                            );
                            publish_problem.report(
                                Level::ERROR,
                                &e.class(),
                                &format!("{message} (the stored slice is left as it is)"),
                            );
                        } else if matches!(e, PublishError::NameTaken { .. }) {
                            // Nothing the agent does will help: someone must look.
                            publish_problem.report(Level::ERROR, &e.class(), &message);
                        } else {
                            publish_problem.report(Level::WARN, &e.class(), &message);
                        }
                        let mut delay = backoff.next_delay();
                        not_before = None;
                        if let PublishError::Api { cause, .. } = &e
                            && let Some(asked) = cause.retry_after()
                        {
                            delay = delay.max(asked);
                            not_before = Some(Instant::now() + asked);
                            // Nor a read: the resync waits as long.
                            resync.reset_at(Instant::now() + asked);
                        }
                        retry_at = Some(Instant::now() + delay);
                    }
                }
            }
            tokio::select! {
                event = events.next() => match event {
                    // The watcher never ends on its own; treat an end like a stop.
                    None => return,
                    Some(Err(e)) => {
                        let (verb, cause) = ApiCause::from_watcher(&e, &self.config.api_url);
                        if cause.status().is_some_and(|(code, _)| code == 410) {
                            // History compacted: the watcher lists again; nothing is wrong.
                            debug!("watch ResourceSlices: 410 Gone; listing again");
                        } else if !api_unanswered(&self.health, &self.config.api_url, &cause) {
                            api_answered(&self.health, &self.config.api_url);
                            let message = format!("{verb} ResourceSlices ({selector}): {cause}");
                            watch_problem.report(Level::WARN, &cause.class(), &message);
                        }
                    }
                    Some(Ok(event)) => {
                        if !matches!(event, Event::Init) {
                            api_answered(&self.health, &self.config.api_url);
                        }
                        match event {
                            Event::Init => init_buffer.clear(),
                            Event::InitApply(slice) => {
                                watch_problem.ok();
                                init_buffer.push(slice);
                            }
                            Event::InitDone => {
                                watch_problem.ok();
                                listed = true;
                                let found = std::mem::take(&mut init_buffer);
                                if !found.iter().any(|s| s.metadata.name.as_deref() == Some(&self.name)) {
                                    self.gone();
                                }
                                for slice in found {
                                    self.seen(Some(slice));
                                }
                            }
                            Event::Apply(slice) => {
                                watch_problem.ok();
                                self.seen(Some(slice));
                            }
                            Event::Delete(slice) => {
                                watch_problem.ok();
                                // The object we follow, not an older one of the same name whose
                                // deletion reaches us late.
                                let current = self.observed.as_ref().is_none_or(|o| {
                                    o.metadata.uid == slice.metadata.uid
                                });
                                if slice.metadata.name.as_deref() == Some(&self.name) && current {
                                    self.gone();
                                }
                            }
                        }
                    }
                },
                changed = gpus.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // New content is worth an attempt now, even inside a backoff window; not
                    // before the server said it would take requests again.
                    retry_at = not_before.filter(|at| *at > Instant::now());
                }
                () = sleep_until(retry_at), if retry_at.is_some() => retry_at = None,
                _ = resync.tick() => {
                    // Reads only: a write happens in the next round if the two differ.
                    let name = self.name.clone();
                    match self.call("get", &format!("ResourceSlice {name}"), self.slices.get_opt(&name)).await {
                        Ok(found) => {
                            watch_problem.ok();
                            match found {
                                Some(found) => {
                                    self.observed = None;
                                    self.seen(Some(found));
                                }
                                None => self.gone(),
                            }
                        }
                        Err(e) => {
                            // A throttled read waits as asked too: the next read and any write.
                            if let PublishError::Api { cause, .. } = &e
                                && let Some(asked) = cause.retry_after()
                            {
                                let at = Instant::now() + asked;
                                not_before = Some(at);
                                retry_at = Some(retry_at.map_or(at, |r| r.max(at)));
                                resync.reset_at(at);
                            }
                            let outage = matches!(&e, PublishError::Api { cause, .. }
                                if api_unanswered(&self.health, &self.config.api_url, cause));
                            if !outage {
                                watch_problem.report(Level::WARN, &e.class(), &e.to_string());
                            }
                        }
                    }
                }
            }
        }
    }

    /// One bounded API request: the heartbeat promises progress within its timeout.
    async fn call<T>(
        &self,
        verb: &'static str,
        what: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, PublishError> {
        self.heartbeat.busy(API_CALL_TIMEOUT);
        let url = &self.config.api_url;
        let cause = match tokio::time::timeout(API_CALL_TIMEOUT, request).await {
            Ok(Ok(answer)) => {
                api_answered(&self.health, url);
                return Ok(answer);
            }
            Ok(Err(e)) => ApiCause::from_kube(&e, url),
            Err(_) => ApiCause::TimedOut {
                url: url.clone(),
                after: API_CALL_TIMEOUT,
            },
        };
        if !cause.is_outage() {
            // "No" is an answer: the server works.
            api_answered(&self.health, url);
        }
        Err(PublishError::Api {
            verb,
            what: what.to_string(),
            cause,
        })
    }

    fn what(&self) -> String {
        format!("ResourceSlice {}", self.name)
    }

    /// Takes note that our slice is not stored (any more), however that was learned (a watch
    /// event, a list, a read): said once, when it was there before.
    fn gone(&mut self) {
        if self.observed.take().is_some() {
            info!(
                "ResourceSlice {} was deleted; publishing it again",
                self.name
            );
        }
    }

    /// Takes note of a stored slice of this node and driver. Only the slice with our name is
    /// ours; another one (an older naming, a copy) would compete in our pool, and is deleted.
    fn seen(&mut self, slice: Option<ResourceSlice>) {
        let Some(slice) = slice else {
            self.observed = None;
            return;
        };
        if slice.metadata.name.as_deref() == Some(&self.name) {
            // A watch event can arrive after the answer to our own later write (or a read):
            // an older state of the same object must not replace a newer one, or we would
            // "restore" it with a write doomed to conflict. metadata.generation grows with every
            // spec change of an object, so it orders them (resourceVersions must not be compared).
            if let Some(current) = &self.observed
                && current.metadata.uid == slice.metadata.uid
                && slice.metadata.generation < current.metadata.generation
            {
                debug!("ignoring an older state of ResourceSlice {}", self.name);
                return;
            }
            // Another driver's slice is another pool: its generation says nothing about ours.
            if slice.spec.driver == DRIVER {
                self.generation = self.generation.max(slice.spec.pool.generation);
            }
            self.observed = Some(slice);
        } else if let Some(other) = slice.metadata.name.clone() {
            if slice.spec.pool.name == self.config.node {
                self.stray_generation = self.stray_generation.max(slice.spec.pool.generation);
                self.generation = self.generation.max(slice.spec.pool.generation);
            }
            let slices = self.slices.clone();
            let uid = slice.metadata.uid.clone();
            let health = Arc::clone(&self.health);
            let url = self.config.api_url.clone();
            warn!(
                "deleting ResourceSlice {other}: it belongs to driver {DRIVER} on this node but is not {}, and would compete with it",
                self.name
            );
            tokio::spawn(async move {
                let params = DeleteParams::default().preconditions(Preconditions {
                    uid,
                    resource_version: None,
                });
                match tokio::time::timeout(API_CALL_TIMEOUT, slices.delete(&other, &params)).await {
                    Ok(Ok(_)) => {
                        health
                            .metrics
                            .writes
                            .get_or_create(&WriteLabels { verb: "delete" })
                            .inc();
                    }
                    Ok(Err(e)) => warn!(
                        "delete ResourceSlice {other}: {}",
                        ApiCause::from_kube(&e, &url)
                    ),
                    Err(_) => warn!(
                        "delete ResourceSlice {other}: no answer from {url} within {}",
                        human(API_CALL_TIMEOUT)
                    ),
                }
            });
        }
    }

    /// One attempt to make the stored slice match `gpus`; writes only when they differ.
    async fn reconcile(&mut self, gpus: &[GpuDevice]) -> Result<(), PublishError> {
        for _ in 0..MAX_IMMEDIATE_RETRIES {
            if self.node_uid.is_none() {
                self.read_node().await?;
            }
            let node = NodeRef {
                name: self.config.node.clone(),
                uid: self.node_uid.clone().unwrap_or_default(),
            };
            match self.observed.clone() {
                Some(stored) => {
                    let mut wanted = desired(&node, gpus, 0);
                    if stored.spec.driver != wanted.spec.driver {
                        // The watch follows this driver's slices only: read again whether it
                        // is still there before saying so.
                        self.refresh().await?;
                        match &self.observed {
                            Some(again) if again.spec.driver != wanted.spec.driver => {
                                return Err(PublishError::NameTaken {
                                    name: self.name.clone(),
                                    driver: again.spec.driver.clone(),
                                });
                            }
                            _ => continue,
                        }
                    }
                    if let Some(difference) = not_ours(&stored, &wanted) {
                        // Decided from the stored object, never from an error code: a 422 on
                        // update can as well be a validation or admission refusal.
                        warn!(
                            "ResourceSlice {} is not this agent's: {difference}, which cannot be changed; deleting it and creating this node's",
                            self.name
                        );
                        self.delete_stored(&stored).await?;
                        continue;
                    }
                    if same_content(&stored, &wanted, &self.left_aside)
                        && stored.spec.pool.generation > self.stray_generation
                    {
                        if !self
                            .health
                            .published
                            .load(std::sync::atomic::Ordering::Relaxed)
                        {
                            info!(
                                "ResourceSlice {} is up to date (pool generation {})",
                                self.name, stored.spec.pool.generation
                            );
                            self.health.mark_published();
                        }
                        return Ok(());
                    }
                    wanted.spec.pool.generation =
                        self.generation.max(stored.spec.pool.generation) + 1;
                    // Keep what others put in metadata; it does not reach the scheduler.
                    wanted.metadata = updated_metadata(&stored.metadata, &wanted.metadata);
                    let what = self.what();
                    let written = self
                        .call(
                            "update",
                            &what,
                            self.slices
                                .replace(&self.name, &PostParams::default(), &wanted),
                        )
                        .await;
                    match written {
                        Ok(written) => return self.written("update", &wanted, written),
                        Err(PublishError::Api { cause, .. }) if cause.is_conflict() => {
                            // Someone wrote in between: read what is there now and try again.
                            self.refresh().await?;
                        }
                        Err(PublishError::Api { cause, .. }) if cause.is_not_found() => {
                            self.observed = None;
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    // Re-read the Node first: a slice owned by a deleted Node would be collected
                    // at once, and a re-registered Node has a new uid.
                    self.read_node().await?;
                    let node = NodeRef {
                        name: self.config.node.clone(),
                        uid: self.node_uid.clone().unwrap_or_default(),
                    };
                    let wanted = desired(&node, gpus, self.generation + 1);
                    let what = self.what();
                    let written = self
                        .call(
                            "create",
                            &what,
                            self.slices.create(&PostParams::default(), &wanted),
                        )
                        .await;
                    match written {
                        Ok(written) => return self.written("create", &wanted, written),
                        Err(PublishError::Api { cause, .. })
                            if cause.is_already_exists() || cause.is_conflict() =>
                        {
                            self.refresh().await?;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(PublishError::Conflicts {
            name: self.name.clone(),
        })
    }

    async fn read_node(&mut self) -> Result<(), PublishError> {
        let node = self.config.node.clone();
        match self
            .call("get", &format!("Node {node}"), self.nodes.get_opt(&node))
            .await?
        {
            Some(found) => {
                self.node_uid = found.metadata.uid;
                Ok(())
            }
            None => {
                self.node_uid = None;
                Err(PublishError::NodeMissing { node })
            }
        }
    }

    async fn refresh(&mut self) -> Result<(), PublishError> {
        let what = self.what();
        let found = self
            .call("get", &what, self.slices.get_opt(&self.name))
            .await?;
        self.seen(found);
        Ok(())
    }

    async fn delete_stored(&mut self, stored: &ResourceSlice) -> Result<(), PublishError> {
        let params = DeleteParams::default().preconditions(Preconditions {
            uid: stored.metadata.uid.clone(),
            resource_version: None,
        });
        let what = self.what();
        match self
            .call("delete", &what, self.slices.delete(&self.name, &params))
            .await
        {
            Ok(_) => self.count_write("delete"),
            Err(PublishError::Api { cause, .. }) if cause.is_not_found() => {}
            Err(e) => return Err(e),
        }
        self.observed = None;
        Ok(())
    }

    fn count_write(&self, verb: &'static str) {
        self.health
            .metrics
            .writes
            .get_or_create(&WriteLabels { verb })
            .inc();
    }

    /// Records a write's answer (the object as stored) and compares it with what was sent:
    /// fields the server drops, adds or changes inside devices are said once and left out of
    /// the comparison from now on; any other change makes the write count as failed.
    fn written(
        &mut self,
        verb: &'static str,
        sent: &ResourceSlice,
        stored: ResourceSlice,
    ) -> Result<(), PublishError> {
        self.count_write(verb);
        self.health.mark_published();
        let devices = stored.spec.devices.as_ref().map_or(0, Vec::len);
        info!(
            "ResourceSlice {}: {verb}d with {devices} device(s), pool generation {}",
            self.name, stored.spec.pool.generation
        );
        let changes = stored_changes(sent, &stored);
        let (aside, fought): (Vec<&Change>, Vec<&Change>) =
            changes.iter().partition(|c| c.path.can_be_left_aside());
        self.learn(&aside, sent);
        self.generation = self.generation.max(stored.spec.pool.generation);
        self.observed = Some(stored);
        if fought.is_empty() {
            Ok(())
        } else {
            let changes: Vec<String> = fought.iter().map(ToString::to_string).collect();
            Err(PublishError::StoredOtherwise {
                name: self.name.clone(),
                changes: changes.join(", "),
            })
        }
    }

    /// Takes the fields the last write's answer changed as the ones to leave aside, and says
    /// so when that set changes.
    fn learn(&mut self, aside: &[&Change], sent: &ResourceSlice) {
        let asked_multiple = sent
            .spec
            .devices
            .iter()
            .flatten()
            .any(|d| d.allow_multiple_allocations == Some(true));
        if asked_multiple {
            let dropped = aside.iter().any(|c| c.path.is_gate_field());
            if self.health.set_dropped_field(dropped) {
                if dropped {
                    warn!("{DROPPED_FIELD_WARNING}");
                } else {
                    info!("the API server keeps allowMultipleAllocations again");
                }
            }
        }
        let others: Vec<&&Change> = aside.iter().filter(|c| !c.path.is_gate_field()).collect();
        self.health
            .metrics
            .server_changed_fields
            .set(others.len() as i64);
        let note = (!others.is_empty()).then(|| {
            let listed: Vec<String> = others.iter().map(ToString::to_string).collect();
            format!(
                "the API server changes what this agent writes to ResourceSlice {}: {}; these fields are no longer compared, so the slice is not rewritten over them (hint: a mutating admission policy or webhook, or an API server of another version, changes ResourceSlices: kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations)",
                self.name,
                listed.join(", ")
            )
        });
        if Health::set_note(&self.health.server_changes, note.clone()) {
            match note {
                Some(note) => warn!("{note}"),
                None => info!(
                    "the API server stores ResourceSlice {} as sent again",
                    self.name
                ),
            }
        }
        let mut left_aside: Vec<FieldPath> = aside.iter().map(|c| c.path.clone()).collect();
        left_aside.dedup();
        self.left_aside = left_aside;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::device::AttrValue;
    use k8s_openapi::api::resource::v1::DeviceAttribute;

    fn gpu(name: &str) -> GpuDevice {
        GpuDevice {
            name: name.into(),
            render_node: "/dev/dri/renderD128".into(),
            attributes: [("decodeVP9", AttrValue::Bool(true))].into_iter().collect(),
            failure: None,
            trimmed: Vec::new(),
        }
    }

    fn node() -> NodeRef {
        NodeRef {
            name: "n1".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn generation_and_metadata_are_not_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = desired(&node(), &[gpu("pci-0000-00-02-0")], 7);
        stored.metadata.resource_version = Some("42".into());
        stored.metadata.labels = Some([("team".to_string(), "x".to_string())].into());
        assert!(same_content(&stored, &wanted, &[]));
    }

    #[test]
    fn devices_and_owner_are_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let other_gpu = desired(&node(), &[gpu("pci-0000-03-00-0")], 1);
        assert!(!same_content(&other_gpu, &wanted, &[]));
        let other_owner = desired(
            &NodeRef {
                name: "n1".into(),
                uid: "u2".into(),
            },
            &[gpu("pci-0000-00-02-0")],
            1,
        );
        assert!(!same_content(&other_owner, &wanted, &[]));
        let mut edited = wanted.clone();
        edited.spec.devices.as_mut().unwrap()[0]
            .attributes
            .as_mut()
            .unwrap()
            .insert("decodeVP9".into(), Default::default());
        assert!(!same_content(&edited, &wanted, &[]));
    }

    /// Another owner's reference, as a backup tool might add one.
    fn backup_owner() -> OwnerReference {
        OwnerReference {
            api_version: "backup.example.com/v1".into(),
            kind: "Snapshot".into(),
            name: "nightly".into(),
            uid: "s1".into(),
            controller: None,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_the_controller_is_owner_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = wanted.clone();
        let owners = stored.metadata.owner_references.as_mut().unwrap();
        // A policy flags our reference; a backup tool adds its own, and a finalizer.
        owners[0].block_owner_deletion = Some(true);
        owners.push(backup_owner());
        stored.metadata.finalizers = Some(vec!["backup.example.com/keep".into()]);
        assert!(same_content(&stored, &wanted, &[]));
        // No controller at all is a difference.
        stored.metadata.owner_references.as_mut().unwrap().remove(0);
        assert!(!same_content(&stored, &wanted, &[]));
    }

    #[test]
    fn an_update_keeps_the_stored_metadata_and_puts_our_controller_in() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let theirs = backup_owner();
        let mut stored = wanted.metadata.clone();
        stored.resource_version = Some("42".into());
        stored.finalizers = Some(vec!["backup.example.com/keep".into()]);
        stored.labels = Some([("team".to_string(), "x".to_string())].into());
        stored.owner_references.as_mut().unwrap()[0].block_owner_deletion = Some(true);
        stored
            .owner_references
            .as_mut()
            .unwrap()
            .push(theirs.clone());
        assert_eq!(
            updated_metadata(&stored, &wanted.metadata),
            stored,
            "all kept"
        );

        // A stale controller (a Node of the same name, re-registered) is replaced in place.
        let mut stale = stored.clone();
        stale.owner_references.as_mut().unwrap()[0].uid = "old".into();
        let updated = updated_metadata(&stale, &wanted.metadata);
        let owners = updated.owner_references.as_deref().unwrap();
        assert_eq!(owners.len(), 2);
        assert_eq!(
            (owners[0].uid.as_str(), owners[0].controller),
            ("u1", Some(true))
        );
        assert_eq!(owners[1], theirs);
        assert_eq!(updated.finalizers, stored.finalizers);
        assert_eq!(updated.resource_version.as_deref(), Some("42"));

        // None at all: ours is added first.
        let mut none = stored.clone();
        none.owner_references = Some(vec![theirs.clone()]);
        let owners = updated_metadata(&none, &wanted.metadata)
            .owner_references
            .unwrap();
        assert_eq!(owners.len(), 2);
        assert_eq!(owners[0].uid, "u1");
    }

    #[test]
    fn an_empty_list_and_no_list_are_the_same() {
        let wanted = desired(&node(), &[], 1);
        let mut stored = wanted.clone();
        stored.spec.devices = None;
        assert!(same_content(&stored, &wanted, &[]));
    }

    #[test]
    fn a_dropped_field_is_seen_and_then_left_aside() {
        let sent = desired(
            &node(),
            &[gpu("pci-0000-00-02-0"), gpu("pci-0000-03-00-0")],
            1,
        );
        let mut stored = sent.clone();
        for device in stored.spec.devices.as_mut().unwrap() {
            device.allow_multiple_allocations = None;
        }
        let changes = stored_changes(&sent, &stored);
        assert_eq!(changes.len(), 1, "one path for every device: {changes:?}");
        let change = &changes[0];
        assert_eq!(change.treatment, Treatment::Dropped);
        assert_eq!(
            change.path.to_string(),
            "spec.devices[*].allowMultipleAllocations"
        );
        assert!(change.path.is_gate_field() && change.path.can_be_left_aside());
        assert!(stored_changes(&sent, &sent).is_empty());
        assert!(!same_content(&stored, &sent, &[]));
        assert!(same_content(
            &stored,
            &sent,
            std::slice::from_ref(&change.path)
        ));
    }

    #[test]
    fn an_added_or_changed_field_is_named_with_what_was_stored() {
        let sent = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = sent.clone();
        let attributes = stored.spec.devices.as_mut().unwrap()[0]
            .attributes
            .as_mut()
            .unwrap();
        attributes.insert(
            "example.com/zone".into(),
            DeviceAttribute {
                string: Some("a".into()),
                ..Default::default()
            },
        );
        attributes.insert(
            "decodeVP9".into(),
            DeviceAttribute {
                bool: Some(false),
                ..Default::default()
            },
        );
        let changes: Vec<String> = stored_changes(&sent, &stored)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            changes,
            [
                "spec.devices[*].attributes.decodeVP9.bool changed (stored false)",
                "spec.devices[*].attributes[example.com/zone] added ({\"string\":\"a\"})",
            ]
        );
        let paths: Vec<FieldPath> = stored_changes(&sent, &stored)
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert!(same_content(&stored, &sent, &paths));
    }

    #[test]
    fn what_makes_the_slice_is_never_left_aside() {
        let sent = desired(
            &node(),
            &[gpu("pci-0000-00-02-0"), gpu("pci-0000-03-00-0")],
            1,
        );
        let mut fewer = sent.clone();
        fewer.spec.devices.as_mut().unwrap().pop();
        let mut renamed = sent.clone();
        renamed.spec.devices.as_mut().unwrap()[0].name = "other".into();
        let mut orphan = sent.clone();
        orphan.metadata.owner_references = None;
        for stored in [fewer, renamed, orphan] {
            let changes = stored_changes(&sent, &stored);
            assert!(!changes.is_empty());
            assert!(
                changes.iter().all(|c| !c.path.can_be_left_aside()),
                "{changes:?}"
            );
        }
    }

    #[test]
    fn only_immutable_fields_make_a_slice_not_ours() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut other_pool = wanted.clone();
        other_pool.spec.pool.name = "x".into();
        assert_eq!(
            not_ours(&other_pool, &wanted).as_deref(),
            Some("its spec.pool.name is \"x\", not \"n1\"")
        );
        let mut selector = wanted.clone();
        selector.spec.node_name = None;
        selector.spec.all_nodes = Some(true);
        assert!(
            not_ours(&selector, &wanted)
                .unwrap()
                .contains("spec.nodeName is unset")
        );
        // Different content, owner or generation: ours, to be updated.
        let mut edited = desired(&node(), &[], 9);
        edited.metadata.owner_references = None;
        assert_eq!(not_ours(&edited, &wanted), None);
    }

    #[test]
    fn refusals_and_outages_read_as_operators_read_them() {
        let cause = ApiCause::Status {
            code: 422,
            reason: "Invalid".into(),
            message: "x".into(),
            retry_after: None,
        };
        assert!(cause.is_refusal());
        assert_eq!(cause.to_string(), "refused, 422 Invalid: x");
        let outage = ApiCause::Status {
            code: 503,
            reason: "ServiceUnavailable".into(),
            message: "down".into(),
            retry_after: None,
        };
        assert!(!outage.is_refusal());
        assert_eq!(outage.to_string(), "503 ServiceUnavailable: down");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let mut backoff = Backoff::new(Duration::from_secs(2));
        let delays: Vec<Duration> = (0..8).map(|_| backoff.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(100) && delays[0] <= INITIAL_BACKOFF);
        assert!(
            delays[3] >= Duration::from_millis(800) && delays[3] <= Duration::from_millis(1600)
        );
        for d in &delays[5..] {
            assert!(
                *d >= Duration::from_secs(1) && *d <= Duration::from_secs(2),
                "{d:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next_delay() <= INITIAL_BACKOFF);
    }

    #[tokio::test]
    async fn an_older_state_of_the_slice_does_not_replace_a_newer_one() {
        // Never contacted: `seen` only records.
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("a valid URI"),
        ))
        .expect("a client");
        let mut publisher = Publisher::new(
            client,
            PublisherConfig {
                node: "n1".into(),
                resync_interval: Duration::from_secs(60),
                max_backoff: Duration::from_secs(1),
                api_url: "http://127.0.0.1:9".into(),
            },
            Arc::new(Health::default()),
            Heartbeat::detached("publisher"),
        );
        let at = |generation: i64, pool: i64| {
            let mut slice = desired(&node(), &[gpu("pci-0000-00-02-0")], pool);
            slice.metadata.uid = Some("slice-uid".into());
            slice.metadata.generation = Some(generation);
            slice
        };
        publisher.seen(Some(at(3, 3)));
        publisher.seen(Some(at(2, 2)));
        let observed = publisher.observed.as_ref().expect("observed");
        assert_eq!(observed.spec.pool.generation, 3, "the newer state stays");
        // A new object (re-created by someone) is taken whatever its generation.
        let mut other = at(1, 1);
        other.metadata.uid = Some("another-uid".into());
        publisher.seen(Some(other));
        assert_eq!(publisher.observed.as_ref().unwrap().spec.pool.generation, 1);
        assert_eq!(
            publisher.generation, 3,
            "the pool generation never goes back"
        );
    }

    #[test]
    fn a_problem_is_logged_once_per_change() {
        let mut problem = Problem::new("publish");
        assert!(problem.failed("503"));
        assert!(!problem.failed("503"));
        assert!(problem.failed("500"));
        problem.ok();
        assert!(problem.failed("500"));
        // The same kind of failure with another message (list, then watch) is one problem.
        assert!(problem.report(Level::WARN, "unreachable", "list: cannot reach x"));
        assert!(!problem.report(Level::WARN, "unreachable", "watch: cannot reach x"));
        assert!(problem.is_failing());
        problem.ok();
        assert!(!problem.is_failing());
    }
}
