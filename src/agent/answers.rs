//! What the agent reads of the API server's answers, bounded, in front of kube-rs (which keeps
//! an answer whole and follows a watch line however long it grows): an answer is read up to
//! [`MAX_ANSWER`], a watch line up to [`MAX_WATCH_LINE`], and every page of a listing (the
//! publisher's watch of its own slice lists first; the render nodes' list) is checked as
//! [`crate::paging`] checks the plugin's, within bounds fit for one node's slices. A listing
//! that does not page (a token handed back unchanged, pages repeating objects, a listing past
//! its bounds) ends with an error the loop logs once and backs off on, and `/readyz` says so
//! until a listing of the same request completes.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Either, Full};
use serde::Deserialize;
use serde::de::{self, IgnoredAny, SeqAccess, Visitor};

use crate::agent::health::Health;
use crate::paging::{Bounds, Key, PageKeys, Paging, PagingFault};

/// The most of one answer (not a watch) that is read: the agent reads a Node, its slice and
/// lists of its node's slices, each object under etcd's 1.5 MiB; this holds forty of the
/// largest. Past it the answer is not held.
pub(crate) const MAX_ANSWER: usize = 64 << 20;

/// The longest watch line (one event, one object) that is read: ten times the 1.5 MiB etcd
/// stores of an object, in JSON.
pub(crate) const MAX_WATCH_LINE: usize = 16 << 20;

/// The bounds of the agent's listings: a node's slices of one driver. A driver publishes a pool
/// per node in slices of at most 128 devices, and a node has a few dozen GPUs at most: 256
/// objects is ten times what a node has. Pages: a listing that fits one page at the `limit`
/// the watcher asks (500), and room for a server that pages smaller.
pub(crate) const LISTING: Bounds = Bounds {
    pages: 8,
    objects: 256,
    // Each page's own is the `limit` it was asked with.
    page_limit: usize::MAX,
};

/// The listings followed at once: the agent makes two; more are dropped, oldest first.
const MAX_LISTINGS: usize = 16;

/// Why an answer was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerFault {
    #[error("the answer to GET {path} is over {} MiB, more than the agent reads", MAX_ANSWER >> 20)]
    TooLarge { path: String },
    #[error("a watch line from {path} is over {} MiB, more than one object", MAX_WATCH_LINE >> 20)]
    LineTooLong { path: String },
    #[error("the listing GET {path} does not page as kube-apiserver pages: {fault}")]
    Paging {
        path: String,
        #[source]
        fault: PagingFault,
    },
    #[error("the answer to GET {path} is not JSON: {cause}")]
    Unreadable { path: String, cause: String },
}

impl AnswerFault {
    /// The fault in `error`'s chain, if the error is one of this layer's.
    pub(crate) fn find<'a>(
        error: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a AnswerFault> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(fault) = e.downcast_ref::<AnswerFault>() {
                return Some(fault);
            }
            current = e.source();
        }
        None
    }
}

/// The listings in progress, by request (its path and query without `continue`).
#[derive(Debug, Default)]
struct Listings {
    open: HashMap<String, Paging>,
    /// The listing whose fault `/readyz` shows.
    faulted: Option<String>,
}

/// A layer for kube-rs's client stack; see the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct BoundAnswers {
    health: Arc<Health>,
    listings: Arc<Mutex<Listings>>,
}

impl BoundAnswers {
    /// Reports listing faults to `health` (`/readyz`).
    pub(crate) fn new(health: Arc<Health>) -> Self {
        Self {
            health,
            listings: Arc::default(),
        }
    }
}

impl<S> tower::Layer<S> for BoundAnswers {
    type Service = BoundedAnswers<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BoundedAnswers {
            inner,
            shared: self.clone(),
        }
    }
}

/// The service [`BoundAnswers`] makes.
#[derive(Clone, Debug)]
pub(crate) struct BoundedAnswers<S> {
    inner: S,
    shared: BoundAnswers,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a request is, as far as its answer's reading goes.
struct Asked {
    path: String,
    watch: bool,
    get: bool,
    /// The listing it belongs to, and the token it was sent with.
    listing: String,
    sent: Option<String>,
    limit: Option<usize>,
}

impl Asked {
    fn of<Q>(request: &Request<Q>) -> Asked {
        let uri = request.uri();
        let (mut listing, mut sent, mut watch, mut limit) =
            (uri.path().to_string(), None, false, None);
        let mut separator = '?';
        for pair in uri.query().unwrap_or_default().split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "continue" => sent = Some(percent_decoded(value)),
                "watch" => watch = matches!(value, "true" | "1"),
                "limit" => limit = value.parse().ok(),
                _ => {}
            }
            if name != "continue" && !pair.is_empty() {
                listing.push(separator);
                listing.push_str(pair);
                separator = '&';
            }
        }
        Asked {
            path: crate::text::one_line(&uri.to_string(), 200),
            watch,
            get: request.method() == http::Method::GET,
            listing,
            sent,
            limit,
        }
    }
}

