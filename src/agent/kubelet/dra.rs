//! The DRA service (`DRAPlugin`, v1 and v1beta1) the kubelet calls before a pod with a
//! `media.liken.sh` claim starts and after it stops. Our device is a statement about a GPU, not a
//! handle to it, so there is nothing to prepare: every claim gets an entry with no devices and no
//! error. The entry must be there, keyed by claim UID: a missing one makes the kubelet retry and
//! keeps the pod from starting (or terminating). Calls log at debug only.

use std::collections::HashMap;

use tonic::{Request, Response, Status};
use tracing::debug;

use super::proto::dra::{v1, v1beta1};

/// Serves both DRA API versions; it holds no state because it prepares nothing.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DraService;

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
                debug!(
                    api = stringify!($version),
                    "prepared {} claim(s), nothing to deliver: {}",
                    claims.len(),
                    describe(claims.iter().map(|c| (&*c.namespace, &*c.name, &*c.uid)))
                );
                Ok(Response::new($version::NodePrepareResourcesResponse {
                    claims: nothing_for_each(claims.into_iter().map(|c| c.uid)),
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
