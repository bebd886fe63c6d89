//! Reading objects from a cluster: one paged lister for every [`Kind`], with selectors, paged as
//! kubectl pages and read by the same parser as files ([`crate::fleet::objects`]). The failures a
//! user can act on (unreachable, forbidden, a cluster without `resource.k8s.io/v1`) are one line.
//!
//! The client has kubectl's timeouts: 30 s for TCP, then 10 s for TLS, `--request-timeout` over the
//! whole request. kube-rs has one connect timeout over both steps, so the client is assembled from
//! kube-rs's layers around a connector that times them apart.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;

use crate::api_errors::{MAX_ERROR_BODY, asked_wait, failure, failure_in_success};
use crate::fleet::objects::{Kind, Kinds, Objects};
use crate::fleet::protobuf::{self, ProtobufError};
use crate::kubeconfig::{KubeconfigError, Source};
use crate::paging::{Bounds, PageKeys, Paging, PagingFault};

/// kubectl's page size for lists (`--chunk-size`).
pub(crate) const PAGE_SIZE: usize = 500;

/// The most objects one listing reads: over six times Kubernetes' scalability envelope of
/// 150,000 pods per cluster (sig-scalability's thresholds), and a hundred times the 10,000
/// slices of a 40,000-GPU fleet. Past it a listing is not a cluster's, and is not held.
pub const MAX_LIST_OBJECTS: usize = 1_000_000;

/// The most pages one listing takes: [`MAX_LIST_OBJECTS`] in full pages, and a quarter more.
/// kube-apiserver fills every page but the last, so only a server that does not page (empty
/// pages with new tokens, forever) reaches it.
pub const MAX_LIST_PAGES: usize = MAX_LIST_OBJECTS / PAGE_SIZE * 5 / 4;

/// A listing's bounds (see [`crate::paging`]).
const LIST_BOUNDS: Bounds = Bounds {
    pages: MAX_LIST_PAGES,
    objects: MAX_LIST_OBJECTS,
    page_limit: PAGE_SIZE,
};

/// The most of an error's cause that is quoted from an answer.
const MAX_SHOWN_CAUSE: usize = 400;

/// Notes kept per listing (an object passed over is one): the rest are counted.
const MAX_NOTES: usize = 1000;

/// kubectl's dial timeout: client-go's `net.Dialer{Timeout: 30 * time.Second}`.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// kubectl's TLS handshake timeout: client-go's `TLSHandshakeTimeout: 10 * time.Second`,
/// counted from the moment the TCP connection is open.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most a response's buffer is sized ahead of its bytes: a `Content-Length` is the
/// server's word, not a promise, and the buffer grows past this when the bytes come.
const MAX_BODY_HINT: usize = 64 << 20;

/// The most of one answer that is read: a page of 500 objects at etcd's 1.5 MiB each, as JSON,
/// is under this; past it the answer is not an API server's listing, and is not held.
const MAX_BODY: usize = 2 << 30;

/// How many pages are parsed at once.
const PARSERS: usize = 2;

/// Asks for one encoding of lists instead of kubectl's two (`json` or `protobuf`), so that the
/// tests compare what `caps` reads from each; not for users, hence not a flag.
const ENCODING_VARIABLE: &str = "KUBECTL_MEDIA_LIST_ENCODING";

/// The encodings a listing may come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListEncoding {
    /// kubectl's `Accept` for built-in types: protobuf, else JSON, as the server chooses.
    Negotiated,
    Json,
    Protobuf,
}

impl ListEncoding {
    fn from_env() -> Result<ListEncoding, ClusterError> {
        match std::env::var(ENCODING_VARIABLE) {
            Err(std::env::VarError::NotPresent) => Ok(ListEncoding::Negotiated),
            Ok(value) if value == "json" => Ok(ListEncoding::Json),
            Ok(value) if value == "protobuf" => Ok(ListEncoding::Protobuf),
            Ok(value) => Err(ClusterError::Encoding(value)),
            Err(std::env::VarError::NotUnicode(value)) => {
                Err(ClusterError::Encoding(value.to_string_lossy().into_owned()))
            }
        }
    }

    /// The header for a listing of `kind`: protobuf only where we read it.
    fn header(self, kind: Kind, wanted: Kinds) -> &'static str {
        const JSON: &str = "application/json";
        match (self, kind) {
            (_, kind) if !reads_protobuf(kind, wanted) => JSON,
            (ListEncoding::Negotiated, _) => {
                "application/vnd.kubernetes.protobuf, application/json"
            }
            (ListEncoding::Json, _) => JSON,
            (ListEncoding::Protobuf, _) => protobuf::MEDIA_TYPE,
        }
    }
}

/// The kinds read as protobuf: those a fleet has tens of thousands of, as the fleet model
/// keeps them (whole claims are for `why`, which reads few).
fn reads_protobuf(kind: Kind, wanted: Kinds) -> bool {
    match kind {
        Kind::ResourceSlice => true,
        Kind::ResourceClaim => wanted.allocations_only(),
        _ => false,
    }
}

