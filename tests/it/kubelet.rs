//! The kubelet plugin as a library and as the agent, over real gRPC on unix sockets, for what the
//! kubelet's own code (kubelet_real/) cannot produce. With tonic clients: concurrent calls on both
//! versions, stale, vanished, taken-over and re-created sockets, shutdown, the refusal offered
//! again on a new socket, and the log. With the raw client of `support/grpc_raw.rs`: every
//! `:authority` form, HPACK turnover, h2's resets, abusive header blocks, a kubelet gone with
//! frames unread; the last tests drive the real binary on the real control plane.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::controlplane::{AGENT, NAMESPACE};
use crate::support::agent::{AgentProcess, FAST, write_fleet};
use crate::support::grpc_raw::{Authority, CallError, RawGrpc};
use crate::support::kubelet::{
    channel, claims, prepare_and_unprepare, raw_prepare_and_unprepare, raw_register,
};
use media_operator::agent::kubelet::health::Published;
use media_operator::agent::kubelet::proto::dra::{v1, v1beta1};
use media_operator::agent::kubelet::proto::pluginregistration::{
    InfoRequest, RegistrationStatus, registration_client::RegistrationClient,
};
use media_operator::agent::kubelet::{Config, KubeletError, KubeletPlugin, RegistrationState};
use media_operator::catalogue::DRIVER;
use tokio::net::UnixStream;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// How long any awaited event may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// Plugin directories inside `dir`, checked every 20 ms so re-creation tests finish quickly.
fn config(dir: &Path) -> Config {
    Config {
        registry_dir: dir.join("plugins_registry"),
        plugins_dir: dir.join("plugins").join(DRIVER),
        recheck_interval: Duration::from_millis(20),
        // Longer than any deadline below, so "returns promptly" is not the drain cap at work.
        drain_timeout: Duration::from_secs(30),
        // Tests that need the warning set their own; none should see it by accident.
        registration_warning: Duration::from_secs(600),
        // Likewise the socket made anew after a refusal.
        refusal_retry: Duration::from_secs(600),
    }
}

/// A plugin serving in the background.
struct Running {
    config: Config,
    registration: watch::Receiver<RegistrationState>,
    endpoint: String,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), KubeletError>>,
}

fn start(config: Config) -> Running {
    let plugin = KubeletPlugin::bind(&config).expect("plugin binds its sockets");
    start_plugin(config, plugin)
}

/// Runs `plugin`, bound with `config`, in the background.
fn start_plugin(config: Config, plugin: KubeletPlugin) -> Running {
    let registration = plugin.registration();
    let endpoint = plugin.endpoint().to_owned();
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(plugin.run(async {
        let _ = signal.await;
    }));
    Running {
        config,
        registration,
        endpoint,
        shutdown,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.shutdown.send(()).expect("plugin still running");
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("plugin stops before the deadline")
            .expect("plugin task did not panic")
            .expect("plugin stops without error");
    }
}

/// Polls `check` every 10 ms until it holds, failing the test after [`DEADLINE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the registration state satisfies `wanted`.
async fn registration_becomes(
    state: &mut watch::Receiver<RegistrationState>,
    wanted: impl FnMut(&RegistrationState) -> bool,
) -> RegistrationState {
    tokio::time::timeout(DEADLINE, state.wait_for(wanted))
        .await
        .expect("registration state changes before the deadline")
        .expect("plugin still running")
        .clone()
}

/// Whether a GetInfo call on `path` answers with our driver name.
async fn answers_get_info(path: &Path) -> bool {
    if !path.exists() {
        return false;
    }
    let Ok(stream) = UnixStream::connect(path).await else {
        return false;
    };
    drop(stream);
    let mut client = RegistrationClient::new(channel(path).await);
    client
        .get_info(InfoRequest {})
        .await
        .is_ok_and(|info| info.into_inner().name == DRIVER)
}

/// Log lines written while a test's subscriber is installed.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Installs a subscriber for this thread. `#[tokio::test]` runs the plugin's tasks on the
    /// test's own thread, so everything the plugin logs lands here.
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || logs.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_both_versions_each_get_their_own_claims() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = start(config(dir.path()));
    let dra = channel(&plugin.config.dra_socket()).await;

    let mut calls = tokio::task::JoinSet::new();
    for i in 0..16 {
        let dra = dra.clone();
        // Separate connections too, as several kubelet workers (or restarts) would make.
        let own = channel(&plugin.config.dra_socket()).await;
        calls.spawn(async move {
            if i % 2 == 0 {
                prepare_and_unprepare!(v1, dra, claims(&format!("pod{i}"), 3));
                prepare_and_unprepare!(v1beta1, own, claims(&format!("own{i}"), 2));
            } else {
                prepare_and_unprepare!(v1beta1, dra, claims(&format!("pod{i}"), 3));
                prepare_and_unprepare!(v1, own, claims(&format!("own{i}"), 2));
            }
        });
    }
    while let Some(call) = calls.join_next().await {
        call.expect("call task did not panic");
    }

    plugin.stop().await;
}

