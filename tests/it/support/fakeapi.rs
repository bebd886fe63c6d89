//! A stand-in for the API server on loopback (plain HTTP), for answers no server gives and the
//! fault proxy cannot make of the real one's cheaply: a 200 whose body is a `Status` of failure,
//! a redirect, messages and names with control characters. Every request gets the answer a
//! script makes of its method and target; the targets are recorded. Each answer closes its
//! connection, as the fault proxy's do.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One answer: the status code, the headers after the status line and the body.
#[derive(Clone, Debug)]
pub struct Reply {
    pub code: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// A JSON body with `code`.
    pub fn json(code: u16, body: &serde_json::Value) -> Reply {
        Reply {
            code,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// A `Status` of failure as kube-apiserver writes one, sent with the HTTP code `http`
    /// (a server that follows the API sends `code` itself).
    pub fn status(http: u16, code: u16, reason: &str, message: &str) -> Reply {
        Reply::json(
            http,
            &serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code,
            }),
        )
    }
}

type Script = dyn Fn(&str, &str) -> Reply + Send + Sync;

/// A running stand-in; it serves until the test process ends.
pub struct FakeApi {
    pub addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
}

impl FakeApi {
    /// Serves `script(method, target)` for every request.
    pub fn start(script: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let recorded = Arc::clone(&asked);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let script = Arc::clone(&script);
                let recorded = Arc::clone(&recorded);
                std::thread::spawn(move || {
                    let _ = answer(stream, &*script, &recorded);
                });
            }
        });
        FakeApi { addr, asked }
    }

    /// The server's address as a kubeconfig names it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `METHOD TARGET` of every request so far.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    /// A kubeconfig in `dir` whose one context is this server, with a token user.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{}'}}\n\
                 contexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: media}}\n\
                 current-context: c\nusers:\n- name: u\n  user: {{token: t}}\n",
                self.url()
            ),
        )
        .unwrap();
        path
    }
}

/// Reads one request (its head, and a body of `Content-Length`) and writes the script's answer.
fn answer(
    stream: std::net::TcpStream,
    script: &Script,
    asked: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (method, target) = (
        words.next().unwrap_or("").to_owned(),
        words.next().unwrap_or("").to_owned(),
    );
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    asked.lock().unwrap().push(format!("{method} {target}"));
    let reply = script(&method, &target);
    let mut out = stream;
    let reason = http::StatusCode::from_u16(reply.code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Unknown");
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", reply.code);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    out.write_all(head.as_bytes())?;
    out.write_all(&reply.body)?;
    out.flush()
}
