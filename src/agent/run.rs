//! The agent as a whole: binds what must be bound (kubelet sockets, health port) so that a mistake
//! fails at start, then runs its loops side by side until SIGTERM/SIGINT: the prober
//! ([`probe_loop`]), the publisher, the render-node check, the kubelet plugin, the health server.
//!
//! Each loop but the health server holds a heartbeat, so `/healthz` fails when one is wedged. A
//! loop that stops on its own ends the agent with an error, and the kubelet restarts it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};
use tracing_subscriber::EnvFilter;

use crate::agent::api::Problem;
use crate::agent::config::{AgentConfig, Watched};
use crate::agent::dropped_reads;
use crate::agent::health::{self, Health, TaintsLeftOut};
use crate::agent::kubelet::{self, Claims, KubeletError, KubeletPlugin};
use crate::agent::probing::{ProbeError, ProbeSource};
use crate::agent::publisher::{Publisher, PublisherConfig};
use crate::agent::render_nodes;
use crate::agent::reprobe::{CONFIRM_DELAY, Reprobe, Why};
use crate::node::device::{GpuDevice, describe, log_line};
use crate::node::slice;
use crate::node::sysfs::DiscoveryError;
use crate::node::taint::TaintPolicy;

/// How long the loops get to stop after SIGTERM before the process exits anyway; well inside
/// the DaemonSet's termination grace period.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(5);

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

/// How the log writes an event's fields: as tracing-subscriber's default does (the message
/// bare, then `name=value`), each put through [`crate::text::terminal_safe`]. Messages and
/// names come from API answers (a server's error, a stray slice's name) and from the node's
/// files; tracing-subscriber escapes ESC and C1 controls only, so a newline would forge a log
/// line and a bidi override (U+202E) reorder one, in `kubectl logs` as in a terminal.
pub fn log_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static
{
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = format!("{value:?}");
        let text = crate::text::terminal_safe(&text);
        if field.name() == "message" {
            writer.write_str(&text)
        } else {
            write!(writer, "{}={text}", field.name())
        }
    })
    .delimited(" ")
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
/// and look at (or wedge, see [`crate::agent::liveness::Liveness::wedge`]) its loops.
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
    // The devices' health as published, for the kubelet's DRAResourceHealth.
    let (published_tx, published_rx) = watch::channel(None);
    let plugin = KubeletPlugin::bind(&config.kubelet)?
        .with_heartbeat(kubelet_heartbeat)
        .with_claims(Claims::new(client.clone(), config.node_name.clone()))
        .with_health(published_rx, kubelet::health::RESEND);
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
        let prober = Prober {
            source: config.source.clone(),
            watched: config.watched.clone(),
            taints: config.taints.clone(),
            rescan: config.rescan_interval,
            reprobe: config.reprobe_interval,
        };
        let heartbeat = health.liveness.register("prober", config.rescan_interval);
        async move {
            probe_loop(prober, gpus_tx, health, heartbeat).await;
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
        )
        .with_health(published_tx);
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
            crate::duration::human(SHUTDOWN_BOUND)
        );
    } else {
        info!("every loop stopped; exiting");
    }
    outcome
}

