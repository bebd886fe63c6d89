//! Playing the kubelet against our plugin: a gRPC channel over a unix socket, claims to prepare,
//! and one macro that prepares then unprepares them on either DRA API version and checks that
//! every claim is answered with nothing to deliver and no error (a plugin without claims to read),
//! or, with `missing`, with the error that the claim does not exist (the agent, which reads each
//! claim from the API server, given claims that were never made).

use std::path::Path;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// A gRPC channel over the unix socket at `path`, as the kubelet dials it.
pub async fn channel(path: &Path) -> Channel {
    let target = path.to_path_buf();
    // The URI is required by tonic but unused: the connector always dials the socket.
    Endpoint::from_static("http://kubelet-plugin.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let target = target.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(target).await?)) }
        }))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e:?}", path.display()))
}

/// `count` claims as (namespace, name, uid), distinct per `prefix`.
pub fn claims(prefix: &str, count: usize) -> Vec<(String, String, String)> {
    (0..count)
        .map(|i| {
            (
                format!("ns-{prefix}"),
                format!("claim-{i}"),
                format!("{prefix}-uid-{i}"),
            )
        })
        .collect()
}

/// The claims of a prepare or unprepare call in `$version`'s types, with the UIDs every answer
/// must name: `(wanted, request)`.
#[allow(unused_macros)]
macro_rules! dra_claims {
    ($version:ident, $claims:expr) => {{
        let claims: Vec<(String, String, String)> = $claims;
        let wanted: std::collections::BTreeSet<String> =
            claims.iter().map(|c| c.2.clone()).collect();
        let request: Vec<$version::Claim> = claims
            .iter()
            .map(|(namespace, name, uid)| $version::Claim {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
            })
            .collect();
        (wanted, request)
    }};
}
#[allow(unused_imports)]
pub(crate) use dra_claims;

/// A prepare answer names every claim of `$wanted`, each with no devices and no error.
#[allow(unused_macros)]
macro_rules! check_prepared {
    ($prepared:expr, $wanted:expr, missing) => {{
        assert_eq!(
            $prepared
                .claims
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            $wanted
        );
        for (uid, answer) in &$prepared.claims {
            assert!(
                answer.devices.is_empty()
                    && answer.error.starts_with("read ResourceClaim ns-")
                    && answer.error.contains("not found"),
                "{uid}: {answer:?}"
            );
        }
    }};
    ($prepared:expr, $wanted:expr) => {{
        assert_eq!(
            $prepared
                .claims
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            $wanted
        );
        for (uid, answer) in &$prepared.claims {
            assert!(
                answer.devices.is_empty() && answer.error.is_empty(),
                "{uid}: {answer:?}"
            );
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use check_prepared;

/// An unprepare answer names every claim of `$wanted`, each with no error.
#[allow(unused_macros)]
macro_rules! check_unprepared {
    ($unprepared:expr, $wanted:expr) => {{
        assert_eq!(
            $unprepared
                .claims
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            $wanted
        );
        for (uid, answer) in &$unprepared.claims {
            assert!(answer.error.is_empty(), "{uid}: {answer:?}");
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use check_unprepared;

/// Prepares then unprepares `claims` over one API version (`v1` or `v1beta1` in scope); every
/// claim must get an entry, with no devices and no error.
#[allow(unused_macros)] // not every test binary that includes support/ prepares claims
macro_rules! prepare_and_unprepare {
    ($version:ident, $channel:expr, $claims:expr $(, $missing:ident)?) => {{
        let (wanted, request) = crate::support::kubelet::dra_claims!($version, $claims);
        let mut client = $version::dra_plugin_client::DraPluginClient::new($channel);
        let prepared = client
            .node_prepare_resources($version::NodePrepareResourcesRequest {
                claims: request.clone(),
            })
            .await
            .expect("prepare succeeds")
            .into_inner();
        crate::support::kubelet::check_prepared!(prepared, wanted $(, $missing)?);
        let unprepared = client
            .node_unprepare_resources($version::NodeUnprepareResourcesRequest { claims: request })
            .await
            .expect("unprepare succeeds")
            .into_inner();
        crate::support::kubelet::check_unprepared!(unprepared, wanted);
    }};
}
#[allow(unused_imports)]
pub(crate) use prepare_and_unprepare;

/// Plays the kubelet's plugin watcher with the exact bytes grpc-go sends: GetInfo then
/// NotifyRegistrationStatus on one connection (as `operation_generator.go` does), with the
/// `:authority` of `form`; registered when `error` is empty. Returns the plugin's info.
pub async fn raw_register(
    socket: &Path,
    form: crate::support::grpc_raw::Authority,
    error: &str,
) -> Result<
    media_operator::agent::kubelet::proto::pluginregistration::PluginInfo,
    crate::support::grpc_raw::CallError,
> {
    use crate::support::grpc_raw::{RawGrpc, unary};
    use media_operator::agent::kubelet::proto::pluginregistration::{
        InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    };
    let authority = form.value(socket);
    let mut conn = RawGrpc::connect(socket)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", socket.display()));
    let info: PluginInfo = unary(
        &mut conn,
        authority.as_deref(),
        "/pluginregistration.Registration/GetInfo",
        &InfoRequest {},
    )
    .await?;
    let _: RegistrationStatusResponse = unary(
        &mut conn,
        authority.as_deref(),
        "/pluginregistration.Registration/NotifyRegistrationStatus",
        &RegistrationStatus {
            plugin_registered: error.is_empty(),
            error: error.to_owned(),
        },
    )
    .await?;
    Ok(info)
}

/// Like [`prepare_and_unprepare!`], with the raw client and the `:authority` of `form`: both
/// calls on one connection, every claim answered with nothing and no error. Evaluates to
/// `Result<(), CallError>`.
#[allow(unused_macros)]
macro_rules! raw_prepare_and_unprepare {
    ($version:ident, $socket:expr, $form:expr, $claims:expr $(, $missing:ident)?) => {{
        async {
            use crate::support::grpc_raw::{RawGrpc, unary};
            let socket: &std::path::Path = $socket;
            let authority = $form.value(socket);
            let (wanted, request) = crate::support::kubelet::dra_claims!($version, $claims);
            let service = concat!(
                "/k8s.io.kubelet.pkg.apis.dra.",
                stringify!($version),
                ".DRAPlugin"
            );
            let mut conn = RawGrpc::connect(socket)
                .await
                .expect("connect to the DRA socket");
            let prepared: $version::NodePrepareResourcesResponse = unary(
                &mut conn,
                authority.as_deref(),
                &format!("{service}/NodePrepareResources"),
                &$version::NodePrepareResourcesRequest {
                    claims: request.clone(),
                },
            )
            .await?;
            crate::support::kubelet::check_prepared!(prepared, wanted $(, $missing)?);
            let unprepared: $version::NodeUnprepareResourcesResponse = unary(
                &mut conn,
                authority.as_deref(),
                &format!("{service}/NodeUnprepareResources"),
                &$version::NodeUnprepareResourcesRequest { claims: request },
            )
            .await?;
            crate::support::kubelet::check_unprepared!(unprepared, wanted);
            Ok::<(), crate::support::grpc_raw::CallError>(())
        }
        .await
    }};
}
#[allow(unused_imports)]
pub(crate) use raw_prepare_and_unprepare;
