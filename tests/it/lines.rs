//! One clear line for what the way to the cluster answers: a redirect (which kubectl follows),
//! certificates rustls refuses, one of them a self-signed CA certificate kubectl accepts, each
//! named in kubeconfig words; and a `proxy-url` that works, through a small CONNECT proxy made
//! here. The certificates are made with `openssl req` and served by `openssl s_server`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::fakeapi::{FakeApi, Reply};
use crate::{error_line, kubectl_media};

/// A kubeconfig in `dir` whose cluster is this YAML flow map.
fn kubeconfig(dir: &Path, cluster: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {cluster}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n\
             users:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_redirect_is_said_as_kubectl_users_know_it() {
    let api = FakeApi::start(|_, _| Reply {
        code: 302,
        headers: vec![(
            "Location".into(),
            "https://login.example.com/oauth?next=%2Fapis".into(),
        )],
        body: Vec::new(),
    });
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &format!("{{server: '{}'}}", api.url()));
    let line = error_line(kubectl_media(&["caps"], &config));
    assert!(
        line.starts_with(&format!(
            "error: the Kubernetes API at {} answered 302 to GET /apis/resource.k8s.io/v1/resourceslices?limit=500 \
             with a redirect to https://login.example.com/oauth?next=%2Fapis, which kubectl follows \
             and kubectl media does not (hint: set the server of the kubeconfig context",
            api.url()
        )),
        "{line}"
    );
    assert_eq!(api.asked().len(), 1, "not followed");
}

/// A self-signed certificate for 127.0.0.1 in `dir`, a CA's (`CA:TRUE`) or a server's.
fn certificate(dir: &Path, name: &str, ca: bool) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let constraint = if ca {
        "critical,CA:TRUE"
    } else {
        "critical,CA:FALSE"
    };
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", &format!("basicConstraints={constraint}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    (cert, key)
}

/// `openssl s_server` presenting `cert`, on a free loopback port; killed when dropped.
struct TlsServer(Child, u16);

impl TlsServer {
    fn start(cert: &Path, key: &Path) -> TlsServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("openssl")
            .args([
                "s_server",
                "-quiet",
                "-www",
                "-accept",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("-cert")
            .arg(cert)
            .arg("-key")
            .arg(key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "openssl s_server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsServer(child, port)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[cfg_attr(
    not(have_openssl),
    ignore = "needs openssl: apt-get install openssl, then touch build.rs"
)]
fn refused_certificates_are_said_with_the_kubeconfig_field_that_fixes_them() {
    let dir = tempfile::tempdir().unwrap();
    // A CA certificate as the server's own, trusted by the kubeconfig: kubectl accepts it.
    let (cert, key) = certificate(dir.path(), "ca", true);
    let server = TlsServer::start(&cert, &key);
    let url = format!("https://127.0.0.1:{}", server.1);
    let config = kubeconfig(
        dir.path(),
        &format!(
            "{{server: '{url}', certificate-authority: '{}'}}",
            cert.display()
        ),
    );
    let line = error_line(kubectl_media(&["caps"], &config));
    assert_eq!(
        line,
        format!(
            "error: the Kubernetes API at {url} sent a certificate that is a CA certificate \
             (CA:TRUE) serving as its own server certificate, which kubectl accepts when the \
             kubeconfig trusts it and kubectl media's TLS (rustls) does not (hint: give the API \
             server a serving certificate signed by that CA (as kubeadm and kind do), or, for a \
             test cluster only, set insecure-skip-tls-verify: true in the kubeconfig's cluster)"
        )
    );
    // insecure-skip-tls-verify is honoured: the handshake passes (openssl's page is no API).
    let config = kubeconfig(
        dir.path(),
        &format!("{{server: '{url}', insecure-skip-tls-verify: true}}"),
    );
    let line = error_line(kubectl_media(&["caps"], &config));
    assert!(!line.contains("certificate"), "{line}");
    drop(server);

    // A server's self-signed certificate the kubeconfig does not trust.
    let (cert, key) = certificate(dir.path(), "leaf", false);
    let server = TlsServer::start(&cert, &key);
    let url = format!("https://127.0.0.1:{}", server.1);
    let config = kubeconfig(dir.path(), &format!("{{server: '{url}'}}"));
    let line = error_line(kubectl_media(&["caps"], &config));
    assert_eq!(
        line,
        format!(
            "error: the Kubernetes API at {url} sent a certificate that no certificate authority \
             of the kubeconfig signed (kubectl says: x509: certificate signed by unknown \
             authority) (hint: set certificate-authority or certificate-authority-data in the \
             kubeconfig's cluster to the CA that signed the server's certificate, or, for a test \
             cluster only, insecure-skip-tls-verify: true)"
        )
    );
    // The agent logs the same words, not rustls's Rust names.
    let reports = tempfile::tempdir().unwrap();
    crate::support::agent::write_fleet(reports.path(), 1);
    let agent = crate::support::agent::AgentProcess::start(
        env!("CARGO_BIN_EXE_media-capabilities"),
        "tls-node",
        reports.path(),
        &config,
        crate::support::agent::FAST,
    );
    let line = agent
        .log
        .wait_for("sent a certificate that", Duration::from_secs(30));
    assert!(
        line.contains(&format!(
            "cannot reach {url}: it sent a certificate that no certificate authority of the \
             kubeconfig signed (kubectl says: x509: certificate signed by unknown authority) \
             (hint: set certificate-authority"
        )) && !line.contains("UnknownIssuer"),
        "{line}"
    );
}

/// An HTTP CONNECT proxy on loopback that tunnels to any address and counts its tunnels.
fn connect_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let tunnels = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&tunnels);
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(client.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut words = line.split_whitespace();
                let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
                    return;
                };
                let target = target.to_owned();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                        break;
                    }
                }
                let Ok(upstream) = TcpStream::connect(&target) else {
                    let _ = (&client).write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                (&client)
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .unwrap();
                let (mut up_read, mut up_write) = (upstream.try_clone().unwrap(), upstream);
                let mut down_write = client;
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut reader, &mut up_write);
                    let _ = up_write.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up_read, &mut down_write);
            });
        }
    });
    (url, tunnels)
}

#[test]
fn a_proxy_url_in_the_kubeconfig_is_used() {
    let api = FakeApi::start(|_, _| {
        Reply::json(
            200,
            &serde_json::json!({"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                                "metadata": {"resourceVersion": "1"}, "items": []}),
        )
    });
    let (proxy, tunnels) = connect_proxy();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(
        dir.path(),
        &format!("{{server: '{}', proxy-url: '{proxy}'}}", api.url()),
    );
    let out = kubectl_media(&["caps"], &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "No media.liken.sh devices or render nodes found.\n");
    assert!(
        tunnels.load(Ordering::SeqCst) >= 1,
        "nothing went through the proxy: {stderr}"
    );
    assert!(
        api.asked().iter().any(|a| a.contains("/resourceslices?")),
        "{:?}",
        api.asked()
    );
    // A proxy that is not there is said as such, not passed by.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = kubeconfig(
        dir.path(),
        &format!("{{server: '{}', proxy-url: 'http://{closed}'}}", api.url()),
    );
    let before = api.asked().len();
    let line = error_line(kubectl_media(&["caps"], &config));
    assert!(
        line.starts_with("error: cannot reach the Kubernetes API at"),
        "{line}"
    );
    assert_eq!(
        api.asked().len(),
        before,
        "the server was reached around the proxy"
    );
}
