//! The HTTP side: routing Kubernetes API paths to verbs, discovery documents, `Table` answers
//! for kubectl, watch streams, fault injection and the request log.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use super::resources::{self, RESOURCES, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::{ApiError, FieldError};
use super::store::{self, Manager, Store, WatchFilter};

/// The Kubernetes minor version the server claims to be: 1.36 while DRAConsumableCapacity is
/// on (its first release with the gate on by default), 1.34 while it is off.
fn server_minor(consumable_capacity: bool) -> &'static str {
    if consumable_capacity { "36" } else { "34" }
}

/// One request as the server saw and answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection;
    /// `get` for discovery and other non-resource paths.
    pub verb: String,
    /// The HTTP method.
    pub method: String,
    /// The URL path.
    pub path: String,
    /// The raw query string (still percent-encoded), empty when absent.
    pub query: String,
    /// The status code answered.
    pub status: u16,
    /// The request's Content-Type, if any (tells a merge patch from an apply).
    pub content_type: Option<String>,
    /// The plural resource name, for resource requests.
    pub resource: Option<String>,
    /// The User-Agent header, if any.
    pub user_agent: Option<String>,
    /// When the answer was sent.
    pub answered_at: std::time::Instant,
}

impl RequestRecord {
    /// Whether the request changed (or tried to change) stored state.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// The decoded value of a query parameter.
    pub fn query_param(&self, key: &str) -> Option<String> {
        parse_query(&self.query).remove(key)
    }
}

/// A failure to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 404 NotFound as a `Status` ("the server could not find the requested resource").
    NotFound,
    /// 500 InternalError.
    InternalError,
    /// 503 ServiceUnavailable.
    ServiceUnavailable,
    /// 429 as kube-apiserver's priority-and-fairness and max-in-flight filters answer it (and
    /// the one that turns requests away while the server shuts down): Go's `http.Error`, one
    /// line of plain text and `Retry-After: seconds`, no `Status` (k8s.io/apiserver
    /// `pkg/server/filters`, `tooManyRequests`).
    TooManyRequests {
        /// Value of the Retry-After header.
        retry_after_seconds: u64,
    },
    /// 403 Forbidden, as the authorizer words a missing permission for the request's verb and
    /// resource (for a user named `system:anonymous`).
    Forbidden,
    /// 401 Unauthorized: the credentials were refused (expired token, wrong certificate).
    Unauthorized,
    /// 409 Conflict, worded as for a stale resourceVersion (another writer got there first);
    /// nothing is stored.
    Conflict,
    /// A ValidatingAdmissionPolicy denying the write (see [`ApiError::admission_denied`]):
    /// 422 Invalid, or 403 Forbidden when the validation's reason says so.
    AdmissionDenied {
        policy: &'static str,
        binding: &'static str,
        message: &'static str,
        forbidden: bool,
    },
    /// 422 Invalid content, worded as validation words one field error
    /// (`<field>: Invalid value: <value>: <detail>`).
    Invalid {
        field: &'static str,
        value: &'static str,
        detail: &'static str,
    },
    /// Not the API server's answer but the load balancer's in front of it (as while the control
    /// plane is upgraded): an HTML page with this code, no `Status`.
    GatewayPage { code: u16 },
}

