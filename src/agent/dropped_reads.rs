//! A read whose connection closed before its answer is sent once more, at once, on a fresh
//! connection: kube-apiserver starting up can close a connection it has just accepted, and one
//! such close is not an outage. Below us, hyper-util resends only a request never written, and
//! kube-rs's RetryPolicy only 429/503/504 answers (off in the agent); client-go resends a GET
//! after a reset or EOF, never a write (rest/request.go `isErrRetryableFunc`), as this does.

use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::client::{Body, DynBody};
use tower::{BoxError, ServiceExt};
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
            use std::io::ErrorKind::{
                BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof,
            };
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
/// list or the start of a watch; it changes nothing however often it arrives), and only after a
/// closed connection. A write (POST, PUT, DELETE) is never sent again here: one whose connection
/// closed may have been carried out; the publisher decides again from what the server stores
/// (its watch, or the re-read after a 409: each update names the resourceVersion it replaces).
/// Once only: the copy goes on [`fresh_connections`], which sends nothing again.
pub(crate) fn send_again(method: &Method, why: NoAnswer) -> bool {
    method == Method::GET && why == NoAnswer::Closed
}

/// A service with kube-rs's request and error types.
pub(crate) type Api =
    tower::util::BoxCloneSyncService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// kube-rs's layers (base URI, authentication, extra headers) over a hyper-util client that
/// keeps no idle connection, so every request on it opens one of its own. A read is sent again
/// here, not through the agent's pooled client: the pool may hand it another idle connection
/// to the same server that is about to close the same way. Built from `config` as kube-rs
/// builds its own (`ClientBuilder::try_from`), with its connect timeout; its write timeout is
/// left out, as a GET is a few hundred bytes.
pub(crate) fn fresh_connections(config: &kube::Config) -> Result<Api, kube::Error> {
    use kube::client::ConfigExt;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = config.rustls_https_connector_with_connector(http)?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build::<_, Body>(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .map_response(|response: Response<hyper::body::Incoming>| {
            response.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>)
        })
        .service(client);
    Ok(tower::util::BoxCloneSyncService::new(service))
}

/// A layer for kube-rs's client stack: a read whose connection was closed before its answer
/// is sent once more, at once, on [`fresh_connections`]; see the module documentation.
#[derive(Clone)]
pub(crate) struct SendReadsAgain {
    fresh: Api,
}

impl SendReadsAgain {
    /// Sends reads again on `fresh`.
    pub(crate) fn new(fresh: Api) -> Self {
        Self { fresh }
    }
}

impl<S> tower::Layer<S> for SendReadsAgain {
    type Service = ReadsSentAgain<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReadsSentAgain {
            inner,
            fresh: self.fresh.clone(),
        }
    }
}

/// The service [`SendReadsAgain`] makes.
pub(crate) struct ReadsSentAgain<S> {
    inner: S,
    fresh: Api,
}

impl<S> tower::Service<Request<Body>> for ReadsSentAgain<S>
where
    S: tower::Service<Request<Body>, Response = Response<Box<DynBody>>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let copy = copy_of_read(&request);
        let answer = self.inner.call(request);
        let fresh = self.fresh.clone();
        Box::pin(async move {
            let error = match answer.await {
                Ok(response) => return Ok(response),
                Err(error) => error.into(),
            };
            let Some(copy) = copy else {
                return Err(error);
            };
            if !send_again(copy.method(), no_answer(error.as_ref())) {
                return Err(error);
            }
            debug!(
                "{} {}: the connection was closed before an answer; sending it once more on a new connection",
                copy.method(),
                copy.uri()
            );
            fresh.oneshot(copy).await
        })
    }
}

