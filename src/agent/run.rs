//! The agent as a whole: binds what must be bound (kubelet sockets, health port) so that a
//! mistake fails at start, then runs its loops side by side until SIGTERM/SIGINT:
//!
//! - the prober: probes at start, then lists the render nodes (or the `--reports` directory)
//!   every `--rescan-interval` and probes again when the listing changes. Polling a readdir was
//!   chosen over inotify: /dev/dri in a container is a devtmpfs or bind mount where inotify
//!   events for device nodes added by the host are not reliable, and one readdir every few
//!   seconds costs nothing measurable. A GPU whose driver query failed is asked again after
//!   30 s, doubling up to 30 min, so a driver that was not ready at boot does not need a restart;
//! - the publisher ([`crate::agent::publisher`]);
//! - the kubelet plugin ([`crate::agent::kubelet`]);
//! - the health server ([`crate::agent::health`]).
//!
//! A loop that stops on its own is a bug or an unrecoverable condition: the agent then exits
//! with an error and the kubelet restarts it.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::agent::config::{AgentConfig, Watched};
use crate::agent::health::{self, Health};
use crate::agent::kubelet::{KubeletError, KubeletPlugin};
use crate::agent::probing::{ProbeError, ProbeSource};
use crate::agent::publisher::{Backoff, Problem, Publisher, PublisherConfig};
use crate::node::device::{GpuDevice, describe, log_line};
use crate::node::sysfs::DiscoveryError;

/// How long the loops get to stop after SIGTERM before the process exits anyway; well inside
/// the DaemonSet's termination grace period.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(5);

/// The first re-probe of a failed GPU query; doubled up to [`FAILED_REPROBE_MAX`].
const FAILED_REPROBE_FIRST: Duration = Duration::from_secs(30);

/// The longest wait between re-probes of a failed GPU query.
const FAILED_REPROBE_MAX: Duration = Duration::from_secs(30 * 60);

