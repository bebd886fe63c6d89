//! Publishing the node's `media.liken.sh` ResourceSlice and keeping it true.
//!
//! The publisher holds what the slice should contain (from the prober) and what the API server
//! stores (from a watch of only this node's slices: field selectors `spec.nodeName=<node>` and
//! `spec.driver=media.liken.sh`). Whenever the two differ it writes; when they agree it sends
//! nothing, so a steady node costs the API server one idle watch and no writes. This covers:
//!
//! - the first publish, and re-creation after the kubelet's wipe (at kubelet start, and 30 s
//!   after our plugin disappears) or any other deletion;
//! - restoring the slice after an outside edit of its spec or its ownerReference (metadata such
//!   as labels is left alone: it does not reach the scheduler);
//! - a new probe result (GPUs appeared or disappeared), bumping `spec.pool.generation` on every
//!   content change, from the stored value, never backwards.
//!
//! Comparison ignores `generation` and metadata noise (resourceVersion, managedFields, ...).
//! API failures are retried with capped exponential backoff and jitter, forever: an outage is
//! never a reason to exit. A conflict re-reads and retries at once. The watch itself (kube-rs's
//! watcher) re-lists after a broken stream or `410 Gone`. Each problem is logged once when it
//! starts and once when it ends, not at every retry.
//!
//! After each write the publisher looks at what the API server answered, which is the object as
//! stored: a server with the DRAConsumableCapacity gate off drops `allowMultipleAllocations`
//! silently, and the publisher says so once (log, `/readyz`, `/metrics`) and stops counting that
//! field as a difference (otherwise it would rewrite the slice forever).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceSlice, ResourceSliceSpec};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::agent::health::{DROPPED_FIELD_WARNING, Health, WriteLabels};
use crate::catalogue::DRIVER;
use crate::node::device::GpuDevice;
use crate::node::slice::{NodeRef, desired, slice_name};

/// The first retry delay; doubled at each failure up to the configured maximum.
const INITIAL_BACKOFF: Duration = Duration::from_millis(200);

/// How many conflicts in a row are re-read and retried at once before backing off.
const MAX_IMMEDIATE_RETRIES: usize = 5;

/// Why one publish attempt failed (retried; never fatal).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The Node could not be read.
    #[error("read Node {node}: {source}")]
    GetNode { node: String, source: kube::Error },
    /// The Node does not exist (yet, or any more).
    #[error(
        "Node {node} does not exist, so its slice would be garbage-collected at once; waiting for it (hint: the slice is published when the kubelet registers the node again)"
    )]
    NodeMissing { node: String },
    /// The slice could not be read.
    #[error("read ResourceSlice {name}: {source}")]
    Get { name: String, source: kube::Error },
    /// The slice could not be created.
    #[error("create ResourceSlice {name}: {source}")]
    Create { name: String, source: kube::Error },
    /// The slice could not be updated.
    #[error("update ResourceSlice {name}: {source}")]
    Update { name: String, source: kube::Error },
    /// A slice in the way could not be deleted.
    #[error("delete ResourceSlice {name}: {source}")]
    Delete { name: String, source: kube::Error },
    /// Every immediate retry met a conflict.
    #[error(
        "ResourceSlice {name} kept changing under us ({MAX_IMMEDIATE_RETRIES} conflicts in a row)"
    )]
    Conflicts { name: String },
}

/// Capped exponential backoff with jitter ("equal jitter": half fixed, half random), so a fleet
/// of agents that lost the API server together does not come back in lockstep.
#[derive(Debug)]
pub struct Backoff {
    failures: u32,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff from 200 ms that never waits longer than `max`.
    pub fn new(max: Duration) -> Self {
        Self::starting_at(INITIAL_BACKOFF, max)
    }

    /// A backoff from `initial` that never waits longer than `max`.
    pub fn starting_at(initial: Duration, max: Duration) -> Self {
        Self {
            failures: 0,
            initial,
            max,
        }
    }

    /// The delay before the next attempt after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.initial.saturating_mul(1 << self.failures.min(20));
        self.failures = self.failures.saturating_add(1);
        let capped = exp.min(self.max);
        let half = capped / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Back to the first delay after a success.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Logs a problem once when it starts (or changes) and once when it is over, not per retry.
#[derive(Debug)]
pub struct Problem {
    what: &'static str,
    current: Option<String>,
}

impl Problem {
    /// A tracker for one activity (`what`: "publish the ResourceSlice", "watch ...").
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            current: None,
        }
    }

    /// Records a failure; returns whether it was logged (a new or different problem).
    pub fn failed(&mut self, error: &str) -> bool {
        if self.current.as_deref() == Some(error) {
            return false;
        }
        warn!(
            "{}: {error}; retrying with backoff (logged again only when this changes)",
            self.what
        );
        self.current = Some(error.to_string());
        true
    }

    /// Records a success; logs the recovery if there was a problem.
    pub fn ok(&mut self) {
        if let Some(previous) = self.current.take() {
            info!("{}: works again (after: {previous})", self.what);
        }
    }
}

