//! The registration service (`pluginregistration.Registration`): the kubelet's plugin watcher asks
//! who we are (`GetInfo`), then whether it registered us (`NotifyRegistrationStatus`). The verdict
//! goes to a `watch` channel for `/readyz`, and [`report`] logs what an operator needs once:
//! registered (INFO), refused or not registered in time (WARN, with what to check). After a refusal
//! the socket is made anew so that the kubelet tries again.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use super::PLUGIN_TYPE;
use super::proto::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    registration_server::Registration,
};
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
    /// The services served on it (`super::supported_versions`).
    versions: Vec<String>,
    state: watch::Sender<RegistrationState>,
}

impl RegistrationService {
    pub(super) fn new(
        endpoint: String,
        versions: Vec<String>,
        state: watch::Sender<RegistrationState>,
    ) -> Self {
        Self {
            endpoint,
            versions,
            state,
        }
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
            supported_versions: self.versions.clone(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        debug!(
            registered = status.plugin_registered,
            error = %status.error,
            "the kubelet reported on the plugin's registration"
        );
        // What an operator must see is logged once per change by `report`.
        let state = if status.plugin_registered {
            RegistrationState::Registered
        } else {
            RegistrationState::Failed {
                error: status.error,
            }
        };
        // `send_replace` stores the state even while nobody is subscribed yet.
        self.state.send_replace(state);
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// How long after start (or after the registration socket was re-created) the agent waits for
/// the kubelet to register the plugin before it warns. The kubelet's plugin watcher notices a
/// new socket within a second or two, so a minute means it is not looking at ours.
pub const DEFAULT_REGISTRATION_WARNING: Duration = Duration::from_secs(60);

/// What [`report`] needs to name in its hints.
#[derive(Clone, Debug)]
pub(super) struct Where {
    /// The registration socket the kubelet should find.
    pub socket: PathBuf,
    /// The DRA socket handed to the kubelet.
    pub endpoint: String,
}

/// Logs the registration's course for operators, each finding once: INFO when the kubelet
/// registers the plugin; WARN with the kubelet's message when it refuses (a new message is
/// logged again, a repeated one is not); WARN when nothing is registered `wait` after start or
/// after the socket was re-created. Ends when the state's sender is dropped.
pub(super) async fn report(
    mut state: watch::Receiver<RegistrationState>,
    wait: Duration,
    place: Where,
) {
    let socket = place.socket.display().to_string();
    let registry = place
        .socket
        .parent()
        .map_or_else(String::new, |d| d.display().to_string());
    let mut deadline = Some(Instant::now() + wait);
    let mut registered = false;
    let mut last_refusal: Option<String> = None;
    // Whether this round follows a change of the state (not the warning's timer).
    let mut changed_state = false;
    loop {
        let current = state.borrow_and_update().clone();
        match current {
            RegistrationState::Registered => {
                if !registered {
                    info!(
                        "the kubelet registered the {DRIVER} plugin (DRA endpoint {})",
                        place.endpoint
                    );
                }
                registered = true;
                deadline = None;
                last_refusal = None;
            }
            RegistrationState::Failed { error } => {
                if last_refusal.as_deref() != Some(&error) {
                    // The kubelet's message is the only clue an operator gets (an unsupported
                    // version, a name clash), so it is logged exactly as received.
                    let error_text = if error.is_empty() {
                        "(the kubelet gave no reason)"
                    } else {
                        &error
                    };
                    warn!(
                        "the kubelet refused to register the {DRIVER} plugin: {error_text} (hint: pods with {DRIVER} claims cannot start on this node until it does; the kubelet's log has the same message after \"RegisterPlugin error\"; check the kubelet's version and that DynamicResourceAllocation is enabled)"
                    );
                    last_refusal = Some(error);
                }
                registered = false;
                deadline = None;
            }
            RegistrationState::Pending => {
                if changed_state {
                    // The socket was re-created: the kubelet has to find it again, and gets
                    // the whole grace period for that.
                    deadline = Some(Instant::now() + wait);
                }
                // A refusal is remembered across new sockets: the same one again, after the
                // socket was offered anew, is not news (the serving loop logs each new offer).
                registered = false;
            }
        }
        let timer = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = state.changed() => {
                if changed.is_err() {
                    return;
                }
                changed_state = true;
            }
            () = timer => {
                deadline = None;
                changed_state = false;
                warn!(
                    "no kubelet has registered the {DRIVER} plugin within {wait:?} of serving {socket}: pods with {DRIVER} claims stay in ContainerCreating on this node (hint: the kubelet finds plugins in its plugins_registry directory: check that {registry} is a hostPath mount of it (usually /var/lib/kubelet/plugins_registry, --kubelet-registry-dir), and look for \"RegisterPlugin error\" and {DRIVER}-reg.sock in the kubelet's log)"
                );
            }
        }
    }
}