/// One answer's body and its `Content-Type`.
struct Reply {
    body: Vec<u8>,
    content_type: Option<http::HeaderValue>,
}

/// How an answer's body is encoded, by its `Content-Type` (parameters ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Json,
    Protobuf,
}

fn encoding(content_type: Option<&http::HeaderValue>) -> Option<Encoding> {
    let value = String::from_utf8_lossy(content_type?.as_bytes());
    let media_type = value.split(';').next()?.trim().to_ascii_lowercase();
    match media_type.as_str() {
        "application/json" => Some(Encoding::Json),
        protobuf::MEDIA_TYPE => Some(Encoding::Protobuf),
        _ => None,
    }
}

/// A `Content-Type` as an error line shows it.
fn shown(content_type: Option<&http::HeaderValue>) -> String {
    content_type.map_or_else(
        || "without a Content-Type".to_owned(),
        |v| String::from_utf8_lossy(v.as_bytes()).into_owned(),
    )
}

/// One page of a listing, ready to parse, with the token of the next.
enum Page {
    Json(String),
    /// The list inside the envelope.
    Protobuf(Vec<u8>),
}

/// How to reach the cluster: kubectl's own flags, which a plugin must handle itself.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    pub source: Source,
    /// `-n/--namespace`; `None` is the context's namespace.
    pub namespace: Option<String>,
    /// Per request; `None` waits as long as the server takes.
    pub request_timeout: Option<Duration>,
}

/// Which namespaces a listing of a namespaced kind covers (ignored for cluster-scoped kinds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// `-A/--all-namespaces`.
    All,
    One(String),
}

/// One listing: a kind, where, and which of its objects.
#[derive(Clone, Debug)]
pub struct ListRequest<'a> {
    pub kind: Kind,
    pub namespaces: &'a Namespaces,
    /// As `kubectl get -l`: `app=x,tier in (a,b)`.
    pub label_selector: Option<&'a str>,
    /// As `kubectl get --field-selector`: `spec.nodeName=n1`.
    pub field_selector: Option<&'a str>,
}

impl ListRequest<'_> {
    /// The collection's path and query, without paging.
    fn uri(&self) -> String {
        let mut path = if self.kind.group().is_empty() {
            format!("/api/{}", self.kind.api_version())
        } else {
            format!("/apis/{}", self.kind.api_version())
        };
        if let (true, Namespaces::One(namespace)) = (self.kind.namespaced(), self.namespaces) {
            path.push_str("/namespaces/");
            path.push_str(&percent_encode(namespace));
        }
        path.push('/');
        path.push_str(self.kind.plural());
        path.push_str(&format!("?limit={PAGE_SIZE}"));
        if let Some(selector) = self.label_selector.filter(|s| !s.is_empty()) {
            path.push_str("&labelSelector=");
            path.push_str(&percent_encode(selector));
        }
        if let Some(selector) = self.field_selector.filter(|s| !s.is_empty()) {
            path.push_str("&fieldSelector=");
            path.push_str(&percent_encode(selector));
        }
        path
    }

    /// How a message names where the listing looked, as the API server's own messages do.
    fn scope(&self) -> String {
        match (self.kind.namespaced(), self.namespaces) {
            (true, Namespaces::One(namespace)) => format!("in the namespace {namespace:?}"),
            _ => "at the cluster scope".to_string(),
        }
    }
}

