//! What the agent tells the kubelet's probes and Prometheus, on one port: `/healthz` fails when a
//! loop is wedged past its heartbeat's promise ([`Liveness`]) or stopped (never for an API outage: restarting
//! would not help); `/readyz` waits for the published slice and the kubelet's registration, and
//! carries warnings; `/metrics` is [`Metrics`]. docs/operations.md documents all three. The state
//! is atomics and small mutexes the loops share; the server only reads it.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::agent::kubelet::RegistrationState;
use crate::agent::liveness::Liveness;

/// The API server dropped `allowMultipleAllocations`: the words `/readyz` and the log say.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DroppedField;

impl fmt::Display for DroppedField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the API server dropped allowMultipleAllocations from the media.liken.sh devices \
             (the DRAConsumableCapacity feature gate is off, as by default in Kubernetes 1.34 \
             and 1.35): each GPU's statement can now back only one claim at a time, so a second \
             pod claiming the same GPU's capabilities stays Pending (hint: enable the \
             DRAConsumableCapacity feature gate on kube-apiserver and kube-scheduler, then \
             restart this DaemonSet to republish)",
        )
    }
}

/// The API server dropped the devices' `taints`: the words `/readyz` and the log say.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DroppedTaints;

impl fmt::Display for DroppedTaints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the API server dropped the taints of the media.liken.sh devices whose probe failed \
             (the DRADeviceTaints feature gate is off, as by default in Kubernetes 1.34 and \
             1.35): the rest is published, and a failed GPU still states every capability false \
             and no vaDriver, so claims that select by capability do not get it, but a class \
             that selects every media.liken.sh device can (hint: enable the DRADeviceTaints \
             feature gate on kube-apiserver, kube-scheduler and kube-controller-manager, on 1.34 \
             with --runtime-config resource.k8s.io/v1alpha3=true on kube-apiserver; the next \
             failure is published with its taint)",
        )
    }
}

/// The node has more GPUs than a slice with taints may hold: the words `/readyz` and the log say.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TaintsLeftOut {
    pub gpus: usize,
}

impl fmt::Display for TaintsLeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "this node has {} GPUs, more than the {} devices a ResourceSlice may hold when one \
             of them has taints, so the failed GPUs are published without their taint: they \
             still state every capability false and no vaDriver (hint: claims that select by \
             capability do not get them; a class that selects every media.liken.sh device can)",
            self.gpus,
            crate::node::slice::MAX_DEVICES_WITH_TAINTS
        )
    }
}

/// The labels of the refusal counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// create, update or delete.
    pub verb: &'static str,
    /// The HTTP status code of the refusal (401, 403, 422, ...).
    pub code: u16,
}

/// The labels of the write counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// create, update or delete.
    pub verb: &'static str,
}