#[tokio::test]
async fn stale_sockets_are_replaced_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    std::fs::create_dir_all(&config.registry_dir).unwrap();
    std::fs::create_dir_all(&config.plugins_dir).unwrap();
    // A socket file left by a process that has exited, and a plain file, at our two paths.
    drop(std::os::unix::net::UnixListener::bind(config.registration_socket()).unwrap());
    std::fs::write(config.dra_socket(), b"left over").unwrap();
    // A process another test forks at this moment holds a copy of the listener until it
    // execs, and the socket accepts until then.
    eventually("the left-over socket refuses connections", || async {
        UnixStream::connect(config.registration_socket())
            .await
            .is_err()
    })
    .await;

    let plugin = start(config);
    assert!(answers_get_info(&plugin.config.registration_socket()).await);
    prepare_and_unprepare!(
        v1,
        channel(&plugin.config.dra_socket()).await,
        claims("after-stale", 2)
    );

    plugin.stop().await;
}

#[tokio::test]
async fn a_directory_in_place_of_a_socket_is_an_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    std::fs::create_dir_all(config.registration_socket()).unwrap();

    let error = KubeletPlugin::bind(&config).expect_err("a directory is not replaced");
    assert!(
        matches!(error, KubeletError::IsADirectory { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("media.liken.sh-reg.sock is a directory"),
        "{message}"
    );
    assert!(message.contains("(hint: "), "{message}");
    assert!(
        config.registration_socket().is_dir(),
        "the directory is left alone"
    );
}

#[tokio::test]
async fn sockets_are_re_created_after_the_registry_dir_is_re_created() {
    let dir = tempfile::tempdir().unwrap();
    let mut plugin = start(config(dir.path()));
    let registration_socket = plugin.config.registration_socket();
    let mut client = RegistrationClient::new(channel(&registration_socket).await);
    client
        .notify_registration_status(RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await
        .unwrap();
    registration_becomes(&mut plugin.registration, RegistrationState::is_registered).await;

    // What a kubelet reinstall or a node cleanup does to the registry directory.
    std::fs::remove_dir_all(&plugin.config.registry_dir).unwrap();
    std::fs::create_dir_all(&plugin.config.registry_dir).unwrap();

    // The socket is back and serving (a connection by path reaches only a file that exists),
    // and the kubelet must register it anew.
    registration_becomes(&mut plugin.registration, |s| {
        *s == RegistrationState::Pending
    })
    .await;
    eventually("the registration socket is re-created and answers", || {
        answers_get_info(&registration_socket)
    })
    .await;
    let mut client = RegistrationClient::new(channel(&registration_socket).await);
    client
        .notify_registration_status(RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await
        .unwrap();
    registration_becomes(&mut plugin.registration, RegistrationState::is_registered).await;

    // The same for the DRA socket, whose directory is ours.
    let dra_socket = plugin.config.dra_socket();
    std::fs::remove_file(&dra_socket).unwrap();
    eventually("the DRA socket is re-created", || {
        let dra_socket = dra_socket.clone();
        async move { UnixStream::connect(&dra_socket).await.is_ok() }
    })
    .await;
    prepare_and_unprepare!(v1, channel(&dra_socket).await, claims("after-recreate", 2));

    plugin.stop().await;
    assert!(!registration_socket.exists() && !dra_socket.exists());
}

#[tokio::test]
async fn a_socket_taken_over_by_a_live_process_is_left_alone() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let dir = tempfile::tempdir().unwrap();
    let plugin = start(config(dir.path()));
    let registration_socket = plugin.config.registration_socket();

    // A newer agent pod (rolling update with surge) binds the same path.
    std::fs::remove_file(&registration_socket).unwrap();
    let newer = tokio::net::UnixListener::bind(&registration_socket).unwrap();
    let newer_inode = std::fs::metadata(&registration_socket).unwrap().ino();

    eventually("the plugin notices the other process", || {
        let text = logs.text();
        async move { text.contains("another process now serves the registration socket") }
    })
    .await;
    plugin.stop().await;
    assert_eq!(
        std::fs::metadata(&registration_socket).unwrap().ino(),
        newer_inode,
        "the other process's socket is neither replaced nor removed"
    );
    drop(newer);
}

#[tokio::test]
async fn shutdown_returns_promptly_and_removes_the_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = start(config(dir.path()));
    let registration_socket = plugin.config.registration_socket();
    let dra_socket = plugin.config.dra_socket();
    // The kubelet keeps its connections open between calls; they must not hold up shutdown.
    let mut registration = RegistrationClient::new(channel(&registration_socket).await);
    registration.get_info(InfoRequest {}).await.unwrap();
    let dra = channel(&dra_socket).await;
    prepare_and_unprepare!(v1, dra.clone(), claims("before-shutdown", 1));

    let started = std::time::Instant::now();
    plugin.shutdown.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(2), plugin.task)
        .await
        .expect("run returns within 2 s of the shutdown signal")
        .expect("plugin task did not panic")
        .expect("plugin stops without error");
    let took = started.elapsed();

    assert!(!registration_socket.exists(), "registration socket removed");
    assert!(!dra_socket.exists(), "DRA socket removed");
    assert!(
        registration.get_info(InfoRequest {}).await.is_err(),
        "nothing answers after shutdown"
    );
    eprintln!("shutdown took {took:?}");
}