/// A continue token as sent: base64, percent-encoded in the query.
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl<S, B, Q> tower::Service<Request<Q>> for BoundedAnswers<S>
where
    S: tower::Service<Request<Q>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<LineBound<B>, Full<Bytes>>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Q>) -> Self::Future {
        let asked = Asked::of(&request);
        let answer = self.inner.call(request);
        let shared = self.shared.clone();
        Box::pin(async move {
            let response = answer.await.map_err(Into::into)?;
            if asked.watch {
                return Ok(response.map(|body| {
                    Either::Left(LineBound {
                        inner: body,
                        line: 0,
                        path: Some(asked.path),
                    })
                }));
            }
            let (mut parts, body) = response.into_parts();
            let mut bytes = read_bounded(body, &asked.path).await?;
            if parts.status.is_success()
                && let Some(status) = crate::api_errors::failure_in_success(&bytes)
            {
                // A 200 whose body is a `Status` of failure is an error, as client-go takes
                // it: kube-rs reads it so only with an error code.
                parts.status = http::StatusCode::from_u16(status.code)
                    .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                parts.headers.remove(http::header::CONTENT_LENGTH);
                bytes = Bytes::from(serde_json::to_vec(&status)?);
            } else if asked.get && parts.status.is_success() {
                shared.check(&asked, &bytes)?;
            }
            Ok(Response::from_parts(parts, Either::Right(Full::new(bytes))))
        })
    }
}

/// A body read whole, up to [`MAX_ANSWER`].
async fn read_bounded<B>(mut body: B, path: &str) -> Result<Bytes, BoxError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(Into::into)?.into_data() {
            if read.len() + data.len() > MAX_ANSWER {
                return Err(Box::new(AnswerFault::TooLarge {
                    path: path.to_string(),
                }));
            }
            read.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(read))
}

impl BoundAnswers {
    /// Checks a successful GET's answer: a List is a page of its listing.
    fn check(&self, asked: &Asked, body: &[u8]) -> Result<(), AnswerFault> {
        let Some(page) = list_page(body).map_err(|cause| AnswerFault::Unreadable {
            path: asked.path.clone(),
            cause,
        })?
        else {
            return Ok(());
        };
        let mut listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        if asked.sent.is_none() || !listings.open.contains_key(&asked.listing) {
            if listings.open.len() >= MAX_LISTINGS {
                listings.open.clear();
            }
            let bounds = Bounds {
                page_limit: asked.limit.unwrap_or(usize::MAX),
                ..LISTING
            };
            listings
                .open
                .insert(asked.listing.clone(), Paging::new(bounds));
        }
        let paging = listings
            .open
            .get_mut(&asked.listing)
            .expect("just inserted");
        let checked = paging
            .token(asked.sent.as_deref(), page.next.as_deref())
            .and_then(|()| {
                let number = paging.pages();
                let named = page.items.iter().filter(|i| !i.metadata.name.is_empty());
                let mut keys = PageKeys::of(named.map(ItemHead::key))
                    .map_err(|key| PagingFault::Repeated { page: number, key })?;
                // Items without a name (no server's) have no place to check, but count.
                keys.count = page.items.len();
                paging.objects(number, keys)
            });
        let done = checked.is_err() || page.next.is_none();
        if done {
            listings.open.remove(&asked.listing);
        }
        match checked {
            Err(fault) => {
                // Named by the listing, not the page: one fault, however often it recurs.
                let fault = AnswerFault::Paging {
                    path: crate::text::one_line(&asked.listing, 200),
                    fault,
                };
                let note = format!("{fault}; listing again with backoff");
                Health::set_note(&self.health.bad_answers, Some(note));
                listings.faulted = Some(asked.listing.clone());
                Err(fault)
            }
            Ok(()) => {
                if done && listings.faulted.as_deref() == Some(&asked.listing) {
                    listings.faulted = None;
                    Health::set_note(&self.health.bad_answers, None);
                }
                Ok(())
            }
        }
    }
}