/// Why reading from the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{0} (hint: {hint})", hint = kubeconfig_hint(.0))]
    Config(#[from] KubeconfigError),
    #[error(
        "the Kubernetes API at {server} refused our credentials (401 Unauthorized) (hint: log in again, or check the user of the kubeconfig context)"
    )]
    Unauthorized { server: String },
    #[error(
        "cannot reach the Kubernetes API at {server}: {cause} (hint: check --context and --kubeconfig, or read objects from a file with -f)"
    )]
    Unreachable { server: String, cause: String },
    #[error(
        "the Kubernetes API at {server} did not answer within {timeout:?} (hint: raise --request-timeout, or read objects from a file with -f)"
    )]
    Timeout { server: String, timeout: Duration },
    #[error(
        "forbidden: cannot {verb} {resource} {scope}: {message} (hint: ask for a role that allows '{verb}' on {resource})"
    )]
    Forbidden {
        verb: &'static str,
        resource: &'static str,
        scope: String,
        message: String,
    },
    /// A 404 where discovery shows the API version missing.
    #[error("the cluster at {server} does not serve {resource} in {api_version} ({listed}): {why}", why = not_served(.api_version))]
    NotServed {
        server: String,
        resource: &'static str,
        api_version: &'static str,
        /// What discovery lists instead.
        listed: String,
    },
    /// A 404 where discovery lists the API version: the version is not to blame.
    #[error(
        "the Kubernetes API at {server} answered 404 to GET {path}, though its discovery lists {api_version}: {message} (hint: check that the server of the kubeconfig context is the API server itself, not a proxy or a path below it)"
    )]
    NotFound {
        server: String,
        path: String,
        api_version: &'static str,
        message: String,
    },
    #[error(
        "the Kubernetes API at {server} refused to {verb} {resource}: {message} ({code} {reason})"
    )]
    Api {
        server: String,
        verb: &'static str,
        resource: &'static str,
        code: u16,
        reason: String,
        message: String,
    },
    // The cause may quote the answer (a parser's message quotes a value of any length).
    #[error("{resource} from {server}: {}", crate::text::elide(.cause, MAX_SHOWN_CAUSE))]
    Response {
        server: String,
        resource: &'static str,
        cause: String,
    },
    #[error(
        "{resource} from {server}: {} (hint: check that the server of the kubeconfig context is the API server itself, not a proxy that rewrites its answers)",
        crate::kubeconfig::chain(.cause)
    )]
    Protobuf {
        server: String,
        resource: &'static str,
        #[source]
        cause: ProtobufError,
    },
    #[error(
        "{resource} from {server}: the answer is {content_type:?}, neither JSON nor protobuf (hint: check that the server of the kubeconfig context is the API server itself, not a proxy or a path below it)"
    )]
    ContentType {
        server: String,
        resource: &'static str,
        content_type: String,
    },
    /// A listing that does not page as kube-apiserver pages ([`crate::paging`]).
    #[error(
        "list {resource} from {server}: {fault} (hint: check that the server of the kubeconfig context is the API server itself, not a proxy that rewrites its answers)"
    )]
    Paging {
        server: String,
        resource: &'static str,
        #[source]
        fault: PagingFault,
    },
    /// A 3xx: kubectl (Go's HTTP client) follows it; this client does not.
    #[error(
        "the Kubernetes API at {server} answered {code} to GET {path} with a redirect to {location}, which kubectl follows and kubectl media does not (hint: set the server of the kubeconfig context to the address the API server is at; a redirect to a login page is a proxy in front of it that wants a login kubectl media cannot do)"
    )]
    Redirect {
        server: String,
        path: String,
        code: u16,
        location: String,
    },
    /// The server's certificate is refused ([`crate::fleet::tls`]).
    #[error("the Kubernetes API at {server} sent a certificate that {problem} (hint: {hint})")]
    Certificate {
        server: String,
        problem: String,
        hint: &'static str,
    },
    #[error("{ENCODING_VARIABLE} is {0:?} (hint: json or protobuf, or unset for kubectl's order)")]
    Encoding(String),
    #[error(
        "{resource} from {server}: the answer is over {} MiB, more than an API server sends for one page (hint: check that the server of the kubeconfig context is the API server itself)",
        MAX_BODY >> 20
    )]
    TooLarge {
        server: String,
        resource: &'static str,
    },
}

/// What to do about a kubeconfig that cannot be used, beside kubectl: what was given on the
/// command line is never suggested as if it were not.
fn kubeconfig_hint(error: &KubeconfigError) -> String {
    use crate::kubeconfig::{FileFault, Origin};
    match error {
        KubeconfigError::Missing { .. } => {
            "pass --kubeconfig or set KUBECONFIG, or read objects from a file with -f".into()
        }
        KubeconfigError::NoSuchContext { by_flag, .. } => match error.similar_context() {
            Some(similar) => format!("a similar context exists: '{similar}'"),
            None if *by_flag => {
                "give --context one of them ('kubectl config get-contexts' lists them all)".into()
            }
            None => "choose one with --context, or set one with 'kubectl config use-context NAME'"
                .into(),
        },
        KubeconfigError::File { origin, fault, .. } => match (origin, fault) {
            (Origin::Flag, FileFault::Directory) => {
                "--kubeconfig takes the kubeconfig file itself, such as ~/.kube/config".into()
            }
            (Origin::Flag, FileFault::NotThere) => {
                "check the path given to --kubeconfig, or leave --kubeconfig out for KUBECONFIG \
                 and ~/.kube/config"
                    .into()
            }
            (Origin::Flag, FileFault::Unusable) => {
                "fix that file or give --kubeconfig another, or read objects from a file with -f"
                    .into()
            }
            (Origin::Env, _) => {
                "fix that file or take it out of KUBECONFIG, or read objects from a file with -f"
                    .into()
            }
            (Origin::Home, _) => "fix that file, or pass --kubeconfig or set KUBECONFIG, or read \
                                  objects from a file with -f"
                .into(),
        },
        KubeconfigError::Invalid { .. } => {
            "pass --kubeconfig or --context, set KUBECONFIG, or read objects from a file with -f"
                .into()
        }
        KubeconfigError::NamedFile(_) => {
            "fix the file the kubeconfig names, or read objects from a file with -f".into()
        }
        KubeconfigError::Exec(e) => e.hint(),
    }
}

fn not_served(api_version: &str) -> &'static str {
    if api_version == crate::fleet::objects::RESOURCE_API_VERSION {
        "it is older than Kubernetes 1.34, or the resource.k8s.io/v1 API is disabled (hint: DRA with resource.k8s.io/v1 needs Kubernetes 1.34 or newer)"
    } else {
        "the API server does not know this resource (hint: check the server and --context)"
    }
}