#[tokio::test]
async fn a_dead_socket_in_our_place_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = start(config(dir.path()));
    let registration_socket = plugin.config.registration_socket();

    // A process bound the path and exited without cleaning up: nobody listens there.
    std::fs::remove_file(&registration_socket).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&registration_socket).unwrap());
    assert!(!answers_get_info(&registration_socket).await);

    // Answering proves the replacement: the inode number alone would not, as the new socket
    // often reuses the dead one's.
    eventually("the dead socket is replaced by a serving one", || {
        answers_get_info(&registration_socket)
    })
    .await;

    plugin.stop().await;
}

/// What the kubelet really sends: every `:authority` form, with grpc-go's header bytes, reaches
/// both services: GetInfo and NotifyRegistrationStatus on the registration socket (one
/// connection, as the kubelet's plugin watcher), NodePrepareResources and NodeUnprepareResources
/// on v1 and v1beta1 on the DRA socket.
#[tokio::test]
async fn every_authority_a_real_client_sends_reaches_both_services() {
    let dir = tempfile::tempdir().unwrap();
    let mut plugin = start(config(dir.path()));
    let registration_socket = plugin.config.registration_socket();
    let dra_socket = plugin.config.dra_socket();
    for form in Authority::ALL {
        plugin.registration.mark_unchanged();
        let info = raw_register(&registration_socket, form, "")
            .await
            .unwrap_or_else(|e| panic!("{form:?}: registration: {e:?}"));
        assert_eq!(info.name, DRIVER, "{form:?}");
        assert_eq!(info.endpoint, plugin.endpoint, "{form:?}");
        registration_becomes(&mut plugin.registration, RegistrationState::is_registered).await;
        let tag = format!("{form:?}").to_lowercase();
        raw_prepare_and_unprepare!(v1, &dra_socket, form, claims(&tag, 3))
            .unwrap_or_else(|e| panic!("{form:?}: DRA v1: {e:?}"));
        raw_prepare_and_unprepare!(
            v1beta1,
            &dra_socket,
            form,
            claims(&format!("beta-{tag}"), 2)
        )
        .unwrap_or_else(|e| panic!("{form:?}: DRA v1beta1: {e:?}"));
    }
    plugin.stop().await;
}

/// A kubelet keeps one DRA connection for as long as both run (1.34+: opened at registration),
/// and grpc-go writes each call's `grpc-timeout` from what is left of its deadline at send time,
/// so every call adds a new entry to the connection's HPACK table: after about 70 calls the
/// 4 KiB table is full and every call evicts. Hundreds of calls on one connection, as the
/// kubelet makes them (45 s deadlines, a little less left at each send), all pass the relay.
#[tokio::test]
async fn hundreds_of_calls_on_one_connection_pass_as_the_table_turns_over() {
    use crate::support::kubelet::dra_claims;
    use prost::Message as _;

    let dir = tempfile::tempdir().unwrap();
    let plugin = start(config(dir.path()));
    let dra_socket = plugin.config.dra_socket();
    let service = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin";
    for form in [Authority::Localhost, Authority::PercentEncodedPath] {
        let authority = form.value(&dra_socket);
        let mut conn = RawGrpc::connect(&dra_socket).await.unwrap();
        let mut timeouts = std::collections::BTreeSet::new();
        for call in 0..300 {
            let (wanted, request) =
                dra_claims!(v1, claims(&format!("{form:?}-{call}"), 1 + call % 3));
            // What is left of the 45 s when the call is sent: some microseconds less each time
            // (a clock read here would repeat values on a fast machine, and a repeat is indexed).
            let left = Duration::from_secs(45) - Duration::from_micros(37 * (call as u64 + 1));
            timeouts.insert(crate::support::grpc_raw::encode_timeout(left));
            let (method, message) = if call % 2 == 0 {
                let m = v1::NodePrepareResourcesRequest { claims: request };
                ("NodePrepareResources", m.encode_to_vec())
            } else {
                let m = v1::NodeUnprepareResourcesRequest { claims: request };
                ("NodeUnprepareResources", m.encode_to_vec())
            };
            let answer = conn
                .call(
                    authority.as_deref(),
                    &format!("{service}/{method}"),
                    &message,
                    left,
                )
                .await
                .unwrap_or_else(|e| panic!("{form:?}: call {call} ({method}): {e:?}"));
            if call % 2 == 0 {
                let prepared =
                    v1::NodePrepareResourcesResponse::decode(&answer.message[..]).unwrap();
                crate::support::kubelet::check_prepared!(prepared, wanted);
            } else {
                let unprepared =
                    v1::NodeUnprepareResourcesResponse::decode(&answer.message[..]).unwrap();
                crate::support::kubelet::check_unprepared!(unprepared, wanted);
            }
        }
        assert_eq!(timeouts.len(), 300, "{form:?}: each call adds an entry");
    }
    plugin.stop().await;
}