/// A copy of a GET to send again (its body is empty); None for anything else.
fn copy_of_read(request: &Request<Body>) -> Option<Request<Body>> {
    if request.method() != Method::GET {
        return None;
    }
    let mut copy = Request::new(request.body().try_clone()?);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    Some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Layer, Service};

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
        for kind in [
            ConnectionReset,
            ConnectionAborted,
            BrokenPipe,
            UnexpectedEof,
        ] {
            let nested = Outer(io_error(kind));
            assert_eq!(no_answer(&nested), NoAnswer::Closed, "{kind:?}");
        }
        for kind in [ConnectionRefused, TimedOut, NotFound, InvalidData] {
            let nested = Outer(io_error(kind));
            assert_eq!(no_answer(&nested), NoAnswer::Other, "{kind:?}");
        }
        let words = Outer("connection closed before message completed".into());
        assert_eq!(
            no_answer(&words),
            NoAnswer::Other,
            "told by type, not by words"
        );
    }

    #[test]
    fn only_a_read_is_sent_again() {
        assert!(send_again(&Method::GET, NoAnswer::Closed));
        assert!(!send_again(&Method::GET, NoAnswer::Other));
        for write in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(!send_again(&write, NoAnswer::Closed), "{write}");
        }
    }

    /// A service that answers each call with what `answer` says for it (counted from 0), and
    /// its count of calls.
    fn scripted(answer: fn(usize) -> Result<(), io::ErrorKind>) -> (Arc<AtomicUsize>, Api) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let service = tower::service_fn(move |_request: Request<Body>| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match answer(n) {
                    Ok(()) => {
                        let body = http_body_util::Empty::new().map_err(BoxError::from);
                        Ok(Response::new(Box::new(body) as Box<DynBody>))
                    }
                    Err(kind) => Err(Box::new(Outer(io_error(kind))) as BoxError),
                }
            }
        });
        (calls, tower::util::BoxCloneSyncService::new(service))
    }

    /// Sends one `method` request through the layer over `inner`, with `fresh` for sending again.
    async fn send(inner: Api, fresh: Api, method: Method) -> Result<(), BoxError> {
        let request = Request::builder()
            .method(method)
            .uri("/apis/resource.k8s.io/v1/resourceslices")
            .body(Body::empty())
            .unwrap();
        let mut stack = SendReadsAgain::new(fresh).layer(inner);
        stack.ready().await?.call(request).await.map(drop)
    }

    #[tokio::test]
    async fn a_read_closed_once_is_sent_again_on_a_new_connection_and_only_once() {
        use io::ErrorKind::{ConnectionRefused, ConnectionReset};
        let (calls, inner) = scripted(|_| Err(ConnectionReset));
        let (again, fresh) = scripted(|_| Ok(()));
        send(inner, fresh, Method::GET).await.unwrap();
        assert_eq!(
            (calls.load(Ordering::SeqCst), again.load(Ordering::SeqCst)),
            (1, 1)
        );

        // Closed twice: the second failure is the answer, and it is not sent a third time.
        let (_, inner) = scripted(|_| Err(ConnectionReset));
        let (again, fresh) = scripted(|_| Err(ConnectionReset));
        let error = send(inner, fresh, Method::GET).await.unwrap_err();
        assert_eq!(no_answer(error.as_ref()), NoAnswer::Closed, "{error}");
        assert_eq!(again.load(Ordering::SeqCst), 1);

        // A write, or a server that is not there: not sent again.
        let (_, inner) = scripted(|_| Err(ConnectionReset));
        let (again, fresh) = scripted(|_| Ok(()));
        assert!(send(inner, fresh, Method::PUT).await.is_err());
        assert_eq!(again.load(Ordering::SeqCst), 0, "a write");
        let (_, inner) = scripted(|_| Err(ConnectionRefused));
        let (again, fresh) = scripted(|_| Ok(()));
        assert!(send(inner, fresh, Method::GET).await.is_err());
        assert_eq!(again.load(Ordering::SeqCst), 0, "refused");
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

    /// hyper's own errors, as kube-rs passes them on: `Service(legacy::Error(SendRequest,
    /// hyper::Error(IncompleteMessage)))` when the request was read, and `Service(legacy::Error(
    /// Canceled, hyper::Error(Canceled, hyper::Error(IncompleteMessage))))` when it was not.
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

            let fresh = fresh_connections(&config).unwrap();
            let agents = kube::client::ClientBuilder::try_from(config)
                .unwrap()
                .with_layer(&SendReadsAgain::new(fresh))
                .build();
            let error = agents.request_text(get()).await.unwrap_err();
            assert_eq!(no_answer(&error), NoAnswer::Closed, "{error:?}");
            assert_eq!(accepted.load(Ordering::SeqCst), 3, "sent once more");
        }
    }
}
