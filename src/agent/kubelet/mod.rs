//! The agent's kubelet plugin: pods with `media.liken.sh` claims start and stop only if the kubelet
//! finds a registered DRA plugin for the driver, though our devices deliver nothing. Two unix
//! sockets, each connection through the [`authority`] relay: [`registration`] on one, and on the
//! other [`dra`] (v1 and v1beta1) and, with a health feed, [`health`] (`DRAResourceHealth` v1 and
//! v1alpha1: each GPU's last published probe, in the status of the pods that hold it).
//!
//! The sockets must stay: without them the kubelet drops the plugin and wipes our slice 30 s later,
//! so [`KubeletPlugin::run`] re-checks both files every [`Config::recheck_interval`] and re-creates
//! a missing one (a `stat()` poll: an inotify watch is lost when its directory is deleted).

mod authority;
mod dra;
pub mod health;
pub mod proto;
mod registration;
mod socket;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::DuplexStream;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;
use tracing::{debug, info, warn};

pub use self::authority::REPLACEMENT_AUTHORITY;
use self::authority::{MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE};
pub use self::dra::Claims;
use self::dra::DraService;
use self::health::{HEALTH_SERVICES, HealthFeed, HealthService};
use self::proto::dra::{v1, v1beta1};
use self::proto::health as health_proto;
use self::proto::pluginregistration::registration_server::RegistrationServer;
use self::registration::RegistrationService;
pub use self::registration::{DEFAULT_REGISTRATION_WARNING, RegistrationState};
use self::socket::{FileId, Found};
use crate::catalogue::DRIVER;

/// Where the kubelet's plugin watcher looks for registration sockets.
pub(crate) const DEFAULT_REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";

/// The parent of every DRA driver's own directory (`<this>/media.liken.sh`).
pub(crate) const DEFAULT_PLUGINS_ROOT: &str = "/var/lib/kubelet/plugins";

/// The plugin type the kubelet expects from a DRA driver in `PluginInfo.type`.
pub(crate) const PLUGIN_TYPE: &str = "DRAPlugin";

/// The DRA API versions we serve, preferred first: the kubelet takes the first one it knows.
pub const SUPPORTED_VERSIONS: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// What the registration lists: the DRA versions, then the health services when they are
/// served ([`KubeletPlugin::with_health`]). A 1.37 kubelet opens a health stream only to a
/// plugin that lists one (and stops retrying one that answers `Unimplemented`), so a service is
/// listed exactly when it is served; kubelets before 1.37 skip names they do not know.
pub fn supported_versions(health_served: bool) -> Vec<String> {
    let health: &[&str] = if health_served { &HEALTH_SERVICES } else { &[] };
    SUPPORTED_VERSIONS
        .iter()
        .chain(health)
        .map(|v| (*v).to_owned())
        .collect()
}

/// How often the socket files are checked by default (see the module documentation).
pub(crate) const DEFAULT_RECHECK_INTERVAL: Duration = Duration::from_secs(5);

/// How long after a refused registration the registration socket is made anew by default. The
/// kubelet retries a registration by itself only when the refusal came before it took the
/// plugin in (GetInfo or validation failed); one that failed in the DRA handler
/// (`RegisterPlugin`, say "already registered" while an old instance is being dropped) is not
/// tried again until the socket file changes (k/k `operation_generator.go`,
/// `GenerateRegisterPluginFunc`: the plugin is in the actual state of the world by then).
pub(crate) const DEFAULT_REFUSAL_RETRY: Duration = Duration::from_secs(30);

