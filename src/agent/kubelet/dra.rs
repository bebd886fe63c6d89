//! The DRA service (`DRAPlugin`, v1 and v1beta1) the kubelet calls before a pod with a
//! `media.liken.sh` claim starts and after it stops. Our device is a statement about a GPU, not a
//! handle to it, so there is nothing to prepare and nothing to hand into containers (no CDI
//! devices). Every claim gets an entry, keyed by claim UID: a missing one makes the kubelet retry
//! and keeps the pod from starting (or terminating).
//!
//! With [`Claims`] (the agent always has them) the entry names the claim's devices of this
//! node's pool, read from the claim's allocation: the kubelet keeps them with the claim and shows
//! their health (see [`super::health`]) in the status of the pods that hold it; it knows a
//! claim's devices from this answer only. A claim that cannot be read gets an error in its entry,
//! and the kubelet tries again. Without [`Claims`] (tests of the sockets alone) the entries are
//! empty. Calls log at debug only.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use tonic::{Request, Response, Status};
use tracing::debug;

use super::proto::dra::{v1, v1beta1};
use crate::catalogue::DRIVER;

/// How long reading one claim may take: well under the kubelet's 45 s for the whole call.
const CLAIM_READ_TIMEOUT: Duration = Duration::from_secs(20);

/// Where the claims' allocations are read: the API server, for this node's pool.
#[derive(Clone)]
pub struct Claims {
    client: kube::Client,
    pool: String,
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claims").field("pool", &self.pool).finish()
    }
}

impl Claims {
    /// Reads claims with `client`; the devices of `pool` (the node's name) are ours.
    pub fn new(client: kube::Client, pool: String) -> Self {
        Self { client, pool }
    }

    /// The claim's devices of our driver and pool, as (request, device name), or why not.
    async fn devices(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Vec<(String, String)>, String> {
        let what = format!("ResourceClaim {namespace}/{name}");
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let claim = match tokio::time::timeout(CLAIM_READ_TIMEOUT, api.get(name)).await {
            Ok(Ok(claim)) => claim,
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                return Err(format!(
                    "read {what}: forbidden: {} (hint: the agent's ClusterRole needs get on resourceclaims in resource.k8s.io, as deploy/base/rbac.yaml has it)",
                    crate::text::one_line(&status.message, 300)
                ));
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "read {what}: {}",
                    crate::text::one_line(&e.to_string(), 300)
                ));
            }
            Err(_) => {
                return Err(format!(
                    "read {what}: no answer from the API server within {}",
                    crate::duration::human(CLAIM_READ_TIMEOUT)
                ));
            }
        };
        if claim.metadata.uid.as_deref() != Some(uid) {
            return Err(format!(
                "{what} has uid {}, not the {uid} the kubelet asked for (it was deleted and made anew)",
                claim.metadata.uid.as_deref().unwrap_or("(none)")
            ));
        }
        let results = claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .map(|d| d.results.unwrap_or_default())
            .ok_or_else(|| format!("{what} is not allocated"))?;
        Ok(results
            .into_iter()
            .filter(|r| r.driver == DRIVER && r.pool == self.pool)
            .map(|r| (r.request, r.device))
            .collect())
    }
}

/// One device of a prepared claim, as the kubelet is told it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PreparedDevice {
    pool: String,
    request: String,
    device: String,
}

/// A claim's UID and its devices, or why it could not be prepared.
type Prepared = (String, Result<Vec<PreparedDevice>, String>);

/// Serves both DRA API versions; see the module documentation.
#[derive(Clone, Debug, Default)]
pub(super) struct DraService {
    claims: Option<Arc<Claims>>,
}

impl DraService {
    pub(super) fn new(claims: Option<Claims>) -> Self {
        Self {
            claims: claims.map(Arc::new),
        }
    }

