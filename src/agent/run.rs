//! The agent as a whole: binds what must be bound (kubelet sockets, health port) so that a mistake
//! fails at start, then runs its loops side by side until SIGTERM/SIGINT: the prober
//! ([`probe_loop`]), the publisher, the render-node check, the kubelet plugin, the health server.
//!
//! Each loop but the health server holds a heartbeat, so `/healthz` fails when one is wedged. A
//! loop that stops on its own ends the agent with an error, and the kubelet restarts it.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

use crate::agent::api::{Backoff, Problem};
use crate::agent::config::{AgentConfig, Watched};
use crate::agent::dropped_reads;
use crate::agent::health::{self, Health};
use crate::agent::kubelet::{KubeletError, KubeletPlugin};
use crate::agent::probing::{ProbeError, ProbeSource};
use crate::agent::publisher::{Publisher, PublisherConfig};
use crate::agent::render_nodes;
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
    #[error("the {what} failed: {source}")]
    LoopFailed {
        what: &'static str,
        source: LoopError,
    },
}

/// Why a loop of the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Kubelet(#[from] KubeletError),
    /// The health server.
    #[error(transparent)]
    Health(#[from] std::io::Error),
    /// The loop's task panicked.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// `RUST_LOG` is not a filter.
#[derive(Debug, thiserror::Error)]
#[error(
    "RUST_LOG={text:?} is not a log filter: {source} (hint: RUST_LOG=info, RUST_LOG=debug or RUST_LOG=info,kube_client=debug)"
)]
pub struct LogFilterError {
    text: String,
    source: tracing_subscriber::filter::ParseError,
}

/// The targets of the Kubernetes client library, whose own events are off unless `RUST_LOG`
/// names them: it logs an ERROR line for every failed request and a WARN with a Rust `Debug`
/// dump for every broken stream, so an outage would print one per retry. Every failure reaches
/// the agent as an error value instead, which it reports once, with the verb and the resource.
pub(crate) const CLIENT_LOG_TARGETS: [&str; 2] = ["kube_client", "kube_runtime"];