/// A connected client, the server it talks to (for messages) and the namespace in effect.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    server: String,
    namespace: String,
    timeout: Option<Duration>,
    /// The largest response body read so far, to size the next one's buffer.
    largest_body: Arc<AtomicUsize>,
    encoding: ListEncoding,
}

impl Cluster {
    /// Loads the kubeconfig and builds a client. Nothing is sent yet.
    pub async fn connect(connection: &Connection) -> Result<Cluster, ClusterError> {
        let encoding = ListEncoding::from_env()?;
        let exec = crate::kubeconfig::ExecOptions {
            timeout: connection.request_timeout,
            stderr: crate::kubeconfig::Stderr::PassThrough,
        };
        let config = crate::kubeconfig::load(&connection.source, exec).await?;
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let namespace = connection
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = client(&config).map_err(|e| {
            ClusterError::Config(KubeconfigError::Invalid {
                cause: crate::kubeconfig::chain(&e),
            })
        })?;
        Ok(Cluster {
            client,
            server,
            namespace,
            timeout: connection.request_timeout,
            largest_body: Arc::default(),
            encoding,
        })
    }

    /// Asks for lists in one encoding only (the tests compare what each reads).
    pub fn list_encoding(&mut self, encoding: ListEncoding) {
        self.encoding = encoding;
    }

    /// The namespace in effect: `-n`, else the context's, else `default` (as kubectl).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The API server's minor version (`/version`), for its feature-gate defaults; `None` when
    /// it does not say (the caller then states what it assumed).
    pub(crate) async fn minor_version(&self) -> Option<u32> {
        let info = self.client.apiserver_version().await.ok()?;
        info.minor.trim_end_matches('+').parse().ok()
    }

    /// Lists every ResourceSlice, page by page, into `objects`.
    pub(crate) async fn list_slices(&self, objects: &mut Objects) -> Result<(), ClusterError> {
        self.list(
            &ListRequest {
                kind: Kind::ResourceSlice,
                namespaces: &Namespaces::All,
                label_selector: None,
                field_selector: None,
            },
            objects,
        )
        .await
    }

    /// Lists every object a request selects, page by page, into `objects`. The next page is
    /// asked for before the current one is parsed, so the server prepares it while we read: a
    /// fleet's listing costs about the larger of the two, not their sum.
    pub async fn list(
        &self,
        request: &ListRequest<'_>,
        objects: &mut Objects,
    ) -> Result<(), ClusterError> {
        let resource = request.kind.resource();
        let scope = request.scope();
        let base = request.uri();
        let kind = request.kind;
        let wanted = objects.wanted();
        let accept = self.encoding.header(kind, wanted);
        let fetch = |token: Option<String>| {
            let mut uri = base.clone();
            if let Some(token) = token {
                uri.push_str("&continue=");
                uri.push_str(&percent_encode(&token));
            }
            let cluster = self.clone();
            let scope = scope.clone();
            tokio::spawn(async move {
                let request = http::Request::get(uri)
                    .header(http::header::ACCEPT, accept)
                    .body(Vec::new())
                    .map_err(|e| ClusterError::Response {
                        server: cluster.server.clone(),
                        resource,
                        cause: e.to_string(),
                    })?;
                cluster.request_body(request, "list", kind, scope).await
            })
        };
        // Pages are parsed on blocking threads, two at a time (one per core of a small
        // machine), and merged in order; more in flight would only hold more pages in memory.
        let mut parsing: VecDeque<(usize, tokio::task::JoinHandle<Result<Parsed, ClusterError>>)> =
            VecDeque::new();
        let mut paging = Paging::new(LIST_BOUNDS);
        let notes_before = objects.notes.len();
        let mut notes_dropped = 0;
        let mut sent: Option<String> = None;
        let mut next = Some(fetch(None));
        let failed = |fault| ClusterError::Paging {
            server: self.server.clone(),
            resource,
            fault,
        };
        while let Some(pending) = next.take() {
            let (page, token) = self.page(self.joined(pending, resource).await??, kind, wanted)?;
            // The token is checked before the next page is asked for.
            paging
                .token(sent.as_deref(), token.as_deref())
                .map_err(failed)?;
            next = token.clone().map(|t| fetch(Some(t)));
            sent = token;
            if parsing.len() >= PARSERS {
                let (number, oldest) = parsing.pop_front().expect("not empty");
                let merged = self
                    .merge(objects, &mut paging, number, oldest, resource)
                    .await;
                if let Err(e) = merged {
                    next.inspect(tokio::task::JoinHandle::abort);
                    return Err(e);
                }
                notes_dropped += cap_notes(&mut objects.notes, notes_before);
            }
            let server = self.server.clone();
            let number = paging.pages();
            parsing.push_back((
                number,
                tokio::task::spawn_blocking(move || parse_page(page, kind, wanted, number, server)),
            ));
        }
        for (number, parse) in parsing {
            self.merge(objects, &mut paging, number, parse, resource)
                .await?;
            notes_dropped += cap_notes(&mut objects.notes, notes_before);
        }
        if notes_dropped > 0 {
            objects.notes.push(format!(
                "{resource}: {notes_dropped} more objects skipped (only the first {MAX_NOTES} are named)"
            ));
        }
        objects.note_nameless(&format!("{resource} from {}", self.server));
        Ok(())
    }

