//! A fault proxy in front of the real control plane: plain HTTP on loopback, forwarding each
//! request to kube-apiserver as its admin (kube-rs's client: TLS, client certificate), except
//! that the next N lists matching a rule get an injected answer instead.
//!
//! What it injects, and why the real server cannot be made to give it on cue: a 500 (a healthy
//! kube-apiserver fails internally on no request), priority and fairness' 429 with Retry-After
//! (only real overload throttles), a load balancer's HTML page and a 404 on a path the server
//! serves (both come from something in front of the server, never from it), and a slow answer
//! (it answers a list at once). A 403 (RBAC), a 401 (an unknown token), paging and selectors
//! come from the real server through it. It records what it was asked, for the tests of how a
//! client pages and retries.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;

use super::controlplane::ControlPlane;

/// What the proxy answers in place of the server.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// 500 as kube-apiserver words an internal error, with the cause "injected fault".
    InternalError,
    /// 429 as priority and fairness answers it: Go's `http.Error`, plain text, `Retry-After`
    /// (k8s.io/apiserver `pkg/server/filters`, `tooManyRequests`).
    TooManyRequests { retry_after_seconds: u64 },
    /// A load balancer's HTML error page (nginx's wording) with this status.
    GatewayPage { code: u16 },
    /// 404 as kube-apiserver answers a path no handler serves (a proxy that drops a resource).
    NotFound,
    /// The real answer, sent this much later.
    Delay(Duration),
}

/// One request the proxy answered.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
    pub answered_at: Instant,
}

struct Rule {
    fault: Fault,
    remaining: usize,
    /// The last segment of a GET's path: the resource a list reads (`pods`, `resourceslices`).
    resource: String,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
}