/// Whether the stored slice says what we want, ignoring the pool generation, metadata other
/// than the ownerReferences, and (when the server is known to drop it) `allowMultipleAllocations`.
pub fn same_content(stored: &ResourceSlice, wanted: &ResourceSlice, ignore_multiple: bool) -> bool {
    let normalise = |spec: &ResourceSliceSpec| {
        let mut spec = spec.clone();
        spec.pool.generation = 0;
        // A real API server omits an empty list; ours sends one. Both mean "no devices".
        let mut devices = spec.devices.take().unwrap_or_default();
        if ignore_multiple {
            for device in &mut devices {
                device.allow_multiple_allocations = None;
            }
        }
        spec.devices = Some(devices);
        spec
    };
    normalise(&stored.spec) == normalise(&wanted.spec)
        && stored
            .metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
            == wanted
                .metadata
                .owner_references
                .as_deref()
                .unwrap_or_default()
}

/// Whether the server dropped `allowMultipleAllocations` from what we sent; `None` when the
/// slice has no device to tell by.
pub fn dropped_multiple(sent: &ResourceSlice, stored: &ResourceSlice) -> Option<bool> {
    let asked = sent
        .spec
        .devices
        .iter()
        .flatten()
        .any(|d| d.allow_multiple_allocations == Some(true));
    if !asked {
        return None;
    }
    let kept = stored
        .spec
        .devices
        .iter()
        .flatten()
        .any(|d| d.allow_multiple_allocations == Some(true));
    Some(!kept)
}

/// How the publisher is set up.
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// The node whose slice this is.
    pub node: String,
    /// How often the stored slice is re-read without a watch event (reads only).
    pub resync_interval: Duration,
    /// The cap of the retry backoff.
    pub max_backoff: Duration,
}

/// Publishes and keeps the node's slice; see the module documentation.
pub struct Publisher {
    config: PublisherConfig,
    name: String,
    slices: Api<ResourceSlice>,
    nodes: Api<Node>,
    health: Arc<Health>,
    /// The stored slice as last seen (watch, list, read or write answer); `None`: absent.
    observed: Option<ResourceSlice>,
    /// The Node's uid, for the ownerReference; re-read before every create.
    node_uid: Option<String>,
    /// The highest pool generation seen or written, so a re-created slice never goes back.
    generation: i64,
    /// The server drops `allowMultipleAllocations` (learned from a write's answer).
    drops_multiple: bool,
}

impl Publisher {
    /// A publisher for `config.node` using `client`.
    pub fn new(client: kube::Client, config: PublisherConfig, health: Arc<Health>) -> Self {
        Self {
            name: slice_name(&config.node),
            slices: Api::all(client.clone()),
            nodes: Api::all(client),
            config,
            health,
            observed: None,
            node_uid: None,
            generation: 0,
            drops_multiple: false,
        }
    }