    /// Adds one parsed page to `objects`, once the listing's order and bounds allow it.
    async fn merge(
        &self,
        objects: &mut Objects,
        paging: &mut Paging,
        number: usize,
        parse: tokio::task::JoinHandle<Result<Parsed, ClusterError>>,
        resource: &'static str,
    ) -> Result<(), ClusterError> {
        let parsed = self.joined(parse, resource).await??;
        paging
            .objects(number, parsed.keys)
            .map_err(|fault| ClusterError::Paging {
                server: self.server.clone(),
                resource,
                fault,
            })?;
        objects.extend(parsed.objects);
        Ok(())
    }

    /// A page as its encoding has it, and the token of the next one.
    fn page(
        &self,
        reply: Reply,
        kind: Kind,
        wanted: Kinds,
    ) -> Result<(Page, Option<String>), ClusterError> {
        let resource = kind.resource();
        let encoding =
            encoding(reply.content_type.as_ref()).ok_or_else(|| ClusterError::ContentType {
                server: self.server.clone(),
                resource,
                content_type: shown(reply.content_type.as_ref()),
            })?;
        match encoding {
            Encoding::Json => {
                let text = String::from_utf8(reply.body).map_err(|e| ClusterError::Response {
                    server: self.server.clone(),
                    resource,
                    cause: format!("unreadable response: {e}"),
                })?;
                let token = crate::fleet::objects::continue_token(&text)
                    .map_err(unreadable_json(self.server.clone(), resource))?;
                Ok((Page::Json(text), token))
            }
            // Only asked for the kinds read so; a server that sends it for others is not obeying.
            Encoding::Protobuf if !reads_protobuf(kind, wanted) => Err(ClusterError::ContentType {
                server: self.server.clone(),
                resource,
                content_type: protobuf::MEDIA_TYPE.to_owned(),
            }),
            Encoding::Protobuf => {
                let failed = |cause| ClusterError::Protobuf {
                    server: self.server.clone(),
                    resource,
                    cause,
                };
                let list_kind = format!("{}List", kind.name());
                let list =
                    protobuf::unwrap(reply.body, kind.api_version(), &list_kind).map_err(failed)?;
                let token = protobuf::continue_token(&list).map_err(failed)?;
                Ok((Page::Protobuf(list), token))
            }
        }
    }

    async fn joined<T>(
        &self,
        task: tokio::task::JoinHandle<T>,
        resource: &'static str,
    ) -> Result<T, ClusterError> {
        task.await.map_err(|e| ClusterError::Response {
            server: self.server.clone(),
            resource,
            cause: format!("a worker task failed: {e}"),
        })
    }

    async fn request_body(
        &self,
        request: http::Request<Vec<u8>>,
        verb: &'static str,
        kind: Kind,
        scope: String,
    ) -> Result<Reply, ClusterError> {
        let path = request.uri().to_string();
        match self.timed(self.body(request)).await? {
            Ok(reply) => Ok(reply),
            Err(kube::Error::Service(e)) if e.is::<TooLarge>() => Err(ClusterError::TooLarge {
                server: self.server.clone(),
                resource: kind.resource(),
            }),
            Err(kube::Error::Service(e)) if e.is::<Redirected>() => {
                let redirected = e.downcast_ref::<Redirected>().expect("checked");
                Err(ClusterError::Redirect {
                    server: self.server.clone(),
                    path: crate::text::one_line(&path, 200),
                    code: redirected.code,
                    location: redirected.location.clone(),
                })
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(self.not_found(kind, path, status.message).await)
            }
            Err(e) => Err(self.classify(e, verb, kind, scope)),
        }
    }

    /// A response's body, or its error as a `Status` ([`failure`]). An answer that asks
    /// to be asked again later (a 429 or a 5xx with `Retry-After`, as kube-apiserver's priority
    /// and fairness sends) is, after the wait it asks for, up to [`MAX_RETRIES`] times, as
    /// client-go does; `--request-timeout` bounds the whole (see [`Self::timed`]).
    async fn body(&self, mut request: http::Request<Vec<u8>>) -> Result<Reply, kube::Error> {
        let mut retries = 0;
        loop {
            let again = (retries < MAX_RETRIES).then(|| copy(&request));
            match self.body_once(request).await? {
                Answer::Wait(wait, status) => match again {
                    Some(again) => {
                        tokio::time::sleep(wait).await;
                        retries += 1;
                        request = again;
                    }
                    None => return Err(kube::Error::Api(status)),
                },
                Answer::Done(done) => return done,
            }
        }
    }

