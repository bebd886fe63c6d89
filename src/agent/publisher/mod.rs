//! Publishing the node's `media.liken.sh` ResourceSlice and keeping it true: it follows what the
//! API server stores (a watch and a periodic read) and writes only when that differs from what the
//! prober found; docs/operations.md says how it answers deletions, edits, refusals and outages.
//!
//! [`compare`] compares two slices and [`decide`] makes every decision; this loop only waits,
//! carries out actions and makes requests, each bounded by [`API_CALL_TIMEOUT`]. kube-runtime's
//! `Controller` does not fit (one object, desired state from the prober, Retry-After waits), nor
//! its `Store` (our own write's answer must win over a late watch event).

mod compare;
mod decide;

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use self::compare::{Change, FieldPath, stored_changes};
use self::decide::{Action, Event, Plan, State, Stray, decide, plan, selector};
use crate::agent::api::{API_CALL_TIMEOUT, ApiCause, api_answered, api_unanswered};
use crate::agent::health::{DroppedField, DroppedTaints, Health, RefusalLabels, WriteLabels};
use crate::agent::kubelet::health::{HealthSender, Published};
use crate::agent::liveness::Heartbeat;
use crate::catalogue::DRIVER;
use crate::duration::human;
use crate::node::device::GpuDevice;

/// How many conflicts in a row are re-read and retried at once before backing off.
const MAX_IMMEDIATE_RETRIES: usize = 5;

/// Why one publish attempt failed (retried; never fatal).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    /// An API request failed: `verb` on `what` (`ResourceSlice <name>`, `Node <name>`).
    #[error("{verb} {what}")]
    Api {
        verb: &'static str,
        what: String,
        #[source]
        cause: ApiCause,
    },
    /// The Node does not exist (yet, or any more).
    #[error(
        "Node {node} does not exist, so its slice would be garbage-collected at once; waiting for it (hint: the slice is published when the kubelet registers the node again)"
    )]
    NodeMissing { node: String },
    /// Every immediate retry met a conflict.
    #[error(
        "ResourceSlice {name} kept changing under us ({MAX_IMMEDIATE_RETRIES} conflicts in a row)"
    )]
    Conflicts { name: String },
    /// The server stored something the agent cannot leave aside.
    #[error(
        "the API server stored ResourceSlice {name} otherwise than it was sent: {changes}; writing it again with backoff (hint: a mutating admission policy or webhook changes ResourceSlices: kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations)"
    )]
    StoredOtherwise { name: String, changes: String },
    /// A slice of another driver has our name: not this agent's to change or delete.
    #[error(
        "ResourceSlice {name} belongs to driver {driver}, not {DRIVER}, so this node's slice cannot be published under its name; another driver's object is left alone (hint: see who made it: kubectl get resourceslice {name} -o yaml; delete it if nothing needs it)"
    )]
    NameTaken { name: String, driver: String },
}

impl PublishError {
    /// The refusal, if the API server refused a write.
    pub(crate) fn refusal(&self) -> Option<(&'static str, u16)> {
        match self {
            PublishError::Api { verb, cause, .. } if cause.is_refusal() => {
                cause.status().map(|(code, _)| (*verb, code))
            }
            _ => None,
        }
    }

    /// The error and its causes on one line, as the log and `/readyz` show it.
    fn chained(&self) -> String {
        let mut text = self.to_string();
        // At most two levels: ApiCause has no source.
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }

    fn class(&self) -> String {
        match self {
            PublishError::Api { cause, .. } => cause.class(),
            other => other.to_string(),
        }
    }
}

/// How the publisher is set up.
#[derive(Clone, Debug)]
pub(crate) struct PublisherConfig {
    /// The node whose slice this is.
    pub node: String,
    /// How often the stored slice is re-read without a watch event (reads only).
    pub resync_interval: Duration,
    /// The cap of the retry backoff.
    pub max_backoff: Duration,
    /// The API server's address, named in errors where it cannot be reached.
    pub api_url: String,
}