/// Why the agent could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No API server to talk to: the kubeconfig could not be read or used, or there is none
    /// and this is not a pod (the one loader both programs share: `crate::kubeconfig`).
    #[error(
        "{0} (hint: in a pod this needs the service account token; elsewhere set --kubeconfig or KUBECONFIG)"
    )]
    Kubeconfig(#[from] crate::kubeconfig::KubeconfigError),
    /// The client could not be built from the configuration.
    #[error("set up the API client: {0}")]
    Client(kube::Error),
    /// The kubelet plugin could not bind its sockets.
    #[error("start the kubelet plugin: {0}")]
    Kubelet(#[from] KubeletError),
    /// The health port could not be bound.
    #[error(
        "listen on {addr} for /healthz, /readyz and /metrics: {source} (hint: choose another --health-addr)"
    )]
    HealthBind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// A loop ended on its own.
    #[error("the {0} stopped unexpectedly")]
    LoopStopped(&'static str),
    /// A loop failed.
    #[error("the {what} failed: {message}")]
    LoopFailed { what: &'static str, message: String },
}

/// The API client `config` asks for: its kubeconfig, or the usual inference (in-cluster first).
pub async fn client(config: &AgentConfig) -> Result<kube::Client, AgentError> {
    let kube_config = crate::kubeconfig::load(&crate::kubeconfig::Source {
        kubeconfig: config.kubeconfig.clone(),
        context: None,
    })
    .await?;
    kube::Client::try_from(kube_config).map_err(AgentError::Client)
}

/// Runs the agent until `shutdown` completes (SIGTERM/SIGINT in the binary).
pub async fn run(
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let client = client(&config).await?;
    let plugin = KubeletPlugin::bind(&config.kubelet)?;
    let listener =
        health::bind(config.health_addr)
            .await
            .map_err(|source| AgentError::HealthBind {
                addr: config.health_addr,
                source,
            })?;
    let health = Arc::new(Health::default());
    let registration = plugin.registration();
    info!(
        node = %config.node_name,
        health = %listener.local_addr().map_or_else(|_| config.health_addr.to_string(), |a| a.to_string()),
        "media-capabilities agent starting"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let (gpus_tx, gpus_rx) = watch::channel(None);

    // Loops that serve until told to stop: they get the stop signal and are awaited.
    let mut serving: JoinSet<(&'static str, Result<(), String>)> = JoinSet::new();
    serving.spawn({
        let stop = stopped();
        async move {
            let result = plugin.run(stop).await.map_err(|e| e.to_string());
            ("kubelet plugin", result)
        }
    });
    serving.spawn({
        let stop = stopped();
        let health = Arc::clone(&health);
        let registration = registration.clone();
        async move {
            let result = health::serve(listener, health, registration, stop)
                .await
                .map_err(|e| e.to_string());
            ("health server", result)
        }
    });
    // Loops that only work: aborted at shutdown.
    let mut working: JoinSet<&'static str> = JoinSet::new();
    working.spawn({
        let health = Arc::clone(&health);
        let source = config.source.clone();
        let watched = config.watched.clone();
        let interval = config.rescan_interval;
        async move {
            probe_loop(source, watched, interval, gpus_tx, health).await;
            "prober"
        }
    });
    working.spawn({
        let publisher = Publisher::new(
            client,
            PublisherConfig {
                node: config.node_name.clone(),
                resync_interval: config.resync_interval,
                max_backoff: config.max_backoff,
            },
            Arc::clone(&health),
        );
        async move {
            publisher.run(gpus_rx).await;
            "publisher"
        }
    });
    let mut registration_log = registration.clone();
    working.spawn(async move {
        // The kubelet plugin logs a refusal itself; this notes the state for operators.
        while registration_log.changed().await.is_ok() {
            let state = registration_log.borrow().clone();
            info!("kubelet registration: {state:?}");
        }
        "registration log"
    });

    let mut shutdown = std::pin::pin!(shutdown);
    let outcome = tokio::select! {
        () = &mut shutdown => {
            info!("shutting down (signal)");
            Ok(())
        }
        Some(done) = serving.join_next() => {
            health.loops_stopped.fetch_add(1, Ordering::Relaxed);
            Err(match done {
                Ok((what, Err(message))) => AgentError::LoopFailed { what, message },
                Ok((what, Ok(()))) => AgentError::LoopStopped(what),
                Err(e) => AgentError::LoopFailed { what: "agent task", message: e.to_string() },
            })
        }
        Some(done) = working.join_next() => {
            health.loops_stopped.fetch_add(1, Ordering::Relaxed);
            Err(match done {
                Ok(what) => AgentError::LoopStopped(what),
                Err(e) => AgentError::LoopFailed { what: "agent task", message: e.to_string() },
            })
        }
    };

    // Stop serving: the kubelet plugin closes and removes its sockets, the health server stops
    // accepting. The ResourceSlice is deliberately LEFT IN PLACE: during a rolling update the new
    // pod registers with the kubelet and takes the slice over well before the kubelet's 30 s
    // wipe after our plugin goes away, so the scheduler never sees this node's media devices
    // vanish. If no agent comes back (the DaemonSet was deleted), the kubelet's wipe removes the
    // slice, and its ownerReference removes it with the Node.
    let _ = stop_tx.send(true);
    working.abort_all();
    let drained = tokio::time::timeout(SHUTDOWN_BOUND, async {
        while let Some(done) = serving.join_next().await {
            if let Ok((what, Err(message))) = done {
                warn!("{what} stopped with an error: {message}");
            }
        }
    })
    .await;
    if drained.is_err() {
        warn!(
            "gave up waiting for the agent to stop after {:?}",
            SHUTDOWN_BOUND
        );
    }
    outcome
}

/// What the rescanner compares between two listings.
type Listing = Vec<(String, u64, Option<SystemTime>)>;

/// Lists what tells that the set of GPUs may have changed. A missing directory lists as empty.
pub fn listing(watched: &Watched) -> std::io::Result<Listing> {
    fn entries(dir: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<Listing> {
        let mut found = Vec::new();
        let read = match std::fs::read_dir(dir) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e),
        };
        for entry in read {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if keep(&name) {
                let meta = entry.metadata().ok();
                found.push((
                    name,
                    meta.as_ref().map_or(0, std::fs::Metadata::len),
                    meta.and_then(|m| m.modified().ok()),
                ));
            }
        }
        found.sort();
        Ok(found)
    }
    match watched {
        // Only the names: a render node's size and times say nothing about the GPU.
        Watched::RenderNodes(dir) => Ok(entries(dir, |n| n.starts_with("renderD"))?
            .into_iter()
            .map(|(name, _, _)| (name, 0, None))
            .collect()),
        Watched::Reports(path) if path.is_dir() => entries(path, |n| n.ends_with(".json")),
        Watched::Reports(path) => {
            let meta = std::fs::metadata(path)?;
            Ok(vec![(String::new(), meta.len(), meta.modified().ok())])
        }
    }
}

/// Probes now and whenever the listing changes; sends each new set of GPUs to the publisher.
async fn probe_loop(
    source: ProbeSource,
    watched: Watched,
    interval: Duration,
    gpus: watch::Sender<Option<Vec<GpuDevice>>>,
    health: Arc<Health>,
) {
    let mut problem = Problem::new("probe the GPUs");
    let mut last: Option<Listing> = None;
    // A GPU whose driver query failed is asked again, less and less often: a driver that was
    // not ready at boot gets its capabilities published without a restart, and a GPU that
    // fails for good costs a probe (and its log lines) at most every half hour.
    let mut failed_backoff = Backoff::starting_at(FAILED_REPROBE_FIRST, FAILED_REPROBE_MAX);
    let mut reprobe_at: Option<Instant> = None;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = match listing(&watched) {
            Ok(now) => now,
            Err(e) => {
                problem.failed(&format!("list {}: {e}", watched_path(&watched).display()));
                continue;
            }
        };
        let retry_failed = reprobe_at.is_some_and(|at| Instant::now() >= at);
        if last.as_ref() == Some(&now) && !retry_failed {
            continue;
        }
        if retry_failed && last.as_ref() == Some(&now) {
            info!("asking the GPUs whose query failed again");
        } else if last.is_some() {
            info!(
                "{} changed; probing the GPUs again",
                watched_path(&watched).display()
            );
            failed_backoff.reset();
        }
        match probe(&source).await {
            Ok(devices) => {
                problem.ok();
                health.metrics.gpus.set(devices.len() as i64);
                let failed = devices.iter().filter(|d| d.failure.is_some()).count();
                health.metrics.probe_failures.inc_by(failed as u64);
                reprobe_at = if failed == 0 {
                    failed_backoff.reset();
                    None
                } else {
                    Some(Instant::now() + failed_backoff.next_delay())
                };
                gpus.send_if_modified(|current| {
                    if current.as_ref() == Some(&devices) {
                        false
                    } else {
                        *current = Some(devices);
                        true
                    }
                });
                last = Some(now);
            }
            // Not remembered as done: the next tick probes again.
            Err(e) => {
                problem.failed(&e.to_string());
            }
        }
    }
}

fn watched_path(watched: &Watched) -> &Path {
    match watched {
        Watched::RenderNodes(path) | Watched::Reports(path) => path,
    }
}

/// One probe of every GPU, logged one line per GPU with the driver's name, every value and the
/// failure word for word. A node without a render node directory has no GPU: it publishes an
/// empty slice, which tells the scheduler so.
async fn probe(source: &ProbeSource) -> Result<Vec<GpuDevice>, ProbeError> {
    let probed = match source.probe().await {
        Ok(probed) => probed,
        Err(ProbeError::Discovery(DiscoveryError::DevRoot { path, source }))
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            info!(
                "{} does not exist: no GPU on this node, publishing no devices",
                path.display()
            );
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    if probed.is_empty() {
        info!("probe: no GPU found");
    }
    let devices: Vec<GpuDevice> = probed
        .iter()
        .map(|p| describe(&p.node(), &p.outcome()))
        .collect();
    for device in &devices {
        if device.failure.is_some() {
            error!("probe: {}", log_line(device));
        } else {
            info!("probe: {}", log_line(device));
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_node_listing_sees_nodes_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let watched = Watched::RenderNodes(dir.path().to_path_buf());
        let empty = listing(&watched).unwrap();
        assert!(empty.is_empty());
        std::fs::write(dir.path().join("renderD128"), "").unwrap();
        std::fs::write(dir.path().join("card0"), "").unwrap();
        let one = listing(&watched).unwrap();
        assert_eq!(one.len(), 1, "only render nodes count: {one:?}");
        assert_ne!(one, empty);
        let missing = Watched::RenderNodes(dir.path().join("nope"));
        assert!(listing(&missing).unwrap().is_empty());
    }
}