    /// One request of [`Self::body`]. Unlike kube-rs's `request_text`, the body is gathered
    /// into one buffer sized by `Content-Length`, or else by the largest body this client has
    /// read so far (the pages of a listing are alike), and not copied again: on a fleet's
    /// listing, kube-rs's growing buffer and its copy into a `String` were two more passes over
    /// every byte and most of the fresh memory the process touched.
    async fn body_once(&self, request: http::Request<Vec<u8>>) -> Result<Answer, kube::Error> {
        use http_body_util::BodyExt;

        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await?;
        let (parts, mut frames) = response.into_parts();
        let expected = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        // An eighth over the largest so far: a page a few bytes longer than the last would
        // otherwise double the buffer (3.2 MiB for a 1.6 MiB protobuf page of slices).
        let hint = expected
            .unwrap_or_else(|| {
                let largest = self.largest_body.load(Ordering::Relaxed);
                largest + largest / 8
            })
            .min(MAX_BODY_HINT);
        let code = parts.status;
        if code.is_redirection() {
            let location = parts.headers.get(http::header::LOCATION).map_or_else(
                || "nowhere (no Location)".to_owned(),
                |l| crate::text::one_line(&String::from_utf8_lossy(l.as_bytes()), 200),
            );
            return Err(kube::Error::Service(Box::new(Redirected {
                code: code.as_u16(),
                location,
            })));
        }
        let failed = code.is_client_error() || code.is_server_error();
        // An error answer is read only as far as its message needs (a Status is far smaller).
        let (hint, limit) = if failed {
            (0, MAX_ERROR_BODY)
        } else {
            (hint, MAX_BODY)
        };
        let mut body = Vec::with_capacity(hint);
        while let Some(frame) = frames.frame().await {
            if let Ok(data) = frame?.into_data() {
                if body.len() + data.len() > limit {
                    if failed {
                        body.extend_from_slice(&data[..limit - body.len()]);
                        break;
                    }
                    return Err(kube::Error::Service(Box::new(TooLarge)));
                }
                body.extend_from_slice(&data);
            }
        }
        if !failed {
            self.largest_body.fetch_max(body.len(), Ordering::Relaxed);
        }
        let content_type = parts.headers.get(http::header::CONTENT_TYPE).cloned();
        if failed {
            // Asked for protobuf, kube-apiserver sends its `Status` so too.
            let text = match encoding(content_type.as_ref()) {
                Some(Encoding::Protobuf) => protobuf::status_json(&body),
                _ => None,
            }
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            let status = failure(code, &parts.headers, &text);
            return Ok(match asked_wait(code, &parts.headers) {
                Some(wait) => Answer::Wait(wait, status.boxed()),
                None => Answer::Done(Err(kube::Error::Api(status.boxed()))),
            });
        }
        // A 200 whose body is a `Status` of failure is an error, as client-go takes it.
        let sent_status = match encoding(content_type.as_ref()) {
            Some(Encoding::Protobuf) => {
                protobuf::status_json(&body).and_then(|json| failure_in_success(json.as_bytes()))
            }
            _ => failure_in_success(&body),
        };
        if let Some(status) = sent_status {
            return Ok(Answer::Done(Err(kube::Error::Api(status.boxed()))));
        }
        Ok(Answer::Done(Ok(Reply { body, content_type })))
    }

    /// `--request-timeout` over a whole call, connection included (Go's `http.Client.Timeout`).
    async fn timed<T>(&self, call: impl Future<Output = T>) -> Result<T, ClusterError> {
        match self.timeout {
            Some(timeout) => {
                tokio::time::timeout(timeout, call)
                    .await
                    .map_err(|_| ClusterError::Timeout {
                        server: self.server.clone(),
                        timeout,
                    })
            }
            None => Ok(call.await),
        }
    }

    /// A 404 is the cluster's version only when discovery says the API version is not served
    /// (kubectl's own "the server doesn't have a resource type" comes from discovery too);
    /// otherwise it is said as it came. When discovery itself fails, nobody is blamed.
    async fn not_found(&self, kind: Kind, path: String, message: String) -> ClusterError {
        let (group, version) = match kind.api_version().split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", kind.api_version()),
        };
        let discovery = if group.is_empty() {
            "/api".to_string()
        } else {
            format!("/apis/{group}")
        };
        let listed: Option<Vec<String>> = match http::Request::get(&discovery).body(Vec::new()) {
            Err(_) => None,
            Ok(request) => match self.timed(self.body(request)).await {
                Ok(Ok(reply)) => served_versions(&String::from_utf8_lossy(&reply.body)),
                // No such group at all.
                Ok(Err(kube::Error::Api(status))) if status.code == 404 => Some(Vec::new()),
                _ => None,
            },
        };
        match listed {
            Some(listed) if !listed.iter().any(|v| v == version) => ClusterError::NotServed {
                server: self.server.clone(),
                resource: kind.resource(),
                api_version: kind.api_version(),
                listed: if listed.is_empty() {
                    format!(
                        "its discovery lists no {}",
                        if group.is_empty() { "core API" } else { group }
                    )
                } else {
                    let full: Vec<String> = listed
                        .iter()
                        .map(|v| {
                            if group.is_empty() {
                                v.clone()
                            } else {
                                format!("{group}/{v}")
                            }
                        })
                        .collect();
                    format!("its discovery lists {} only", full.join(", "))
                },
            },
            _ => ClusterError::NotFound {
                server: self.server.clone(),
                path,
                api_version: kind.api_version(),
                message,
            },
        }
    }

    fn classify(
        &self,
        error: kube::Error,
        verb: &'static str,
        kind: Kind,
        scope: String,
    ) -> ClusterError {
        let server = self.server.clone();
        let resource = kind.resource();
        match error {
            kube::Error::Api(status) => match status.code {
                401 => ClusterError::Unauthorized { server },
                403 => ClusterError::Forbidden {
                    verb,
                    resource,
                    scope,
                    message: status.message,
                },
                code => ClusterError::Api {
                    server,
                    verb,
                    resource,
                    code,
                    reason: status.reason,
                    message: status.message,
                },
            },
            other => match crate::fleet::tls::certificate_problem(&other) {
                Some(refused) => ClusterError::Certificate {
                    server,
                    problem: refused.problem,
                    hint: refused.hint,
                },
                None => ClusterError::Unreachable {
                    server,
                    cause: connect_cause(&other),
                },
            },
        }
    }
}