/// How long in-flight kubelet calls may take to finish at shutdown by default. Our calls do no
/// work, so this only bounds a stuck connection.
pub(crate) const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Where and how the kubelet plugin serves.
#[derive(Clone, Debug)]
pub struct Config {
    /// The kubelet's plugin registry directory; the registration socket is created in it.
    pub registry_dir: PathBuf,
    /// Our own directory for the DRA socket.
    pub plugins_dir: PathBuf,
    /// How often to check that both socket files are still ours.
    pub recheck_interval: Duration,
    /// How long to let in-flight calls finish after the shutdown signal.
    pub drain_timeout: Duration,
    /// How long to wait for the kubelet to register the plugin before warning.
    pub registration_warning: Duration,
    /// How long after the kubelet refused the registration the registration socket is made
    /// anew, so that the kubelet tries again; doubled at each refusal in a row, up to ten times
    /// this (see [`KubeletPlugin::run`]).
    pub refusal_retry: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            registry_dir: PathBuf::from(DEFAULT_REGISTRY_DIR),
            plugins_dir: Path::new(DEFAULT_PLUGINS_ROOT).join(DRIVER),
            recheck_interval: DEFAULT_RECHECK_INTERVAL,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            registration_warning: DEFAULT_REGISTRATION_WARNING,
            refusal_retry: DEFAULT_REFUSAL_RETRY,
        }
    }
}

impl Config {
    /// The registration socket: `<registry dir>/media.liken.sh-reg.sock`.
    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir.join(format!("{DRIVER}-reg.sock"))
    }

    /// The DRA socket: `<plugins dir>/dra.sock`.
    pub fn dra_socket(&self) -> PathBuf {
        self.plugins_dir.join("dra.sock")
    }
}

/// The command-line flags of the kubelet plugin, for `media-capabilities` to flatten into its
/// own arguments (`#[command(flatten)]`).
#[derive(Clone, Debug, clap::Args)]
pub struct KubeletArgs {
    /// The kubelet's plugin registry directory, where the registration socket
    /// `media.liken.sh-reg.sock` is created; must be the directory the kubelet watches.
    #[arg(long, env = "KUBELET_REGISTRY_DIR", value_name = "DIR", default_value = DEFAULT_REGISTRY_DIR)]
    pub kubelet_registry_dir: PathBuf,

    /// The directory for the DRA socket `dra.sock`, whose absolute path is handed to the kubelet.
    #[arg(long, env = "KUBELET_PLUGINS_DIR", value_name = "DIR", default_value_os_t = Config::default().plugins_dir)]
    pub kubelet_plugins_dir: PathBuf,

    /// How long to wait for the kubelet to register the plugin before logging a warning with
    /// what to check (the kubelet normally registers it within seconds).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = crate::duration::parse_positive)]
    pub kubelet_registration_warning: Duration,
}

impl KubeletArgs {
    /// The plugin configuration these flags describe, with the default timings.
    pub fn config(&self) -> Config {
        Config {
            registry_dir: self.kubelet_registry_dir.clone(),
            plugins_dir: self.kubelet_plugins_dir.clone(),
            registration_warning: self.kubelet_registration_warning,
            ..Config::default()
        }
    }
}