/// What a List's page says of its paging.
struct ListPage {
    next: Option<String>,
    items: Vec<ItemHead>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ItemHead {
    metadata: ItemMeta,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ItemMeta {
    name: String,
    namespace: String,
}

impl ItemHead {
    fn key(&self) -> Key<'_> {
        Key {
            namespace: &self.metadata.namespace,
            name: &self.metadata.name,
        }
    }
}

/// The paging of `body` when it is a List (`kind: ...List`); `None` for any other object. Items
/// past the listing's bound are not gathered: the count says enough.
fn list_page(body: &[u8]) -> Result<Option<ListPage>, String> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        metadata: Option<ListMeta>,
        #[serde(default)]
        items: Option<Items>,
    }
    #[derive(Default, Deserialize)]
    #[serde(default)]
    struct ListMeta {
        #[serde(rename = "continue")]
        next: Option<String>,
    }
    let head: Head = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !head.kind.as_deref().is_some_and(|k| k.ends_with("List")) {
        return Ok(None);
    }
    Ok(Some(ListPage {
        next: head.metadata.and_then(|m| m.next).filter(|t| !t.is_empty()),
        items: head.items.map(|i| i.0).unwrap_or_default(),
    }))
}

/// A List's items, at most one past [`LISTING`]'s bound gathered (the check refuses that one).
struct Items(Vec<ItemHead>);

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Gather;
        impl<'de> Visitor<'de> for Gather {
            type Value = Items;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of objects")
            }
            fn visit_unit<E>(self) -> Result<Items, E> {
                Ok(Items(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
                let mut items = Vec::new();
                while items.len() <= LISTING.objects {
                    match seq.next_element::<ItemHead>()? {
                        Some(item) => items.push(item),
                        None => return Ok(Items(items)),
                    }
                }
                // Over the bound: the rest is passed over, each item where it stands.
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Items(items))
            }
        }
        deserializer.deserialize_any(Gather)
    }
}

/// A watch's body, ended with an error at a line over [`MAX_WATCH_LINE`].
pub(crate) struct LineBound<B> {
    inner: B,
    /// Bytes since the last newline.
    line: usize,
    /// The watch, for the error; taken when the error is given.
    path: Option<String>,
}