/// How many times one request is sent again when its answer asks for that (client-go's
/// `maxRetries`).
const MAX_RETRIES: usize = 10;

/// What one request came to: its body or error, or an error that asks to wait and ask again.
enum Answer {
    Done(Result<Reply, kube::Error>),
    Wait(Duration, Box<kube::core::Status>),
}

/// The same request again (the plugin's requests are GETs with small bodies).
fn copy(request: &http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    let mut again = http::Request::new(request.body().clone());
    *again.method_mut() = request.method().clone();
    *again.uri_mut() = request.uri().clone();
    *again.version_mut() = request.version();
    *again.headers_mut() = request.headers().clone();
    again
}

/// What a user can act on in a failed connection: which of kubectl's timeouts ran out, else
/// the innermost cause ("Connection refused (os error 111)", "dns error"), not kube's or
/// hyper's wrappers around it.
fn connect_cause(e: &kube::Error) -> String {
    let mut current: Option<&dyn std::error::Error> = Some(e);
    let mut last: &dyn std::error::Error = e;
    while let Some(err) = current {
        if let Some(timeout) = err.downcast_ref::<HandshakeTimeout>() {
            return timeout.to_string();
        }
        // hyper-util's dial timeout: a TimedOut io::Error under "tcp connect error".
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return format!("no TCP connection within {DIAL_TIMEOUT:?}");
        }
        last = err;
        current = err.source();
    }
    let text = last.to_string();
    if text.is_empty() {
        crate::kubeconfig::chain(e)
    } else {
        text
    }
}

/// An answer over [`MAX_BODY`], stopped there.
#[derive(Debug)]
struct TooLarge;

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an answer over {} MiB", MAX_BODY >> 20)
    }
}

impl std::error::Error for TooLarge {}

/// A 3xx answer, not followed.
#[derive(Debug)]
struct Redirected {
    code: u16,
    location: String,
}

impl std::fmt::Display for Redirected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a redirect ({}) to {}", self.code, self.location)
    }
}

impl std::error::Error for Redirected {}

/// The TLS handshake did not finish in time.
#[derive(Debug)]
struct HandshakeTimeout(Duration);

impl std::fmt::Display for HandshakeTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TLS handshake timeout: the server accepted the connection but did not complete a TLS handshake within {:?}",
            self.0
        )
    }
}