/// Why the kubelet plugin could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// A socket directory could not be created.
    #[error(
        "create socket directory {path}: {source} (hint: the agent needs write access to the kubelet's directories: in the DaemonSet, hostPath mounts of plugins_registry and plugins/media.liken.sh)"
    )]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file left at a socket path by an earlier run could not be removed.
    #[error("remove stale socket {path}: {source}")]
    RemoveStale {
        /// The socket path.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A directory sits where a socket must be created.
    #[error(
        "{path} is a directory, not a socket (hint: remove it, or choose other kubelet plugin directories)"
    )]
    IsADirectory {
        /// The socket path.
        path: PathBuf,
    },
    /// A socket could not be bound.
    #[error("listen on unix socket {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The current directory, needed to make a relative directory absolute, is unknown.
    #[error(
        "make {path} absolute: {source} (hint: give the kubelet plugin directories as absolute paths)"
    )]
    Absolute {
        /// The relative path.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The DRA socket path cannot be sent to the kubelet, which takes UTF-8 strings.
    #[error("the DRA socket path {} is not valid UTF-8 (hint: choose a plugins directory with a UTF-8 name)", path.display())]
    NonUtf8Endpoint {
        /// The socket path.
        path: PathBuf,
    },
    /// A gRPC server stopped with an error while serving.
    #[error("serve gRPC on {path}: {source}")]
    Serve {
        /// The socket path.
        path: PathBuf,
        /// What tonic said.
        source: tonic::transport::Error,
    },
    /// A socket's directory was deleted while the path still shows it (a hostPath mount of the
    /// directory itself): no socket created there can reach the kubelet, and only a new
    /// container, whose mount is the directory now at that path, can serve it again.
    #[error(
        "the directory {} of the {role} socket was deleted while the agent served in it, and this path still shows the deleted directory (a hostPath mount of it), so the socket cannot be re-created where the kubelet looks; exiting so that the container is restarted with the directory now at that path (hint: if the kubelet's plugins_registry was deleted, also restart the kubelet: it watches only the directory it created when it started)",
        dir.display()
    )]
    DirectoryDeleted {
        /// The socket's directory, as the agent sees it.
        dir: PathBuf,
        /// Which socket: "registration" or "DRA".
        role: &'static str,
    },
    /// A gRPC server stopped serving before shutdown without saying why.
    #[error("the gRPC server on {path} stopped serving before shutdown")]
    ServerEnded {
        /// The socket path.
        path: PathBuf,
    },
    /// A gRPC server task ended unexpectedly (it panicked or was cancelled).
    #[error("the gRPC server on {path} stopped unexpectedly: {source}")]
    ServerTask {
        /// The socket path.
        path: PathBuf,
        /// Why the task ended.
        source: tokio::task::JoinError,
    },
}

/// The kubelet plugin with both sockets bound, ready to [`run`](Self::run).
#[derive(Debug)]
pub struct KubeletPlugin {
    registration: Bound,
    dra: Bound,
    endpoint: String,
    state: watch::Sender<RegistrationState>,
    recheck_interval: Duration,
    drain_timeout: Duration,
    registration_warning: Duration,
    refusal_retry: Duration,
    /// Tells `/healthz` that the serving loop progresses (see `crate::agent::health`).
    heartbeat: Option<crate::agent::liveness::Heartbeat>,
    /// Where prepared claims' devices are read; none: claims are prepared with no devices.
    claims: Option<Claims>,
    /// The published devices' health, for `DRAResourceHealth`; none: the service is not served.
    health: Option<HealthFeed>,
    /// How often an open health stream says every device again.
    health_resend: Duration,
}

/// One bound socket before serving starts.
#[derive(Debug)]
struct Bound {
    path: PathBuf,
    listener: UnixListener,
    id: FileId,
}

impl Bound {
    fn new(path: PathBuf) -> Result<Self, KubeletError> {
        let (listener, id) = socket::bind(&path)?;
        debug!(path = %path.display(), "listening");
        Ok(Self { path, listener, id })
    }
}

impl KubeletPlugin {
    /// Binds both sockets, replacing stale socket files left by an earlier run. Nothing is
    /// served until [`run`](Self::run); connections made before then wait in the backlog.
    ///
    /// Must be called within a Tokio runtime, as Tokio's own `UnixListener::bind`.
    pub fn bind(config: &Config) -> Result<Self, KubeletError> {
        let absolute = |path: PathBuf| {
            std::path::absolute(&path).map_err(|source| KubeletError::Absolute { path, source })
        };
        let dra_path = absolute(config.dra_socket())?;
        let registration_path = absolute(config.registration_socket())?;
        let endpoint = dra_path
            .to_str()
            .ok_or_else(|| KubeletError::NonUtf8Endpoint {
                path: dra_path.clone(),
            })?
            .to_owned();
        // The DRA socket first: the kubelet dials the endpoint as soon as it has registered us.
        let dra = Bound::new(dra_path)?;
        let registration = Bound::new(registration_path)?;
        Ok(Self {
            registration,
            dra,
            endpoint,
            state: watch::Sender::new(RegistrationState::Pending),
            recheck_interval: config.recheck_interval,
            drain_timeout: config.drain_timeout,
            registration_warning: config.registration_warning,
            refusal_retry: config.refusal_retry,
            heartbeat: None,
            claims: None,
            health: None,
            health_resend: health::RESEND,
        })
    }

