//! A fault-injecting proxy in front of the real kube-apiserver, for answers it cannot be made to
//! give on cue (a 500 or 503, a 409 at a chosen moment, a 429 with a chosen Retry-After, a load
//! balancer's page, a 404 on a served path, a slow answer, a connection dropped or closed after
//! the request, a cut watch); everything else is forwarded, and every request is recorded. It
//! terminates TLS with the server's own certificate (a TCP proxy sees no method or path), so
//! clients use bearer tokens, and adds `Connection: close` so each request has a connection of
//! its own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::{self, pki_types};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::controlplane::ControlPlane;

/// A request head longer than this is refused: the API server's clients send a few hundred bytes.
const MAX_HEAD: usize = 64 * 1024;
/// A body the proxy reads before answering in place of the server (so the client is not reset
/// mid-send); the agent's slices are well under this.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// An answer the proxy gives instead of the server's.
#[derive(Debug, Clone)]
pub enum Fault {
    /// A `Status` as kube-apiserver writes one: `code`, `reason` and `message`.
    Status {
        code: u16,
        reason: &'static str,
        message: String,
    },
    /// 429 as priority and fairness words it: plain text and `Retry-After` (the real server's
    /// value grows with its own drop rate; this one is chosen).
    TooManyRequests { retry_after_seconds: u64 },
    /// A load balancer's HTML page with this code, no `Status`.
    GatewayPage { code: u16 },
    /// The request is read, then the connection dropped without an answer (no TLS
    /// `close_notify`: the client's TLS reads an unexpected EOF).
    Drop,
    /// The request is read, then the connection closed without an answer as Go's server closes
    /// one (TLS `close_notify`, then FIN): what kube-apiserver starting up may do to a request
    /// on a connection it has just accepted or answered on, but not on cue.
    Close,
    /// The server's own answer, this much later.
    Delay(Duration),
    /// The server's own page of a list, asked for as JSON, rewritten to page otherwise than
    /// kube-apiserver pages (no server pages so, and none can be made to).
    Paging(Paging),
}

/// How [`Fault::Paging`] rewrites a page. The proxy's tokens (`proxy-N`) are taken off the
/// request before it goes to the server, which so answers its first page every time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paging {
    /// The token the page was asked with is handed back (`proxy-0` on the first page).
    SameToken,
    /// A new token on every page, and the first page's objects on each.
    RepeatPages,
    /// A new token on every page, with objects never read before (the first page's, renamed
    /// `pNNNNN-NAME`, so that they come in key order as kube-apiserver's would).
    FreshObjects,
    /// A new token on every page, and no objects.
    EmptyPages,
}

/// The proxy's own continue tokens.
const PROXY_TOKEN: &str = "proxy-";

impl Fault {
    /// 500 InternalError, worded as kube-apiserver wraps an internal error.
    pub fn internal() -> Fault {
        Fault::Status {
            code: 500,
            reason: "InternalError",
            message: "Internal error occurred: injected fault".into(),
        }
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable() -> Fault {
        Fault::Status {
            code: 503,
            reason: "ServiceUnavailable",
            message: "the server is currently unable to handle the request".into(),
        }
    }

    /// 409 Conflict on `resource` `name`, worded as for a stale resourceVersion.
    pub fn conflict(resource: &str, name: &str) -> Fault {
        Fault::Status {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been \
                 modified; please apply your changes to the latest version and try again"
            ),
        }
    }

    /// 404 as kube-apiserver answers a path no handler serves (a proxy that drops a resource).
    pub fn not_found() -> Fault {
        Fault::Status {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
        }
    }

    /// The answer's bytes; None when there is none to write (a drop, a delay).
    fn response(&self) -> Option<Vec<u8>> {
        let (code, content_type, extra, body) = match self {
            Fault::Status {
                code,
                reason,
                message,
            } => {
                let status = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": message, "reason": reason, "code": code,
                });
                (*code, "application/json", String::new(), status.to_string())
            }
            Fault::TooManyRequests {
                retry_after_seconds,
            } => (
                429,
                "text/plain; charset=utf-8",
                format!(
                    "Retry-After: {retry_after_seconds}\r\nX-Content-Type-Options: nosniff\r\n"
                ),
                "Too many requests, please try again later.\n".to_string(),
            ),
            Fault::GatewayPage { code } => {
                let reason = reason_phrase(*code);
                let page = format!(
                    "<html>\r\n<head><title>{code} {reason}</title></head>\r\n<body>\r\n\
                     <center><h1>{code} {reason}</h1></center>\r\n</body>\r\n</html>\r\n"
                );
                (*code, "text/html", String::new(), page)
            }
            Fault::Drop | Fault::Close | Fault::Delay(_) | Fault::Paging(_) => return None,
        };
        let text = format!(
            "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\n{extra}Content-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            reason_phrase(code),
            body.len()
        );
        Some(text.into_bytes())
    }
}