    /// Runs until the `gpus` sender is dropped. `gpus` holds `None` until the first probe.
    pub async fn run(mut self, mut gpus: watch::Receiver<Option<Vec<GpuDevice>>>) {
        let selector = format!("spec.nodeName={},spec.driver={DRIVER}", self.config.node);
        let events = watcher::watcher(
            self.slices.clone(),
            watcher::Config::default().fields(&selector),
        )
        .default_backoff();
        let mut events = std::pin::pin!(events);
        let mut init_buffer: Vec<ResourceSlice> = Vec::new();
        let mut listed = false;
        // The watch and the periodic read both follow the stored slice; the watcher yields
        // nothing when it reconnects without news, so a successful read also ends a problem.
        let mut watch_problem = Problem::new("follow this node's ResourceSlice");
        let mut publish_problem = Problem::new("publish the ResourceSlice");
        let mut backoff = Backoff::new(self.config.max_backoff);
        let mut retry_at: Option<Instant> = None;
        let mut resync = tokio::time::interval(self.config.resync_interval);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resync.tick().await; // The first tick is immediate; the watcher lists at start anyway.

        loop {
            let wanted = gpus.borrow().clone();
            if let Some(wanted) = wanted
                && listed
                && retry_at.is_none()
            {
                match self.reconcile(&wanted).await {
                    Ok(()) => {
                        publish_problem.ok();
                        backoff.reset();
                    }
                    Err(e) => {
                        self.health.metrics.publish_errors.inc();
                        publish_problem.failed(&e.to_string());
                        retry_at = Some(Instant::now() + backoff.next_delay());
                    }
                }
            }
            tokio::select! {
                event = events.next() => match event {
                    // The watcher never ends on its own; treat an end like a stop.
                    None => return,
                    Some(Err(e)) => {
                        watch_problem.failed(&e.to_string());
                    }
                    Some(Ok(event)) => {
                        watch_problem.ok();
                        match event {
                            Event::Init => init_buffer.clear(),
                            Event::InitApply(slice) => init_buffer.push(slice),
                            Event::InitDone => {
                                listed = true;
                                let found = std::mem::take(&mut init_buffer);
                                if !found.iter().any(|s| s.metadata.name.as_deref() == Some(&self.name)) {
                                    self.observed = None;
                                }
                                for slice in found {
                                    self.seen(Some(slice));
                                }
                            }
                            Event::Apply(slice) => self.seen(Some(slice)),
                            Event::Delete(slice) => {
                                if slice.metadata.name.as_deref() == Some(&self.name) {
                                    info!("ResourceSlice {} was deleted; publishing it again", self.name);
                                    self.observed = None;
                                }
                            }
                        }
                    }
                },
                changed = gpus.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // New content is worth an attempt now, even inside a backoff window.
                    retry_at = None;
                }
                () = sleep_until(retry_at), if retry_at.is_some() => retry_at = None,
                _ = resync.tick() => {
                    // Reads only: a write happens in the next round if the two differ.
                    match self.slices.get_opt(&self.name).await {
                        Ok(found) => {
                            watch_problem.ok();
                            self.observed = None;
                            self.seen(found);
                        }
                        Err(source) => {
                            watch_problem.failed(&PublishError::Get { name: self.name.clone(), source }.to_string());
                        }
                    }
                }
            }
        }
    }

    /// Takes note of a stored slice of this node and driver. Only the slice with our name is
    /// ours; another one (an older naming, a copy) would compete in our pool, and is deleted.
    fn seen(&mut self, slice: Option<ResourceSlice>) {
        let Some(slice) = slice else {
            self.observed = None;
            return;
        };
        if slice.metadata.name.as_deref() == Some(&self.name) {
            // A watch event can arrive after the answer to our own later write (or a read):
            // an older state of the same object must not replace a newer one, or we would
            // "restore" it with a write doomed to conflict. metadata.generation grows with every
            // spec change of an object, so it orders them (resourceVersions must not be compared).
            if let Some(current) = &self.observed
                && current.metadata.uid == slice.metadata.uid
                && slice.metadata.generation < current.metadata.generation
            {
                tracing::debug!("ignoring an older state of ResourceSlice {}", self.name);
                return;
            }
            self.generation = self.generation.max(slice.spec.pool.generation);
            self.observed = Some(slice);
        } else if let Some(other) = slice.metadata.name.clone() {
            let slices = self.slices.clone();
            let uid = slice.metadata.uid.clone();
            let health = Arc::clone(&self.health);
            warn!(
                "deleting ResourceSlice {other}: it belongs to driver {DRIVER} on this node but is not {}, and would compete with it",
                self.name
            );
            tokio::spawn(async move {
                let params = DeleteParams::default().preconditions(Preconditions {
                    uid,
                    resource_version: None,
                });
                match slices.delete(&other, &params).await {
                    Ok(_) => {
                        health
                            .metrics
                            .writes
                            .get_or_create(&WriteLabels { verb: "delete" })
                            .inc();
                    }
                    Err(e) => warn!("delete stray ResourceSlice {other}: {e}"),
                }
            });
        }
    }

    /// One attempt to make the stored slice match `gpus`; writes only when they differ.
    async fn reconcile(&mut self, gpus: &[GpuDevice]) -> Result<(), PublishError> {
        for _ in 0..MAX_IMMEDIATE_RETRIES {
            if self.node_uid.is_none() {
                self.read_node().await?;
            }
            let node = NodeRef {
                name: self.config.node.clone(),
                uid: self.node_uid.clone().unwrap_or_default(),
            };
            match self.observed.clone() {
                Some(stored) => {
                    let mut wanted = desired(&node, gpus, 0);
                    if same_content(&stored, &wanted, self.drops_multiple) {
                        if !self
                            .health
                            .published
                            .load(std::sync::atomic::Ordering::Relaxed)
                        {
                            info!(
                                "ResourceSlice {} is up to date (pool generation {})",
                                self.name, stored.spec.pool.generation
                            );
                            self.health.mark_published();
                        }
                        return Ok(());
                    }
                    wanted.spec.pool.generation =
                        self.generation.max(stored.spec.pool.generation) + 1;
                    // Keep what others put in metadata; it does not reach the scheduler.
                    wanted.metadata.labels = stored.metadata.labels.clone();
                    wanted.metadata.annotations = stored.metadata.annotations.clone();
                    wanted.metadata.resource_version = stored.metadata.resource_version.clone();
                    match self
                        .slices
                        .replace(&self.name, &PostParams::default(), &wanted)
                        .await
                    {
                        Ok(written) => {
                            self.written("update", &wanted, written);
                            return Ok(());
                        }
                        Err(kube::Error::Api(status)) if status.is_conflict() => {
                            // Someone wrote in between: read what is there now and try again.
                            self.refresh().await?;
                        }
                        Err(kube::Error::Api(status)) if status.is_not_found() => {
                            self.observed = None;
                        }
                        Err(kube::Error::Api(status)) if status.code == 422 => {
                            // An immutable field (driver, pool name, node) differs: the slice
                            // was not made by us. Replace it.
                            warn!(
                                "ResourceSlice {} cannot be updated ({}); deleting and re-creating it",
                                self.name, status.message
                            );
                            self.delete_stored(&stored).await?;
                        }
                        Err(source) => {
                            return Err(PublishError::Update {
                                name: self.name.clone(),
                                source,
                            });
                        }
                    }
                }
                None => {
                    // Re-read the Node first: a slice owned by a deleted Node would be collected
                    // at once, and a re-registered Node has a new uid.
                    self.read_node().await?;
                    let node = NodeRef {
                        name: self.config.node.clone(),
                        uid: self.node_uid.clone().unwrap_or_default(),
                    };
                    let wanted = desired(&node, gpus, self.generation + 1);
                    match self.slices.create(&PostParams::default(), &wanted).await {
                        Ok(written) => {
                            self.written("create", &wanted, written);
                            return Ok(());
                        }
                        Err(kube::Error::Api(status))
                            if status.is_already_exists() || status.is_conflict() =>
                        {
                            self.refresh().await?;
                        }
                        Err(source) => {
                            return Err(PublishError::Create {
                                name: self.name.clone(),
                                source,
                            });
                        }
                    }
                }
            }
        }
        Err(PublishError::Conflicts {
            name: self.name.clone(),
        })
    }

    async fn read_node(&mut self) -> Result<(), PublishError> {
        match self.nodes.get_opt(&self.config.node).await {
            Ok(Some(node)) => {
                self.node_uid = node.metadata.uid;
                Ok(())
            }
            Ok(None) => {
                self.node_uid = None;
                Err(PublishError::NodeMissing {
                    node: self.config.node.clone(),
                })
            }
            Err(source) => Err(PublishError::GetNode {
                node: self.config.node.clone(),
                source,
            }),
        }
    }

    async fn refresh(&mut self) -> Result<(), PublishError> {
        let found = self
            .slices
            .get_opt(&self.name)
            .await
            .map_err(|source| PublishError::Get {
                name: self.name.clone(),
                source,
            })?;
        self.seen(found);
        Ok(())
    }

    async fn delete_stored(&mut self, stored: &ResourceSlice) -> Result<(), PublishError> {
        let params = DeleteParams::default().preconditions(Preconditions {
            uid: stored.metadata.uid.clone(),
            resource_version: None,
        });
        match self.slices.delete(&self.name, &params).await {
            Ok(_) => self.count_write("delete"),
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => {
                return Err(PublishError::Delete {
                    name: self.name.clone(),
                    source,
                });
            }
        }
        self.observed = None;
        Ok(())
    }

    fn count_write(&self, verb: &'static str) {
        self.health
            .metrics
            .writes
            .get_or_create(&WriteLabels { verb })
            .inc();
    }

    /// Records a write's answer (the object as stored) and checks it kept every field we sent.
    fn written(&mut self, verb: &'static str, sent: &ResourceSlice, stored: ResourceSlice) {
        self.count_write(verb);
        let devices = stored.spec.devices.as_ref().map_or(0, Vec::len);
        info!(
            "ResourceSlice {}: {verb}d with {devices} device(s), pool generation {}",
            self.name, stored.spec.pool.generation
        );
        if let Some(dropped) = dropped_multiple(sent, &stored) {
            self.drops_multiple = dropped;
            if self.health.set_dropped_field(dropped) {
                if dropped {
                    warn!("{DROPPED_FIELD_WARNING}");
                } else {
                    info!("the API server keeps allowMultipleAllocations again");
                }
            }
        }
        self.generation = self.generation.max(stored.spec.pool.generation);
        self.observed = Some(stored);
        self.health.mark_published();
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::device::AttrValue;

    fn gpu(name: &str) -> GpuDevice {
        GpuDevice {
            name: name.into(),
            render_node: "/dev/dri/renderD128".into(),
            attributes: [("decodeVP9", AttrValue::Bool(true))].into_iter().collect(),
            failure: None,
            trimmed: Vec::new(),
        }
    }

    fn node() -> NodeRef {
        NodeRef {
            name: "n1".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn generation_and_metadata_are_not_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = desired(&node(), &[gpu("pci-0000-00-02-0")], 7);
        stored.metadata.resource_version = Some("42".into());
        stored.metadata.labels = Some([("team".to_string(), "x".to_string())].into());
        assert!(same_content(&stored, &wanted, false));
    }

    #[test]
    fn devices_and_owner_are_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let other_gpu = desired(&node(), &[gpu("pci-0000-03-00-0")], 1);
        assert!(!same_content(&other_gpu, &wanted, false));
        let other_owner = desired(
            &NodeRef {
                name: "n1".into(),
                uid: "u2".into(),
            },
            &[gpu("pci-0000-00-02-0")],
            1,
        );
        assert!(!same_content(&other_owner, &wanted, false));
        let mut edited = wanted.clone();
        edited.spec.devices.as_mut().unwrap()[0]
            .attributes
            .as_mut()
            .unwrap()
            .insert("decodeVP9".into(), Default::default());
        assert!(!same_content(&edited, &wanted, false));
    }

    #[test]
    fn an_empty_list_and_no_list_are_the_same() {
        let wanted = desired(&node(), &[], 1);
        let mut stored = wanted.clone();
        stored.spec.devices = None;
        assert!(same_content(&stored, &wanted, false));
    }

    #[test]
    fn a_dropped_field_is_seen_and_then_ignored() {
        let sent = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = sent.clone();
        stored.spec.devices.as_mut().unwrap()[0].allow_multiple_allocations = None;
        assert_eq!(dropped_multiple(&sent, &stored), Some(true));
        assert_eq!(dropped_multiple(&sent, &sent), Some(false));
        assert_eq!(
            dropped_multiple(&desired(&node(), &[], 1), &stored),
            None,
            "no device, no verdict"
        );
        assert!(!same_content(&stored, &sent, false));
        assert!(same_content(&stored, &sent, true));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let mut backoff = Backoff::new(Duration::from_secs(2));
        let delays: Vec<Duration> = (0..8).map(|_| backoff.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(100) && delays[0] <= INITIAL_BACKOFF);
        assert!(
            delays[3] >= Duration::from_millis(800) && delays[3] <= Duration::from_millis(1600)
        );
        for d in &delays[5..] {
            assert!(
                *d >= Duration::from_secs(1) && *d <= Duration::from_secs(2),
                "{d:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next_delay() <= INITIAL_BACKOFF);
    }

    #[tokio::test]
    async fn an_older_state_of_the_slice_does_not_replace_a_newer_one() {
        // Never contacted: `seen` only records.
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("a valid URI"),
        ))
        .expect("a client");
        let mut publisher = Publisher::new(
            client,
            PublisherConfig {
                node: "n1".into(),
                resync_interval: Duration::from_secs(60),
                max_backoff: Duration::from_secs(1),
            },
            Arc::new(Health::default()),
        );
        let at = |generation: i64, pool: i64| {
            let mut slice = desired(&node(), &[gpu("pci-0000-00-02-0")], pool);
            slice.metadata.uid = Some("slice-uid".into());
            slice.metadata.generation = Some(generation);
            slice
        };
        publisher.seen(Some(at(3, 3)));
        publisher.seen(Some(at(2, 2)));
        let observed = publisher.observed.as_ref().expect("observed");
        assert_eq!(observed.spec.pool.generation, 3, "the newer state stays");
        // A new object (re-created by someone) is taken whatever its generation.
        let mut other = at(1, 1);
        other.metadata.uid = Some("another-uid".into());
        publisher.seen(Some(other));
        assert_eq!(publisher.observed.as_ref().unwrap().spec.pool.generation, 1);
        assert_eq!(
            publisher.generation, 3,
            "the pool generation never goes back"
        );
    }

    #[test]
    fn a_problem_is_logged_once_per_change() {
        let mut problem = Problem::new("publish");
        assert!(problem.failed("503"));
        assert!(!problem.failed("503"));
        assert!(problem.failed("500"));
        problem.ok();
        assert!(problem.failed("500"));
    }
}
