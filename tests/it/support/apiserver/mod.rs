//! An in-process Kubernetes API server for tests and benchmarks: real HTTP/1.1 and JSON on
//! 127.0.0.1 with an ephemeral port, served from its own thread and tokio runtime so that sync
//! tests (running the real binaries or kubectl) and async tests (kube-rs clients) can both use it.
//!
//! What it serves, with the real semantics:
//! - resources `resourceslices`, `deviceclasses`, `resourceclaims`, `resourceclaimtemplates`,
//!   `devicetaintrules` (resource.k8s.io/v1) and `pods`, `events`, `nodes`, `namespaces` (v1); `/version`, `/api`,
//!   `/api/v1`, `/apis`, `/apis/resource.k8s.io[/v1]` discovery, `/healthz`, and a minimal
//!   `/openapi/v3` (see `http.rs`) so that `kubectl apply` works without `--validate=false`;
//! - verbs get, list (`labelSelector`, `fieldSelector`, `limit`/`continue`), watch (`watch=true`
//!   or `1`, `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`, `sendInitialEvents`,
//!   410 Gone as an ERROR event past the retained history), create (`generateName`), update
//!   (409 on a stale resourceVersion, unconditional without one), delete (with preconditions),
//!   deletecollection, JSON merge patch and server-side apply (`fieldManager`, `force`);
//! - metadata: uid, one global resourceVersion counter, creationTimestamp, generation (bumped
//!   when anything outside metadata and status changes), managedFields (manager, operation,
//!   apiVersion, time, fieldsV1); a write that changes nothing stores nothing;
//! - `Status` error bodies worded as apimachinery words them (an injected ValidatingAdmissionPolicy
//!   denial as the admission dispatcher builds it), and, injected, the HTML page a load balancer
//!   in front of the API server answers with instead; ResourceSlice validation as
//!   upstream, and metadata names and ownerReferences for every kind (see `validation.rs`); `as=Table` answers for kubectl (ResourceSlice columns as
//!   upstream prints them: NAME, NODE, DRIVER, POOL, AGE; other kinds' columns are simplified).
//! - `/version` says 1.36 while DRAConsumableCapacity is on (the default) and 1.34 when it is
//!   switched off, when `allowMultipleAllocations` is dropped from slices silently; 1.37 when
//!   asked to.
//!
//! What it does NOT implement, so no test may rely on it: authentication and authorisation
//! (every request is allowed), TLS, HTTP/2, protobuf and CBOR (answers are always JSON),
//! strategic merge patch and JSON patch (415), dryRun (400), `fieldValidation` (accepted and
//! ignored: unknown fields are stored, not rejected), subresources such as `/status` (status is
//! written with the object), admission (beyond injected denials and the one device-attribute
//! mutation of [`TestApiServer::set_device_attribute_default`]), defaulting beyond what is listed above, finalizers and
//! graceful deletion (deletes are immediate; deletionTimestamp is never set), namespace
//! existence checks, consistent reads at an older resourceVersion (a list always reads the
//! current state, and a `continue` page reads the state at the time of that page, never 410),
//! `resourceVersionMatch`, `remainingItemCount`, the field selectors whose value the real server
//! derives rather than reads (pods' `spec.hostNetwork`, events' `source`, nodes'
//! `spec.unschedulable`), periodic bookmarks (call
//! [`TestApiServer::send_bookmarks`]), watches of a single object by path, OpenAPI schemas,
//! aggregated discovery (clients fall back to the legacy documents), CEL, and any validation of
//! DeviceClass/ResourceClaim/ResourceClaimTemplate beyond names and required fields.
//! Server-side apply tracks field ownership with lists treated as atomic (no merge keys) and is
//! exact only where one manager owns an object wholly; a conflict is reported where another
//! manager owns a field the apply changes. Garbage collection is immediate: deleting a Node
//! deletes the objects whose ownerReferences name its uid, deleting a Namespace its objects.
//!
//! Answers are as kube-apiserver words them: a `Status` (with `Retry-After` when it carries
//! `retryAfterSeconds`), except where the real server sends something else: Go's plain-text 404
//! page for unrouted paths, and priority and fairness's plain-text 429 with `Retry-After`
//! ([`Fault::TooManyRequests`]); [`Fault::GatewayPage`] is a proxy's page.
//!
//! Note for fault tests: kube-rs clients retry 429, 503 and 504 by default; set
//! `kube::Config::default_retry = false` on [`TestApiServer::kube_config`] to see each answer.
//!
//! ```ignore
//! mod support;
//! use support::apiserver::{Fault, TestApiServer};
//!
//! let server = TestApiServer::start();
//! server.put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))?;
//! server.fail_next_matching(1, Fault::ServiceUnavailable, Some("create"), Some("resourceslices"));
//! let mark = server.request_mark();
//! let mut agent = Command::new(env!("CARGO_BIN_EXE_media-capabilities"))
//!     .env("KUBECONFIG", server.kubeconfig())
//!     .spawn()?;
//! server.wait_until(Duration::from_secs(10), |s| {
//!     s.get("resourceslices", "", "n1-media.liken.sh").is_some()
//! })?;
//! // The kubelet wipes the node's slices; the agent must publish again.
//! server.delete_where("resourceslices", |o| o["spec"]["nodeName"] == "n1");
//! server.wait_until(Duration::from_secs(10), |s| s.list("resourceslices", None).len() == 1)?;
//! // In steady state it writes nothing.
//! let steady = server.request_mark();
//! server.send_bookmarks();
//! assert!(server.writes_since(steady).is_empty());
//! ```