impl Fault {
    fn response(self, verb: &str, routed: &Route, body: &[u8]) -> Response<Body> {
        match self {
            Fault::GatewayPage { code } => {
                let reason = StatusCode::from_u16(code)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("Error");
                let page = format!(
                    "<html>\r\n<head><title>{code} {reason}</title></head>\r\n<body>\r\n\
                     <center><h1>{code} {reason}</h1></center>\r\n</body>\r\n</html>\r\n"
                );
                let mut r = bytes_response(code, Bytes::from(page));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/html"),
                );
                r
            }
            Fault::TooManyRequests {
                retry_after_seconds,
            } => {
                let mut r = text_response(429, "Too many requests, please try again later.\n");
                let headers = r.headers_mut();
                headers.insert(header::RETRY_AFTER, retry_after_seconds.into());
                headers.insert(
                    header::X_CONTENT_TYPE_OPTIONS,
                    header::HeaderValue::from_static("nosniff"),
                );
                r
            }
            fault => error_response(&fault.error(verb, routed, body)),
        }
    }

    fn error(self, verb: &str, routed: &Route, body: &[u8]) -> ApiError {
        // The object's name: from the path, or for a create from the body, as admission reads it.
        let name = match routed {
            Route::Resource {
                name: Some(name), ..
            } => name.clone(),
            _ => serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.pointer("/metadata/name")?.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        match self {
            Fault::AdmissionDenied {
                policy,
                binding,
                message,
                forbidden,
            } => match routed {
                Route::Resource { rt, .. } => {
                    ApiError::admission_denied(rt, &name, policy, binding, message, forbidden)
                }
                _ => ApiError::forbidden_path(),
            },
            Fault::Invalid {
                field,
                value,
                detail,
            } => match routed {
                Route::Resource { rt, .. } => ApiError::invalid(
                    rt,
                    &name,
                    &[FieldError::invalid_raw(field, value.to_string(), detail)],
                ),
                _ => ApiError::bad_request("injected invalid content on a path without a resource"),
            },
            Fault::Unauthorized => ApiError::unauthorized(),
            Fault::Forbidden => match routed {
                Route::Resource { rt, ns, name } => {
                    ApiError::forbidden_request(verb, rt, ns.as_deref(), name.as_deref())
                }
                _ => ApiError::forbidden_path(),
            },
            Fault::Conflict => match routed {
                Route::Resource {
                    rt,
                    name: Some(name),
                    ..
                } => ApiError::conflict(rt, name),
                _ => ApiError::internal("injected conflict on a path without an object"),
            },
            // What kube-apiserver answers when no handler serves the path inside a group
            // version it does serve (say a proxy in front that drops the resource).
            Fault::NotFound => ApiError::resource_not_found(),
            Fault::InternalError => ApiError::internal("injected fault"),
            Fault::ServiceUnavailable => ApiError::service_unavailable(
                "injected fault: the server is currently unable to handle the request",
            ),
            Fault::GatewayPage { .. } | Fault::TooManyRequests { .. } => {
                unreachable!("Fault::response answers with the page or the text")
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct FaultRule {
    pub fault: Fault,
    pub remaining: usize,
    pub verb: Option<String>,
    pub resource: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub rules: VecDeque<FaultRule>,
    pub latency: Duration,
}

/// Wakes whoever waits for the log or the store to change, sync (Condvar) or async (Notify).
#[derive(Default)]
pub(crate) struct Changes {
    version: Mutex<u64>,
    cv: Condvar,
    pub notify: Notify,
}

impl Changes {
    pub fn bump(&self) {
        *lock(&self.version) += 1;
        self.cv.notify_all();
        self.notify.notify_waiters();
    }

    pub fn version(&self) -> u64 {
        *lock(&self.version)
    }

    /// Blocks until the version moves past `seen` or `timeout` passes.
    pub fn wait_past(&self, seen: u64, timeout: Duration) {
        let guard = lock(&self.version);
        // Whether it timed out does not matter: the caller re-checks its condition and clock.
        drop(self.cv.wait_timeout_while(guard, timeout, |v| *v == seen));
    }
}

/// The key of an object version's encodings: (uid, resourceVersion).
fn version_key(item: &Value) -> (String, String) {
    let text = |path: &str| {
        item.pointer(path)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (text("/metadata/uid"), text("/metadata/resourceVersion"))
}

/// One object's `Table` row, encoded but for its AGE cell.
#[derive(Clone)]
pub(crate) struct TableRow {
    before_age: Bytes,
    created: Option<i64>,
    after_age: Bytes,
}

impl TableRow {
    fn of(rt: &ResourceType, obj: &Value) -> TableRow {
        let mut cells = vec![obj["metadata"]["name"].clone()];
        for (_, path) in rt.columns {
            cells.push(json!(resources::field_string(obj, path)));
        }
        let mut before = b"{\"cells\":".to_vec();
        let cells = serde_json::to_string(&cells).unwrap_or_else(|_| "[]".into());
        before.extend_from_slice(&cells.as_bytes()[..cells.len() - 1]);
        before.push(b',');
        let object = json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        });
        let after = format!("],\"object\":{object}}}");
        TableRow {
            before_age: Bytes::from(before),
            created: obj
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|t| t.as_second()),
            after_age: Bytes::from(after),
        }
    }
}

/// Locks a mutex, ignoring poisoning: a test that panicked while holding it has failed already.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// State shared by the connections and the test's handle.
pub(crate) struct Shared {
    pub store: Mutex<Store>,
    /// Each stored object version's JSON encoding, by (uid, resourceVersion): a version never
    /// changes, so its bytes are made once, as kube-apiserver's watch cache keeps encoded
    /// objects. Lists of large fleets are then mostly copying.
    pub encoded: Mutex<HashMap<(String, String), Bytes>>,
    /// Each stored object version's `Table` row for kubectl, by (uid, resourceVersion), without
    /// its AGE cell (which moves with the clock): the row before that cell, the creation time,
    /// and the row after it. kube-apiserver converts a row in microseconds of Go; building it
    /// again per request from JSON values here would make kubectl's figure the test server's.
    pub table_rows: Mutex<HashMap<(String, String), TableRow>>,
    pub log: Mutex<Vec<RequestRecord>>,
    pub faults: Mutex<Faults>,
    pub changes: Changes,
    pub address: String,
}

impl Shared {
    /// Fills [`Shared::encoded`] and [`Shared::table_rows`] for these objects.
    pub(crate) fn encode_ahead(&self, rt: &ResourceType, items: &[Arc<Value>]) {
        let mut encoded = lock(&self.encoded);
        let mut rows = lock(&self.table_rows);
        for item in items {
            let key = version_key(item);
            if let Ok(bytes) = serde_json::to_vec(&**item) {
                encoded.insert(key.clone(), Bytes::from(bytes));
            }
            rows.insert(key, TableRow::of(rt, item));
        }
    }

    /// Runs `f` on the store and wakes waiters afterwards.
    pub fn with_store<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let r = f(&mut lock(&self.store));
        self.changes.bump();
        r
    }
}

/// A response body: all at once, or a stream of watch event lines.
pub enum Body {
    /// A complete body.
    Full(Option<Bytes>),
    /// A watch stream.
    Watch(WatchBody),
}

/// A watch stream; ends when the store drops its sender (cut), at `timeoutSeconds`, or when
/// the client goes away (then it deregisters itself).
pub struct WatchBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for WatchBody {
    fn drop(&mut self) {
        self.shared.with_store(|s| s.end_watch(self.id));
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    // An exact size for complete bodies makes hyper send Content-Length rather than chunks;
    // watch streams stay chunked.
    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Body::Full(Some(b)) => http_body::SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => http_body::SizeHint::with_exact(0),
            Body::Watch(_) => http_body::SizeHint::default(),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Watch(w) => {
                if let Poll::Ready(item) = w.rx.poll_recv(cx) {
                    return Poll::Ready(item.map(|b| Ok(Frame::data(b))));
                }
                if let Some(d) = w.deadline.as_mut()
                    && d.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(None);
                }
                Poll::Pending
            }
        }
    }
}