impl<B> Body for LineBound<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(path) = self.path.as_ref() else {
            return Poll::Ready(None);
        };
        let path = path.clone();
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        if let Some(data) = frame.data_ref() {
            self.line = match memchr::memrchr(b'\n', data) {
                Some(at) => data.len() - at - 1,
                None => self.line + data.len(),
            };
            if self.line > MAX_WATCH_LINE {
                self.path = None;
                return Poll::Ready(Some(Err(Box::new(AnswerFault::LineTooLong { path }))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.path.is_none() || self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers() -> (BoundAnswers, Arc<Health>) {
        let health = Arc::new(Health::default());
        (BoundAnswers::new(Arc::clone(&health)), health)
    }

    fn note(health: &Health) -> Option<String> {
        health.bad_answers.lock().unwrap().clone()
    }

    fn asked(query: &str) -> Asked {
        let request = Request::get(format!("/apis/resource.k8s.io/v1/resourceslices?{query}"))
            .body(())
            .unwrap();
        Asked::of(&request)
    }

    fn page(names: &[&str], next: Option<&str>) -> Vec<u8> {
        let items: Vec<_> = names
            .iter()
            .map(|n| serde_json::json!({"metadata": {"name": n}}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "kind": "ResourceSliceList", "metadata": {"continue": next}, "items": items
        }))
        .unwrap()
    }

    #[test]
    fn a_listing_that_pages_passes_and_one_that_does_not_is_stopped_and_said() {
        let (answers, health) = answers();
        let first = asked("fieldSelector=spec.nodeName%3Dn1&limit=500");
        answers.check(&first, &page(&["a"], Some("t1"))).unwrap();
        let second = asked("fieldSelector=spec.nodeName%3Dn1&limit=500&continue=t1");
        assert_eq!(second.listing, first.listing);
        answers.check(&second, &page(&["b"], None)).unwrap();

        // The same token again: stopped, and /readyz says so until a listing completes.
        answers.check(&first, &page(&["a"], Some("t%2B"))).unwrap();
        let again = asked("fieldSelector=spec.nodeName%3Dn1&limit=500&continue=t%252B");
        let fault = answers
            .check(&again, &page(&["b"], Some("t%2B")))
            .unwrap_err();
        assert!(
            fault.to_string().contains("handed back the continue token"),
            "{fault}"
        );
        let said = note(&health).expect("said on /readyz");
        assert!(said.contains("does not page"), "{said}");
        answers.check(&first, &page(&["a"], None)).unwrap();
        assert_eq!(note(&health), None);

        // A page repeating what was read, and a listing that never ends.
        answers
            .check(&first, &page(&["a", "b"], Some("t1")))
            .unwrap();
        let repeated = answers.check(&second, &page(&["b", "c"], Some("t2")));
        assert!(matches!(
            repeated,
            Err(AnswerFault::Paging {
                fault: PagingFault::Repeated { .. },
                ..
            })
        ));
        answers.check(&first, &page(&[], Some("t0"))).unwrap();
        let mut stopped = None;
        for i in 0..100 {
            let sent = asked(&format!(
                "limit=500&fieldSelector=spec.nodeName%3Dn1&continue=t{i}"
            ));
            if let Err(fault) = answers.check(&sent, &page(&[], Some(&format!("t{}", i + 1)))) {
                stopped = Some((i, fault));
                break;
            }
        }
        let (at, fault) = stopped.expect("stopped");
        assert!(at < LISTING.pages, "{at}");
        assert!(fault.to_string().contains("past 8 pages"), "{fault}");

        // A page of a million `{}`: gathered up to the bound, refused by its count.
        let mut body = br#"{"kind":"ResourceSliceList","metadata":{},"items":["#.to_vec();
        body.extend(std::iter::repeat_n(&b"{},"[..], 1_000_000).flatten());
        body.extend_from_slice(b"{}]}");
        let fault = answers.check(&first, &body).unwrap_err();
        assert!(fault.to_string().contains("past 256 objects"), "{fault}");
        // Other objects are not pages.
        answers.check(&first, br#"{"kind":"Node"}"#).unwrap();
    }

    #[tokio::test]
    async fn a_success_that_is_a_status_of_failure_reaches_kube_rs_as_an_error() {
        use tower::{Layer, ServiceExt};
        let through = |body: &'static str| async move {
            let service = tower::service_fn(move |_: Request<()>| async move {
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(
                    body.as_bytes(),
                ))))
            });
            let request = Request::get("/api/v1/nodes/n1").body(()).unwrap();
            let (answers, _) = answers();
            let answer = answers.layer(service).oneshot(request).await.unwrap();
            let (parts, body) = answer.into_parts();
            (parts.status, body.collect().await.unwrap().to_bytes())
        };
        let (code, body) = through(
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","reason":"Forbidden","code":403}"#,
        )
        .await;
        assert_eq!(code, http::StatusCode::FORBIDDEN);
        let status: kube::core::Status = serde_json::from_slice(&body).unwrap();
        assert_eq!((status.code, status.message.as_str()), (403, "no"));
        // A DELETE's Status of success and any other object pass as they came.
        for sent in [
            r#"{"kind":"Status","status":"Success"}"#,
            r#"{"kind":"Node"}"#,
        ] {
            let (code, body) = through(sent).await;
            assert_eq!((code, &body[..]), (http::StatusCode::OK, sent.as_bytes()));
        }
    }

    #[tokio::test]
    async fn a_watch_line_past_the_bound_ends_the_watch() {
        use http_body_util::StreamBody;
        let chunk = Bytes::from(vec![b'x'; 1 << 20]);
        let frames = (0..20).map(move |_| Ok::<_, std::io::Error>(Frame::data(chunk.clone())));
        let body = StreamBody::new(futures_util::stream::iter(frames));
        let mut bound = LineBound {
            inner: body,
            line: 0,
            path: Some("/watch".into()),
        };
        let mut read = 0;
        let error = loop {
            match bound.frame().await {
                Some(Ok(_)) => read += 1,
                Some(Err(e)) => break e,
                None => panic!("ended without an error"),
            }
        };
        assert_eq!(read, 16);
        assert!(error.to_string().contains("over 16 MiB"), "{error}");
        assert!(bound.frame().await.is_none());
    }
}