/// A registration service on `socket` served by tonic alone, without the relay: how h2 itself
/// answers.
fn serve_bare(socket: &Path) {
    use media_operator::agent::kubelet::proto::pluginregistration::registration_server::{
        Registration, RegistrationServer,
    };
    use media_operator::agent::kubelet::proto::pluginregistration::{
        PluginInfo, RegistrationStatusResponse,
    };

    struct Bare;
    #[tonic::async_trait]
    impl Registration for Bare {
        async fn get_info(
            &self,
            _: tonic::Request<InfoRequest>,
        ) -> Result<tonic::Response<PluginInfo>, tonic::Status> {
            Ok(tonic::Response::new(PluginInfo {
                name: "bare".into(),
                ..Default::default()
            }))
        }
        async fn notify_registration_status(
            &self,
            _: tonic::Request<RegistrationStatus>,
        ) -> Result<tonic::Response<RegistrationStatusResponse>, tonic::Status> {
            Ok(tonic::Response::new(RegistrationStatusResponse {}))
        }
    }

    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            if tx.send(Ok::<_, std::io::Error>(stream)).await.is_err() {
                return;
            }
        }
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(Bare))
            .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(rx)),
    );
}

/// Why the relay exists, pinned: tonic alone (h2 underneath) resets the stream of the kubelet's
/// percent-encoded path and of the raw path with PROTOCOL_ERROR, and answers `localhost` and no
/// authority. If h2 ever accepts them, this fails and the relay can go (hyperium/h2#487).
#[tokio::test]
async fn tonic_alone_resets_what_the_kubelet_sends() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("bare.sock");
    serve_bare(&socket);
    for form in Authority::ALL {
        let outcome = raw_register(&socket, form, "").await.map(|info| info.name);
        match form {
            Authority::PercentEncodedPath | Authority::RawPath => {
                assert_eq!(outcome, Err(CallError::Reset(1)), "{form:?}");
            }
            Authority::Localhost | Authority::Absent => {
                assert_eq!(outcome, Ok("bare".to_owned()), "{form:?}");
            }
        }
    }
}

/// The kubelet refuses the registration on `socket` with `refusal`; returns how long after
/// that the plugin made the socket anew (its state back to Pending).
async fn refuse_until_offered_again(
    plugin: &mut Running,
    socket: &Path,
    refusal: &str,
) -> Duration {
    let refused_at = std::time::Instant::now();
    raw_register(socket, Authority::PercentEncodedPath, refusal)
        .await
        .unwrap();
    registration_becomes(&mut plugin.registration, |s| {
        matches!(s, RegistrationState::Failed { .. })
    })
    .await;
    registration_becomes(&mut plugin.registration, |s| {
        *s == RegistrationState::Pending
    })
    .await;
    refused_at.elapsed()
}

/// A refusal the kubelet does not retry by itself (its DRA handler's, after it took the plugin
/// in): the agent makes the registration socket anew after `refusal_retry`, so that the
/// kubelet's plugin watcher sees a new file and registers again; twice as long after a second
/// refusal in a row; and a registration ends it.
#[tokio::test]
async fn a_refused_registration_is_offered_again_on_a_new_socket() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let dir = tempfile::tempdir().unwrap();
    let mut plugin = start(Config {
        refusal_retry: Duration::from_millis(300),
        ..config(dir.path())
    });
    let socket = plugin.config.registration_socket();
    let inode = |path: &Path| std::fs::metadata(path).map(|m| m.ino()).ok();
    let refusal =
        "RegisterPlugin error -- plugin registration failed with err: endpoint already registered";

    let first = inode(&socket).expect("the socket is there");
    let renewed_after = refuse_until_offered_again(&mut plugin, &socket, refusal).await;
    let second = inode(&socket).expect("a socket is there again");
    assert_ne!(
        first, second,
        "a new socket file, which the kubelet's inotify sees"
    );
    assert!(
        renewed_after >= Duration::from_millis(300),
        "{renewed_after:?}"
    );

    // Refused again: twice the wait.
    let renewed_after = refuse_until_offered_again(&mut plugin, &socket, refusal).await;
    assert!(
        renewed_after >= Duration::from_millis(600),
        "{renewed_after:?}"
    );
    assert_ne!(inode(&socket), Some(second));
    // Said once, however often the kubelet refuses the new offers in the same words; each
    // offer is said.
    let text = logs.text();
    let count = |what: &str| {
        text.lines()
            .filter(|l| l.contains(what) && !l.contains(" DEBUG "))
            .count()
    };
    assert_eq!(count(refusal), 1, "{text}");
    assert_eq!(count("making the registration socket"), 2, "{text}");

    // Registered: the socket stays as it is.
    raw_register(&socket, Authority::PercentEncodedPath, "")
        .await
        .unwrap();
    registration_becomes(&mut plugin.registration, RegistrationState::is_registered).await;
    let registered = inode(&socket);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(inode(&socket), registered);
    assert!(plugin.registration.borrow().is_registered());
    plugin.stop().await;
}