impl std::error::Error for HandshakeTimeout {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// A kube client with kubectl's connection timeouts, built from the same layers as kube-rs's
/// own (`kube::client::ConfigExt`): base URI, authentication, extra headers, rustls.
fn client(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt;
    if config.proxy_url.is_some() {
        // `proxy-url` (http, https or socks5, as kubectl takes it) goes through kube-rs's own
        // proxy connectors; its one connect timeout then stands for kubectl's two.
        return kube::Client::try_from(config.clone());
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(DIAL_TIMEOUT));
    // As kubectl: Go sets TCP_NODELAY on every TCP connection it opens. Without it, a
    // response's last small segment can wait for a delayed ACK (40 ms on Linux), once per page.
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(Dial(http))?;
    let connector = Handshake {
        inner: https,
        timeout: TLS_HANDSHAKE_TIMEOUT,
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, kube::client::Body>(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

thread_local! {
    /// Hands the "TCP is up" signal from [`Handshake::call`] to the [`Dial::call`] that the
    /// TLS connector makes synchronously inside it, on the same thread (hyper-rustls starts the
    /// dial in its `call`). Per call, so concurrent connections never share a signal.
    static ON_CONNECTED: std::cell::Cell<Option<tokio::sync::oneshot::Sender<()>>> =
        const { std::cell::Cell::new(None) };
}

/// The TCP step: hyper-util's connector (which applies [`DIAL_TIMEOUT`]), saying when it is done.
#[derive(Clone)]
struct Dial(HttpConnector);

impl tower::Service<http::Uri> for Dial {
    type Response = <HttpConnector as tower::Service<http::Uri>>::Response;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connected = ON_CONNECTED.take();
        let dial = self.0.call(uri);
        Box::pin(async move {
            let stream = dial.await?;
            if let Some(connected) = connected {
                let _ = connected.send(());
            }
            Ok(stream)
        })
    }
}

/// The whole connection (TCP, then TLS): once [`Dial`] says TCP is up, the rest must finish
/// within `timeout`, as Go's `Transport.TLSHandshakeTimeout`.
#[derive(Clone)]
struct Handshake<S> {
    inner: S,
    timeout: Duration,
}

impl<S> tower::Service<http::Uri> for Handshake<S>
where
    S: tower::Service<http::Uri>,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (tx, connected) = tokio::sync::oneshot::channel();
        ON_CONNECTED.set(Some(tx));
        let connecting = self.inner.call(uri);
        // Not taken when the connector failed before dialling: the signal is dropped.
        drop(ON_CONNECTED.take());
        let timeout = self.timeout;
        Box::pin(async move {
            let mut connecting = std::pin::pin!(connecting);
            tokio::select! {
                biased;
                done = &mut connecting => return done.map_err(Into::into),
                up = connected => {
                    if up.is_err() {
                        // The dial failed (its error is the connector's answer).
                        return connecting.await.map_err(Into::into);
                    }
                }
            }
            match tokio::time::timeout(timeout, connecting).await {
                Ok(done) => done.map_err(Into::into),
                Err(_) => Err(Box::new(HandshakeTimeout(timeout)) as BoxError),
            }
        })
    }
}

/// One page parsed: its objects and their keys, in order (checked within the page).
struct Parsed {
    objects: Objects,
    keys: PageKeys,
}

/// Parses page `number` of a listing of `kind` (on a blocking thread).
fn parse_page(
    page: Page,
    kind: Kind,
    wanted: Kinds,
    number: usize,
    server: String,
) -> Result<Parsed, ClusterError> {
    let resource = kind.resource();
    let mut parsed = Objects::page(wanted, PAGE_SIZE);
    match page {
        Page::Json(text) => {
            parsed
                .add_json(&text)
                .map_err(unreadable_json(server.clone(), resource))?;
        }
        Page::Protobuf(list) => {
            let failed = |cause| ClusterError::Protobuf {
                server: server.clone(),
                resource,
                cause,
            };
            // `page` lets through the kinds of `reads_protobuf` only.
            if kind == Kind::ResourceClaim {
                parsed.allocated = protobuf::allocated(&list, PAGE_SIZE).map_err(failed)?;
                let before = parsed.allocated.len();
                parsed.allocated.retain(|c| !c.name.is_empty());
                parsed.nameless = before - parsed.allocated.len();
            } else {
                parsed.slices = protobuf::slices(&list, PAGE_SIZE).map_err(failed)?;
                let before = parsed.slices.len();
                parsed.slices.retain(|s| !s.metadata.name.is_empty());
                parsed.nameless = before - parsed.slices.len();
            }
        }
    }
    let mut keys = PageKeys::of(parsed.keys()).map_err(|key| ClusterError::Paging {
        server,
        resource,
        fault: PagingFault::Repeated { page: number, key },
    })?;
    // Items without a name count against the bounds, though they are not kept.
    keys.count += parsed.nameless;
    Ok(Parsed {
        objects: parsed,
        keys,
    })
}

/// Drops the notes past [`MAX_NOTES`] of those after `before`; returns how many.
fn cap_notes(notes: &mut Vec<String>, before: usize) -> usize {
    let keep = before + MAX_NOTES;
    let dropped = notes.len().saturating_sub(keep);
    notes.truncate(keep);
    dropped
}

/// A JSON page that does not parse, as the error `caps` reports.
fn unreadable_json(
    server: String,
    resource: &'static str,
) -> impl FnOnce(serde_json::Error) -> ClusterError {
    move |e| ClusterError::Response {
        server,
        resource,
        cause: format!("unreadable response: {e}"),
    }
}

/// The versions a discovery document lists: an `APIGroup` (`versions[].version`) or the core
/// group's `APIVersions` (`versions: ["v1"]`).
fn served_versions(text: &str) -> Option<Vec<String>> {
    let document: serde_json::Value = serde_json::from_str(text).ok()?;
    let versions = document.get("versions")?.as_array()?;
    Some(
        versions
            .iter()
            .filter_map(|v| v.as_str().or_else(|| v.get("version")?.as_str()))
            .map(str::to_owned)
            .collect(),
    )
}

/// Percent-encodes a query value: continue tokens are base64 (`=`, `+`, `/`), selectors hold
/// `=`, `!`, `,`, spaces and parentheses.
fn percent_encode(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_are_encoded() {
        assert_eq!(percent_encode("ab+/=c"), "ab%2B%2F%3Dc");
    }
}