/// Publishes and keeps the node's slice; see the module documentation.
pub(crate) struct Publisher {
    config: PublisherConfig,
    slices: Api<ResourceSlice>,
    nodes: Api<Node>,
    health: Arc<Health>,
    heartbeat: Heartbeat,
    state: State,
    /// Told each device's health once the stored slice says it (the kubelet plugin's
    /// `DRAResourceHealth`, `crate::agent::kubelet::health`).
    published: Option<HealthSender>,
}

impl Publisher {
    /// A publisher for `config.node` using `client`; `heartbeat` tells `/healthz` it progresses.
    pub(crate) fn new(
        client: kube::Client,
        config: PublisherConfig,
        health: Arc<Health>,
        heartbeat: Heartbeat,
    ) -> Self {
        let state = State::new(
            &config.node,
            config.resync_interval,
            config.max_backoff,
            Instant::now(),
        );
        Self {
            slices: Api::all(client.clone()),
            nodes: Api::all(client),
            config,
            health,
            heartbeat,
            state,
            published: None,
        }
    }

    /// Tells `published` each device's health (working, or failed and why) once the stored
    /// slice says it: after a write the server accepted, or a read that found it up to date.
    pub(crate) fn with_health(self, published: HealthSender) -> Self {
        Self {
            published: Some(published),
            ..self
        }
    }

    /// The slice now says `gpus`: their health goes to the health feed, if it changed.
    fn tell_health(&self, gpus: &[GpuDevice]) {
        let Some(sender) = &self.published else {
            return;
        };
        let now = std::time::SystemTime::now();
        sender.send_if_modified(|current| {
            let next = Published::follow(
                current.as_ref(),
                &self.config.node,
                gpus.iter()
                    .map(|g| (g.name.as_str(), g.failure.as_ref().map(|f| f.text.as_str()))),
                now,
            );
            let changed = current.as_ref() != Some(&next);
            if changed {
                *current = Some(next);
            }
            changed
        });
    }

    /// Runs until the `gpus` sender is dropped. `gpus` holds `None` until the first probe.
    /// Only waits and dispatches: every decision is [`decide`]'s.
    pub(crate) async fn run(mut self, mut gpus: watch::Receiver<Option<Vec<GpuDevice>>>) {
        let config = watcher::Config::default().fields(&selector(&self.config.node));
        let events = watcher::watcher(self.slices.clone(), config).default_backoff();
        let mut events = std::pin::pin!(events);
        let known = gpus.borrow().is_some();
        let mut pending = VecDeque::from(self.decide(Event::Desired { known }));
        loop {
            // The timer wakes the loop at least once per resync interval, whatever else happens.
            self.heartbeat.beat(self.config.resync_interval).await;
            while let Some(action) = pending.pop_front() {
                if let Some(answer) = self.execute(action, &gpus).await {
                    pending.extend(self.decide(answer));
                }
            }
            let event = tokio::select! {
                event = events.next() => match event {
                    // The watcher never ends on its own; treat an end like a stop.
                    None => return,
                    Some(Ok(event)) => Event::Watched(event),
                    Some(Err(e)) => {
                        let (verb, cause) = ApiCause::from_watcher(&e, &self.config.api_url);
                        Event::WatchFailed { verb, cause }
                    }
                },
                changed = gpus.changed() => match changed {
                    Ok(()) => Event::Desired { known: gpus.borrow().is_some() },
                    Err(_) => return,
                },
                () = tokio::time::sleep_until(self.state.wake_at()) => Event::Timer,
            };
            pending.extend(self.decide(event));
        }
    }

    fn decide(&mut self, event: Event) -> Vec<Action> {
        decide(&mut self.state, event, Instant::now())
    }