    /// Each claim's devices, or its error, by claim UID; all empty without [`Claims`].
    async fn prepare<'a>(
        &self,
        claims: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Vec<Prepared> {
        let claims: Vec<_> = claims.into_iter().collect();
        let Some(reader) = &self.claims else {
            return claims
                .into_iter()
                .map(|(_, _, uid)| (uid.to_owned(), Ok(Vec::new())))
                .collect();
        };
        let reads = claims.iter().map(|&(namespace, name, uid)| async move {
            let devices = reader.devices(namespace, name, uid).await.map(|devices| {
                devices
                    .into_iter()
                    .map(|(request, device)| PreparedDevice {
                        pool: reader.pool.clone(),
                        request,
                        device,
                    })
                    .collect()
            });
            (uid.to_owned(), devices)
        });
        futures_util::future::join_all(reads).await
    }
}

/// What one prepare gave, for the debug line: `ns/name (uid) -> pool/device, ...` per claim.
fn outcome(claims: &[(&str, &str, &str)], results: &[Prepared]) -> String {
    claims
        .iter()
        .zip(results)
        .map(|((namespace, name, uid), (_, result))| {
            let got = match result {
                Ok(devices) if devices.is_empty() => "nothing to deliver".to_owned(),
                Ok(devices) => devices
                    .iter()
                    .map(|d| format!("{}/{}", d.pool, d.device))
                    .collect::<Vec<_>>()
                    .join(", "),
                Err(error) => format!("error: {error}"),
            };
            format!("{namespace}/{name} ({uid}) -> {got}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One default entry (no devices, no error) per claim UID.
fn nothing_for_each<R: Default>(uids: impl IntoIterator<Item = String>) -> HashMap<String, R> {
    uids.into_iter().map(|uid| (uid, R::default())).collect()
}

/// `namespace/name (uid)` for each claim, for the log line of a call.
fn describe<'a>(claims: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> String {
    claims
        .into_iter()
        .map(|(namespace, name, uid)| format!("{namespace}/{name} ({uid})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Implements one version of the `DRAPlugin` service. The two versions' messages are identical
/// but are distinct Rust types, so the body is shared through a macro rather than a trait.
macro_rules! serve_version {
    ($version:ident) => {
        #[tonic::async_trait]
        impl $version::dra_plugin_server::DraPlugin for DraService {
            async fn node_prepare_resources(
                &self,
                request: Request<$version::NodePrepareResourcesRequest>,
            ) -> Result<Response<$version::NodePrepareResourcesResponse>, Status> {
                let claims = request.into_inner().claims;
                let named: Vec<(&str, &str, &str)> = claims
                    .iter()
                    .map(|c| (&*c.namespace, &*c.name, &*c.uid))
                    .collect();
                let results = self.prepare(named.iter().copied()).await;
                debug!(
                    api = stringify!($version),
                    "prepared {} claim(s): {}",
                    claims.len(),
                    outcome(&named, &results)
                );
                let claims = results
                    .into_iter()
                    .map(|(uid, result)| {
                        let entry = match result {
                            Ok(devices) => $version::NodePrepareResourceResponse {
                                devices: devices
                                    .into_iter()
                                    .map(|d| $version::Device {
                                        request_names: vec![d.request],
                                        pool_name: d.pool,
                                        device_name: d.device,
                                        ..Default::default()
                                    })
                                    .collect(),
                                error: String::new(),
                            },
                            Err(error) => $version::NodePrepareResourceResponse {
                                devices: Vec::new(),
                                error,
                            },
                        };
                        (uid, entry)
                    })
                    .collect();
                Ok(Response::new($version::NodePrepareResourcesResponse {
                    claims,
                }))
            }

            async fn node_unprepare_resources(
                &self,
                request: Request<$version::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$version::NodeUnprepareResourcesResponse>, Status> {
                let claims = request.into_inner().claims;
                debug!(
                    api = stringify!($version),
                    "unprepared {} claim(s), nothing to release: {}",
                    claims.len(),
                    describe(claims.iter().map(|c| (&*c.namespace, &*c.name, &*c.uid)))
                );
                Ok(Response::new($version::NodeUnprepareResourcesResponse {
                    claims: nothing_for_each(claims.into_iter().map(|c| c.uid)),
                }))
            }
        }
    };
}

serve_version!(v1);
serve_version!(v1beta1);