fn reason_phrase(code: u16) -> &'static str {
    http::StatusCode::from_u16(code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Error")
}

/// Which requests a fault is for, and how many more times.
struct Rule {
    method: Option<&'static str>,
    /// A substring of the request target (path and query).
    target: Option<String>,
    remaining: usize,
    fault: Fault,
}

/// What the proxy did with one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub method: String,
    pub target: String,
    /// The fault it answered with, or None when forwarded untouched.
    pub fault: Option<Fault>,
    pub at: Instant,
    /// The same moment in seconds since the Unix epoch, to compare with the audit log's.
    pub wall: f64,
}

impl Answer {
    /// Whether this is a list (not a watch) of `resource`, the plural of its path.
    pub fn lists(&self, resource: &str) -> bool {
        let path = self.target.split('?').next().unwrap_or_default();
        self.method == "GET" && !is_watch(&self.target) && path.rsplit('/').next() == Some(resource)
    }
}

fn is_watch(target: &str) -> bool {
    target.contains("watch=true") || target.contains("watch=1")
}

#[derive(Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    answers: Mutex<Vec<Answer>>,
    live_watches: AtomicUsize,
    cut: tokio::sync::Notify,
    /// Pages [`Fault::Paging`] has rewritten, for its tokens and names.
    pages: AtomicUsize,
}