fn json_response(code: u16, value: &Value) -> Response<Body> {
    bytes_response(
        code,
        Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
    )
}

fn bytes_response(code: u16, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Body::Full(Some(body)));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

fn text_response(code: u16, text: &'static str) -> Response<Body> {
    let mut r = bytes_response(code, Bytes::from_static(text.as_bytes()));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A `Status` answer; its `retryAfterSeconds` is also sent as `Retry-After`, as
/// k8s.io/apiserver's `responsewriters.ErrorNegotiated` does.
fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.body);
    if let Some(secs) = e.body["details"]["retryAfterSeconds"]
        .as_u64()
        .filter(|s| *s > 0)
    {
        r.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    r
}

/// Decodes `application/x-www-form-urlencoded` query strings.
pub fn parse_query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a path names.
enum Route {
    Static(Value),
    Health,
    Resource {
        rt: &'static ResourceType,
        ns: Option<String>,
        name: Option<String>,
    },
    NotFound,
}

fn route(path: &str, address: &str, minor: &str, resource_v1: bool) -> Route {
    // A 1.33 server with the DRA beta APIs on lists these instead of v1 (and serves neither
    // here: only clients that read v1 are tested against it).
    let resource_versions: &[&str] = if resource_v1 {
        &["v1"]
    } else {
        &["v1beta2", "v1beta1"]
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["version"] => Route::Static(json!({
            "major": "1",
            "minor": minor,
            "gitVersion": format!("v1.{minor}.0"),
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-08-27T00:00:00Z",
            "goVersion": "go1.24.6",
            "compiler": "gc",
            "platform": "linux/amd64",
        })),
        ["healthz"] | ["livez"] | ["readyz"] => Route::Health,
        ["api"] => Route::Static(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        })),
        ["api", "v1"] => Route::Static(resource_list("", "v1")),
        ["apis"] => Route::Static(json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [api_group("resource.k8s.io", resource_versions)],
        })),
        ["apis", "resource.k8s.io"] => {
            let mut g = api_group("resource.k8s.io", resource_versions);
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            Route::Static(g)
        }
        ["apis", "resource.k8s.io", "v1"] => Route::Static(resource_list("resource.k8s.io", "v1")),
        ["openapi", "v3"] => Route::Static(json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1"},
            "apis/resource.k8s.io/v1": {"serverRelativeURL": "/openapi/v3/apis/resource.k8s.io/v1"},
        }})),
        ["openapi", "v3", "api", "v1"] => Route::Static(openapi_v3("", "v1", minor)),
        ["openapi", "v3", "apis", "resource.k8s.io", "v1"] => {
            Route::Static(openapi_v3("resource.k8s.io", "v1", minor))
        }
        ["api", "v1", rest @ ..] => resource_route("", "v1", rest),
        ["apis", group, version, rest @ ..] => resource_route(group, version, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let (ns, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return Route::NotFound,
    };
    let Some(rt) = resources::find(group, version, plural) else {
        return Route::NotFound;
    };
    if ns.is_some() && !rt.namespaced {
        return Route::NotFound;
    }
    if rt.namespaced && ns.is_none() && name.is_some() {
        return Route::NotFound;
    }
    Route::Resource {
        rt,
        ns: ns.map(str::to_string),
        name: name.map(str::to_string),
    }
}

