//! Reading objects from a cluster for `kubectl media`, with kubectl's connection flags and the
//! failures a user can act on turned into one line each: the API server is unreachable, a
//! permission is missing, or the cluster is too old to serve `resource.k8s.io/v1`.
//!
//! Responses are paged as kubectl pages them and go through the same parser as files
//! ([`crate::fleet::objects`]), so `-f` of a `kubectl get -o json` gives the same answer.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::fleet::objects::{Objects, RESOURCE_API_VERSION};

/// kubectl's page size for lists (`--chunk-size`).
pub const PAGE_SIZE: usize = 500;

/// How many pages are parsed at once.
const PARSERS: usize = 2;

/// How to reach the cluster: kubectl's own flags, which a plugin must handle itself.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Per request; `None` waits as long as the server takes.
    pub request_timeout: Option<Duration>,
}

/// Why reading from the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "load kubeconfig: {cause} (hint: pass --kubeconfig or --context, set KUBECONFIG, or read objects from a file with -f)"
    )]
    Config { cause: String },
    #[error(
        "no kubeconfig: KUBECONFIG is not set, ~/.kube/config does not exist, and this is not a pod in a cluster (hint: pass --kubeconfig or set KUBECONFIG, or read objects from a file with -f)"
    )]
    NoConfig,
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
        "forbidden: cannot {verb} {resource} at the cluster scope: {message} (hint: ask for a role that allows '{verb}' on {resource})"
    )]
    Forbidden {
        verb: &'static str,
        resource: &'static str,
        message: String,
    },
    #[error(
        "the cluster at {server} does not serve {resource} in {RESOURCE_API_VERSION}: it is older than Kubernetes 1.34, or the resource.k8s.io/v1 API is disabled (hint: DRA with resource.k8s.io/v1 needs Kubernetes 1.34 or newer)"
    )]
    NotServed {
        server: String,
        resource: &'static str,
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

/// A connected client and the server it talks to (for messages).
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    server: String,
    timeout: Option<Duration>,
}

impl Cluster {
    /// Loads the kubeconfig (the `--kubeconfig` file, else `KUBECONFIG`, else `~/.kube/config`)
    /// and builds a client. Nothing is sent yet.
    pub async fn connect(connection: &Connection) -> Result<Cluster, ClusterError> {
        let options = KubeConfigOptions {
            context: connection.context.clone(),
            ..Default::default()
        };
        let mut config = match (&connection.kubeconfig, &connection.context) {
            (Some(path), _) => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(config_error)?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(config_error)?
            }
            // As kubectl does: KUBECONFIG, else ~/.kube/config, else the pod's service account.
            (None, None) => kube::Config::infer().await.map_err(|e| {
                if no_kubeconfig() {
                    ClusterError::NoConfig
                } else {
                    config_error(e)
                }
            })?,
            (None, Some(_)) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(config_error)?,
        };
        config.connect_timeout = connection.request_timeout;
        config.read_timeout = connection.request_timeout;
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let client = kube::Client::try_from(config).map_err(config_error)?;
        Ok(Cluster {
            client,
            server,
            timeout: connection.request_timeout,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Lists every ResourceSlice, page by page, into `objects`.
    pub async fn list_slices(&self, objects: &mut Objects) -> Result<(), ClusterError> {
        self.list_all(
            "/apis/resource.k8s.io/v1/resourceslices",
            "resourceslices.resource.k8s.io",
            objects,
        )
        .await
    }

    /// Lists every object of a collection, page by page. The next page is asked for before the
    /// current one is parsed, so the server prepares it while we read: a fleet's listing costs
    /// about the larger of the two, not their sum.
    async fn list_all(
        &self,
        path: &str,
        resource: &'static str,
        objects: &mut Objects,
    ) -> Result<(), ClusterError> {
        let unreadable = |e: serde_json::Error| ClusterError::Response {
            server: self.server.clone(),
            resource,
            cause: format!("unreadable response: {e}"),
        };
        let fetch = |token: Option<String>| {
            let mut uri = format!("{path}?limit={PAGE_SIZE}");
            if let Some(token) = token {
                uri.push_str("&continue=");
                uri.push_str(&percent_encode(&token));
            }
            let cluster = self.clone();
            tokio::spawn(async move {
                let request = http::Request::get(uri).body(Vec::new()).map_err(|e| {
                    ClusterError::Response {
                        server: cluster.server.clone(),
                        resource,
                        cause: e.to_string(),
                    }
                })?;
                cluster.request_text(request, "list", resource).await
            })
        };
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
                let mut parsed = Objects::default();
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
        resource: &'static str,
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
        result.map_err(|e| self.classify(e, verb, resource))
    }

    fn classify(
        &self,
        error: kube::Error,
        verb: &'static str,
        resource: &'static str,
    ) -> ClusterError {
        let server = self.server.clone();
        match error {
            kube::Error::Api(status) => match status.code {
                401 => ClusterError::Unauthorized { server },
                403 => ClusterError::Forbidden {
                    verb,
                    resource,
                    message: status.message,
                },
                404 => ClusterError::NotServed { server, resource },
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

/// Whether there is no kubeconfig to read at all (then the in-cluster attempt's failure is not
/// what the user needs to hear).
fn no_kubeconfig() -> bool {
    std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty())
        && std::env::var_os("HOME")
            .is_none_or(|home| !std::path::Path::new(&home).join(".kube/config").exists())
}

fn config_error(e: impl std::error::Error) -> ClusterError {
    ClusterError::Config { cause: chain(&e) }
}

/// The error and its sources, lowercase and joined, without kube's generic prefixes.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// The innermost cause is what a user can act on ("Connection refused (os error 111)",
/// "dns error"), not kube's or hyper's wrappers around it.
fn root_cause(e: &kube::Error) -> String {
    let mut last: &dyn std::error::Error = e;
    while let Some(source) = last.source() {
        last = source;
    }
    let text = last.to_string();
    if text.is_empty() { chain(e) } else { text }
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

/// Percent-encodes a continue token for a query string (tokens are base64 and may hold `=`,
/// `+` and `/`).
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

/// Parses kubectl's `--request-timeout`: `0` for none, a number of seconds, or a duration such
/// as `30s`, `1m30s`, `500ms`, `2h`.
pub fn parse_timeout(text: &str) -> Result<Option<Duration>, String> {
    let timeout = crate::duration::parse(text).map_err(|e| format!("--request-timeout: {e}"))?;
    Ok((!timeout.is_zero()).then_some(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_like_kubectl() {
        assert_eq!(parse_timeout("0"), Ok(None));
        assert_eq!(parse_timeout("30"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse_timeout("30s"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse_timeout("1m30s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(parse_timeout("500ms"), Ok(Some(Duration::from_millis(500))));
        assert_eq!(parse_timeout("2h"), Ok(Some(Duration::from_secs(7200))));
        for bad in ["", "s", "10x", "1m30", "-1s", "abc"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn continue_tokens_are_encoded() {
        assert_eq!(percent_encode("ab+/=c"), "ab%2B%2F%3Dc");
    }
}
