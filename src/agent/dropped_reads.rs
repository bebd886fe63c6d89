//! A read whose connection was closed before its answer is sent once more, at once, so that
//! one dropped connection is not an outage: kube-apiserver starting up can close a connection
//! it has just accepted or answered on, and the request on it gets no answer at all.
//!
//! What the layers below already retry, and why that is not enough: hyper-util's pooled client
//! (`retry_canceled_requests`, on by default) sends a request again only when it was never
//! written and its connection was a reused idle one; once the request is on the wire it gives
//! up ("connection closed before message completed"), as it cannot know whether the server
//! acted. kube-rs's `RetryPolicy` retries 429, 503 and 504 answers, never a missing answer (and
//! the agent turns it off, see `crate::agent::run::client`). client-go retries a GET after a
//! connection reset or an EOF, and writes never, "as they are not idempotent"
//! (rest/request.go, `isErrRetryableFunc`); this does the same, once and at once rather than
//! after its 1 s, so that an API server that is really gone is said after the second failure.

use std::error::Error;

use http::{Method, Request};
use kube::client::Body;
use tower::BoxError;
use tracing::debug;

/// How many causes of an error are looked through for the connection's end.
const MAX_CAUSES: usize = 16;

/// Why a request got no answer, as far as sending it again goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoAnswer {
    /// The connection was closed or reset before an answer came (after the request was written,
    /// or between the TCP accept and the TLS handshake's end): the server is there.
    Closed,
    /// Anything else (refused, timed out, a certificate refused): at once would fail the same.
    Other,
}

/// Reads the error hyper-util's client gives (through kube-rs's layers) by type, not words:
/// hyper's `IncompleteMessage` (the peer closed cleanly, as Go's server does, with TLS
/// `close_notify`), or an I/O error of a connection that ended (reset, aborted, broken pipe, or
/// an EOF without `close_notify`, as rustls reports it).
pub(crate) fn no_answer(error: &(dyn Error + 'static)) -> NoAnswer {
    let mut cause = Some(error);
    for _ in 0..MAX_CAUSES {
        let Some(error) = cause else { break };
        if error
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return NoAnswer::Closed;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
            return match io.kind() {
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
                    NoAnswer::Closed
                }
                _ => NoAnswer::Other,
            };
        }
        cause = error.source();
    }
    NoAnswer::Other
}

/// Whether to send a request again at once after it got no answer: only a read (GET: a get, a
/// list or the start of a watch; it changes nothing however often it arrives), only after a
/// closed connection, and only once. A write (POST, PUT, DELETE) is never sent again here: one
/// whose connection closed may have been carried out, and the publisher re-reads and plans again
/// instead of replaying it.
pub(crate) fn send_again(method: &Method, why: NoAnswer, sent_again: bool) -> bool {
    method == Method::GET && why == NoAnswer::Closed && !sent_again
}

/// The retry policy for tower's `Retry` layer: see the module documentation. A fresh one (not
/// sent again yet) is cloned for each request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DroppedReads {
    sent_again: bool,
}