/// A running proxy; it stops when dropped or on [`FaultProxy::stop`].
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<Mutex<State>>,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl FaultProxy {
    /// A proxy in front of `cp`, with a kubeconfig of its own that reaches the server through it.
    pub fn start(cp: &ControlPlane) -> FaultProxy {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let admin = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("admin kubeconfig");
        let client = runtime.block_on(async {
            let config = kube::Config::from_custom_kubeconfig(admin, &Default::default())
                .await
                .expect("admin kubeconfig");
            kube::Client::try_from(config).expect("a client of the control plane")
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        std::thread::spawn(move || {
            runtime.block_on(serve(listener, client, shared, stopped));
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: media-test\n  cluster: {{server: 'http://{addr}'}}\n\
                 contexts:\n- name: media-test\n  context: {{cluster: media-test, user: media-test}}\n\
                 current-context: media-test\nusers:\n- name: media-test\n  user: {{}}\n"
            ),
        )
        .unwrap();
        FaultProxy {
            url: format!("http://{addr}"),
            state,
            stop: Mutex::new(Some(stop)),
            kubeconfig,
            _dir: dir,
        }
    }

    /// The kubeconfig whose only context reaches the server through the proxy, as its admin.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Answers the next `n` GETs of `resource` (a list of it) with `fault`.
    pub fn fail_next(&self, n: usize, fault: Fault, resource: &str) {
        lock(&self.state).rules.push(Rule {
            fault,
            remaining: n,
            resource: resource.to_string(),
        });
    }

    /// How many requests were answered so far, for [`FaultProxy::requests_since`].
    pub fn mark(&self) -> usize {
        lock(&self.state).seen.len()
    }

    /// The requests answered since `mark`.
    pub fn requests_since(&self, mark: usize) -> Vec<Seen> {
        lock(&self.state).seen[mark..].to_vec()
    }

    /// The GETs of `resource` answered since `mark`.
    pub fn lists_since(&self, mark: usize, resource: &str) -> Vec<Seen> {
        self.requests_since(mark)
            .into_iter()
            .filter(|s| s.method == "GET" && last_segment(&s.path) == resource)
            .collect()
    }

    /// Closes the listening socket: connections are refused from then on.
    pub fn stop(&self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
        // The accept loop drops the listener when it sees the signal.
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(self.url.trim_start_matches("http://")).is_ok() {
            assert!(Instant::now() < deadline, "the proxy still listens");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or("")
}

async fn serve(
    listener: std::net::TcpListener,
    client: kube::Client,
    state: Arc<Mutex<State>>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let (client, state) = (client.clone(), state.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                answer(request, client.clone(), state.clone())
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    client: kube::Client,
    state: Arc<Mutex<State>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = request.into_parts();
    let method = parts.method.to_string();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let fault = {
        let mut state = lock(&state);
        let is_get = parts.method == hyper::Method::GET;
        state
            .rules
            .iter_mut()
            .find(|r| r.remaining > 0 && is_get && last_segment(&path) == r.resource)
            .map(|r| {
                r.remaining -= 1;
                r.fault
            })
    };
    let response = match fault {
        Some(Fault::Delay(delay)) => {
            tokio::time::sleep(delay).await;
            forward(parts, body, &client).await
        }
        Some(fault) => injected(fault),
        None => forward(parts, body, &client).await,
    };
    lock(&state).seen.push(Seen {
        method,
        path,
        query,
        status: response.status().as_u16(),
        answered_at: Instant::now(),
    });
    Ok(response)
}

fn injected(fault: Fault) -> Response<Full<Bytes>> {
    let (code, content_type, body, retry_after) = match fault {
        Fault::InternalError => (
            500,
            "application/json",
            status_json(
                500,
                "InternalError",
                "Internal error occurred: injected fault",
            ),
            None,
        ),
        Fault::NotFound => (
            404,
            "application/json",
            status_json(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            None,
        ),
        Fault::TooManyRequests {
            retry_after_seconds,
        } => (
            429,
            "text/plain; charset=utf-8",
            "Too many requests, please try again later.\n".to_string(),
            Some(retry_after_seconds),
        ),
        Fault::GatewayPage { code } => {
            let reason = StatusCode::from_u16(code)
                .ok()
                .and_then(|c| c.canonical_reason())
                .unwrap_or("Error");
            let page = format!(
                "<html>\r\n<head><title>{code} {reason}</title></head>\r\n<body>\r\n\
                 <center><h1>{code} {reason}</h1></center>\r\n</body>\r\n</html>\r\n"
            );
            (code, "text/html", page, None)
        }
        Fault::Delay(_) => unreachable!("a delay forwards"),
    };
    let mut response = Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, content_type);
    if let Some(seconds) = retry_after {
        response = response
            .header(header::RETRY_AFTER, seconds)
            .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    }
    response.body(Full::new(Bytes::from(body))).unwrap()
}

/// A `Status` as kube-apiserver writes one (`details.causes` as `errors.NewInternalError` has them).
fn status_json(code: u16, reason: &str, message: &str) -> String {
    let mut status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    if code == 500 {
        status["details"] = serde_json::json!({"causes": [{"message": "injected fault"}]});
    }
    status.to_string()
}

async fn forward(
    parts: hyper::http::request::Parts,
    body: Incoming,
    client: &kube::Client,
) -> Response<Full<Bytes>> {
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return bad_gateway(&format!("read the request: {e}")),
    };
    let mut request = Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::AUTHORIZATION {
            request = request.header(name, value);
        }
    }
    let request = request
        .body(kube::client::Body::from(body.to_vec()))
        .unwrap();
    let upstream = match client.send(request).await {
        Ok(upstream) => upstream,
        Err(e) => return bad_gateway(&e.to_string()),
    };
    let (head, body) = upstream.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return bad_gateway(&format!("read the answer: {e}")),
    };
    let mut response = Response::builder().status(head.status);
    for (name, value) in &head.headers {
        // hyper sets the framing of the whole body it sends.
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    response.body(Full::new(bytes)).unwrap()
}

fn bad_gateway(why: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(502)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Full::new(Bytes::from(format!("fault proxy: {why}\n"))))
        .unwrap()
}