fn api_group(name: &str, versions: &[&str]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": gvs, "preferredVersion": gvs[0]})
}

fn resource_list(group: &str, version: &str) -> Value {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .map(ResourceType::discovery)
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// The least OpenAPI v3 document kubectl needs: a PATCH operation per kind that declares the
/// `fieldValidation` query parameter, so kubectl leaves validation to the server (which, note,
/// does not reject unknown fields) instead of downloading schemas. No schemas are served, so
/// `kubectl apply` builds JSON merge patches (it only builds strategic merge patches from a
/// schema), which this server supports.
fn openapi_v3(group: &str, version: &str, minor: &str) -> Value {
    let mut paths = serde_json::Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        paths.insert(
            path,
            json!({"patch": {
                "operationId": format!("patch{}", r.kind),
                "parameters": [
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
                ],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
            }}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v1.{minor}.0")},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

fn verb_for(method: &Method, has_name: bool, watch: bool) -> Option<&'static str> {
    Some(match (method.as_str(), has_name) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    })
}

/// Answers one request and logs it.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or("").to_string();
    let query = parse_query(&raw_query);
    let header_str = |h: header::HeaderName| {
        parts
            .headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header_str(header::CONTENT_TYPE);
    let accept = header_str(header::ACCEPT).unwrap_or_default();
    let user_agent = header_str(header::USER_AGENT);
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };

    let latency = lock(&shared.faults).latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }

    let (minor, resource_v1_served) = {
        let store = lock(&shared.store);
        let minor = match store.kubernetes_1_37 {
            true => "37",
            false => server_minor(!store.drop_allow_multiple_allocations),
        };
        (minor, store.resource_v1_served)
    };
    let minor = if resource_v1_served { minor } else { "33" };
    let routed = if !resource_v1_served
        && (path.starts_with("/apis/resource.k8s.io/v1/") || path == "/apis/resource.k8s.io/v1")
    {
        Route::NotFound
    } else {
        route(&path, &shared.address, minor, resource_v1_served)
    };
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let (verb, resource) = match &routed {
        Route::Resource { rt, name, .. } => (
            verb_for(&parts.method, name.is_some(), watch).unwrap_or("unknown"),
            Some(rt.plural.to_string()),
        ),
        _ => ("get", None),
    };

    let injected = {
        let mut faults = lock(&shared.faults);
        let hit = faults.rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.verb.as_deref().is_none_or(|v| v == verb)
                && r.resource
                    .as_deref()
                    .is_none_or(|x| Some(x) == resource.as_deref())
        });
        let fault = hit.map(|r| {
            r.remaining -= 1;
            r.fault
        });
        faults.rules.retain(|r| r.remaining > 0);
        fault
    };

    let response = match (injected, routed) {
        (Some(fault), ref routed) => fault.response(verb, routed, &body),
        (None, Route::Static(v)) if parts.method == Method::GET => json_response(200, &v),
        (None, Route::Health) if parts.method == Method::GET => text_response(200, "ok"),
        (None, Route::Resource { rt, ns, name }) => {
            let ctx = Ctx {
                shared: &shared,
                rt,
                ns: ns.unwrap_or_default(),
                name,
                query: &query,
                accept: &accept,
                content_type: content_type.as_deref().unwrap_or(""),
                user_agent: user_agent.as_deref().unwrap_or(""),
                body: &body,
            };
            match verb {
                "get" => ctx.get(),
                "list" => ctx.list(),
                "watch" => ctx.watch(),
                "create" => ctx.create(),
                "update" => ctx.update(),
                "patch" => ctx.patch(),
                "delete" => ctx.delete(),
                "deletecollection" => ctx.delete_collection(),
                _ => Err(ApiError::method_not_allowed(parts.method.as_str(), rt)),
            }
            .unwrap_or_else(|e| error_response(&e))
        }
        (None, Route::Static(_) | Route::Health) => text_response(405, "405: Method Not Allowed"),
        // The real server answers paths it does not route with Go's plain-text 404 page,
        // which client-go reports as "the server could not find the requested resource".
        (None, Route::NotFound) => text_response(404, "404 page not found\n"),
    };

    lock(&shared.log).push(RequestRecord {
        verb: verb.to_string(),
        method: parts.method.to_string(),
        path,
        query: raw_query,
        status: response.status().as_u16(),
        content_type,
        resource,
        user_agent,
        answered_at: std::time::Instant::now(),
    });
    shared.changes.bump();
    Ok(response)
}