/// The registration's course in the log, each finding once: a warning with what to check when
/// nothing registers the plugin in time, the kubelet's refusal verbatim (once, however often it
/// is repeated), and one INFO line when the kubelet registers it, not one per re-registration.
#[tokio::test]
async fn registration_is_reported_once_per_finding() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let dir = tempfile::tempdir().unwrap();
    let mut plugin = start(Config {
        registration_warning: Duration::from_millis(100),
        ..config(dir.path())
    });
    let socket = plugin.config.registration_socket();
    let warning = "no kubelet has registered the media.liken.sh plugin within 100ms";
    eventually("the missing registration is reported", || {
        let text = logs.text();
        async move { text.contains(warning) }
    })
    .await;
    // Several periods later it is still one line.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let text = logs.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(warning)).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains(" WARN "), "{}", lines[0]);
    for what in [
        "ContainerCreating",
        "(hint: ",
        &plugin.config.registry_dir.display().to_string(),
        "hostPath",
        "RegisterPlugin error",
        "media.liken.sh-reg.sock",
    ] {
        assert!(lines[0].contains(what), "{what:?} in {}", lines[0]);
    }
    // The socket made anew (deleted, say): the kubelet gets the whole grace period again, and
    // is warned about once more when it still does not register.
    std::fs::remove_file(&socket).unwrap();
    eventually("the warning is given again for the new socket", || {
        let text = logs.text();
        async move { text.lines().filter(|l| l.contains(warning)).count() == 2 }
    })
    .await;

    let refusal = "RegisterPlugin error -- plugin validation failed with err: no supported version";
    for _ in 0..3 {
        raw_register(&socket, Authority::PercentEncodedPath, refusal)
            .await
            .expect("the kubelet's calls are answered");
    }
    registration_becomes(&mut plugin.registration, |s| {
        matches!(s, RegistrationState::Failed { .. })
    })
    .await;
    eventually("the refusal is reported", || {
        let text = logs.text();
        async move { text.contains(refusal) }
    })
    .await;

    for _ in 0..3 {
        raw_register(&socket, Authority::PercentEncodedPath, "")
            .await
            .expect("the kubelet's calls are answered");
    }
    registration_becomes(&mut plugin.registration, RegistrationState::is_registered).await;
    let registered = "the kubelet registered the media.liken.sh plugin";
    eventually("the registration is reported", || {
        let text = logs.text();
        async move { text.contains(registered) }
    })
    .await;
    let endpoint = plugin.endpoint.clone();
    plugin.stop().await;

    let text = logs.text();
    // Lines above debug: the calls themselves are logged at debug, with the kubelet's words.
    let count = |what: &str| {
        text.lines()
            .filter(|l| l.contains(what) && !l.contains(" DEBUG "))
            .count()
    };
    assert_eq!(count(refusal), 1, "{text}");
    assert_eq!(count(registered), 1, "{text}");
    assert_eq!(count(warning), 2, "once for each socket: {text}");
    let line = text.lines().find(|l| l.contains(registered)).unwrap();
    assert!(line.contains(" INFO "), "{line}");
    assert!(line.contains(&endpoint), "{line}");
    // The kubelet's routine calls are there, at debug only.
    for line in text
        .lines()
        .filter(|l| l.contains("GetInfo") || l.contains("reported on"))
    {
        assert!(line.contains(" DEBUG "), "{line}");
    }
}

/// A kubelet that goes away while the agent stops, with the agent's last frames unread (a node
/// restarting its kubelet during a rollout): its connection is reset, and the stop still ends
/// at once instead of waiting for the vanished kubelet until the drain timeout (30 s here).
#[tokio::test]
async fn a_kubelet_gone_during_the_stop_does_not_hold_it_up() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let Running {
        config,
        shutdown,
        task,
        ..
    } = start(config(dir.path()));
    let mut kubelet = UnixStream::connect(config.dra_socket()).await.unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // an empty SETTINGS frame
    kubelet.write_all(&hello).await.unwrap();
    // Frame by frame, acknowledging nothing, until the server's SETTINGS have come.
    let mut read_frame = async || -> u8 {
        let mut head = [0u8; 9];
        kubelet.read_exact(&mut head).await.expect("a frame head");
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        kubelet
            .read_exact(&mut vec![0; len])
            .await
            .expect("a frame payload");
        head[3]
    };
    const SETTINGS: u8 = 0x4;
    const GOAWAY: u8 = 0x7;
    while read_frame().await != SETTINGS {}
    shutdown.send(()).expect("plugin still running");
    // The graceful shutdown's GOAWAY, then its PING, which stays unread: closing the socket
    // with it queued resets the connection.
    while read_frame().await != GOAWAY {}
    tokio::time::timeout(DEADLINE, kubelet.readable())
        .await
        .expect("the PING after the GOAWAY")
        .unwrap();
    drop(kubelet);
    tokio::time::timeout(DEADLINE, task)
        .await
        .expect("plugin stops before the deadline")
        .expect("plugin task did not panic")
        .expect("plugin stops without error");
}