    /// Prepares claims with their devices of this node's pool, read from the API server (see
    /// [`dra`]), so that the kubelet knows which devices a pod holds.
    pub fn with_claims(self, claims: Claims) -> Self {
        Self {
            claims: Some(claims),
            ..self
        }
    }

    /// Serves `DRAResourceHealth` (v1 and v1alpha1) from `feed`, and lists it in the
    /// registration; `resend` is how often an open stream says every device again (under the
    /// kubelet's 30 s, [`health::RESEND`] in the agent).
    pub fn with_health(self, feed: HealthFeed, resend: Duration) -> Self {
        Self {
            health: Some(feed),
            health_resend: resend,
            ..self
        }
    }

    /// Beats `heartbeat` at every socket re-check, so a wedged serving loop fails `/healthz`.
    pub(crate) fn with_heartbeat(self, heartbeat: crate::agent::liveness::Heartbeat) -> Self {
        Self {
            heartbeat: Some(heartbeat),
            ..self
        }
    }

    /// Follows what the kubelet said about our registration; `/readyz` waits for
    /// [`RegistrationState::Registered`].
    pub fn registration(&self) -> watch::Receiver<RegistrationState> {
        self.state.subscribe()
    }

    /// The absolute path of the DRA socket, as handed to the kubelet.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Serves the kubelet until `shutdown` completes, re-creating a socket file whenever it
    /// disappears. At shutdown it stops accepting, removes both socket files (if they are still
    /// ours), lets in-flight calls finish for at most the drain timeout, and returns.
    ///
    /// The ResourceSlice is deliberately not touched here: the kubelet wipes it 30 s after the
    /// plugin goes away, and during a rolling update the new pod registers within that time,
    /// so its devices never disappear from the scheduler's view.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), KubeletError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        // Dropped (and so ended) when `run` returns.
        let _report = AbortOnDrop(tokio::spawn(registration::report(
            self.state.subscribe(),
            self.registration_warning,
            registration::Where {
                socket: self.registration.path.clone(),
                endpoint: self.endpoint.clone(),
            },
        )));
        let registration_service = RegistrationService::new(
            self.endpoint,
            supported_versions(self.health.is_some()),
            self.state.clone(),
        );
        let dra_service = DraService::new(self.claims);
        let health_service = self
            .health
            .map(|feed| HealthService::new(feed, self.health_resend));

        let (mut dra, dra_incoming) = Served::start(self.dra, "DRA");
        let (mut registration, registration_incoming) =
            Served::start(self.registration, "registration");