impl<R> tower::retry::Policy<Request<Body>, R, BoxError> for DroppedReads {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<R, BoxError>,
    ) -> Option<Self::Future> {
        let Err(error) = result else { return None };
        if !send_again(request.method(), no_answer(error.as_ref()), self.sent_again) {
            return None;
        }
        self.sent_again = true;
        // The failed connection is not pooled again: the copy goes on an idle one the pool
        // knows is open, or a new one (hyper-util retries on its own an idle one found closed).
        debug!(
            "{} {}: the connection was closed before an answer; sending it once more",
            request.method(),
            request.uri()
        );
        Some(std::future::ready(()))
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        // Only a GET is ever sent again; its body is empty, so it can be copied.
        if request.method() != Method::GET {
            return None;
        }
        let body = request.body().try_clone()?;
        let mut copy = Request::new(body);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

/// The layers that send a dropped read once more: tower's `Retry` with [`DroppedReads`], over a
/// `Buffer` because kube-rs's stack cannot be cloned and a retry needs its service twice
/// (kube-rs's own retry example stacks them so).
pub(crate) fn layer<S>() -> impl tower::Layer<
    S,
    Service = tower::retry::Retry<DroppedReads, tower::buffer::Buffer<Request<Body>, S::Future>>,
>
where
    S: tower::Service<Request<Body>> + Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
    S::Future: Send,
{
    tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(DroppedReads::default()))
        // kube-rs's own buffer in front of its client holds as many.
        .layer(tower::buffer::BufferLayer::new(1024))
        .into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Layer, Service, ServiceExt};

    fn io_error(kind: io::ErrorKind) -> BoxError {
        Box::new(io::Error::new(kind, "x"))
    }

    /// An error as hyper-util's client nests one: its own error, with the cause as source.
    #[derive(Debug)]
    struct Outer(BoxError);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (SendRequest)")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(self.0.as_ref())
        }
    }

    #[test]
    fn a_closed_connection_is_told_from_a_server_that_is_not_there() {
        use io::ErrorKind::*;
        for kind in [ConnectionReset, ConnectionAborted, BrokenPipe, UnexpectedEof] {
            let nested = Outer(io_error(kind));
            assert_eq!(no_answer(&nested), NoAnswer::Closed, "{kind:?}");
        }
        for kind in [ConnectionRefused, TimedOut, NotFound, InvalidData] {
            let nested = Outer(io_error(kind));
            assert_eq!(no_answer(&nested), NoAnswer::Other, "{kind:?}");
        }
        assert_eq!(no_answer(&Outer("tls: bad certificate".into())), NoAnswer::Other);
    }

    #[test]
    fn only_a_read_is_sent_again_and_only_once() {
        assert!(send_again(&Method::GET, NoAnswer::Closed, false));
        assert!(!send_again(&Method::GET, NoAnswer::Closed, true));
        assert!(!send_again(&Method::GET, NoAnswer::Other, false));
        for write in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(!send_again(&write, NoAnswer::Closed, false), "{write}");
        }
    }

    /// A service that fails the first `closes` calls as a connection reset, then answers.
    fn closing(closes: usize) -> (impl Fn() -> usize, impl Service<Request<Body>, Response = u16, Error = BoxError, Future: Send> + Send + 'static) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let service = tower::service_fn(move |_request: Request<Body>| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < closes {
                    Err(Box::new(Outer(io_error(io::ErrorKind::ConnectionReset))) as BoxError)
                } else {
                    Ok(200u16)
                }
            }
        });
        (move || calls.load(Ordering::SeqCst), service)
    }

    async fn send(
        service: impl Service<Request<Body>, Response = u16, Error = BoxError, Future: Send> + Send + 'static,
        method: Method,
    ) -> Result<u16, BoxError> {
        let mut stack = layer().layer(service);
        let request = Request::builder()
            .method(method)
            .uri("/apis/resource.k8s.io/v1/resourceslices")
            .body(Body::empty())
            .unwrap();
        stack.ready().await?.call(request).await
    }

    #[tokio::test]
    async fn one_closed_connection_is_waited_out_and_two_are_reported() {
        let (calls, service) = closing(1);
        assert_eq!(send(service, Method::GET).await.unwrap(), 200);
        assert_eq!(calls(), 2, "sent once more");

        let (calls, service) = closing(2);
        let error = send(service, Method::GET).await.unwrap_err();
        assert_eq!(no_answer(error.as_ref()), NoAnswer::Closed, "{error}");
        assert_eq!(calls(), 2, "only once more");

        let (calls, service) = closing(1);
        assert!(send(service, Method::PUT).await.is_err());
        assert_eq!(calls(), 1, "a write is not sent again");
    }

    /// A socket that takes each connection, reads the request's head if `read_first`, and
    /// closes it without an answer, as kube-apiserver starting up may; returns its address and
    /// how many connections it took.
    async fn closes_without_answer(read_first: bool) -> (String, Arc<AtomicUsize>) {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut head = Vec::new();
                let mut chunk = [0u8; 1024];
                while read_first && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn hypers_own_error_for_a_closed_connection_is_read_by_type() {
        for read_first in [true, false] {
            let (url, accepted) = closes_without_answer(read_first).await;
            let config = kube::Config::new(url.parse().unwrap());
            let plain = kube::client::ClientBuilder::try_from(config.clone())
                .unwrap()
                .build();
            let get = || Request::get("/api/v1/nodes/n1").body(Vec::new()).unwrap();
            let error = plain.request_text(get()).await.unwrap_err();
            assert_eq!(no_answer(&error), NoAnswer::Closed, "{error:?}");
            assert_eq!(accepted.load(Ordering::SeqCst), 1);

            let retrying = kube::client::ClientBuilder::try_from(config)
                .unwrap()
                .with_layer(&layer())
                .build();
            let error = retrying.request_text(get()).await.unwrap_err();
            assert_eq!(no_answer(&error), NoAnswer::Closed, "{error:?}");
            assert_eq!(
                accepted.load(Ordering::SeqCst),
                3,
                "sent once more, on a connection of its own"
            );
        }
    }
}