/// What the rescanner compares between two listings: each file by its path, with its size and
/// modification time where they count.
type Listing = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The entries of `dir` whose names `keep` accepts, with what `meta` reads of each (following
/// symbolic links, as libva's `dlopen` does). A missing directory lists as empty.
fn entries(
    dir: &Path,
    keep: impl Fn(&str) -> bool,
    meta: impl Fn(&Path) -> (u64, Option<SystemTime>),
) -> std::io::Result<Listing> {
    let mut found = Vec::new();
    let read = match std::fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    // Bounded: a directory of more entries than this is not a /dev/dri or a driver directory.
    for entry in read.take(MAX_LISTED) {
        let entry = entry?;
        if keep(&entry.file_name().to_string_lossy()) {
            let path = entry.path();
            let (len, modified) = meta(&path);
            found.push((path, len, modified));
        }
    }
    found.sort();
    Ok(found)
}

/// The most entries one watched directory is read for.
const MAX_LISTED: usize = 4096;

/// Size and modification time, following links; a file that vanished reads as nothing.
fn size_and_time(path: &Path) -> (u64, Option<SystemTime>) {
    let meta = std::fs::metadata(path).ok();
    (
        meta.as_ref().map_or(0, std::fs::Metadata::len),
        meta.and_then(|m| m.modified().ok()),
    )
}

/// Lists what tells that the GPUs, or what their drivers state, may have changed.
pub(crate) fn listing(watched: &Watched) -> std::io::Result<Listing> {
    match watched {
        // Only the render nodes' names (a device node's size and times say nothing about the
        // GPU); the VA drivers' sizes and times too: a driver updated on the host is a new file.
        Watched::RenderNodes { dev, drivers } => {
            let mut listed = entries(dev, |n| n.starts_with("renderD"), |_| (0, None))?;
            for dir in drivers {
                listed.extend(entries(
                    dir,
                    |n| n.ends_with("_drv_video.so"),
                    size_and_time,
                )?);
            }
            Ok(listed)
        }
        Watched::Reports(path) if path.is_dir() => entries(
            path,
            |n| crate::agent::probing::is_record_file(Path::new(n)),
            size_and_time,
        ),
        Watched::Reports(path) => {
            let meta = std::fs::metadata(path)?;
            Ok(vec![(path.clone(), meta.len(), meta.modified().ok())])
        }
    }
}

/// What changed between two listings, for the log: the first file that appeared, went or
/// changed.
fn difference(before: &Listing, now: &Listing) -> String {
    let path_of = |l: &Listing, p: &Path| l.iter().find(|(q, _, _)| q == p).cloned();
    for entry in now {
        match path_of(before, &entry.0) {
            None => return format!("{} appeared", entry.0.display()),
            Some(old) if old != *entry => return format!("{} changed", entry.0.display()),
            Some(_) => {}
        }
    }
    before
        .iter()
        .find(|(p, _, _)| path_of(now, p).is_none())
        .map_or_else(
            || "the watched files changed".to_string(),
            |(p, _, _)| format!("{} went away", p.display()),
        )
}

/// The prober's own settings.
struct Prober {
    source: ProbeSource,
    watched: Watched,
    /// The taint of a GPU whose probe failed.
    taints: TaintPolicy,
    /// How often the watched files are listed.
    rescan: Duration,
    /// How often every GPU is probed again.
    reprobe: Duration,
}

/// Probes at start, whenever the watched files change and every re-probe period, and sends the
/// publisher each new set of GPUs as [`Reprobe`] decides it (a working GPU's first failure is
/// confirmed before it is sent). A readdir poll, not inotify: inotify misses device nodes the
/// host adds to a container's /dev/dri.
async fn probe_loop(
    prober: Prober,
    gpus: watch::Sender<Option<Vec<GpuDevice>>>,
    health: Arc<Health>,
    heartbeat: crate::agent::liveness::Heartbeat,
) {
    let Prober {
        source,
        watched,
        taints,
        rescan,
        reprobe,
    } = prober;
    let mut problem = Problem::new("probe the GPUs");
    let mut last: Option<Listing> = None;
    let mut state = Reprobe::new(reprobe, Instant::now());
    let mut rescan_at = Instant::now();
    loop {
        heartbeat.beat(rescan).await;
        tokio::time::sleep_until(rescan_at.min(state.next_probe())).await;
        let now = Instant::now();
        if now >= rescan_at {
            rescan_at = now + rescan;
        }
        let listed = match listing(&watched) {
            Ok(listed) => listed,
            Err(e) => {
                problem.failed(&format!("list {}: {e}", watched_path(&watched).display()));
                continue;
            }
        };
        let changed = last.as_ref() != Some(&listed);
        let Some(why) = state.due(now, changed) else {
            continue;
        };
        match (why, &last) {
            (Why::FilesChanged, Some(before)) => {
                info!("{}; probing the GPUs again", difference(before, &listed));
            }
            (Why::Confirm, _) => info!("asking again the GPUs whose probe failed once"),
            _ => debug!("probing the GPUs ({why:?})"),
        }
        heartbeat.busy(probe_budget(&source, listed.len()));
        match probe(&source).await {
            Ok(devices) => {
                let devices: Vec<GpuDevice> =
                    devices.into_iter().map(|d| d.tainted(&taints)).collect();
                problem.ok();
                let failed = devices.iter().filter(|d| d.failure.is_some()).count();
                health.metrics.probe_failures.inc_by(failed as u64);
                health.metrics.probes.inc();
                let decision = state.probed(devices, Instant::now());
                if let Some(devices) = decision.send {
                    log_decided(&devices, &decision.changed);
                    note_taints(&health, &devices);
                    gpus.send_replace(Some(devices));
                }
                for (name, failure) in &decision.held {
                    warn!(
                        "probe: {name} failed after it worked; asking it again in {} before publishing the failure: {failure}",
                        crate::duration::human(CONFIRM_DELAY.min(reprobe))
                    );
                }
                for name in &decision.gone {
                    info!("probe: {name} is gone");
                }
                last = Some(listed);
            }
            // Not remembered as done: the next listing probes again.
            Err(e) => {
                problem.failed(&e.to_string());
            }
        }
    }
}

/// Counts the GPUs and the failed ones, and says once when the node has too many GPUs for the
/// failed ones to carry their taint.
fn note_taints(health: &Health, devices: &[GpuDevice]) {
    let failed = devices.iter().filter(|d| d.failure.is_some()).count();
    health.metrics.gpus.set(devices.len() as i64);
    health.metrics.failed_gpus.set(failed as i64);
    let left_out = (failed > 0 && !slice::taints_fit(devices)).then(|| {
        TaintsLeftOut {
            gpus: devices.len(),
        }
        .to_string()
    });
    if Health::set_note(&health.taints_left_out, left_out.clone()) {
        match left_out {
            Some(note) => warn!("{note}"),
            None => info!("the failed GPUs carry their taint again"),
        }
    }
}

/// Logs the devices whose statements are new or changed, one line each with every value and
/// the failure word for word; a probe that changes nothing logs nothing (above debug).
fn log_decided(devices: &[GpuDevice], changed: &[String]) {
    if devices.is_empty() {
        info!("probe: no GPU found");
    }
    for device in devices.iter().filter(|d| changed.contains(&d.name)) {
        if device.failure.is_some() {
            error!("probe: {}", log_line(device));
        } else {
            info!("probe: {}", log_line(device));
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
        Watched::RenderNodes { dev: path, .. } | Watched::Reports(path) => path,
    }
}

/// One probe of every GPU. A node without a render node directory has no GPU: it publishes an
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
    Ok(probed
        .iter()
        .map(|p| describe(&p.node(), &p.outcome()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_escapes_what_would_act_on_a_terminal() {
        use std::sync::Mutex;
        let written = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&written);
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(log_fields())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(move || Into(Arc::clone(&into)))
            .finish();
        struct Into(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Into {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        tracing::subscriber::with_default(subscriber, || {
            let name = "gpu\u{202e}lave\x1b[2J";
            warn!(slice = %name, node = ?"n\n1", "deleting ResourceSlice {name}: refused\nINFO forged");
        });
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            " WARN deleting ResourceSlice gpu\\u{202e}lave\\x1b[2J: refused\\nINFO forged \
             slice=gpu\\u{202e}lave\\x1b[2J node=\"n\\n1\"\n"
        );
    }

    #[test]
    fn render_node_listing_sees_nodes_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let watched = Watched::RenderNodes {
            dev: dir.path().to_path_buf(),
            drivers: Vec::new(),
        };
        let empty = listing(&watched).unwrap();
        assert!(empty.is_empty());
        std::fs::write(dir.path().join("renderD128"), "").unwrap();
        std::fs::write(dir.path().join("card0"), "").unwrap();
        let one = listing(&watched).unwrap();
        assert_eq!(one.len(), 1, "only render nodes count: {one:?}");
        assert_ne!(one, empty);
        assert_eq!(
            difference(&empty, &one),
            format!("{} appeared", dir.path().join("renderD128").display())
        );
        let missing = Watched::RenderNodes {
            dev: dir.path().join("nope"),
            drivers: vec![dir.path().join("nope")],
        };
        assert!(listing(&missing).unwrap().is_empty());
    }

    #[test]
    fn a_va_driver_replaced_changes_the_listing() {
        let dev = tempfile::tempdir().unwrap();
        let dri = tempfile::tempdir().unwrap();
        let watched = Watched::RenderNodes {
            dev: dev.path().to_path_buf(),
            drivers: vec![dri.path().to_path_buf()],
        };
        let driver = dri.path().join("iHD_drv_video.so");
        std::fs::write(&driver, "v1").unwrap();
        std::fs::write(dri.path().join("README"), "not a driver").unwrap();
        let before = listing(&watched).unwrap();
        assert_eq!(before.len(), 1, "{before:?}");
        // A package update writes a new file of another size.
        std::fs::write(&driver, "version 2").unwrap();
        let after = listing(&watched).unwrap();
        assert_ne!(before, after);
        assert_eq!(
            difference(&before, &after),
            format!("{} changed", driver.display())
        );
        std::fs::remove_file(&driver).unwrap();
        assert_eq!(
            difference(&after, &listing(&watched).unwrap()),
            format!("{} went away", driver.display())
        );
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
