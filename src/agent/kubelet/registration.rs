//! The registration service (`pluginregistration.Registration`): the kubelet's plugin watcher
//! finds our socket in its `plugins_registry` directory, asks who we are (`GetInfo`) and then
//! tells us whether it registered us (`NotifyRegistrationStatus`). The verdict is kept in a
//! `tokio::sync::watch` channel so `/readyz` can wait for "kubelet registration succeeded".

use std::fmt;

use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tracing::{debug, error, info};

use super::proto::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    registration_server::Registration,
};
use super::{PLUGIN_TYPE, SUPPORTED_VERSIONS};
use crate::catalogue::DRIVER;

/// What the kubelet last told us about our registration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum RegistrationState {
    /// The kubelet has not reported on the current registration socket yet: the agent just
    /// started, or the socket had to be re-created and the kubelet has not picked it up again.
    #[default]
    Pending,
    /// The kubelet registered the plugin; pods with `media.liken.sh` claims can start here.
    Registered,
    /// The kubelet refused the plugin; `error` is the kubelet's own message, verbatim.
    Failed {
        /// The kubelet's reason, exactly as it sent it (may be empty).
        error: String,
    },
}

impl RegistrationState {
    /// True once the kubelet reported that it registered the plugin.
    pub fn is_registered(&self) -> bool {
        matches!(self, Self::Registered)
    }
}

impl fmt::Display for RegistrationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pending => f.write_str("waiting for the kubelet to register the plugin"),
            Self::Registered => f.write_str("registered with the kubelet"),
            Self::Failed { error } if error.is_empty() => {
                f.write_str("the kubelet refused the registration without giving a reason")
            }
            Self::Failed { error } => write!(f, "the kubelet refused the registration: {error}"),
        }
    }
}

/// Answers the kubelet's plugin watcher on the registration socket.
#[derive(Clone, Debug)]
pub(super) struct RegistrationService {
    /// Absolute path of the DRA socket, handed to the kubelet as our endpoint.
    endpoint: String,
    state: watch::Sender<RegistrationState>,
}

impl RegistrationService {
    pub(super) fn new(endpoint: String, state: watch::Sender<RegistrationState>) -> Self {
        Self { endpoint, state }
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(
        &self,
        _request: Request<InfoRequest>,
    ) -> Result<Response<PluginInfo>, Status> {
        debug!(endpoint = %self.endpoint, "the kubelet asked for the plugin's info");
        Ok(Response::new(PluginInfo {
            r#type: PLUGIN_TYPE.to_owned(),
            name: DRIVER.to_owned(),
            endpoint: self.endpoint.clone(),
            supported_versions: SUPPORTED_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        let state = if status.plugin_registered {
            info!("the kubelet registered the {DRIVER} plugin");
            RegistrationState::Registered
        } else {
            // The kubelet's message is the only clue an operator gets (e.g. an unsupported
            // version or a name clash), so it is logged exactly as received.
            error!(
                "the kubelet refused to register the {DRIVER} plugin: {}",
                status.error
            );
            RegistrationState::Failed {
                error: status.error,
            }
        };
        // `send_replace` stores the state even while nobody is subscribed yet.
        self.state.send_replace(state);
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