        let mut dra_server = {
            let stop = stopped(stop_rx.clone());
            let path = dra.path.clone();
            tokio::spawn(async move {
                let v1_health = health_service.clone().map(
                    health_proto::v1::dra_resource_health_server::DraResourceHealthServer::new,
                );
                let v1alpha1_health = health_service.map(
                    health_proto::v1alpha1::dra_resource_health_server::DraResourceHealthServer::new,
                );
                server()
                    .add_service(v1::dra_plugin_server::DraPluginServer::new(
                        dra_service.clone(),
                    ))
                    .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(
                        dra_service,
                    ))
                    .add_optional_service(v1_health)
                    .add_optional_service(v1alpha1_health)
                    .serve_with_incoming_shutdown(dra_incoming, stop)
                    .await
                    .map_err(|source| KubeletError::Serve { path, source })
            })
        };
        let mut registration_server = {
            let stop = stopped(stop_rx);
            let path = registration.path.clone();
            tokio::spawn(async move {
                server()
                    .add_service(RegistrationServer::new(registration_service))
                    .serve_with_incoming_shutdown(registration_incoming, stop)
                    .await
                    .map_err(|source| KubeletError::Serve { path, source })
            })
        };
        info!(
            registration = %registration.path.display(),
            endpoint = %dra.path.display(),
            "serving the kubelet plugin"
        );

        let mut recheck = tokio::time::interval(self.recheck_interval);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        recheck.tick().await; // The first tick is immediate; the sockets were just bound.
        let mut retry = RefusalRetry::new(self.refusal_retry);
        let mut shutdown = std::pin::pin!(shutdown);
        let failure = loop {
            tokio::select! {
                () = &mut shutdown => break None,
                _ = recheck.tick() => {
                    if let Some(heartbeat) = &self.heartbeat {
                        heartbeat.beat(self.recheck_interval).await;
                    }
                    let recreated = match dra.recheck().await {
                        Ok(_) => registration.recheck().await,
                        Err(error) => Err(error),
                    };
                    // A refusal the kubelet will not try again by itself: a new socket file
                    // makes it drop the plugin and register it anew.
                    let recreated = match recreated {
                        Ok(false) if retry.due(&self.state.borrow()) => {
                            info!(
                                "making the registration socket {} anew {} after the kubelet refused the registration, so that it tries again",
                                registration.path.display(),
                                crate::duration::human(retry.waited()),
                            );
                            registration.rebind("renewed").map(|()| {
                                retry.renewed();
                                true
                            })
                        }
                        other => other,
                    };
                    match recreated {
                        // The kubelet saw our socket vanish and dropped the plugin; it has to
                        // register the new one before pods with our claims can start again.
                        Ok(true) => {
                            self.state.send_replace(RegistrationState::Pending);
                        }
                        Ok(false) => {}
                        Err(error) => break Some(error),
                    }
                }
                ended = &mut dra_server => break Some(server_failure(ended, &dra.path)),
                ended = &mut registration_server => {
                    break Some(server_failure(ended, &registration.path))
                }
            }
        };

        // Stop accepting and remove the files first, registration socket before the DRA socket,
        // so the kubelet unregisters us before it could dial a missing endpoint.
        registration.stop();
        dra.stop();
        if let Some(error) = failure {
            dra_server.abort();
            registration_server.abort();
            return Err(error);
        }
        stop_tx.send_replace(true);
        let drain = async {
            let dra_result = (&mut dra_server).await;
            let registration_result = (&mut registration_server).await;
            (dra_result, registration_result)
        };
        match tokio::time::timeout(self.drain_timeout, drain).await {
            Ok((dra_result, registration_result)) => {
                flatten(dra_result, &dra.path)?;
                flatten(registration_result, &registration.path)?;
                info!("the kubelet plugin stopped");
            }
            Err(_) => {
                warn!(
                    timeout = ?self.drain_timeout,
                    "kubelet calls still in flight after the drain timeout; closing them"
                );
                dra_server.abort();
                registration_server.abort();
            }
        }
        Ok(())
    }
}