/// Prepare and unprepare are routine: one DEBUG line per call, naming the claims; nothing at
/// INFO or above.
#[tokio::test]
async fn prepare_and_unprepare_log_at_debug() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let dir = tempfile::tempdir().unwrap();
    let plugin = start(config(dir.path()));
    raw_prepare_and_unprepare!(
        v1,
        &plugin.config.dra_socket(),
        Authority::Localhost,
        claims("logged", 2)
    )
    .expect("prepare and unprepare");
    plugin.stop().await;
    let text = logs.text();
    let prepared: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("prepared 2 claim(s)"))
        .collect();
    assert_eq!(prepared.len(), 2, "prepare and unprepare: {text}");
    for line in prepared {
        assert!(line.contains(" DEBUG "), "{line}");
        assert!(line.contains("ns-logged/claim-1 (logged-uid-1)"), "{line}");
    }
}

// --- the real binary ---------------------------------------------------------------------------

/// The `media-capabilities` agent as a process on its own node of the real control plane
/// (deploy/ installed, a pod-bound token), with one recorded GPU and `extra` flags.
fn agent_process(node: &str, extra: &[&str]) -> (tempfile::TempDir, AgentProcess) {
    let cp = crate::controlplane::installed(crate::support::controlplane::Release::V1_34);
    cp.node(node, &[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let token = cp.token(NAMESPACE, AGENT, &format!("{AGENT}-{node}"), node);
    let kubeconfig = dir.path().join("agent.kubeconfig");
    cp.token_kubeconfig(&token, &kubeconfig);
    let reports = dir.path().join("reports");
    write_fleet(&reports, 1);
    let args: Vec<&str> = FAST.iter().chain(extra).copied().collect();
    let agent = AgentProcess::start(
        env!("CARGO_BIN_EXE_media-capabilities"),
        node,
        &reports,
        &kubeconfig,
        &args,
    );
    (dir, agent)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Through the real binary, as a kubelet would meet it: before any kubelet calls, one warning
/// with what to check and `/readyz` saying why it is not ready; then every `:authority` form
/// with grpc-go's bytes registers the plugin and prepares and unprepares claims on both API
/// versions; a refusal is logged once, the registration once at INFO, and the routine calls not
/// at all at the default level.
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_agent_registers_with_a_kubelet_that_dials_as_the_real_one() {
    let (_dir, agent) = agent_process(
        "kubelet-raw-agent",
        &["--kubelet-registration-warning", "300ms"],
    );
    let warning = agent.log.wait_for(
        "no kubelet has registered the media.liken.sh plugin within 300ms",
        Duration::from_secs(10),
    );
    assert!(warning.contains(" WARN "), "{warning}");
    assert!(warning.contains("(hint: "), "{warning}");
    let (status, body) = agent.get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("kubelet registration: waiting for the kubelet to register the plugin"),
        "{body}"
    );

    let registration_socket = agent.registration_socket();
    let dra_socket = agent.dra_socket();
    let refusal = "RegisterPlugin error -- plugin registration failed with err: test refusal";
    runtime().block_on(async {
        for _ in 0..2 {
            raw_register(&registration_socket, Authority::PercentEncodedPath, refusal)
                .await
                .expect("a refusal is still answered");
        }
        for form in Authority::ALL {
            let info = raw_register(&registration_socket, form, "")
                .await
                .unwrap_or_else(|e| panic!("{form:?}: registration: {e:?}"));
            assert_eq!(Path::new(&info.endpoint), dra_socket, "{form:?}");
            assert_eq!(
                info.supported_versions,
                [
                    "v1.DRAPlugin",
                    "v1beta1.DRAPlugin",
                    "v1.DRAResourceHealth",
                    "v1alpha1.DRAResourceHealth"
                ],
                "{form:?}"
            );
            let tag = format!("{form:?}").to_lowercase();
            // Claims never made: each gets its error, and the call still succeeds.
            raw_prepare_and_unprepare!(v1, &dra_socket, form, claims(&tag, 2), missing)
                .unwrap_or_else(|e| panic!("{form:?}: DRA v1: {e:?}"));
            raw_prepare_and_unprepare!(v1beta1, &dra_socket, form, claims(&tag, 1), missing)
                .unwrap_or_else(|e| panic!("{form:?}: DRA v1beta1: {e:?}"));
        }
    });
    let registered = agent.log.wait_for(
        "the kubelet registered the media.liken.sh plugin",
        Duration::from_secs(10),
    );
    assert!(registered.contains(" INFO "), "{registered}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = agent.get("/readyz");
        if status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not ready: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(agent.log.count(refusal), 1, "{:#?}", agent.log.lines());
    assert_eq!(
        agent
            .log
            .count("the kubelet registered the media.liken.sh plugin"),
        1,
        "{:#?}",
        agent.log.lines()
    );
    assert_eq!(agent.log.count("no kubelet has registered"), 1);
    assert_eq!(
        agent.log.count("claim(s)"),
        0,
        "prepare/unprepare log at debug"
    );
    // The plugin's own lines: the publisher's may say, in prose, that a pod stays Pending.
    let plugin_lines: Vec<String> = agent
        .log
        .lines()
        .into_iter()
        .filter(|l| l.contains("agent::kubelet"))
        .collect();
    assert!(plugin_lines.len() >= 3, "{plugin_lines:#?}");
    for line in plugin_lines {
        assert!(
            !line.contains("Pending") && !line.contains("Registered") && !line.contains("Failed {"),
            "no Debug dumps: {line}"
        );
    }
}

/// A client that abuses the header limits gets exactly what h2 alone answers (the relay hands
/// such input to h2 verbatim): the connection ends, and the socket goes on serving the next one.
#[tokio::test]
async fn abusive_header_blocks_are_answered_as_h2_alone_answers_them() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = start(config(dir.path()));
    let relayed = plugin.config.registration_socket();
    let bare = dir.path().join("bare.sock");
    serve_bare(&bare);
    let frame = |kind: u8, flags: u8, payload: &[u8]| {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.extend_from_slice(&[kind, flags, 0, 0, 0, 1]);
        out.extend_from_slice(payload);
        out
    };
    // HEADERS without END_HEADERS, then CONTINUATIONs that never end.
    let mut flood = frame(0x1, 0, &[0x83, 0x86]);
    for _ in 0..64 {
        flood.extend(frame(0x9, 0, &[0x86; 512]));
    }
    // One frame larger than the 16 KiB the server advertises.
    let oversized = frame(0x0, 0, &vec![0; 20_000]);
    // A reference to a dynamic table entry that was never added.
    let bad_index = frame(0x1, 0x4, &[0x83, 0xff, 0x10]);
    // 4 KiB in the dynamic table, referred to 16 more times: 68 KiB of decoded list.
    let mut block = vec![0x40, 5];
    block.extend_from_slice(b"x-big");
    block.extend_from_slice(&[0x7f, 0x80 | 33, 30]); // length 127 + 33 + 30 * 128 = 4000
    block.extend(std::iter::repeat_n(b'v', 4000));
    block.extend(std::iter::repeat_n(0xbe, 16));
    let huge_list = frame(0x1, 0x4, &block);

    for (what, bytes) in [
        ("a CONTINUATION flood", &flood),
        ("an oversized frame", &oversized),
        ("an HPACK error", &bad_index),
        ("a decoded list over h2's abuse limit", &huge_list),
    ] {
        let mut outcomes = Vec::new();
        for socket in [&relayed, &bare] {
            let mut conn = RawGrpc::connect(socket).await.unwrap();
            conn.send_raw(bytes).await.unwrap();
            outcomes.push(conn.read_answer(1).await.map(|a| a.headers));
        }
        assert!(outcomes[0].is_err(), "{what}: {outcomes:?}");
        assert_eq!(outcomes[0], outcomes[1], "{what}: relayed, then h2 alone");
    }

    let info = raw_register(&relayed, Authority::PercentEncodedPath, "")
        .await
        .expect("a new connection is served");
    assert_eq!(info.name, DRIVER);
    plugin.stop().await;
}

/// The raw client's own encodings, as grpc-go makes them: the percent-encoded authority
/// (`encodeAuthority`), `grpc-timeout` (`EncodeDuration`), and Go's HPACK choices: static
/// matches indexed, new fields literal with incremental indexing, repeats indexed from the
/// dynamic table on the next call.
#[test]
fn the_raw_client_encodes_as_grpc_go_does() {
    use crate::support::grpc_raw::{GoEncoder, encode_authority, encode_timeout};
    assert_eq!(
        encode_authority("/var/lib/kubelet/plugins_registry/media.liken.sh-reg.sock"),
        "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fmedia.liken.sh-reg.sock"
    );
    assert_eq!(encode_authority("localhost:50051"), "localhost:50051");
    assert_eq!(encode_timeout(Duration::from_secs(1)), "1000000u");
    assert_eq!(encode_timeout(Duration::from_secs(45)), "45000000u");
    assert_eq!(
        encode_timeout(Duration::from_millis(999_999_999)),
        "1000000S"
    );

    let mut encoder = GoEncoder::new();
    let method = "/pluginregistration.Registration/GetInfo";
    let first = encoder.request(Some("%2Fsock"), method, Duration::from_secs(1));
    assert_eq!(
        first[..2],
        [0x83, 0x86],
        ":method POST and :scheme http from the static table"
    );
    assert_eq!(
        first[2], 0x44,
        ":path: literal with incremental indexing, static name 4"
    );
    let second = encoder.request(Some("%2Fsock"), method, Duration::from_secs(1));
    // Everything repeats, so every field is one index byte, newest entries first.
    // The six fields the first call added are 62 (grpc-timeout, the newest) to 67 (:path).
    assert_eq!(
        second,
        [
            0x83,
            0x86,
            0x80 | 67,
            0x80 | 66,
            0x80 | 65,
            0x80 | 64,
            0x80 | 63,
            0x80 | 62
        ]
    );
    let mut decoder = loona_hpack::Decoder::new();
    let decoded: Vec<(Vec<u8>, Vec<u8>)> = decoder.decode(&first).unwrap();
    assert_eq!(decoder.decode(&second).unwrap(), decoded);
    let names: Vec<&[u8]> = decoded.iter().map(|(n, _)| &n[..]).collect();
    assert_eq!(
        names,
        [
            &b":method"[..],
            b":scheme",
            b":path",
            b":authority",
            b"content-type",
            b"user-agent",
            b"te",
            b"grpc-timeout"
        ]
    );
    assert_eq!(decoded[3].1, b"%2Fsock");
    assert_eq!(decoded[7].1, b"1000000u");
}

// --- device health ------------------------------------------------------------------------------

/// The versions a plugin at `path` lists in its registration.
async fn listed_versions(path: &Path) -> Vec<String> {
    let mut client = RegistrationClient::new(channel(path).await);
    client
        .get_info(InfoRequest {})
        .await
        .expect("GetInfo")
        .into_inner()
        .supported_versions
}

fn published(devices: &[(&str, Option<&str>)]) -> Option<Published> {
    Some(Published::follow(
        None,
        "node-h",
        devices.iter().copied(),
        std::time::SystemTime::now(),
    ))
}

/// Without a health feed the plugin lists only the DRA versions and answers a health stream
/// `Unimplemented` (which a 1.37 kubelet takes as "do not ask again"); with one it lists both
/// health services, and each stream over the DRA socket says every published device, each
/// change at once, and everything again every resend period.
#[tokio::test]
async fn health_is_listed_only_where_served_and_streams_each_change() {
    use media_operator::agent::kubelet::proto::health::{v1 as h1, v1alpha1 as h1alpha1};

    let dir = tempfile::tempdir().unwrap();
    let running = start(config(dir.path()));
    let socket = running.config.registration_socket();
    eventually("the plugin answers", || answers_get_info(&socket)).await;
    assert_eq!(
        listed_versions(&socket).await,
        ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    );
    let dra = channel(&running.config.dra_socket()).await;
    let refused = h1::dra_resource_health_client::DraResourceHealthClient::new(dra)
        .node_watch_resources(h1::NodeWatchResourcesRequest {})
        .await
        .expect_err("no health service without a feed");
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");
    running.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let (feed, health) = watch::channel(None);
    let resend = Duration::from_millis(300);
    let plugin = KubeletPlugin::bind(&config)
        .expect("plugin binds its sockets")
        .with_health(health, resend);
    let running = start_plugin(config, plugin);
    let socket = running.config.registration_socket();
    eventually("the plugin answers", || answers_get_info(&socket)).await;
    assert_eq!(
        listed_versions(&socket).await,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ]
    );
    let dra = channel(&running.config.dra_socket()).await;
    let mut v1_stream = h1::dra_resource_health_client::DraResourceHealthClient::new(dra.clone())
        .node_watch_resources(h1::NodeWatchResourcesRequest {})
        .await
        .expect("v1 stream")
        .into_inner();
    let mut alpha_stream = h1alpha1::dra_resource_health_client::DraResourceHealthClient::new(dra)
        .node_watch_resources(h1alpha1::NodeWatchResourcesRequest {})
        .await
        .expect("v1alpha1 stream")
        .into_inner();
    let next_v1 = async |stream: &mut tonic::Streaming<h1::NodeWatchResourcesResponse>| {
        tokio::time::timeout(DEADLINE, stream.message())
            .await
            .expect("a message before the deadline")
            .expect("no stream error")
            .expect("the stream goes on")
    };

    feed.send_replace(published(&[("gpu-0", None), ("gpu-1", None)]));
    let first = next_v1(&mut v1_stream).await;
    let healths: Vec<_> = first.devices.iter().map(|d| d.health()).collect();
    assert_eq!(
        healths,
        [h1::HealthStatus::Healthy, h1::HealthStatus::Healthy]
    );
    let device = first.devices[1].device.as_ref().unwrap();
    assert_eq!(
        (&*device.pool_name, &*device.device_name),
        ("node-h", "gpu-1")
    );
    assert_eq!(first.devices[0].health_check_timeout_seconds, 30);
    let alpha = tokio::time::timeout(DEADLINE, alpha_stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(alpha.devices.len(), 2);
    assert_eq!(alpha.devices[0].health(), h1alpha1::HealthStatus::Healthy);

    // A change reaches the stream at once, well before the resend period.
    let changed_at = tokio::time::Instant::now();
    feed.send_replace(published(&[
        ("gpu-0", None),
        ("gpu-1", Some("vaInitialize failed\n")),
    ]));
    let changed = next_v1(&mut v1_stream).await;
    assert!(changed_at.elapsed() < resend, "{:?}", changed_at.elapsed());
    assert_eq!(changed.devices[1].health(), h1::HealthStatus::Unhealthy);
    assert_eq!(
        changed.devices[1].message,
        "probe failed: vaInitialize failed\\n"
    );
    assert_eq!(changed.devices[0].health(), h1::HealthStatus::Healthy);

    // Nothing new: the same again after the period.
    let again = next_v1(&mut v1_stream).await;
    assert_eq!(again, changed);

    // The publisher gone (the agent stopping): each stream ends, so the drain is not held up.
    drop(feed);
    let end = tokio::time::timeout(DEADLINE, v1_stream.message())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
    running.stop().await;
}
