//! What the agent tells the kubelet's probes and Prometheus, on one port:
//!
//! - `/healthz`: 200 while every loop of the agent runs (probing, publishing, kubelet plugin);
//!   a stopped loop makes it 500 so the kubelet restarts the pod. An API server outage does not
//!   fail it: restarting would not help, and the publisher retries on its own.
//! - `/readyz`: 200 once the slice has been published and the kubelet has registered the plugin,
//!   503 with the missing part(s) before. The body also carries the dropped-field warning.
//! - `/metrics`: Prometheus text format (OpenMetrics), see [`Metrics`].
//!
//! The state is plain atomics shared with the loops; the server only reads it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

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

/// The line `/readyz` and the log show when the API server dropped `allowMultipleAllocations`.
pub const DROPPED_FIELD_WARNING: &str = "the API server dropped allowMultipleAllocations from the \
     media.liken.sh devices (the DRAConsumableCapacity feature gate is off, as by default in \
     Kubernetes 1.34 and 1.35): each GPU's statement can now back only one claim at a time, so a \
     second pod claiming the same GPU's capabilities stays Pending (hint: enable the \
     DRAConsumableCapacity feature gate on kube-apiserver and kube-scheduler, then restart this \
     DaemonSet to republish)";

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
    /// Failed attempts to publish the slice (each retry counts).
    pub publish_errors: Counter,
    /// Writes to the API server, by verb.
    pub writes: Family<WriteLabels, Counter>,
    /// Unix time of the last successful publish (a write, or finding the stored slice up to date).
    pub last_publish: Gauge<f64, AtomicU64>,
    /// 1 when the API server dropped `allowMultipleAllocations` (see [`DROPPED_FIELD_WARNING`]).
    pub dropped_field: Gauge,
    /// 1 while the kubelet has registered the plugin.
    pub kubelet_registered: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("media_capabilities");
        let metrics = Metrics {
            gpus: Gauge::default(),
            probe_failures: Counter::default(),
            publish_errors: Counter::default(),
            writes: Family::default(),
            last_publish: Gauge::default(),
            dropped_field: Gauge::default(),
            kubelet_registered: Gauge::default(),
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
            "kubelet_registered",
            "1 while the kubelet has registered the media.liken.sh plugin",
            metrics.kubelet_registered.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
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
    /// Loops that stopped (any stop is fatal; the process exits right after).
    pub loops_stopped: AtomicI64,
    pub metrics: Metrics,
}

impl Health {
    /// Records a successful publish.
    pub fn mark_published(&self) {
        self.published.store(true, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        self.metrics.last_publish.set(now);
    }

    /// Records whether the API server kept `allowMultipleAllocations`; returns whether that
    /// changed, so the caller logs once per change.
    pub fn set_dropped_field(&self, dropped: bool) -> bool {
        self.metrics.dropped_field.set(i64::from(dropped));
        self.dropped_field.swap(dropped, Ordering::Relaxed) != dropped
    }
}

#[derive(Clone)]
struct Served {
    health: Arc<Health>,
    registration: watch::Receiver<RegistrationState>,
}

/// Serves `/healthz`, `/readyz` and `/metrics` on `listener` until `shutdown` completes.
pub async fn serve(
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
    if s.health.loops_stopped.load(Ordering::Relaxed) == 0 {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "a loop of the agent stopped\n".to_string(),
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
    let mut body = if missing.is_empty() {
        "ready\n".to_string()
    } else {
        format!("not ready: {}\n", missing.join("; "))
    };
    if s.health.dropped_field.load(Ordering::Relaxed) {
        body.push_str(&format!("warning: {DROPPED_FIELD_WARNING}\n"));
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
}