    /// Carries out one action; an API request's answer is the next event.
    async fn execute(
        &mut self,
        action: Action,
        gpus: &watch::Receiver<Option<Vec<GpuDevice>>>,
    ) -> Option<Event> {
        let url = &self.config.api_url;
        match action {
            Action::Publish => {
                let wanted = gpus.borrow().clone()?;
                let published = self.reconcile(&wanted).await;
                if published.is_ok() {
                    self.tell_health(&wanted);
                }
                return Some(Event::Published(published));
            }
            Action::Read => {
                let (what, request) = (self.what(), self.slices.get_opt(&self.state.stored.name));
                return Some(Event::Read(self.call("get", &what, request).await));
            }
            Action::DeleteStray(stray) => self.delete_stray(stray),
            Action::Answered => api_answered(&self.health, url),
            Action::Unanswered(cause) => {
                api_unanswered(&self.health, url, &cause);
            }
            Action::CountFailure => {
                self.health.metrics.publish_errors.inc();
            }
            Action::Refused { verb, code, note } => {
                let labels = RefusalLabels { verb, code };
                self.health.metrics.refusals.get_or_create(&labels).inc();
                Health::set_note(&self.health.refusal, Some(note));
            }
            Action::Accepted => {
                if Health::set_note(&self.health.refusal, None) {
                    info!("the API server accepts this agent's requests again");
                }
            }
        }
        None
    }

    /// Deletes a stray slice in the background (uid precondition): best effort, said once.
    fn delete_stray(&self, Stray { name, uid }: Stray) {
        warn!(
            "deleting ResourceSlice {name}: it belongs to driver {DRIVER} on this node but is not {}, and would compete with it",
            self.state.stored.name
        );
        let slices = self.slices.clone();
        let health = Arc::clone(&self.health);
        let url = self.config.api_url.clone();
        tokio::spawn(async move {
            let params = DeleteParams::default().preconditions(Preconditions {
                uid,
                resource_version: None,
            });
            match tokio::time::timeout(API_CALL_TIMEOUT, slices.delete(&name, &params)).await {
                Ok(Ok(_)) => {
                    let labels = WriteLabels { verb: "delete" };
                    health.metrics.writes.get_or_create(&labels).inc();
                }
                Ok(Err(e)) => warn!(
                    "delete ResourceSlice {name}: {}",
                    ApiCause::from_kube(&e, &url)
                ),
                Err(_) => warn!(
                    "delete ResourceSlice {name}: no answer from {url} within {}",
                    human(API_CALL_TIMEOUT)
                ),
            }
        });
    }

    /// Takes in a stored slice read or written by us (a stray would be deleted).
    fn take_in(&mut self, slice: Option<ResourceSlice>) {
        match slice {
            Some(slice) => {
                if let Some(stray) = self.state.stored.seen(slice) {
                    self.delete_stray(stray);
                }
            }
            None => self.state.stored.observed = None,
        }
    }