mod http;
mod resources;
mod selectors;
mod status;
mod store;
mod validation;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use self::http::{Fault, RequestRecord};
pub use self::status::ApiError;

use self::http::{Changes, FaultRule, Faults, Shared, lock};
use self::store::{Manager, Store};

/// How to start a server.
#[derive(Debug, Clone)]
pub struct Config {
    /// How many events the server retains for watches to resume from; older resourceVersions
    /// get 410 Gone.
    pub history_limit: usize,
    /// The namespace the kubeconfig's context names.
    pub namespace: String,
    /// Whether the DRAConsumableCapacity feature gate is on (as from 1.36). When off, the
    /// server drops `allowMultipleAllocations` from ResourceSlice devices silently on create and
    /// update, as 1.34 and 1.35 servers do.
    pub consumable_capacity: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            history_limit: 10_000,
            namespace: "default".to_string(),
            consumable_capacity: true,
        }
    }
}

/// A wait that ran out of time.
#[derive(Debug)]
pub struct WaitTimeout {
    /// How long it waited.
    pub waited: Duration,
}

impl std::fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "condition not met within {:?} on the test API server",
            self.waited
        )
    }
}

impl std::error::Error for WaitTimeout {}

struct Serving {
    stop: tokio::sync::watch::Sender<bool>,
    done: std::sync::mpsc::Receiver<()>,
}