/// One resource request being answered.
struct Ctx<'a> {
    shared: &'a Arc<Shared>,
    rt: &'static ResourceType,
    ns: String,
    name: Option<String>,
    query: &'a BTreeMap<String, String>,
    accept: &'a str,
    content_type: &'a str,
    user_agent: &'a str,
    body: &'a Bytes,
}

impl Ctx<'_> {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    fn manager(&self) -> Manager {
        let name = match self.query.get("fieldManager") {
            Some(m) if !m.is_empty() => m.clone(),
            // Upstream derives the manager from the User-Agent's program name.
            _ => self
                .user_agent
                .split('/')
                .next()
                .filter(|s| !s.is_empty())
                .unwrap_or("unknown")
                .to_string(),
        };
        Manager { name }
    }

    fn wants_table(&self) -> bool {
        self.accept.contains("as=Table")
    }

    fn parse_body(&self) -> Result<Value, ApiError> {
        if self.content_type.contains("yaml") {
            serde_yaml::from_slice::<Value>(self.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
        } else {
            serde_json::from_slice::<Value>(self.body).map_err(|e| {
                ApiError::bad_request(format!(
                    "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {e}",
                    self.rt.kind
                ))
            })
        }
    }

    fn check_dry_run(&self) -> Result<(), ApiError> {
        if self.query.get("dryRun").is_some_and(|v| !v.is_empty()) {
            return Err(ApiError::bad_request(
                "dryRun is not implemented by the media-operator test API server",
            ));
        }
        Ok(())
    }

    fn object_response(&self, code: u16, obj: &Value) -> Response<Body> {
        if self.wants_table() {
            return json_response(code, &table(self.rt, std::iter::once(obj), None));
        }
        json_response(code, obj)
    }

    fn get(&self) -> Result<Response<Body>, ApiError> {
        let obj = lock(&self.shared.store).get(self.rt, &self.ns, self.name())?;
        Ok(self.object_response(200, &obj))
    }

    fn selectors(&self) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels =
            LabelSelector::parse(self.query.get("labelSelector").map_or("", String::as_str))
                .map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(
            self.query.get("fieldSelector").map_or("", String::as_str),
            self.rt,
        )
        .map_err(ApiError::bad_request)?;
        Ok((labels, fields))
    }

    fn ns_filter(&self) -> Option<&str> {
        (self.rt.namespaced && !self.ns.is_empty()).then_some(self.ns.as_str())
    }

    fn list(&self) -> Result<Response<Body>, ApiError> {
        let (labels, fields) = self.selectors()?;
        let limit = match self.query.get("limit").map(|l| l.parse::<i64>()) {
            None => None,
            Some(Ok(l)) if l > 0 => Some(l as usize),
            Some(Ok(_)) => None,
            Some(Err(_)) => return Err(ApiError::bad_request("limit: invalid value")),
        };
        let cont = self.query.get("continue").filter(|c| !c.is_empty());
        let page = lock(&self.shared.store).list(
            self.rt,
            self.ns_filter(),
            &labels,
            &fields,
            limit,
            cont.map(String::as_str),
        )?;
        if self.wants_table() {
            return Ok(self.table_page(&page));
        }
        // Serialised straight from the stored objects: no copy of the list is built.
        let mut out = Vec::with_capacity(64 + page.items.len() * 1024);
        let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
        if let Some(c) = &page.continue_token {
            meta["continue"] = json!(c);
        }
        out.extend_from_slice(
            format!(
                "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
                self.rt.kind,
                self.rt.api_version(),
                meta
            )
            .as_bytes(),
        );
        let mut encoded = lock(&self.shared.encoded);
        for (i, item) in page.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let key = version_key(item);
            let bytes = match encoded.get(&key) {
                Some(bytes) => bytes.clone(),
                None => {
                    let bytes = Bytes::from(
                        serde_json::to_vec(&**item)
                            .map_err(|e| ApiError::internal(&e.to_string()))?,
                    );
                    encoded.insert(key, bytes.clone());
                    bytes
                }
            };
            out.extend_from_slice(&bytes);
        }
        out.extend_from_slice(b"]}");
        Ok(bytes_response(200, Bytes::from(out)))
    }

    /// A list page as a `Table`, from the rows kept per object version (see
    /// [`Shared::table_rows`]); the same document as [`table`] builds.
    fn table_page(&self, page: &store::ListPage) -> Response<Body> {
        let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
        if let Some(c) = &page.continue_token {
            meta["continue"] = json!(c);
        }
        let head = table(self.rt, std::iter::empty(), None);
        let mut out = Vec::with_capacity(1024 + page.items.len() * 768);
        out.extend_from_slice(
            format!(
                "{{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{meta},\"columnDefinitions\":{},\"rows\":[",
                head["columnDefinitions"]
            )
            .as_bytes(),
        );
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let mut rows = lock(&self.shared.table_rows);
        for (i, item) in page.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let key = version_key(item);
            let row = rows
                .entry(key)
                .or_insert_with(|| TableRow::of(self.rt, item));
            out.extend_from_slice(&row.before_age);
            let age = row
                .created
                .map(|t| human_duration((now - t).max(0)))
                .unwrap_or_else(|| "<unknown>".to_string());
            out.extend_from_slice(json!(age).to_string().as_bytes());
            out.extend_from_slice(&row.after_age);
        }
        out.extend_from_slice(b"]}");
        bytes_response(200, Bytes::from(out))
    }

    fn watch(&self) -> Result<Response<Body>, ApiError> {
        let (labels, fields) = self.selectors()?;
        let from = match self.query.get("resourceVersion").map(String::as_str) {
            None | Some("") | Some("0") => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {v}")))?,
            ),
        };
        let flag = |k: &str| matches!(self.query.get(k).map(String::as_str), Some("true" | "1"));
        let timeout = match self.query.get("timeoutSeconds") {
            Some(t) => Some(Duration::from_secs(t.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds: {t}"))
            })?)),
            None => None,
        };
        let filter = WatchFilter {
            rt: store::rt_index(self.rt),
            namespace: self.ns_filter().map(str::to_string),
            labels,
            fields,
            bookmarks: flag("allowWatchBookmarks"),
        };
        let opened = self
            .shared
            .with_store(|s| s.watch(filter, from, flag("sendInitialEvents")));
        let (id, rx) = match opened {
            Ok(x) => x,
            Err(e) => {
                // The real server answers 200 and sends the 410 as an ERROR event.
                return Ok(bytes_response(200, store::error_line(&e)));
            }
        };
        let body = Body::Watch(WatchBody {
            rx,
            deadline: timeout.map(|t| Box::pin(tokio::time::sleep(t))),
            id,
            shared: self.shared.clone(),
        });
        let mut r = Response::new(body);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        Ok(r)
    }

    fn create(&self) -> Result<Response<Body>, ApiError> {
        self.check_dry_run()?;
        let obj = self.parse_body()?;
        let manager = self.manager();
        let created = self
            .shared
            .with_store(|s| s.create(self.rt, &self.ns, obj, &manager))?;
        Ok(self.object_response(201, &created))
    }

    fn update(&self) -> Result<Response<Body>, ApiError> {
        self.check_dry_run()?;
        let obj = self.parse_body()?;
        let manager = self.manager();
        let updated = self
            .shared
            .with_store(|s| s.update(self.rt, &self.ns, self.name(), obj, &manager))?;
        Ok(self.object_response(200, &updated))
    }

    fn patch(&self) -> Result<Response<Body>, ApiError> {
        self.check_dry_run()?;
        let ct = self.content_type.split(';').next().unwrap_or("").trim();
        match ct {
            "application/merge-patch+json" => {
                let patch = self.parse_body()?;
                let manager = self.manager();
                let r = self.shared.with_store(|s| {
                    s.patch_merge(self.rt, &self.ns, self.name(), &patch, &manager)
                })?;
                Ok(self.object_response(200, &r))
            }
            "application/apply-patch+yaml" => {
                let manager = self.query.get("fieldManager").cloned().unwrap_or_default();
                if manager.is_empty() {
                    let rt = ResourceType {
                        group: "meta.k8s.io",
                        kind: "PatchOptions",
                        ..*self.rt
                    };
                    return Err(ApiError::invalid(
                        &rt,
                        "",
                        &[FieldError::required(
                            "fieldManager",
                            "is required for apply patch",
                        )],
                    ));
                }
                let applied: Value = serde_yaml::from_slice(self.body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                let force = matches!(
                    self.query.get("force").map(String::as_str),
                    Some("true" | "1")
                );
                let (r, created) = self.shared.with_store(|s| {
                    s.apply(self.rt, &self.ns, self.name(), applied, &manager, force)
                })?;
                Ok(self.object_response(if created { 201 } else { 200 }, &r))
            }
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }

    fn delete_options(&self) -> Result<(Option<String>, Option<String>), ApiError> {
        if self.body.is_empty() {
            return Ok((None, None));
        }
        let opts: Value = serde_json::from_slice(self.body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        let get = |k: &str| {
            opts.pointer(&format!("/preconditions/{k}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Ok((get("resourceVersion"), get("uid")))
    }

    fn delete(&self) -> Result<Response<Body>, ApiError> {
        self.check_dry_run()?;
        let (rv, uid) = self.delete_options()?;
        let gone = self.shared.with_store(|s| {
            s.delete(
                self.rt,
                &self.ns,
                self.name(),
                rv.as_deref(),
                uid.as_deref(),
            )
        })?;
        // Pods and namespaces answer with the object; the others with a Success Status, as their
        // upstream registries do (ReturnDeletedObject unset).
        if matches!(self.rt.plural, "pods" | "namespaces") {
            return Ok(self.object_response(200, &gone));
        }
        let mut details =
            json!({"name": self.name(), "kind": self.rt.plural, "uid": gone["metadata"]["uid"]});
        if !self.rt.group.is_empty() {
            details["group"] = json!(self.rt.group);
        }
        Ok(json_response(
            200,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
        ))
    }

    fn delete_collection(&self) -> Result<Response<Body>, ApiError> {
        self.check_dry_run()?;
        let (labels, fields) = self.selectors()?;
        let deleted = self.shared.with_store(|s| {
            let page = s.list(self.rt, self.ns_filter(), &labels, &fields, None, None)?;
            let mut gone = Vec::new();
            for obj in page.items {
                let ns = obj
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let name = obj
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if let Ok(g) = s.delete(self.rt, ns, name, None, None) {
                    gone.push((*g).clone());
                }
            }
            Ok::<_, ApiError>((s.resource_version(), gone))
        })?;
        Ok(json_response(
            200,
            &json!({
                "kind": format!("{}List", self.rt.kind),
                "apiVersion": self.rt.api_version(),
                "metadata": {"resourceVersion": deleted.0.to_string()},
                "items": deleted.1,
            }),
        ))
    }
}

/// kubectl's `as=Table` answer: Name, the resource's columns, Age; rows carry the object's
/// metadata as PartialObjectMetadata (kubectl's default `includeObject=Metadata`).
fn table<'a>(
    rt: &ResourceType,
    items: impl Iterator<Item = &'a Value>,
    list: Option<(u64, Option<&str>)>,
) -> Value {
    let mut columns = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for (header, _) in rt.columns {
        columns.push(json!({"name": header, "type": "string", "format": "", "description": "", "priority": 0}));
    }
    columns.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
    let now = k8s_openapi::jiff::Timestamp::now();
    let rows: Vec<Value> = items
        .map(|obj| {
            let mut cells = vec![obj["metadata"]["name"].clone()];
            for (_, path) in rt.columns {
                cells.push(json!(resources::field_string(obj, path)));
            }
            let age = obj
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|t| human_duration((now.as_second() - t.as_second()).max(0)))
                .unwrap_or_else(|| "<unknown>".to_string());
            cells.push(json!(age));
            json!({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            })
        })
        .collect();
    let mut meta = json!({});
    if let Some((rv, cont)) = list {
        meta["resourceVersion"] = json!(rv.to_string());
        if let Some(c) = cont {
            meta["continue"] = json!(c);
        }
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// apimachinery's `HumanDuration`, to the precision kubectl's AGE column shows.
fn human_duration(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}
