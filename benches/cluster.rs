//! The real control plane for the benchmarks (tests/controlplane: etcd, kube-apiserver,
//! kube-scheduler and the controllers, as the integration tests run them): starting one, and
//! storing a fleet in it quickly. Included by the benchmarks with `#[path]`, after `support`.
//!
//! Objects are created through the API, 32 requests in flight from one client: kubectl creates
//! a file's objects one request after another, and the harness's `node` command is held to
//! client-go's default 5 requests a second (three requests a node).

// Each benchmark uses a part of this module; the rest would warn as dead.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::controlplane::ControlPlane;

/// Requests in flight while loading; the admin user is exempt from priority and fairness.
const IN_FLIGHT: usize = 32;

/// Starts a control plane of the benchmark's own, saying how long it took.
pub fn start() -> ControlPlane {
    let cp = ControlPlane::start();
    println!(
        "control plane {} ready in {:.1} s ({})",
        crate::support::controlplane::release(),
        cp.startup.as_secs_f64(),
        cp.url
    );
    cp
}

/// An object as a client creates it: only its name, namespace and labels of its metadata (the
/// examples' made-up uids and owner references would have the garbage collector delete it).
pub fn as_created(mut object: Value) -> Value {
    let metadata = &object["metadata"];
    let mut kept = json!({"name": metadata["name"]});
    for key in ["namespace", "labels"] {
        if let Some(value) = metadata.get(key) {
            kept[key] = value.clone();
        }
    }
    object["metadata"] = kept;
    object
}

/// The collection an object is created in.
fn collection(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind").to_lowercase();
    let plural = if kind.ends_with('s') {
        format!("{kind}es")
    } else {
        format!("{kind}s")
    };
    let group = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{group}/namespaces/{namespace}/{plural}"),
        None => format!("{group}/{plural}"),
    }
}

/// A client of `kubeconfig` (kube-rs, as the plugin's own reader is built on).
async fn client(kubeconfig: &Path) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(config).expect("a client")
}

/// Sends `requests` (method, path, content type, body), [`IN_FLIGHT`] at a time; the first
/// failure ends the benchmark.
async fn send_all(client: &kube::Client, requests: Vec<(http::Method, String, &str, Vec<u8>)>) {
    let mut answers = futures::stream::iter(requests.into_iter().map(
        |(method, path, content_type, body)| {
            let client = client.clone();
            async move {
                let request = http::Request::builder()
                    .method(method.clone())
                    .uri(&path)
                    .header(http::header::CONTENT_TYPE, content_type)
                    .body(body)
                    .expect("a request");
                client
                    .request_text(request)
                    .await
                    .map_err(|e| format!("{method} {path}: {e}"))
            }
        },
    ))
    .buffer_unordered(IN_FLIGHT);
    while let Some(answer) = answers.next().await {
        if let Err(e) = answer {
            panic!("load the fleet: {e}");
        }
    }
}

/// Creates `objects` in the order given, kind by kind (a namespace before what it holds), each
/// kind's objects in parallel; returns how long it took.
pub fn create(cp: &ControlPlane, objects: &[Value]) -> Duration {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let start = Instant::now();
    runtime.block_on(async {
        let client = client(cp.kubeconfig()).await;
        let mut rest = objects;
        while let Some(first) = rest.first() {
            let same = rest
                .iter()
                .take_while(|o| o["kind"] == first["kind"])
                .count();
            let requests = rest[..same]
                .iter()
                .map(|o| {
                    let body = serde_json::to_vec(o).expect("serialise");
                    (http::Method::POST, collection(o), "application/json", body)
                })
                .collect();
            send_all(&client, requests).await;
            rest = &rest[same..];
        }
    });
    start.elapsed()
}

/// Creates `count` Ready nodes `node-00000`... as the harness's `node` command makes one (labels;
/// capacity and the Ready condition through the status subresource; admission's not-ready
/// taint lifted, as the node lifecycle controller would); returns how long it took.
pub fn ready_nodes(cp: &ControlPlane, names: &[String]) -> Duration {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let start = Instant::now();
    runtime.block_on(async {
        let client = client(cp.kubeconfig()).await;
        let nodes = names
            .iter()
            .map(|name| {
                let node = json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}});
                let body = serde_json::to_vec(&node).expect("serialise");
                (
                    http::Method::POST,
                    "/api/v1/nodes".to_owned(),
                    "application/json",
                    body,
                )
            })
            .collect();
        send_all(&client, nodes).await;
        let resources = json!({"cpu": "8", "memory": "32Gi", "pods": "110"});
        let status = json!({"status": {"capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status"}]}});
        let patches = |path: &str, body: &Value| -> Vec<_> {
            names
                .iter()
                .map(|name| {
                    (
                        http::Method::PATCH,
                        format!("/api/v1/nodes/{name}{path}"),
                        "application/merge-patch+json",
                        serde_json::to_vec(body).expect("serialise"),
                    )
                })
                .collect()
        };
        send_all(&client, patches("/status", &status)).await;
        send_all(&client, patches("", &json!({"spec": {"taints": null}}))).await;
    });
    start.elapsed()
}