/// The log filter for `RUST_LOG` (default `info`), with the client library's own events off
/// unless `RUST_LOG` names one of [`CLIENT_LOG_TARGETS`] (`RUST_LOG=info,kube_client=debug`).
pub fn log_filter(rust_log: Option<&str>) -> Result<EnvFilter, LogFilterError> {
    let text = rust_log.filter(|s| !s.trim().is_empty()).unwrap_or("info");
    let mut filter = EnvFilter::builder()
        .parse(text)
        .map_err(|source| LogFilterError {
            text: text.to_owned(),
            source,
        })?;
    if !CLIENT_LOG_TARGETS.iter().any(|t| text.contains(t)) {
        for target in CLIENT_LOG_TARGETS {
            if let Ok(directive) = format!("{target}=off").parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    Ok(filter)
}

/// The API client `config` asks for: its kubeconfig, or the usual inference (in-cluster first);
/// with the API server's address, for error messages.
pub(crate) async fn client(
    config: &AgentConfig,
    health: &Arc<Health>,
) -> Result<(kube::Client, String), AgentError> {
    let source = crate::kubeconfig::Source {
        kubeconfig: config.kubeconfig.clone(),
        context: None,
    };
    // The log is no terminal: a plugin's standard error is kept, its end said if it fails.
    let exec = crate::kubeconfig::ExecOptions {
        timeout: Some(crate::agent::api::API_CALL_TIMEOUT),
        stderr: crate::kubeconfig::Stderr::Tail,
    };
    let mut kube_config = crate::kubeconfig::load(&source, exec).await?;
    // The client's own retries (up to 15, on 429/503/504) would hide a problem for minutes;
    // every loop retries with its own backoff and jitter, honouring Retry-After.
    kube_config.default_retry = false;
    let url = kube_config.cluster_url.to_string();
    let url = url.trim_end_matches('/').to_string();
    // A read whose connection closed before its answer is sent once more on a new connection
    // (kube-apiserver starting up closes some), so only a second failure is an outage.
    let fresh = dropped_reads::fresh_connections(&kube_config).map_err(AgentError::Client)?;
    // Error answers reach the loops as client-go reads them: always a Status, with the HTTP code
    // and the server's Retry-After (kube-rs reads neither from a body that is not a Status).
    let client = kube::client::ClientBuilder::try_from(kube_config)
        .map_err(AgentError::Client)?
        .with_layer(&dropped_reads::SendReadsAgain::new(fresh))
        .with_layer(&crate::api_errors::ReadErrorAnswers)
        // Outermost: every answer read within bounds, every listing's pages checked.
        .with_layer(&crate::agent::answers::BoundAnswers::new(Arc::clone(
            health,
        )))
        .build();
    Ok((client, url))
}

/// Runs the agent until `shutdown` completes (SIGTERM/SIGINT in the binary).
pub async fn run(
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    run_with(config, shutdown, Arc::new(Health::default())).await
}

/// [`run`] with the state the health server reports, for tests that run the agent in-process
/// and look at (or wedge, see [`crate::agent::health::Liveness::wedge`]) its loops.
pub async fn run_with(
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
    health: Arc<Health>,
) -> Result<(), AgentError> {
    let (client, api_url) = client(&config, &health).await?;
    let kubelet_heartbeat = health
        .liveness
        .register("kubelet plugin", config.kubelet.recheck_interval);
    // The health port first: if it cannot be had, no socket has been made for the kubelet to
    // find (its plugin watcher would dial one left behind, and back off on that path).
    let listener =
        health::bind(config.health_addr)
            .await
            .map_err(|source| AgentError::HealthBind {
                addr: config.health_addr,
                source,
            })?;
    let plugin = KubeletPlugin::bind(&config.kubelet)?.with_heartbeat(kubelet_heartbeat);
    if let Ok(addr) = listener.local_addr() {
        let _ = health.local_addr.set(addr);
    }
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
    let mut serving: JoinSet<(&'static str, Result<(), LoopError>)> = JoinSet::new();
    serving.spawn({
        let stop = stopped();
        async move {
            let result = plugin.run(stop).await.map_err(LoopError::from);
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
                .map_err(LoopError::from);
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
        let heartbeat = health.liveness.register("prober", interval);
        async move {
            probe_loop(source, watched, interval, gpus_tx, health, heartbeat).await;
            "prober"
        }
    });
    working.spawn({
        let heartbeat = health
            .liveness
            .register("publisher", config.resync_interval);
        let publisher = Publisher::new(
            client.clone(),
            PublisherConfig {
                node: config.node_name.clone(),
                resync_interval: config.resync_interval,
                max_backoff: config.max_backoff,
                api_url: api_url.clone(),
            },
            Arc::clone(&health),
            heartbeat,
        );
        let gpus = gpus_rx.clone();
        async move {
            publisher.run(gpus).await;
            "publisher"
        }
    });
    working.spawn({
        let heartbeat = health
            .liveness
            .register("render-node check", config.resync_interval);
        let follow = render_nodes::follow(
            client,
            config.render_driver,
            config.node_name.clone(),
            api_url,
            gpus_rx,
            Arc::clone(&health),
            config.resync_interval,
            heartbeat,
        );
        async move {
            follow.await;
            "render-node check"
        }
    });
    // The kubelet plugin logs its registration's course itself (src/agent/kubelet/registration.rs).

    let mut shutdown = std::pin::pin!(shutdown);
    let outcome = tokio::select! {
        () = &mut shutdown => {
            info!("shutting down (signal)");
            Ok(())
        }
        Some(done) = serving.join_next() => {
            health.loops_stopped.fetch_add(1, Ordering::Relaxed);
            Err(match done {
                Ok((what, Err(source))) => AgentError::LoopFailed { what, source },
                Ok((what, Ok(()))) => AgentError::LoopStopped(what),
                Err(e) => AgentError::LoopFailed { what: "agent task", source: e.into() },
            })
        }
        Some(done) = working.join_next() => {
            health.loops_stopped.fetch_add(1, Ordering::Relaxed);
            Err(match done {
                Ok(what) => AgentError::LoopStopped(what),
                Err(e) => AgentError::LoopFailed { what: "agent task", source: e.into() },
            })
        }
    };

    // The slice stays: in a rolling update the new pod takes it over before the kubelet's 30 s
    // wipe; with no agent back, that wipe (or the Node's ownerReference) removes it.
    let _ = stop_tx.send(true);
    working.abort_all();
    let drained = tokio::time::timeout(SHUTDOWN_BOUND, async {
        while let Some(done) = serving.join_next().await {
            if let Ok((what, Err(e))) = done {
                warn!("{what} stopped with an error: {e}");
            }
        }
    })
    .await;
    if drained.is_err() {
        warn!(
            "gave up waiting for the agent to stop after {}",
            health::human(SHUTDOWN_BOUND)
        );
    } else {
        info!("every loop stopped; exiting");
    }
    outcome
}

/// What the rescanner compares between two listings.
type Listing = Vec<(String, u64, Option<SystemTime>)>;

/// Lists what tells that the set of GPUs may have changed. A missing directory lists as empty.
pub(crate) fn listing(watched: &Watched) -> std::io::Result<Listing> {
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
        Watched::Reports(path) if path.is_dir() => entries(path, |n| {
            crate::agent::probing::is_record_file(Path::new(n))
        }),
        Watched::Reports(path) => {
            let meta = std::fs::metadata(path)?;
            Ok(vec![(String::new(), meta.len(), meta.modified().ok())])
        }
    }
}

/// Probes now and whenever the listing changes; sends each new set of GPUs to the publisher.
/// A readdir poll, not inotify: inotify misses device nodes the host adds to a container's
/// /dev/dri. A failed driver query is asked again from 30 s, doubling up to 30 min.
async fn probe_loop(
    source: ProbeSource,
    watched: Watched,
    interval: Duration,
    gpus: watch::Sender<Option<Vec<GpuDevice>>>,
    health: Arc<Health>,
    heartbeat: health::Heartbeat,
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
        heartbeat.beat(interval).await;
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
        heartbeat.busy(probe_budget(&source, now.len()));
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

/// The longest one probe of every GPU may take: each GPU's timeout, for as many rounds as the
/// parallelism needs (`gpus` from the listing), plus time to start the children.
fn probe_budget(source: &ProbeSource, gpus: usize) -> Duration {
    const SLACK: Duration = Duration::from_secs(5);
    match source {
        ProbeSource::Live { isolation, .. } => {
            let rounds = gpus.max(1).div_ceil(isolation.parallel.max(1));
            isolation
                .timeout
                .saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX))
                + SLACK
        }
        ProbeSource::Recorded(_) => SLACK,
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

    #[test]
    fn the_client_library_is_quiet_unless_named() {
        let default = log_filter(None).unwrap().to_string();
        assert!(
            default.contains("kube_client=off") && default.contains("kube_runtime=off"),
            "{default}"
        );
        assert!(default.contains("info"), "{default}");
        let named = log_filter(Some("info,kube_client=debug"))
            .unwrap()
            .to_string();
        assert!(!named.contains("kube_client=off"), "{named}");
        let err = log_filter(Some("info,foo=loud")).unwrap_err().to_string();
        assert!(
            err.starts_with("RUST_LOG=\"info,foo=loud\" is not a log filter"),
            "{err}"
        );
        assert!(err.contains("(hint: "), "{err}");
    }

    #[test]
    fn a_probe_gets_its_timeout_for_each_round_of_children() {
        let isolation = |parallel| ProbeSource::Live {
            roots: crate::node::sysfs::Roots {
                dev: "/dev/dri".into(),
                sys: "/sys".into(),
            },
            pci_ids: None,
            only: None,
            isolation: crate::agent::probing::Isolation {
                command: crate::agent::probing::ProbeCommand::current_exe().unwrap(),
                timeout: Duration::from_secs(15),
                parallel,
                overrides: Vec::new(),
            },
        };
        assert_eq!(probe_budget(&isolation(4), 8), Duration::from_secs(35));
        assert_eq!(probe_budget(&isolation(4), 0), Duration::from_secs(20));
        assert_eq!(
            probe_budget(&ProbeSource::Recorded("x".into()), 8),
            Duration::from_secs(5)
        );
    }
}