/// A running test API server; dropping it stops it.
pub struct TestApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    runtime: tokio::runtime::Handle,
    runtime_stop: Option<tokio::sync::oneshot::Sender<()>>,
    runtime_thread: Option<std::thread::JoinHandle<()>>,
    serving: Mutex<Option<Serving>>,
    /// While stopped: the port, bound and not listening (see [`TestApiServer::stop`]).
    held: Mutex<Option<socket2::Socket>>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestApiServer {
    /// Starts a server with the default [`Config`].
    pub fn start() -> Self {
        Self::start_with(Config::default())
    }

    /// Starts a server. Panics when it cannot (no loopback, no threads): tests cannot go on.
    pub fn start_with(config: Config) -> Self {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("test-apiserver".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("test API server: build tokio runtime");
                let _ = handle_tx.send(rt.handle().clone());
                let _ = rt.block_on(stop_rx);
            })
            .expect("test API server: spawn its thread");
        let runtime = handle_rx
            .recv()
            .expect("test API server: runtime thread started");
        let listener = listen_sharable("127.0.0.1:0".parse().expect("an address"))
            .expect("test API server: bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("test API server: local address");

        let mut store = Store::new(config.history_limit);
        store.drop_allow_multiple_allocations = !config.consumable_capacity;
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            encoded: Mutex::new(HashMap::new()),
            table_rows: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
            changes: Changes::default(),
            address: addr.to_string(),
        });

        let dir = tempfile::tempdir().expect("test API server: temp dir for the kubeconfig");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text(addr, &config.namespace))
            .expect("test API server: write the kubeconfig");

        let server = TestApiServer {
            shared,
            addr,
            runtime,
            runtime_stop: Some(stop_tx),
            runtime_thread: Some(thread),
            serving: Mutex::new(None),
            held: Mutex::new(None),
            kubeconfig,
            _dir: dir,
        };
        server.serve(listener);
        server
    }

    fn serve(&self, listener: StdListener) {
        listener
            .set_nonblocking(true)
            .expect("test API server: non-blocking listener");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let shared = self.shared.clone();
        self.runtime
            .spawn(accept_loop(listener, shared, stop_rx, done_tx));
        *lock(&self.serving) = Some(Serving {
            stop: stop_tx,
            done: done_rx,
        });
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig file (one cluster, one user without credentials, one context with the
    /// configured namespace, made current).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube-rs client configuration for this server (default namespace "default").
    pub fn kube_config(&self) -> kube::Config {
        let uri = self
            .base_url()
            .parse()
            .expect("a socket address makes a valid URI");
        kube::Config::new(uri)
    }

    // --- faults -------------------------------------------------------------------------

    /// Fails the next `n` requests with `fault`.
    pub fn fail_next(&self, n: usize, fault: Fault) {
        self.fail_next_matching(n, fault, None, None);
    }

    /// Fails the next `n` requests with the Kubernetes `verb` (get, list, watch, create,
    /// update, patch, delete) on the plural `resource`; `None` matches any.
    pub fn fail_next_matching(
        &self,
        n: usize,
        fault: Fault,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        lock(&self.shared.faults).rules.push_back(FaultRule {
            fault,
            remaining: n,
            verb: verb.map(str::to_string),
            resource: resource.map(str::to_string),
        });
    }

    /// Drops every fault not injected yet.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).rules.clear();
        self.shared.changes.bump();
    }

    /// Delays every answer by `latency` (zero to stop).
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.shared.faults).latency = latency;
    }

    /// Ends every open watch stream now; returns how many there were.
    pub fn cut_watches(&self) -> usize {
        self.shared.with_store(Store::cut_watches)
    }

    /// Sends a BOOKMARK to every open watch that allows them.
    pub fn send_bookmarks(&self) {
        self.shared.with_store(Store::send_bookmarks);
    }

    /// Stops listening and closes every connection; the stored objects stay, and the port is
    /// kept (connections to it are refused) for [`restart`](Self::restart).
    pub fn stop(&self) {
        let serving = lock(&self.serving).take();
        if let Some(s) = serving {
            // Keep the port: a socket bound to it beside the listener (both SO_REUSEPORT) that
            // does not listen, so that once the listener is closed connections are refused, as
            // by a server that is down, and the port is never free for another test's socket
            // (a client's autobind or a listener's port 0 once took it in that moment).
            let held = hold(self.addr);
            let _ = s.stop.send(true);
            let _ = s.done.recv_timeout(Duration::from_secs(10));
            *lock(&self.held) = Some(held);
        }
        self.shared.changes.bump();
    }

    /// Listens again on the same port after [`stop`](Self::stop).
    pub fn restart(&self) {
        self.stop();
        if let Some(held) = lock(&self.held).take() {
            match held.listen(1024) {
                Ok(()) => return self.serve(held.into()),
                Err(e) => panic!("test API server: listen again on {}: {e}", self.addr),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match listen_sharable(self.addr) {
                Ok(l) => break l,
                // The port can be briefly busy while the old socket closes; this polls an OS
                // condition nothing can notify us of.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("test API server: rebind {}: {e}", self.addr),
            }
        };
        self.serve(listener);
    }

    /// Switches the DRAConsumableCapacity behaviour (see [`Config::consumable_capacity`]).
    pub fn set_consumable_capacity(&self, enabled: bool) {
        self.shared
            .with_store(|s| s.drop_allow_multiple_allocations = !enabled);
    }

    /// Adds the attribute `name` with `value` (e.g. `{"string": "a"}`) to every device of every
    /// ResourceSlice written without it, as a MutatingAdmissionPolicy tagging devices does;
    /// `None` stops. The client that wrote the slice sees the attribute in the answer.
    pub fn set_device_attribute_default(&self, attribute: Option<(&str, Value)>) {
        self.shared.with_store(|s| {
            s.device_attribute_default = attribute.map(|(n, v)| (n.to_string(), v));
        });
    }

    /// Serves `resource.k8s.io/v1` or not: switched off, the server is a 1.33 one with the DRA
    /// beta APIs on: `/version` says 1.33, discovery lists `resource.k8s.io/v1beta2` and
    /// `v1beta1` instead of `v1`, and the v1 paths answer `404 page not found` (the beta versions
    /// are listed, not served: only clients that read v1 are meant to be tested with this).
    pub fn set_resource_v1_served(&self, served: bool) {
        self.shared.with_store(|s| s.resource_v1_served = served);
    }

    /// Says 1.37 in `/version` (or not), the release whose scheduler applies DeviceTaintRules,
    /// which `kubectl media why` then lists (the server serves them either way).
    pub fn set_kubernetes_1_37(&self, on: bool) {
        self.shared.with_store(|s| s.kubernetes_1_37 = on);
    }

    /// Keeps only the last `n` events for watches to resume from.
    pub fn set_history_limit(&self, n: usize) {
        self.shared.with_store(|s| s.set_history_limit(n));
    }

    /// Forgets all retained events: any watch resuming from an earlier version gets 410 Gone.
    pub fn compact(&self) {
        self.shared.with_store(Store::compact);
    }

    // --- objects behind the clients' backs ------------------------------------------------

    /// The current resourceVersion of the store.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }

    /// The number of open watch streams.
    pub fn watch_count(&self) -> usize {
        lock(&self.shared.store).watch_count()
    }

    fn resource(plural: &str) -> Result<&'static resources::ResourceType, ApiError> {
        resources::RESOURCES
            .iter()
            .find(|r| r.plural == plural)
            .ok_or_else(|| ApiError::bad_request(format!("the server does not serve {plural}")))
    }

    /// Reads an object (`ns` is "" for cluster-scoped resources).
    pub fn get(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let rt = Self::resource(plural).ok()?;
        lock(&self.shared.store)
            .get(rt, ns, name)
            .ok()
            .map(|v| (*v).clone())
    }

    /// Lists objects of a resource, in one namespace or all (`None`).
    pub fn list(&self, plural: &str, ns: Option<&str>) -> Vec<Value> {
        let Ok(rt) = Self::resource(plural) else {
            return Vec::new();
        };
        lock(&self.shared.store)
            .list(rt, ns, &Default::default(), &Default::default(), None, None)
            .map(|p| p.items.iter().map(|i| (**i).clone()).collect())
            .unwrap_or_default()
    }

    /// Encodes every stored object of a resource ahead of its next listing, as JSON and as
    /// kubectl's `Table` row, as kube-apiserver's watch cache keeps encodings of what it holds:
    /// a benchmark's first listing then costs what the next ones cost.
    pub fn encode_ahead(&self, plural: &str) {
        let Ok(rt) = Self::resource(plural) else {
            return;
        };
        let items = lock(&self.shared.store)
            .list(
                rt,
                None,
                &Default::default(),
                &Default::default(),
                None,
                None,
            )
            .map(|p| p.items)
            .unwrap_or_default();
        self.shared.encode_ahead(rt, &items);
    }

    /// Creates `obj`, or replaces the stored object of that name regardless of its
    /// resourceVersion, as manager "test"; validation applies as for a client. Namespaced
    /// objects without `metadata.namespace` go to "default".
    pub fn put(&self, mut obj: Value) -> Result<Value, ApiError> {
        let api_version = obj["apiVersion"].as_str().unwrap_or("").to_string();
        let kind = obj["kind"].as_str().unwrap_or("").to_string();
        let rt = resources::find_kind(&api_version, &kind).ok_or_else(|| {
            ApiError::bad_request(format!("the server does not serve {api_version} {kind}"))
        })?;
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(if rt.namespaced { "default" } else { "" })
            .to_string();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let manager = Manager {
            name: "test".to_string(),
        };
        self.shared
            .with_store(|s| {
                if !name.is_empty() && s.get(rt, &ns, &name).is_ok() {
                    s.update(rt, &ns, &name, obj, &manager)
                } else {
                    s.create(rt, &ns, obj, &manager)
                }
            })
            .map(|v| (*v).clone())
    }

    /// Applies a JSON merge patch to a stored object, as manager "test".
    pub fn patch(
        &self,
        plural: &str,
        ns: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let rt = Self::resource(plural)?;
        let manager = Manager {
            name: "test".to_string(),
        };
        self.shared
            .with_store(|s| s.patch_merge(rt, ns, name, patch, &manager))
            .map(|v| (*v).clone())
    }

    /// Deletes a stored object (Node deletion collects its dependents).
    pub fn delete(&self, plural: &str, ns: &str, name: &str) -> Result<Value, ApiError> {
        let rt = Self::resource(plural)?;
        self.shared
            .with_store(|s| s.delete(rt, ns, name, None, None))
            .map(|v| (*v).clone())
    }

    /// Deletes every object of a resource for which `pred` holds (as the kubelet wipes a
    /// node's slices); returns how many.
    pub fn delete_where(&self, plural: &str, pred: impl Fn(&Value) -> bool) -> usize {
        let doomed: Vec<(String, String)> = self
            .list(plural, None)
            .iter()
            .filter(|o| pred(o))
            .map(|o| {
                let m = &o["metadata"];
                (
                    m["namespace"].as_str().unwrap_or("").to_string(),
                    m["name"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        doomed
            .iter()
            .filter(|(ns, name)| self.delete(plural, ns, name).is_ok())
            .count()
    }

    // --- the request log -------------------------------------------------------------------

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// A position in the log, for [`requests_since`](Self::requests_since).
    pub fn request_mark(&self) -> usize {
        lock(&self.shared.log).len()
    }

    /// The requests answered after `mark`.
    pub fn requests_since(&self, mark: usize) -> Vec<RequestRecord> {
        lock(&self.shared.log)
            .get(mark..)
            .map(<[RequestRecord]>::to_vec)
            .unwrap_or_default()
    }

    /// The write requests (create, update, patch, delete) answered after `mark`.
    pub fn writes_since(&self, mark: usize) -> Vec<RequestRecord> {
        self.requests_since(mark)
            .into_iter()
            .filter(RequestRecord::is_write)
            .collect()
    }

    // --- waiting without sleeping ----------------------------------------------------------

    /// Blocks until `cond` holds, re-checking whenever a request is answered or the store
    /// changes. For sync tests (use [`wait_until_async`](Self::wait_until_async) on a runtime).
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut cond: impl FnMut(&Self) -> bool,
    ) -> Result<(), WaitTimeout> {
        let start = Instant::now();
        loop {
            let seen = self.shared.changes.version();
            if cond(self) {
                return Ok(());
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(WaitTimeout { waited: elapsed });
            }
            self.shared.changes.wait_past(seen, timeout - elapsed);
        }
    }

    /// Waits until `cond` holds without blocking the caller's runtime.
    pub async fn wait_until_async(
        &self,
        timeout: Duration,
        mut cond: impl FnMut(&Self) -> bool,
    ) -> Result<(), WaitTimeout> {
        let start = Instant::now();
        loop {
            let notified = self.shared.changes.notify.notified();
            tokio::pin!(notified);
            // Registered before checking, so a change between the check and the await is
            // not missed.
            notified.as_mut().enable();
            if cond(self) {
                return Ok(());
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(WaitTimeout { waited: elapsed });
            }
            let _ = tokio::time::timeout(timeout - elapsed, notified).await;
        }
    }

    /// Blocks until a request satisfying `pred` has been answered after `mark`; returns it.
    pub fn wait_for_request(
        &self,
        mark: usize,
        timeout: Duration,
        pred: impl Fn(&RequestRecord) -> bool,
    ) -> Result<RequestRecord, WaitTimeout> {
        let mut found = None;
        self.wait_until(timeout, |s| {
            found = s.requests_since(mark).into_iter().find(|r| pred(r));
            found.is_some()
        })?;
        found.ok_or(WaitTimeout {
            waited: Duration::ZERO,
        })
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.stop();
        if let Some(stop) = self.runtime_stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.runtime_thread.take() {
            let _ = t.join();
        }
    }
}

fn kubeconfig_text(addr: SocketAddr, namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: media-test
  cluster:
    server: http://{addr}
contexts:
- name: media-test
  context:
    cluster: media-test
    user: media-test
    namespace: {namespace}
current-context: media-test
users:
- name: media-test
  user: {{}}
preferences: {{}}
"
    )
}

async fn accept_loop(
    listener: StdListener,
    shared: Arc<Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    done: std::sync::mpsc::Sender<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => panic!("test API server: adopt listener: {e}"),
    };
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                // As kube-apiserver's: Go sets TCP_NODELAY on every TCP connection it accepts.
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                conns.spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let svc = hyper::service::service_fn(move |req| http::handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        }
    }
    drop(listener);
    conns.shutdown().await;
    let _ = done.send(());
}

/// A TCP socket for `addr` with SO_REUSEADDR (as std's listeners: a port whose connections
/// are in TIME_WAIT can be bound again) and SO_REUSEPORT (so that [`hold`] can bind the port
/// beside the listener), bound.
fn sharable(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// The server's listener: [`sharable`], listening. (A port 0 bind never shares a port with
/// other SO_REUSEPORT sockets: the kernel's autobind does not reuse one.)
fn listen_sharable(addr: SocketAddr) -> std::io::Result<StdListener> {
    let socket = sharable(addr)?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// The port of the listener at `addr`, held by a socket that does not listen.
fn hold(addr: SocketAddr) -> socket2::Socket {
    sharable(addr).unwrap_or_else(|e| panic!("test API server: hold {addr}: {e}"))
}