/// Polls `check` every 100 ms until it gives a value, for at most `timeout`.
pub fn wait_until<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// When `path` was first found stored (polled every 5 ms through one client), or `None` after
/// `timeout`.
pub fn stored_within(cp: &ControlPlane, path: &str, timeout: Duration) -> Option<Instant> {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let client = client(cp.kubeconfig()).await;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let request = http::Request::get(path)
                .body(Vec::new())
                .expect("a request");
            if client.request_text(request).await.is_ok() {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    })
}

/// The admin's client certificate, key and the cluster's CA as PEM files in `dir`, for curl.
pub struct Credentials {
    pub ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// Writes the admin kubeconfig's credentials out for curl (`base64 -d` of its `-data` fields).
pub fn credentials(cp: &ControlPlane, dir: &Path) -> Credentials {
    let text = std::fs::read_to_string(cp.kubeconfig()).expect("read the kubeconfig");
    let config: serde_yaml::Value = serde_yaml::from_str(&text).expect("kubeconfig YAML");
    let field = |section: &str, inner: &str, key: &str| -> Vec<u8> {
        let data = config[section][0][inner][key]
            .as_str()
            .unwrap_or_else(|| panic!("no {section}[0].{inner}.{key} in the admin kubeconfig"));
        let mut decode = Command::new("base64")
            .arg("-d")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run base64");
        use std::io::Write;
        decode
            .stdin
            .take()
            .expect("stdin")
            .write_all(data.as_bytes())
            .expect("write to base64");
        decode.wait_with_output().expect("base64 -d").stdout
    };
    let write = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write a PEM file");
        path
    };
    Credentials {
        ca: write(
            "ca.crt",
            field("clusters", "cluster", "certificate-authority-data"),
        ),
        cert: write(
            "admin.crt",
            field("users", "user", "client-certificate-data"),
        ),
        key: write("admin.key", field("users", "user", "client-key-data")),
    }
}

/// One response as curl timed it.
#[derive(Clone, Copy, Default)]
pub struct Fetch {
    /// From the request sent (TLS up) to the first byte of the answer: the server at work.
    pub first_byte: Duration,
    /// From the first byte to the last: the server still encoding and streaming, and the bytes
    /// crossing the loopback.
    pub transfer: Duration,
    pub bytes: usize,
}

impl std::ops::AddAssign for Fetch {
    fn add_assign(&mut self, other: Fetch) {
        self.first_byte += other.first_byte;
        self.transfer += other.transfer;
        self.bytes += other.bytes;
    }
}

/// Lists `path` with curl asking for `accept`, page by page with `limit` as `caps` does (or in
/// one response without one), and sums the pages' times. Protobuf pages carry their continue
/// token in the binary list metadata, so they are walked with the tokens of a JSON walk of the
/// same limit (`tokens`, filled by the walk that finds it empty).
pub fn curl_pages(
    cp: &ControlPlane,
    credentials: &Credentials,
    path: &str,
    accept: &str,
    limit: Option<usize>,
    tokens: &mut Vec<Option<String>>,
) -> Fetch {
    let dir = tempfile::tempdir().expect("temp dir");
    let body = dir.path().join("body");
    let learn = tokens.is_empty();
    if learn {
        tokens.push(None);
    }
    let mut total = Fetch::default();
    let mut page = 0;
    while page < tokens.len() {
        let mut url = format!("{}{path}", cp.url);
        if let Some(limit) = limit {
            url.push_str(&format!("?limit={limit}"));
        }
        if let Some(token) = &tokens[page] {
            url.push_str("&continue=");
            url.push_str(token);
        }
        let out = Command::new("curl")
            .args(["-sS", "--fail", "-o"])
            .arg(&body)
            .arg("--cacert")
            .arg(&credentials.ca)
            .arg("--cert")
            .arg(&credentials.cert)
            .arg("--key")
            .arg(&credentials.key)
            .args(["-H", &format!("Accept: {accept}")])
            .args([
                "-w",
                "%{time_appconnect} %{time_starttransfer} %{time_total} %{size_download}",
            ])
            .arg(&url)
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "curl {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let times: Vec<f64> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|f| f.parse().expect("a curl figure"))
            .collect();
        let [connected, first, last, bytes] = times[..] else {
            panic!("curl -w gave {times:?}")
        };
        total += Fetch {
            first_byte: Duration::from_secs_f64(first - connected),
            transfer: Duration::from_secs_f64(last - first),
            bytes: bytes as usize,
        };
        if learn {
            let list: Value =
                serde_json::from_slice(&std::fs::read(&body).expect("the page")).expect("JSON");
            if let Some(token) = list["metadata"]["continue"]
                .as_str()
                .filter(|t| !t.is_empty())
            {
                tokens.push(Some(token.to_owned()));
            }
        }
        page += 1;
    }
    total
}

/// How many bytes a second cross the loopback from one socket to another (1 GiB copied), to
/// tell the network's share of a transfer from the server's.
pub fn loopback_bytes_per_second() -> f64 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    const TOTAL: usize = 1 << 30;
    let writer = std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..TOTAL / chunk.len() {
            stream.write_all(&chunk).expect("write");
        }
    });
    let (mut stream, _) = listener.accept().expect("accept");
    let start = Instant::now();
    let mut buffer = vec![0; 1 << 20];
    let mut read = 0;
    while read < TOTAL {
        let n = stream.read(&mut buffer).expect("read");
        assert!(n > 0, "the writer stopped early");
        read += n;
    }
    writer.join().expect("writer");
    TOTAL as f64 / start.elapsed().as_secs_f64()
}
