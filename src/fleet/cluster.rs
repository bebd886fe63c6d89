//! Reading objects from a cluster for `kubectl media`: one paged lister for every kind the
//! reader knows ([`Kind`]), namespaced or not, with label and field selectors, over one client
//! built from kubectl's connection flags ([`crate::kubeconfig`]). The failures a user can act on
//! become one line each: the API server is unreachable, a permission is missing, the cluster is
//! too old to serve `resource.k8s.io/v1`.
//!
//! Responses are paged as kubectl pages them and go through the same reader as files
//! ([`crate::fleet::objects`]), so `-f` of a `kubectl get -o json` gives the same answer.

use std::collections::VecDeque;
use std::time::Duration;

use crate::fleet::objects::{Kind, Objects};
use crate::kubeconfig::{KubeconfigError, Source};

/// kubectl's page size for lists (`--chunk-size`).
pub(crate) const PAGE_SIZE: usize = 500;

/// How many pages are parsed at once.
const PARSERS: usize = 2;

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
    #[error("the cluster at {server} does not serve {resource} in {api_version}: {why}", why = not_served(.api_version))]
    NotServed {
        server: String,
        resource: &'static str,
        api_version: &'static str,
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
    #[error("{resource} from {server}: {cause}")]
    Response {
        server: String,
        resource: &'static str,
        cause: String,
    },
}

fn kubeconfig_hint(error: &KubeconfigError) -> &'static str {
    match error {
        KubeconfigError::Missing => {
            "pass --kubeconfig or set KUBECONFIG, or read objects from a file with -f"
        }
        KubeconfigError::Invalid { .. } => {
            "pass --kubeconfig or --context, set KUBECONFIG, or read objects from a file with -f"
        }
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
}

impl Cluster {
    /// Loads the kubeconfig and builds a client. Nothing is sent yet.
    pub async fn connect(connection: &Connection) -> Result<Cluster, ClusterError> {
        let mut config = crate::kubeconfig::load(&connection.source).await?;
        config.connect_timeout = connection.request_timeout;
        config.read_timeout = connection.request_timeout;
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let namespace = connection
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config).map_err(|e| {
            ClusterError::Config(KubeconfigError::Invalid {
                cause: crate::kubeconfig::chain(&e),
            })
        })?;
        Ok(Cluster {
            client,
            server,
            namespace,
            timeout: connection.request_timeout,
        })
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
        let unreadable = |e: serde_json::Error| ClusterError::Response {
            server: self.server.clone(),
            resource,
            cause: format!("unreadable response: {e}"),
        };
        let base = request.uri();
        let kind = request.kind;
        let fetch = |token: Option<String>| {
            let mut uri = base.clone();
            if let Some(token) = token {
                uri.push_str("&continue=");
                uri.push_str(&percent_encode(&token));
            }
            let cluster = self.clone();
            let scope = scope.clone();
            tokio::spawn(async move {
                let request = http::Request::get(uri).body(Vec::new()).map_err(|e| {
                    ClusterError::Response {
                        server: cluster.server.clone(),
                        resource,
                        cause: e.to_string(),
                    }
                })?;
                cluster.request_text(request, "list", kind, scope).await
            })
        };
        let wanted = objects.wanted();
        // Pages are parsed on blocking threads, two at a time (one per core of a small
        // machine), and merged in order; more in flight would only hold more pages in memory.
        let mut parsing: VecDeque<tokio::task::JoinHandle<Result<Objects, serde_json::Error>>> =
            VecDeque::new();
        let mut next = Some(fetch(None));
        while let Some(pending) = next.take() {
            let page = self.joined(pending, resource).await??;
            next = crate::fleet::objects::continue_token(&page)
                .map_err(unreadable)?
                .map(|t| fetch(Some(t)));
            if parsing.len() >= PARSERS {
                let oldest = parsing.pop_front().expect("not empty");
                objects.extend(self.joined(oldest, resource).await?.map_err(unreadable)?);
            }
            parsing.push_back(tokio::task::spawn_blocking(move || {
                let mut parsed = Objects::wanting(wanted);
                parsed.add_json(&page).map(|_| parsed)
            }));
        }
        for parse in parsing {
            objects.extend(self.joined(parse, resource).await?.map_err(unreadable)?);
        }
        Ok(())
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

    async fn request_text(
        &self,
        request: http::Request<Vec<u8>>,
        verb: &'static str,
        kind: Kind,
        scope: String,
    ) -> Result<String, ClusterError> {
        let call = self.client.request_text(request);
        let result =
            match self.timeout {
                Some(timeout) => tokio::time::timeout(timeout, call).await.map_err(|_| {
                    ClusterError::Timeout {
                        server: self.server.clone(),
                        timeout,
                    }
                })?,
                None => call.await,
            };
        result.map_err(|e| self.classify(e, verb, kind, scope))
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
                404 => ClusterError::NotServed {
                    server,
                    resource,
                    api_version: kind.api_version(),
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
            other => {
                if let Some(timeout) = self.timeout.filter(|_| is_timeout(&other)) {
                    return ClusterError::Timeout { server, timeout };
                }
                ClusterError::Unreachable {
                    server,
                    cause: root_cause(&other),
                }
            }
        }
    }
}

/// The innermost cause is what a user can act on ("Connection refused (os error 111)",
/// "dns error"), not kube's or hyper's wrappers around it.
fn root_cause(e: &kube::Error) -> String {
    let mut last: &dyn std::error::Error = e;
    while let Some(source) = last.source() {
        last = source;
    }
    let text = last.to_string();
    if text.is_empty() {
        crate::kubeconfig::chain(e)
    } else {
        text
    }
}

fn is_timeout(e: &kube::Error) -> bool {
    let mut current: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        if err.to_string().to_ascii_lowercase().contains("timed out") {
            return true;
        }
        current = err.source();
    }
    false
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