/// A running proxy; it stops when dropped.
pub struct FaultProxy {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    shared: Arc<Shared>,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// The kubeconfigs that lead through it.
    dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

impl FaultProxy {
    /// Starts a proxy in front of `cp`, presenting the server's own certificate.
    pub fn start(cp: &ControlPlane) -> FaultProxy {
        use pki_types::pem::PemObject;
        let (cert, key, ca) = cp.serving_pem();
        let (cert, key, ca) = (cert.as_path(), key.as_path(), ca.as_path());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<pki_types::CertificateDer<'static>> =
            pki_types::CertificateDer::pem_file_iter(cert)
                .expect("read the serving certificate")
                .map(|c| c.expect("a certificate"))
                .collect();
        let key = pki_types::PrivateKeyDer::from_pem_file(key).expect("read the serving key");
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a TLS server configuration");
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        for c in pki_types::CertificateDer::pem_file_iter(ca).expect("read the CA") {
            roots.add(c.expect("a CA certificate")).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let upstream = cp
            .url
            .trim_end_matches('/')
            .strip_prefix("https://")
            .expect("an https:// upstream")
            .to_string();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the proxy");
        let url = format!("https://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared::default());
        let acceptor = TlsAcceptor::from(Arc::new(server));
        let connector = TlsConnector::from(Arc::new(client));
        let state = Arc::clone(&shared);
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            loop {
                // Returning drops the listener: connections are refused from then on.
                let tcp = tokio::select! {
                    _ = &mut stopped => return,
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, _)) => tcp,
                        Err(_) => continue,
                    },
                };
                let (acceptor, connector) = (acceptor.clone(), connector.clone());
                let (state, upstream) = (Arc::clone(&state), upstream.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        // A broken client or upstream connection ends only its own request.
                        let _ = serve(tls, &state, &connector, &upstream).await;
                    }
                });
            }
        });
        FaultProxy {
            url,
            shared,
            stop: Mutex::new(Some(stop)),
            dir: tempfile::tempdir().expect("a temp dir"),
            _runtime: runtime,
        }
    }

    /// A copy of `kubeconfig` whose clusters are reached through the proxy (their CA still
    /// holds: the proxy presents the server's certificate). Its user must be a token.
    pub fn through(&self, kubeconfig: &Path) -> PathBuf {
        let mut config: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(kubeconfig).expect("read kubeconfig"))
                .expect("a kubeconfig");
        for cluster in config["clusters"].as_sequence_mut().expect("clusters") {
            cluster["cluster"]["server"] = self.url.clone().into();
        }
        let name = kubeconfig.file_name().expect("a kubeconfig file");
        let through = self.dir.path().join(name);
        std::fs::write(&through, serde_yaml::to_string(&config).unwrap()).unwrap();
        through
    }

    /// A kubeconfig through the proxy as `cp`'s admin (a bearer token, see [`super::objects::admin`]).
    pub fn admin(&self, cp: &ControlPlane) -> PathBuf {
        let dir = self.dir.path().join("admin");
        std::fs::create_dir_all(&dir).unwrap();
        // A name of this proxy's own: concurrent `kubectl apply`s of one new object race.
        let port = self.url.rsplit(':').next().unwrap_or_default();
        self.through(&super::objects::admin(
            cp,
            &dir,
            &format!("fault-proxy-{port}"),
        ))
    }

    /// Answers the next `n` requests with `method` (any if None) whose target (path and query)
    /// contains `target` (any if None) with `fault`. Rules are tried in the order they were added.
    pub fn fail_next(
        &self,
        n: usize,
        fault: Fault,
        method: Option<&'static str>,
        target: Option<&str>,
    ) {
        self.shared.rules.lock().unwrap().push(Rule {
            method,
            target: target.map(str::to_string),
            remaining: n,
            fault,
        });
    }

    /// Forwards everything from now on.
    pub fn clear_faults(&self) {
        self.shared.rules.lock().unwrap().clear();
    }

    /// Every request so far and what was done with it.
    pub fn answers(&self) -> Vec<Answer> {
        self.answers_since(0)
    }

    /// How many requests were answered so far, for [`FaultProxy::answers_since`].
    pub fn mark(&self) -> usize {
        self.shared.answers.lock().unwrap().len()
    }

    /// The requests answered since `mark`.
    pub fn answers_since(&self, mark: usize) -> Vec<Answer> {
        self.shared.answers.lock().unwrap()[mark..].to_vec()
    }

    /// Stops listening: connections are refused from then on.
    pub fn stop(&self) {
        if let Some(stop) = self.stop.lock().unwrap().take() {
            let _ = stop.send(());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(self.url.trim_start_matches("https://")).is_ok() {
            assert!(Instant::now() < deadline, "the proxy still listens");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many watches are being forwarded now.
    pub fn live_watches(&self) -> usize {
        self.shared.live_watches.load(Ordering::SeqCst)
    }

    /// Cuts every watch being forwarded (both connections closed mid-stream); returns how many.
    pub fn cut_watches(&self) -> usize {
        let n = self.live_watches();
        self.shared.cut.notify_waiters();
        n
    }
}

/// A connection to the server with the request's head sent (`Connection: close`).
async fn upstream_request(
    connector: &TlsConnector,
    upstream: &str,
    method: &str,
    target: &str,
    headers: &[&str],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(upstream).await?;
    let name = pki_types::ServerName::IpAddress(
        upstream
            .rsplit_once(':')
            .and_then(|(host, _)| host.parse::<std::net::IpAddr>().ok())
            .expect("an IP upstream")
            .into(),
    );
    let mut server = connector.connect(name, tcp).await?;
    let mut forwarded = format!("{method} {target} HTTP/1.1\r\n");
    for h in headers {
        let name = h.split(':').next().unwrap_or_default();
        if !name.eq_ignore_ascii_case("connection") && !name.eq_ignore_ascii_case("keep-alive") {
            forwarded.push_str(h);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    server.write_all(forwarded.as_bytes()).await?;
    Ok(server)
}

/// The server's first page for `target` (the proxy's token taken off, JSON asked for),
/// rewritten as `paging` says for page `page` of the proxy's: a whole HTTP answer.
async fn repage(
    paging: Paging,
    page: usize,
    target: &str,
    headers: &[&str],
    connector: &TlsConnector,
    upstream: &str,
) -> std::io::Result<Vec<u8>> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let sent = query
        .split('&')
        .find_map(|p| p.strip_prefix("continue="))
        .map(str::to_string);
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with(&format!("continue={PROXY_TOKEN}")))
        .collect();
    let target = format!("{path}?{}", kept.join("&"));
    let mut headers: Vec<&str> = headers
        .iter()
        .copied()
        .filter(|h| !h.to_ascii_lowercase().starts_with("accept:"))
        .collect();
    headers.push("Accept: application/json");
    let mut server = upstream_request(connector, upstream, "GET", &target, &headers).await?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.or_else(|e| {
        // Go's server may close without close_notify after a Connection: close answer.
        (e.kind() == std::io::ErrorKind::UnexpectedEof)
            .then_some(0)
            .ok_or(e)
    })?;
    let (code, body) = http_answer(&answer);
    let mut list: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(list) if code == 200 => list,
        _ => return Ok(answer),
    };
    let token = match paging {
        Paging::SameToken => sent.unwrap_or_else(|| format!("{PROXY_TOKEN}0")),
        _ => format!("{PROXY_TOKEN}{page}"),
    };
    list["metadata"]["continue"] = token.into();
    let items = list["items"].as_array_mut().expect("a List's items");
    match paging {
        Paging::SameToken | Paging::RepeatPages => {}
        Paging::EmptyPages => items.clear(),
        Paging::FreshObjects => {
            for item in items {
                let name = item["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                item["metadata"]["name"] = format!("p{page:05}-{name}").into();
                item["metadata"]["uid"] = format!("proxy-{page}-{name}").into();
            }
        }
    }
    let body = serde_json::to_vec(&list).unwrap();
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Ok(out)
}

/// An HTTP/1.1 answer's code and body (`Content-Length`, chunked, or to the end).
fn http_answer(answer: &[u8]) -> (u16, Vec<u8>) {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an answer head");
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut rest = &answer[end + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return (code, rest.to_vec());
    }
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size");
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&rest[..line_end])
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .expect("a chunk size");
        rest = &rest[line_end + 2..];
        if size == 0 {
            return (code, body);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Reads until the end of the request head; returns the head (with its blank line) and what
/// was read past it.
async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too long"));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn serve(
    mut client: tokio_rustls::server::TlsStream<TcpStream>,
    shared: &Shared,
    connector: &TlsConnector,
    upstream: &str,
) -> std::io::Result<()> {
    let (head, rest) = read_head(&mut client).await?;
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let target = request_line.next().unwrap_or_default().to_string();
    let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let length = headers
        .iter()
        .find_map(|h| {
            let (name, value) = h.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);

    let fault = {
        let mut rules = shared.rules.lock().unwrap();
        let hit = rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.method.is_none_or(|m| m == method)
                && r.target.as_deref().is_none_or(|t| target.contains(t))
        });
        hit.map(|r| {
            r.remaining -= 1;
            r.fault.clone()
        })
    };
    shared.answers.lock().unwrap().push(Answer {
        method: method.clone(),
        target: target.clone(),
        fault: fault.clone(),
        at: Instant::now(),
        wall: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64(),
    });

    if let Some(Fault::Delay(delay)) = fault {
        tokio::time::sleep(delay).await;
    } else if let Some(Fault::Paging(paging)) = fault {
        let page = shared.pages.fetch_add(1, Ordering::SeqCst) + 1;
        let response = repage(paging, page, &target, &headers, connector, upstream).await?;
        client.write_all(&response).await?;
        client.shutdown().await?;
        return Ok(());
    } else if let Some(fault) = fault {
        // The whole request is read first, as the server would, so the client is not reset
        // while it still sends.
        let mut left = length.min(MAX_BODY).saturating_sub(rest.len());
        let mut sink = [0u8; 8192];
        while left > 0 {
            let n = client.read(&mut sink[..left.min(8192)]).await?;
            if n == 0 {
                break;
            }
            left -= n;
        }
        if let Some(response) = fault.response() {
            client.write_all(&response).await?;
            client.shutdown().await?;
        } else if matches!(fault, Fault::Close) {
            client.shutdown().await?;
        }
        return Ok(());
    }

    let mut server = upstream_request(connector, upstream, &method, &target, &headers).await?;
    server.write_all(&rest).await?;

    if !is_watch(&target) {
        tokio::io::copy_bidirectional(&mut client, &mut server).await?;
        return Ok(());
    }
    shared.live_watches.fetch_add(1, Ordering::SeqCst);
    let cut = shared.cut.notified();
    let result = tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut server) => copied.map(|_| ()),
        () = cut => Ok(()),
    };
    shared.live_watches.fetch_sub(1, Ordering::SeqCst);
    result
}