/// The agent's Prometheus metrics, all prefixed `media_capabilities_`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// GPUs found at the last probe.
    pub gpus: Gauge,
    /// GPUs whose driver query failed, counted at every probe.
    pub probe_failures: Counter,
    /// Probes of every GPU (at start, on changes, every re-probe period, confirmations).
    pub probes: Counter,
    /// Failed attempts to publish the slice (each retry counts).
    pub publish_errors: Counter,
    /// Writes to the API server, by verb.
    pub writes: Family<WriteLabels, Counter>,
    /// Unix time of the last successful publish (a write, or finding the stored slice up to date).
    pub last_publish: Gauge<f64, AtomicU64>,
    /// 1 when the API server dropped `allowMultipleAllocations` (see [`DroppedField`]).
    pub dropped_field: Gauge,
    /// 1 when the API server dropped the devices' taints (see [`DroppedTaints`]).
    pub dropped_taints: Gauge,
    /// GPUs whose last published probe failed (tainted, unhealthy).
    pub failed_gpus: Gauge,
    /// 1 while the kubelet has registered the plugin.
    pub kubelet_registered: Gauge,
    /// Writes the API server refused (validation, admission, authorisation), by verb and code.
    pub refusals: Family<RefusalLabels, Counter>,
    /// Fields the API server dropped, added or changed in what the agent wrote (besides
    /// `allowMultipleAllocations`, which has its own gauge), no longer compared.
    pub server_changed_fields: Gauge,
    /// GPUs the render driver publishes for this node that the agent cannot open.
    pub gpus_not_in_claim: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("media_capabilities");
        let metrics = Metrics {
            gpus: Gauge::default(),
            probe_failures: Counter::default(),
            probes: Counter::default(),
            publish_errors: Counter::default(),
            writes: Family::default(),
            last_publish: Gauge::default(),
            dropped_field: Gauge::default(),
            dropped_taints: Gauge::default(),
            failed_gpus: Gauge::default(),
            kubelet_registered: Gauge::default(),
            refusals: Family::default(),
            server_changed_fields: Gauge::default(),
            gpus_not_in_claim: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "gpus",
            "GPUs found on this node at the last probe",
            metrics.gpus.clone(),
        );
        registry.register(
            "probe_failures",
            "GPUs whose VA-API driver query failed, counted at every probe",
            metrics.probe_failures.clone(),
        );
        registry.register(
            "probes",
            "Probes of every GPU of the node: at start, on changes, every re-probe period",
            metrics.probes.clone(),
        );
        registry.register(
            "publish_errors",
            "Failed attempts to publish the node's ResourceSlice",
            metrics.publish_errors.clone(),
        );
        registry.register(
            "slice_writes",
            "Writes of the node's ResourceSlice to the API server",
            metrics.writes.clone(),
        );
        registry.register(
            "last_publish_timestamp_seconds",
            "Unix time the ResourceSlice was last published or found up to date",
            metrics.last_publish.clone(),
        );
        registry.register(
            "allow_multiple_allocations_dropped",
            "1 when the API server dropped allowMultipleAllocations (DRAConsumableCapacity off)",
            metrics.dropped_field.clone(),
        );
        registry.register(
            "taints_dropped",
            "1 when the API server dropped the taints of failed GPUs (DRADeviceTaints off)",
            metrics.dropped_taints.clone(),
        );
        registry.register(
            "failed_gpus",
            "GPUs whose published probe failed: tainted, and unhealthy to the kubelet",
            metrics.failed_gpus.clone(),
        );
        registry.register(
            "kubelet_registered",
            "1 while the kubelet has registered the media.liken.sh plugin",
            metrics.kubelet_registered.clone(),
        );
        registry.register(
            "slice_write_refusals",
            "Writes of the node's ResourceSlice the API server refused (validation, admission, authorisation)",
            metrics.refusals.clone(),
        );
        registry.register(
            "server_changed_fields",
            "Fields the API server dropped, added or changed in the written ResourceSlice, no longer compared",
            metrics.server_changed_fields.clone(),
        );
        registry.register(
            "gpus_not_in_claim",
            "GPUs the render driver publishes for this node that this agent cannot open",
            metrics.gpus_not_in_claim.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    /// The metrics in the Prometheus text format.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail; an error here would be a bug in the encoder.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!("encode metrics: {e}");
        }
        text
    }
}

/// The state the loops share with the health server.
#[derive(Debug, Default)]
pub struct Health {
    /// The slice has been published at least once.
    pub published: AtomicBool,
    /// The API server dropped `allowMultipleAllocations` at the last write.
    pub dropped_field: AtomicBool,
    /// The API server dropped the devices' taints at the last write that had any.
    pub dropped_taints: AtomicBool,
    /// While the node has too many GPUs for taints: [`TaintsLeftOut`], one line.
    pub taints_left_out: Mutex<Option<String>>,
    /// Loops that stopped (any stop is fatal; the process exits right after).
    pub loops_stopped: AtomicI64,
    /// The loops' heartbeats.
    pub liveness: Arc<Liveness>,
    /// While the API server does not answer (unreachable, timing out, 5xx, 429): since when, one
    /// line. One problem for the whole agent, however many loops meet it.
    pub api_outage: Mutex<Option<String>>,
    /// While the API server refuses the agent's writes: the refusal, one line.
    pub refusal: Mutex<Option<String>>,
    /// While the API server changes what the agent writes (other than the gate's field): what.
    pub server_changes: Mutex<Option<String>>,
    /// While the render driver publishes GPUs for this node that the agent cannot open: which, and
    /// the fix.
    pub not_in_claim: Mutex<Option<String>>,
    /// While a listing's answers do not page as kube-apiserver's do (`crate::agent::answers`).
    pub bad_answers: Mutex<Option<String>>,
    /// Where the health server listens, once bound (for tests running the agent in-process).
    pub local_addr: OnceLock<SocketAddr>,
    pub metrics: Metrics,
}