    /// One attempt to make the stored slice match `gpus`, following [`plan`]; writes only when
    /// they differ.
    async fn reconcile(&mut self, gpus: &[GpuDevice]) -> Result<(), PublishError> {
        let mut rechecked = false;
        for _ in 0..MAX_IMMEDIATE_RETRIES {
            let mut next = plan(&self.state.stored, gpus, rechecked);
            if next == Plan::ReadNode {
                self.read_node().await?;
                next = plan(&self.state.stored, gpus, rechecked);
            }
            rechecked = false;
            let what = self.what();
            match next {
                // Read and still unknown (a Node without a uid): bounded by the attempts.
                Plan::ReadNode => {}
                Plan::UpToDate { generation } => {
                    if !self
                        .health
                        .published
                        .load(std::sync::atomic::Ordering::Relaxed)
                    {
                        info!("{what} is up to date (pool generation {generation})");
                        self.health.mark_published();
                    }
                    return Ok(());
                }
                Plan::Recheck => {
                    self.refresh().await?;
                    rechecked = true;
                }
                Plan::NameTaken { driver } => {
                    let name = self.state.stored.name.clone();
                    return Err(PublishError::NameTaken { name, driver });
                }
                Plan::Replace { uid, difference } => {
                    warn!(
                        "{what} is not this agent's: {difference}, which cannot be changed; deleting it and creating this node's"
                    );
                    self.delete_stored(uid).await?;
                }
                Plan::Update(wanted) => {
                    let name = &self.state.stored.name;
                    let params = PostParams::default();
                    let request = self.slices.replace(name, &params, &wanted);
                    match self.call("update", &what, request).await {
                        Ok(written) => return self.written("update", &wanted, written),
                        // Someone wrote in between: read what is there now and try again.
                        Err(PublishError::Api { cause, .. }) if cause.is_conflict() => {
                            self.refresh().await?;
                        }
                        Err(PublishError::Api { cause, .. }) if cause.is_not_found() => {
                            self.state.stored.observed = None;
                        }
                        Err(e) => return Err(e),
                    }
                }
                Plan::Create => {
                    // A slice owned by a deleted Node would be collected at once.
                    self.read_node().await?;
                    let wanted = self.state.stored.creation(gpus);
                    let params = PostParams::default();
                    let request = self.slices.create(&params, &wanted);
                    match self.call("create", &what, request).await {
                        Ok(written) => return self.written("create", &wanted, written),
                        Err(PublishError::Api { cause, .. })
                            if cause.is_already_exists() || cause.is_conflict() =>
                        {
                            self.refresh().await?;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(PublishError::Conflicts {
            name: self.state.stored.name.clone(),
        })
    }

    /// One bounded API request: the heartbeat promises progress within its timeout.
    async fn call<T>(
        &self,
        verb: &'static str,
        what: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, PublishError> {
        self.heartbeat.busy(API_CALL_TIMEOUT);
        let url = &self.config.api_url;
        let cause = match tokio::time::timeout(API_CALL_TIMEOUT, request).await {
            Ok(Ok(answer)) => {
                api_answered(&self.health, url);
                return Ok(answer);
            }
            Ok(Err(e)) => ApiCause::from_kube(&e, url),
            Err(_) => ApiCause::TimedOut {
                url: url.clone(),
                after: API_CALL_TIMEOUT,
            },
        };
        if !cause.is_outage() {
            // "No" is an answer: the server works.
            api_answered(&self.health, url);
        }
        Err(PublishError::Api {
            verb,
            what: what.to_string(),
            cause,
        })
    }

    fn what(&self) -> String {
        format!("ResourceSlice {}", self.state.stored.name)
    }

    async fn read_node(&mut self) -> Result<(), PublishError> {
        let node = self.config.node.clone();
        match self
            .call("get", &format!("Node {node}"), self.nodes.get_opt(&node))
            .await?
        {
            Some(found) => {
                self.state.stored.node_uid = found.metadata.uid;
                Ok(())
            }
            None => {
                self.state.stored.node_uid = None;
                Err(PublishError::NodeMissing { node })
            }
        }
    }

    async fn refresh(&mut self) -> Result<(), PublishError> {
        let what = self.what();
        let request = self.slices.get_opt(&self.state.stored.name);
        let found = self.call("get", &what, request).await?;
        self.take_in(found);
        Ok(())
    }

    async fn delete_stored(&mut self, uid: Option<String>) -> Result<(), PublishError> {
        let params = DeleteParams::default().preconditions(Preconditions {
            uid,
            resource_version: None,
        });
        let what = self.what();
        let request = self.slices.delete(&self.state.stored.name, &params);
        match self.call("delete", &what, request).await {
            Ok(_) => self.count_write("delete"),
            Err(PublishError::Api { cause, .. }) if cause.is_not_found() => {}
            Err(e) => return Err(e),
        }
        self.state.stored.observed = None;
        Ok(())
    }

    fn count_write(&self, verb: &'static str) {
        self.health
            .metrics
            .writes
            .get_or_create(&WriteLabels { verb })
            .inc();
    }

    /// Records a write's answer (the object as stored) and compares it with what was sent:
    /// fields the server drops, adds or changes inside devices are said once and left out of
    /// the comparison from now on; any other change makes the write count as failed.
    fn written(
        &mut self,
        verb: &'static str,
        sent: &ResourceSlice,
        stored: ResourceSlice,
    ) -> Result<(), PublishError> {
        self.count_write(verb);
        self.health.mark_published();
        let devices = stored.spec.devices.as_ref().map_or(0, Vec::len);
        info!(
            "ResourceSlice {}: {verb}d with {devices} device(s), pool generation {}",
            self.state.stored.name, stored.spec.pool.generation
        );
        let changes = stored_changes(sent, &stored);
        let (aside, fought): (Vec<&Change>, Vec<&Change>) =
            changes.iter().partition(|c| c.path.can_be_left_aside());
        self.learn(&aside, sent);
        self.state.stored.generation = self
            .state
            .stored
            .generation
            .max(stored.spec.pool.generation);
        self.state.stored.observed = Some(stored);
        if fought.is_empty() {
            Ok(())
        } else {
            let changes: Vec<String> = fought.iter().map(ToString::to_string).collect();
            Err(PublishError::StoredOtherwise {
                name: self.state.stored.name.clone(),
                changes: changes.join(", "),
            })
        }
    }

    /// Takes the fields the last write's answer changed as the ones to leave aside, and says
    /// so when that set changes.
    fn learn(&mut self, aside: &[&Change], sent: &ResourceSlice) {
        let asked_multiple = sent
            .spec
            .devices
            .iter()
            .flatten()
            .any(|d| d.allow_multiple_allocations == Some(true));
        if asked_multiple {
            let dropped = aside.iter().any(|c| c.path.is_gate_field());
            if self.health.set_dropped_field(dropped) {
                if dropped {
                    warn!("{DroppedField}");
                } else {
                    info!("the API server keeps allowMultipleAllocations again");
                }
            }
        }
        // Only a write that sent taints says whether the server keeps them.
        let asked_taints = sent
            .spec
            .devices
            .iter()
            .flatten()
            .any(|d| d.taints.as_ref().is_some_and(|t| !t.is_empty()));
        if asked_taints {
            let dropped = aside.iter().any(|c| c.path.is_taints_field());
            if self.health.set_dropped_taints(dropped) {
                if dropped {
                    warn!("{DroppedTaints}");
                } else {
                    info!("the API server keeps the taints of the media.liken.sh devices again");
                }
            }
        }
        let others: Vec<&&Change> = aside
            .iter()
            .filter(|c| !c.path.is_gate_field() && !c.path.is_taints_field())
            .collect();
        self.health
            .metrics
            .server_changed_fields
            .set(others.len() as i64);
        let note = (!others.is_empty()).then(|| {
            let listed: Vec<String> = others.iter().map(ToString::to_string).collect();
            format!(
                "the API server changes what this agent writes to ResourceSlice {}: {}; these fields are no longer compared, so the slice is not rewritten over them (hint: a mutating admission policy or webhook, or an API server of another version, changes ResourceSlices: kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations)",
                self.state.stored.name,
                listed.join(", ")
            )
        });
        if Health::set_note(&self.health.server_changes, note.clone()) {
            match note {
                Some(note) => warn!("{note}"),
                None => info!(
                    "the API server stores ResourceSlice {} as sent again",
                    self.state.stored.name
                ),
            }
        }
        let mut left_aside: Vec<FieldPath> = aside.iter().map(|c| c.path.clone()).collect();
        left_aside.dedup();
        self.state.stored.left_aside = left_aside;
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use crate::node::device::{AttrValue, GpuDevice};
    use crate::node::slice::NodeRef;

    pub(crate) fn gpu(name: &str) -> GpuDevice {
        GpuDevice {
            name: name.into(),
            render_node: "/dev/dri/renderD128".into(),
            attributes: [("decodeVP9", AttrValue::Bool(true))].into_iter().collect(),
            failure: None,
            taint: None,
            trimmed: Vec::new(),
        }
    }

    pub(crate) fn node() -> NodeRef {
        NodeRef {
            name: "n1".into(),
            uid: "u1".into(),
        }
    }
}
