//! Listings that do not page as kube-apiserver pages, for `kubectl media`: the real server's
//! pages rewritten by the fault proxy (a token handed back unchanged, the same objects on every
//! page, a new token on every page forever), each ending in one error line.

use crate::cluster::{fleet_cluster, lists, proxied};
use crate::support::faultproxy::{Fault, Paging};
use crate::{error_line, kubectl_media};

const SLICES: &str = "/resourceslices?";

/// `caps` through a proxy that pages as `paging` says; its error line and how many lists it
/// asked for.
fn caps_paged(paging: Paging) -> (String, usize) {
    let (proxy, kubeconfig) = proxied(fleet_cluster());
    proxy.fail_next(usize::MAX, Fault::Paging(paging), Some("GET"), Some(SLICES));
    let mark = proxy.mark();
    let line = error_line(kubectl_media(&["caps"], &kubeconfig));
    (
        line,
        lists(proxy.answers_since(mark), "resourceslices").len(),
    )
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_listing_that_does_not_page_ends_in_one_line() {
    let hint = "(hint: check that the server of the kubeconfig context is the API server itself, \
                not a proxy that rewrites its answers)";
    let (line, asked) = caps_paged(Paging::SameToken);
    assert!(
        line.starts_with("error: list resourceslices.resource.k8s.io from https://127.0.0.1:")
            && line.contains(
                ": page 2 handed back the continue token it was asked with, so the listing \
                 would never end "
            )
            && line.ends_with(hint),
        "{line}"
    );
    assert_eq!(asked, 2, "stopped at the second page");

    let (line, asked) = caps_paged(Paging::RepeatPages);
    assert!(
        line.contains(": page 2 repeats \"") && line.ends_with(hint),
        "{line}"
    );
    // Pages are asked for while the last two are parsed, where repeats are seen.
    assert!(
        asked <= 4,
        "stopped within two pages of the second: {asked}"
    );
}

/// A plain HTTP server on loopback that answers every list with an empty page and a new token
/// (`t1`, `t2`...), forever; it counts the requests. A stand-in where the proxy would take a
/// TLS handshake and a real listing per page (60 ms each here): the bound is the client's.
fn endless_pages() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            let body = format!(
                r#"{{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","metadata":{{"continue":"t{n}"}},"items":[]}}"#
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, asked)
}

/// A new token on every page and nothing on any, forever: stopped at the page bound.
#[test]
fn endless_empty_pages_end_at_the_page_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, asked) = endless_pages();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://{addr}'}}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n\
             users:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    let line = error_line(kubectl_media(&["caps"], &kubeconfig));
    let bound = media_operator::fleet::cluster::MAX_LIST_PAGES;
    assert_eq!(
        line,
        format!(
            "error: list resourceslices.resource.k8s.io from http://{addr}: the listing went past \
             {bound} pages without an end (hint: check that the server of the kubeconfig context \
             is the API server itself, not a proxy that rewrites its answers)"
        )
    );
    let asked = asked.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(asked, bound, "every page up to the bound, and no more");
}