impl Health {
    /// Records a successful publish.
    pub(crate) fn mark_published(&self) {
        self.published.store(true, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        self.metrics.last_publish.set(now);
    }

    /// Records whether the API server kept `allowMultipleAllocations`; returns whether that
    /// changed, so the caller logs once per change.
    pub(crate) fn set_dropped_field(&self, dropped: bool) -> bool {
        self.metrics.dropped_field.set(i64::from(dropped));
        self.dropped_field.swap(dropped, Ordering::Relaxed) != dropped
    }

    /// Records whether the API server kept the devices' taints; returns whether that changed.
    pub(crate) fn set_dropped_taints(&self, dropped: bool) -> bool {
        self.metrics.dropped_taints.set(i64::from(dropped));
        self.dropped_taints.swap(dropped, Ordering::Relaxed) != dropped
    }
}

impl Health {
    /// Sets or clears one of the message slots; returns whether it changed (log once per change).
    pub(crate) fn set_note(slot: &Mutex<Option<String>>, note: Option<String>) -> bool {
        let mut current = slot.lock().unwrap_or_else(|e| e.into_inner());
        if *current == note {
            return false;
        }
        *current = note;
        true
    }

    fn note(slot: &Mutex<Option<String>>) -> Option<String> {
        slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[derive(Clone)]
struct Served {
    health: Arc<Health>,
    registration: watch::Receiver<RegistrationState>,
}

/// Serves `/healthz`, `/readyz` and `/metrics` on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    listener: TcpListener,
    health: Arc<Health>,
    registration: watch::Receiver<RegistrationState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Served {
            health,
            registration,
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the health port (before anything else starts, so a taken port is a startup error).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

async fn healthz(State(s): State<Served>) -> impl IntoResponse {
    let mut failing = s.health.liveness.overdue();
    if s.health.loops_stopped.load(Ordering::Relaxed) != 0 {
        failing.push("a loop of the agent stopped".to_string());
    }
    if failing.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unhealthy: {}\n", failing.join("; ")),
        )
    }
}

async fn readyz(State(s): State<Served>) -> impl IntoResponse {
    let mut missing = Vec::new();
    if !s.health.published.load(Ordering::Relaxed) {
        missing.push("the ResourceSlice is not published yet".to_string());
    }
    match &*s.registration.borrow() {
        RegistrationState::Registered => {}
        other => missing.push(format!("kubelet registration: {other}")),
    }
    if let Some(refusal) = Health::note(&s.health.refusal) {
        missing.push(refusal);
    }
    let mut body = if missing.is_empty() {
        "ready\n".to_string()
    } else {
        format!("not ready: {}\n", missing.join("; "))
    };
    if s.health.dropped_field.load(Ordering::Relaxed) {
        body.push_str(&format!("warning: {DroppedField}\n"));
    }
    if s.health.dropped_taints.load(Ordering::Relaxed) {
        body.push_str(&format!("warning: {DroppedTaints}\n"));
    }
    for note in [
        &s.health.server_changes,
        &s.health.not_in_claim,
        &s.health.taints_left_out,
        &s.health.bad_answers,
    ] {
        if let Some(note) = Health::note(note) {
            body.push_str(&format!("warning: {note}\n"));
        }
    }
    let code = if missing.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body)
}

async fn metrics(State(s): State<Served>) -> impl IntoResponse {
    let registered = matches!(*s.registration.borrow(), RegistrationState::Registered);
    s.health
        .metrics
        .kubelet_registered
        .set(i64::from(registered));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.health.metrics.encode(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_named_and_typed() {
        let health = Health::default();
        health.metrics.gpus.set(8);
        health.metrics.publish_errors.inc();
        health
            .metrics
            .writes
            .get_or_create(&WriteLabels { verb: "create" })
            .inc();
        assert!(health.set_dropped_field(true), "first change reported");
        assert!(!health.set_dropped_field(true), "no change, no report");
        let text = health.metrics.encode();
        for line in [
            "media_capabilities_gpus 8",
            "media_capabilities_publish_errors_total 1",
            "media_capabilities_slice_writes_total{verb=\"create\"} 1",
            "media_capabilities_allow_multiple_allocations_dropped 1",
            "# TYPE media_capabilities_last_publish_timestamp_seconds gauge",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn notes_change_once() {
        let health = Health::default();
        assert!(Health::set_note(&health.refusal, Some("x".into())));
        assert!(!Health::set_note(&health.refusal, Some("x".into())));
        assert!(Health::set_note(&health.refusal, None));
        assert!(!Health::set_note(&health.refusal, None));
    }
}