/// Completes once the stop flag is set (or its sender is gone, which also means "stop").
/// Aborts a background task when dropped, so that it ends with the function that started it.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A tonic server whose HTTP/2 limits are the ones the `:authority` rewriter in front of it
/// assumes (see [`authority`]).
fn server() -> Server {
    Server::builder()
        .max_frame_size(MAX_FRAME_SIZE)
        .http2_max_header_list_size(MAX_HEADER_LIST_SIZE)
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// A server task ending before shutdown is always a failure, even with `Ok`.
fn server_failure(
    ended: Result<Result<(), KubeletError>, tokio::task::JoinError>,
    path: &Path,
) -> KubeletError {
    match ended {
        Ok(Err(error)) => error,
        Ok(Ok(())) => KubeletError::ServerEnded {
            path: path.to_path_buf(),
        },
        Err(source) => KubeletError::ServerTask {
            path: path.to_path_buf(),
            source,
        },
    }
}

fn flatten(
    ended: Result<Result<(), KubeletError>, tokio::task::JoinError>,
    path: &Path,
) -> Result<(), KubeletError> {
    match ended {
        Ok(result) => result,
        Err(source) => Err(KubeletError::ServerTask {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The connections handed from a socket's accept loop to its gRPC server: the server's end of an
/// in-memory stream whose other end the `:authority` rewriter feeds.
type Incoming = ReceiverStream<std::io::Result<DuplexStream>>;

/// The buffer of each in-memory stream between the rewriter and tonic: room for a few frames.
const RELAY_BUFFER: usize = 64 * 1024;

/// One socket while serving: its gRPC server keeps running across re-creations of the socket
/// file; only the accept loop feeding it is replaced.
/// When a refused registration is tried again: [`Config::refusal_retry`] after the refusal,
/// doubled for each refusal in a row up to ten times that, back to the first delay once the
/// kubelet registers the plugin.
struct RefusalRetry {
    first: Duration,
    delay: Duration,
    /// When the current refusal was first seen.
    since: Option<tokio::time::Instant>,
}

impl RefusalRetry {
    fn new(first: Duration) -> Self {
        Self {
            first,
            delay: first,
            since: None,
        }
    }

    /// Whether, with the registration in `state`, the registration socket is due to be made
    /// anew.
    fn due(&mut self, state: &RegistrationState) -> bool {
        match state {
            RegistrationState::Failed { .. } => {
                let since = *self.since.get_or_insert_with(tokio::time::Instant::now);
                since.elapsed() >= self.delay
            }
            RegistrationState::Registered => {
                self.delay = self.first;
                self.since = None;
                false
            }
            RegistrationState::Pending => {
                self.since = None;
                false
            }
        }
    }

    /// How long the current refusal has lasted.
    fn waited(&self) -> Duration {
        self.since.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// The socket was made anew: the next refusal in a row waits twice as long.
    fn renewed(&mut self) {
        self.since = None;
        self.delay = (self.delay * 2).min(self.first * 10);
    }
}

struct Served {
    path: PathBuf,
    /// Which socket this is, for log lines.
    role: &'static str,
    id: FileId,
    accept: JoinHandle<()>,
    connections: mpsc::Sender<std::io::Result<DuplexStream>>,
    /// What the last check found, so that each change is logged once, not on every check.
    last: Found,
}

impl Served {
    fn start(bound: Bound, role: &'static str) -> (Self, Incoming) {
        let (connections, incoming) = mpsc::channel(16);
        let accept = tokio::spawn(accept_loop(bound.listener, connections.clone(), role));
        let served = Self {
            path: bound.path,
            role,
            id: bound.id,
            accept,
            connections,
            last: Found::Ours,
        };
        (served, ReceiverStream::new(incoming))
    }

    /// Checks the socket file and re-creates it when it is gone or a dead leftover replaced it.
    /// Returns true when the socket was re-created, and an error when its directory was deleted
    /// behind a mount (see [`KubeletError::DirectoryDeleted`]). Each finding is logged once,
    /// when it changes.
    async fn recheck(&mut self) -> Result<bool, KubeletError> {
        let found = socket::inspect(&self.path, self.id).await;
        let (role, path) = (self.role, self.path.display().to_string());
        let (now, recreated) = match found {
            Found::DirectoryDeleted => {
                return Err(KubeletError::DirectoryDeleted {
                    dir: self.path.parent().unwrap_or(&self.path).to_path_buf(),
                    role,
                });
            }
            Found::Missing | Found::Dead => {
                let was = if found == Found::Missing {
                    "gone"
                } else {
                    "replaced by a dead socket"
                };
                match self.rebind(was) {
                    Ok(()) => {
                        warn!(
                            "the {role} socket {path} was {was}; re-created it so the kubelet registers the plugin again"
                        );
                        (Found::Ours, true)
                    }
                    Err(error) => {
                        let failed = Found::Unknown(error.to_string());
                        if failed != self.last {
                            warn!(
                                "the {role} socket {path} was {was} and cannot be re-created (will retry): {error}"
                            );
                        }
                        (failed, false)
                    }
                }
            }
            Found::Live => {
                if self.last != Found::Live {
                    warn!(
                        "another process now serves the {role} socket {path} (a newer agent pod?); leaving it alone"
                    );
                }
                (Found::Live, false)
            }
            Found::Unknown(why) => {
                let now = Found::Unknown(why.clone());
                if now != self.last {
                    warn!("cannot check the {role} socket {path}: {why}");
                }
                (now, false)
            }
            Found::Ours => (Found::Ours, false),
        };
        self.last = now;
        Ok(recreated)
    }

    /// Binds a new socket file at the path (a left-over one is removed first) and accepts on it
    /// from now on. `why` says why, for debug logs.
    fn rebind(&mut self, why: &str) -> Result<(), KubeletError> {
        let (listener, id) = socket::bind(&self.path)?;
        self.accept.abort();
        self.accept = tokio::spawn(accept_loop(listener, self.connections.clone(), self.role));
        self.id = id;
        debug!(path = %self.path.display(), "{} socket bound anew: {why}", self.role);
        Ok(())
    }

    /// Stops accepting and removes the socket file if it is still ours.
    fn stop(&mut self) {
        self.accept.abort();
        match socket::remove_if_ours(&self.path, self.id) {
            Ok(true) => debug!(path = %self.path.display(), "removed socket"),
            Ok(false) => {}
            Err(error) => warn!(path = %self.path.display(), "cannot remove socket: {error}"),
        }
    }
}

/// Accepts connections on one listener and hands them to the gRPC server through the
/// `:authority` rewriter. Ends when the server is gone; aborted when the socket file is
/// re-created or at shutdown (connections already relayed go on until either side closes).
async fn accept_loop(
    listener: UnixListener,
    connections: mpsc::Sender<std::io::Result<DuplexStream>>,
    role: &'static str,
) {
    // Whether accepting is failing: logged once when it starts and once when it ends, not at
    // every retry.
    let mut failing = false;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if failing {
                    failing = false;
                    info!("accepting connections on the {role} socket works again");
                }
                let (ours, theirs) = tokio::io::duplex(RELAY_BUFFER);
                if connections.send(Ok(theirs)).await.is_err() {
                    return;
                }
                tokio::spawn(authority::relay(stream, ours, role));
            }
            Err(error) => {
                if !failing {
                    failing = true;
                    warn!(
                        "accept a connection on the {role} socket: {error} (will retry every 100ms; the kubelet cannot reach the plugin meanwhile)"
                    );
                }
                // Typically EMFILE: pause briefly instead of spinning on the same error.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        kubelet: KubeletArgs,
    }

    #[test]
    fn flags_default_to_the_kubelet_conventions() {
        let config = Cli::try_parse_from(["agent"]).unwrap().kubelet.config();
        assert_eq!(
            config.registration_socket(),
            Path::new("/var/lib/kubelet/plugins_registry/media.liken.sh-reg.sock")
        );
        assert_eq!(
            config.dra_socket(),
            Path::new("/var/lib/kubelet/plugins/media.liken.sh/dra.sock")
        );
    }

    #[test]
    fn flags_move_both_sockets() {
        let cli = Cli::try_parse_from([
            "agent",
            "--kubelet-registry-dir",
            "/k/registry",
            "--kubelet-plugins-dir",
            "/k/plugins/x",
        ])
        .unwrap();
        let config = cli.kubelet.config();
        assert_eq!(
            config.registration_socket(),
            Path::new("/k/registry/media.liken.sh-reg.sock")
        );
        assert_eq!(config.dra_socket(), Path::new("/k/plugins/x/dra.sock"));
    }
}
