//! The publisher's decisions as plain functions of its state and what just happened: what the
//! server stores, whether a slice is ours, what to write next, when to try again and what to
//! log once. No I/O here: the loop in `super` waits for an [`Event`], calls [`decide`] and
//! carries out the [`Action`]s; a publish attempt follows [`plan`] step by step.

use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::runtime::watcher;
use tokio::time::Instant;
use tracing::{Level, debug, info};

use super::PublishError;
use super::compare::{FieldPath, keep_taint_times, not_ours, same_content, updated_metadata};
use crate::agent::api::{ApiCause, Backoff, Problem};
use crate::catalogue::DRIVER;
use crate::node::device::GpuDevice;
use crate::node::slice::{NodeRef, desired, slice_name};

/// The field selector of the watch: only this node's slices of our driver.
pub(crate) fn selector(node: &str) -> String {
    format!("spec.nodeName={node},spec.driver={DRIVER}")
}

/// What the API server stores, as far as the publisher has seen.
#[derive(Debug)]
pub(crate) struct Stored {
    /// The node whose slice this is.
    pub node: String,
    /// Our slice's name.
    pub name: String,
    /// The stored slice as last seen (watch, list, read or write answer); `None`: absent.
    pub observed: Option<ResourceSlice>,
    /// The Node's uid, for the ownerReference; re-read before every create.
    pub node_uid: Option<String>,
    /// The highest pool generation seen or written, so a re-created slice never goes back.
    pub generation: i64,
    /// The highest pool generation of a stray slice in our pool: ours must be above it, or the
    /// scheduler would take the stray for the pool, or count two slices where it says one.
    pub stray_generation: i64,
    /// Fields the server drops, adds or changes (learned from the last write's answer).
    pub left_aside: Vec<FieldPath>,
}

/// Another slice of this node and driver: it would compete with ours in the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stray {
    pub name: String,
    pub uid: Option<String>,
}

impl Stored {
    /// Nothing seen yet for `node`.
    pub(crate) fn new(node: &str) -> Self {
        Self {
            node: node.to_string(),
            name: slice_name(node),
            observed: None,
            node_uid: None,
            generation: 0,
            stray_generation: 0,
            left_aside: Vec::new(),
        }
    }

    /// Our slice is not stored (any more), however that was learned; said once, when it was
    /// there before. Returns whether it was.
    pub(crate) fn gone(&mut self) -> bool {
        let was = self.observed.take().is_some();
        if was {
            info!(
                "ResourceSlice {} was deleted; publishing it again",
                self.name
            );
        }
        was
    }

    /// Takes note of a stored slice of this node and driver. Only the slice with our name is
    /// ours; another one (an older naming, a copy) is returned, to be deleted.
    pub(crate) fn seen(&mut self, slice: ResourceSlice) -> Option<Stray> {
        let Some(other) = slice.metadata.name.clone().filter(|n| *n != self.name) else {
            // A watch event overtaken by our write's answer must not replace it (the "restore"
            // would conflict): metadata.generation orders them; resourceVersions must not.
            if let Some(current) = &self.observed
                && current.metadata.uid == slice.metadata.uid
                && slice.metadata.generation < current.metadata.generation
            {
                debug!("ignoring an older state of ResourceSlice {}", self.name);
                return None;
            }
            // Another driver's slice is another pool: its generation says nothing about ours.
            if slice.spec.driver == DRIVER {
                self.generation = self.generation.max(slice.spec.pool.generation);
            }
            self.observed = Some(slice);
            return None;
        };
        if slice.spec.pool.name == self.node {
            self.stray_generation = self.stray_generation.max(slice.spec.pool.generation);
            self.generation = self.generation.max(slice.spec.pool.generation);
        }
        Some(Stray {
            name: other,
            uid: slice.metadata.uid,
        })
    }

    /// A watch `Delete` of our slice: the object we follow, not an older one of the same name
    /// whose deletion reaches us late.
    fn deleted(&mut self, slice: &ResourceSlice) {
        let current = self
            .observed
            .as_ref()
            .is_none_or(|o| o.metadata.uid == slice.metadata.uid);
        if slice.metadata.name.as_deref() == Some(&self.name) && current {
            self.gone();
        }
    }

    fn node_ref(&self) -> NodeRef {
        NodeRef {
            name: self.node.clone(),
            uid: self.node_uid.clone().unwrap_or_default(),
        }
    }

    /// The slice to create: the next pool generation, never going back.
    pub(crate) fn creation(&self, gpus: &[GpuDevice]) -> ResourceSlice {
        desired(&self.node_ref(), gpus, self.generation + 1)
    }
}

/// The next step of one publish attempt.
#[derive(Debug, PartialEq)]
pub(crate) enum Plan {
    /// The Node's uid (for the ownerReference) is unknown: read the Node.
    ReadNode,
    /// The stored slice says what we want.
    UpToDate { generation: i64 },
    /// Stored under our name by another driver, as last seen: read it again before saying so
    /// (the watch follows only our driver's slices).
    Recheck,
    /// Read again and still another driver's: never deleted; someone must look.
    NameTaken { driver: String },
    /// Our driver's, but its immutable fields differ (kube-apiserver refuses to change them on
    /// update): delete it with a uid precondition, then create ours.
    Replace {
        uid: Option<String>,
        difference: String,
    },
    /// Write this over the stored slice (its metadata kept, our controller in).
    Update(Box<ResourceSlice>),
    /// Nothing stored: read the Node again (a re-registered Node has a new uid), then create.
    Create,
}

/// What to do next to make the stored slice say `gpus`. Whose slice it is is decided from the
/// stored object, never from an error code (a 422 can as well be an admission refusal).
/// `rechecked`: the stored slice was just read again.
pub(crate) fn plan(stored: &Stored, gpus: &[GpuDevice], rechecked: bool) -> Plan {
    if stored.node_uid.is_none() {
        return Plan::ReadNode;
    }
    let Some(current) = &stored.observed else {
        return Plan::Create;
    };
    let mut wanted = desired(&stored.node_ref(), gpus, 0);
    if current.spec.driver != wanted.spec.driver {
        return if rechecked {
            Plan::NameTaken {
                driver: current.spec.driver.clone(),
            }
        } else {
            Plan::Recheck
        };
    }
    if let Some(difference) = not_ours(current, &wanted) {
        return Plan::Replace {
            uid: current.metadata.uid.clone(),
            difference,
        };
    }
    let generation = current.spec.pool.generation;
    if same_content(current, &wanted, &stored.left_aside) && generation > stored.stray_generation {
        return Plan::UpToDate { generation };
    }
    wanted.spec.pool.generation = stored.generation.max(generation) + 1;
    keep_taint_times(current, &mut wanted);
    // Keep what others put in metadata; it does not reach the scheduler.
    wanted.metadata = updated_metadata(&current.metadata, &wanted.metadata);
    Plan::Update(Box::new(wanted))
}

/// What happened, as the loop tells it.
#[derive(Debug)]
pub(crate) enum Event {
    /// The watch of our slices said something.
    Watched(watcher::Event<ResourceSlice>),
    /// The watch failed (`verb`: "list" or "watch"); kube-rs's watcher retries on its own.
    WatchFailed { verb: &'static str, cause: ApiCause },
    /// The prober sent new GPUs; `known`: there is a probe result at all.
    Desired { known: bool },
    /// The time [`State::wake_at`] came.
    Timer,
    /// A publish attempt ended.
    Published(Result<(), PublishError>),
    /// The periodic read of our slice was answered.
    Read(Result<Option<ResourceSlice>, PublishError>),
}

/// What the loop is to do.
#[derive(Debug, PartialEq)]
pub(crate) enum Action {
    /// One publish attempt (writes only if the stored slice differs).
    Publish,
    /// Read our slice (the periodic re-read; reads only).
    Read,
    /// Delete a stray slice (uid precondition; best effort).
    DeleteStray(Stray),
    /// The API server answered: an outage, if there was one, is over.
    Answered,
    /// The API server did not answer: the agent's one outage note.
    Unanswered(ApiCause),
    /// A publish attempt failed: count it.
    CountFailure,
    /// The server refuses our `verb`: count it by code and show `note` on `/readyz`.
    Refused {
        verb: &'static str,
        code: u16,
        note: String,
    },
    /// A publish attempt succeeded: the server accepts our requests (clear a refusal note).
    Accepted,
}

/// Everything the publisher decides from.
#[derive(Debug)]
pub(crate) struct State {
    pub stored: Stored,
    /// The watcher's initial list completed once: until then absence means nothing.
    listed: bool,
    /// The prober has sent a result.
    desired: bool,
    /// The slices of a list in progress (`Init` .. `InitDone`).
    listing: Vec<ResourceSlice>,
    /// No publish attempt before this (backoff); `None`: attempt on the next event.
    retry_at: Option<Instant>,
    /// The server's Retry-After: not even new content is written before it.
    not_before: Option<Instant>,
    /// The next periodic read.
    resync_at: Instant,
    resync_interval: Duration,
    backoff: Backoff,
    /// Only an answer of the API server ends these problems (the watcher's `Init` is not one:
    /// it comes before its list request is even sent).
    watch_problem: Problem,
    /// A failed list of the watcher: over only when a list completes (a page answered, or a
    /// read, is no proof: the next page may be refused again, `crate::agent::answers`).
    list_problem: Problem,
    publish_problem: Problem,
}

impl State {
    /// Nothing known yet; the first periodic read one `resync_interval` after `now` (the
    /// watcher lists at start anyway).
    pub(crate) fn new(
        node: &str,
        resync_interval: Duration,
        max_backoff: Duration,
        now: Instant,
    ) -> Self {
        Self {
            stored: Stored::new(node),
            listed: false,
            desired: false,
            listing: Vec::new(),
            retry_at: None,
            not_before: None,
            resync_at: now + resync_interval,
            resync_interval,
            backoff: Backoff::new(max_backoff),
            watch_problem: Problem::new("follow this node's ResourceSlice"),
            list_problem: Problem::new("follow this node's ResourceSlice"),
            publish_problem: Problem::new("publish the ResourceSlice"),
        }
    }

    /// When to send [`Event::Timer`]: the end of a backoff or the next periodic read.
    pub(crate) fn wake_at(&self) -> Instant {
        self.retry_at
            .map_or(self.resync_at, |at| at.min(self.resync_at))
    }

    fn publish_if_ready(&self, actions: &mut Vec<Action>) {
        if self.desired && self.listed && self.retry_at.is_none() {
            actions.push(Action::Publish);
        }
    }

    /// Waits as the server asked: no write and no read before then.
    fn hold_until(&mut self, at: Instant) {
        self.not_before = Some(at);
        self.retry_at = Some(self.retry_at.map_or(at, |r| r.max(at)));
        self.resync_at = at;
    }
}

/// What to do after `event` at `now`.
pub(crate) fn decide(state: &mut State, event: Event, now: Instant) -> Vec<Action> {
    let mut actions = Vec::new();
    match event {
        Event::Watched(event) => watched(state, event, &mut actions),
        Event::WatchFailed { verb, cause } => {
            if cause.status().is_some_and(|(code, _)| code == 410) {
                // History compacted: the watcher lists again; nothing is wrong.
                debug!("watch ResourceSlices: 410 Gone; listing again");
            } else if cause.is_outage() {
                actions.push(Action::Unanswered(cause));
            } else {
                actions.push(Action::Answered);
                let selector = selector(&state.stored.node);
                let message = format!("{verb} ResourceSlices ({selector}): {cause}");
                let problem = if verb == "list" {
                    &mut state.list_problem
                } else {
                    &mut state.watch_problem
                };
                problem.report(Level::WARN, &cause.class(), &message);
            }
        }
        Event::Desired { known } => {
            state.desired = known;
            // New content is worth an attempt now, even inside a backoff window; not before
            // the server said it would take requests again.
            state.retry_at = state.not_before.filter(|at| *at > now);
        }
        Event::Timer => {
            if state.retry_at.is_some_and(|at| at <= now) {
                state.retry_at = None;
            }
            if state.resync_at <= now {
                state.resync_at = now + state.resync_interval;
                // The attempt follows the read's answer.
                return vec![Action::Read];
            }
        }
        Event::Published(Ok(())) => {
            state.publish_problem.ok();
            state.backoff.reset();
            state.not_before = None;
            return vec![Action::Accepted];
        }
        Event::Published(Err(e)) => return publish_failed(state, &e, now),
        Event::Read(Ok(found)) => {
            state.watch_problem.ok();
            match found {
                Some(found) => {
                    state.stored.observed = None;
                    actions.extend(state.stored.seen(found).map(Action::DeleteStray));
                }
                None => {
                    state.stored.gone();
                }
            }
        }
        Event::Read(Err(e)) => {
            // A throttled read waits as asked too: the next read and any write.
            if let Some(asked) = retry_after(&e) {
                state.hold_until(now + asked);
            }
            match e {
                PublishError::Api { cause, .. } if cause.is_outage() => {
                    actions.push(Action::Unanswered(cause));
                }
                e => {
                    state
                        .watch_problem
                        .report(Level::WARN, &e.class(), &e.chained());
                }
            }
        }
    }
    state.publish_if_ready(&mut actions);
    actions
}

fn watched(state: &mut State, event: watcher::Event<ResourceSlice>, actions: &mut Vec<Action>) {
    if matches!(event, watcher::Event::Init) {
        state.listing.clear();
        return;
    }
    actions.push(Action::Answered);
    state.watch_problem.ok();
    let stored = &mut state.stored;
    match event {
        watcher::Event::Init => {}
        watcher::Event::InitApply(slice) => state.listing.push(slice),
        watcher::Event::InitDone => {
            state.listed = true;
            state.list_problem.ok();
            let found = std::mem::take(&mut state.listing);
            if !found
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(&stored.name))
            {
                stored.gone();
            }
            for slice in found {
                actions.extend(stored.seen(slice).map(Action::DeleteStray));
            }
        }
        watcher::Event::Apply(slice) => {
            actions.extend(stored.seen(slice).map(Action::DeleteStray));
        }
        watcher::Event::Delete(slice) => stored.deleted(&slice),
    }
}

fn retry_after(error: &PublishError) -> Option<Duration> {
    match error {
        PublishError::Api { cause, .. } => cause.retry_after(),
        _ => None,
    }
}

/// A failed publish attempt: what to count and note, what to log once, and when to try again
/// (backoff, and never before the server's Retry-After: nor a read).
fn publish_failed(state: &mut State, e: &PublishError, now: Instant) -> Vec<Action> {
    let mut actions = vec![Action::CountFailure];
    let message = e.chained();
    let problem = &mut state.publish_problem;
    if let PublishError::Api { cause, .. } = e
        && cause.is_outage()
    {
        // Logged once for the whole agent.
        actions.push(Action::Unanswered(cause.clone()));
    } else if let Some((verb, code)) = e.refusal() {
        let what = if matches!(verb, "create" | "update" | "delete") {
            "writes"
        } else {
            "requests"
        };
        let note = format!("the API server refuses this agent's {what}: {message}");
        actions.push(Action::Refused { verb, code, note });
        let message = format!("{message} (the stored slice is left as it is)");
        problem.report(Level::ERROR, &e.class(), &message);
    } else if matches!(e, PublishError::NameTaken { .. }) {
        // Nothing the agent does will help: someone must look.
        problem.report(Level::ERROR, &e.class(), &message);
    } else {
        problem.report(Level::WARN, &e.class(), &message);
    }
    let mut delay = state.backoff.next_delay();
    state.not_before = None;
    if let Some(asked) = retry_after(e) {
        delay = delay.max(asked);
        state.not_before = Some(now + asked);
        state.resync_at = now + asked;
    }
    state.retry_at = Some(now + delay);
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::publisher::fixtures::{gpu, node};

    const SECOND: Duration = Duration::from_secs(1);

    fn slice(generation: i64, pool: i64) -> ResourceSlice {
        let mut slice = desired(&node(), &[gpu("pci-0000-00-02-0")], pool);
        slice.metadata.uid = Some("slice-uid".into());
        slice.metadata.generation = Some(generation);
        slice
    }

    fn api_error(
        verb: &'static str,
        code: u16,
        reason: &str,
        retry_after: Option<Duration>,
    ) -> PublishError {
        PublishError::Api {
            verb,
            what: "ResourceSlice n1-media.liken.sh".into(),
            cause: ApiCause::Status {
                code,
                reason: reason.into(),
                message: "no".into(),
                retry_after,
            },
        }
    }

    fn unreachable() -> ApiCause {
        ApiCause::Unreachable {
            url: "https://api".into(),
            detail: "connection refused".into(),
        }
    }

    /// A state that has listed (our slice stored) and has a probe result, at `now`.
    fn running(now: Instant) -> State {
        let mut state = State::new("n1", 60 * SECOND, 10 * SECOND, now);
        assert_eq!(decide(&mut state, Event::Desired { known: true }, now), []);
        decide(&mut state, Event::Watched(watcher::Event::Init), now);
        let listed = [
            Event::Watched(watcher::Event::InitApply(slice(1, 1))),
            Event::Watched(watcher::Event::InitDone),
        ];
        let actions: Vec<Action> = listed
            .into_iter()
            .flat_map(|e| decide(&mut state, e, now))
            .collect();
        assert_eq!(
            actions,
            [Action::Answered, Action::Answered, Action::Publish]
        );
        state
    }

    #[test]
    fn nothing_is_published_before_the_first_list_and_the_first_probe() {
        let now = Instant::now();
        let mut state = State::new("n1", 60 * SECOND, 10 * SECOND, now);
        // Init is not an answer: no request was even sent.
        assert_eq!(
            decide(&mut state, Event::Watched(watcher::Event::Init), now),
            []
        );
        let done = Event::Watched(watcher::Event::InitDone);
        assert_eq!(decide(&mut state, done, now), [Action::Answered]);
        let probed = Event::Desired { known: true };
        assert_eq!(decide(&mut state, probed, now), [Action::Publish]);
    }

    #[test]
    fn an_older_state_of_the_slice_does_not_replace_a_newer_one() {
        let mut stored = Stored::new("n1");
        assert_eq!(stored.seen(slice(3, 3)), None);
        assert_eq!(stored.seen(slice(2, 2)), None);
        let observed = stored.observed.as_ref().expect("observed");
        assert_eq!(observed.spec.pool.generation, 3, "the newer state stays");
        // A new object (re-created by someone) is taken whatever its generation.
        let mut other = slice(1, 1);
        other.metadata.uid = Some("another-uid".into());
        stored.seen(other);
        assert_eq!(stored.observed.as_ref().unwrap().spec.pool.generation, 1);
        assert_eq!(stored.generation, 3, "the pool generation never goes back");
    }

    #[test]
    fn a_late_delete_of_an_older_object_is_passed_over() {
        let now = Instant::now();
        let mut state = running(now);
        let mut older = slice(1, 1);
        older.metadata.uid = Some("older-uid".into());
        let late = Event::Watched(watcher::Event::Delete(older));
        assert_eq!(
            decide(&mut state, late, now),
            [Action::Answered, Action::Publish]
        );
        assert!(state.stored.observed.is_some());
        let deleted = Event::Watched(watcher::Event::Delete(slice(1, 1)));
        decide(&mut state, deleted, now);
        assert!(state.stored.observed.is_none());
        assert!(!state.stored.gone(), "said once");
    }

    #[test]
    fn another_slice_of_our_pool_is_deleted_and_ours_goes_above_it() {
        let now = Instant::now();
        let mut state = running(now);
        let mut stray = slice(1, 7);
        stray.metadata.name = Some("old-name".into());
        stray.metadata.uid = Some("stray-uid".into());
        let actions = decide(
            &mut state,
            Event::Watched(watcher::Event::Apply(stray)),
            now,
        );
        let deleted = Stray {
            name: "old-name".into(),
            uid: Some("stray-uid".into()),
        };
        assert_eq!(
            actions,
            [
                Action::Answered,
                Action::DeleteStray(deleted),
                Action::Publish
            ]
        );
        // Same content, but generation 1 is not above the stray's 7: rewritten at 8.
        state.stored.node_uid = Some("u1".into());
        let gpus = [gpu("pci-0000-00-02-0")];
        let Plan::Update(wanted) = plan(&state.stored, &gpus, false) else {
            panic!("an update");
        };
        assert_eq!(wanted.spec.pool.generation, 8);
    }

    #[test]
    fn the_plan_writes_only_what_differs_and_only_what_is_ours() {
        let gpus = [gpu("pci-0000-00-02-0")];
        let mut stored = Stored::new("n1");
        assert_eq!(plan(&stored, &gpus, false), Plan::ReadNode);
        stored.node_uid = Some("u1".into());
        assert_eq!(plan(&stored, &gpus, false), Plan::Create);
        stored.generation = 4;
        assert_eq!(stored.creation(&gpus).spec.pool.generation, 5);

        let mut kept = slice(1, 4);
        kept.metadata.labels = Some([("team".to_string(), "x".to_string())].into());
        stored.seen(kept.clone());
        assert_eq!(
            plan(&stored, &gpus, false),
            Plan::UpToDate { generation: 4 }
        );

        let Plan::Update(wanted) = plan(&stored, &[], false) else {
            panic!("an update");
        };
        assert_eq!(wanted.spec.pool.generation, 5);
        assert_eq!(
            wanted.metadata.labels, kept.metadata.labels,
            "metadata kept"
        );

        let mut other_pool = kept.clone();
        other_pool.spec.pool.name = "x".into();
        stored.observed = Some(other_pool);
        assert_eq!(
            plan(&stored, &gpus, false),
            Plan::Replace {
                uid: Some("slice-uid".into()),
                difference: "its spec.pool.name is \"x\", not \"n1\"".into(),
            }
        );

        let mut theirs = kept;
        theirs.spec.driver = "gpu.example.com".into();
        stored.observed = Some(theirs);
        assert_eq!(plan(&stored, &gpus, false), Plan::Recheck);
        assert_eq!(
            plan(&stored, &gpus, true),
            Plan::NameTaken {
                driver: "gpu.example.com".into()
            }
        );
    }

    #[test]
    fn a_throttled_read_holds_reads_and_writes_until_retry_after() {
        let t0 = Instant::now();
        let mut state = running(t0);
        let throttled = api_error("get", 429, "TooManyRequests", Some(3 * SECOND));
        assert_eq!(decide(&mut state, Event::Read(Err(throttled)), t0), []);
        assert_eq!(state.wake_at(), t0 + 3 * SECOND);
        // New content does not override the server's wait.
        let probed = Event::Desired { known: true };
        assert_eq!(decide(&mut state, probed, t0 + SECOND), []);
        assert_eq!(decide(&mut state, Event::Timer, t0 + 2 * SECOND), []);
        // Then the read comes first, and the write after its answer.
        assert_eq!(
            decide(&mut state, Event::Timer, t0 + 3 * SECOND),
            [Action::Read]
        );
        let read = Event::Read(Ok(Some(slice(1, 1))));
        assert_eq!(decide(&mut state, read, t0 + 3 * SECOND), [Action::Publish]);
        assert_eq!(state.wake_at(), t0 + 63 * SECOND, "then the usual interval");
    }

    #[test]
    fn a_throttled_write_waits_as_asked_even_for_new_content() {
        let t0 = Instant::now();
        let mut state = running(t0);
        let throttled = api_error("update", 429, "TooManyRequests", Some(20 * SECOND));
        let actions = decide(&mut state, Event::Published(Err(throttled)), t0);
        assert_eq!(actions, [Action::CountFailure]);
        // The asked 20 s, above the first backoff; the resync read waits as long.
        assert_eq!(state.wake_at(), t0 + 20 * SECOND);
        assert_eq!(state.resync_at, t0 + 20 * SECOND);
        let probed = Event::Desired { known: true };
        assert_eq!(decide(&mut state, probed, t0 + SECOND), []);
        assert_eq!(
            decide(&mut state, Event::Timer, t0 + 20 * SECOND),
            [Action::Read]
        );
    }

    #[test]
    fn a_failed_write_backs_off_but_new_content_is_tried_at_once() {
        let t0 = Instant::now();
        let mut state = running(t0);
        let failed = api_error("update", 500, "InternalError", None);
        assert_eq!(
            decide(&mut state, Event::Published(Err(failed)), t0),
            [Action::CountFailure]
        );
        let wake = state.wake_at();
        assert!(
            wake > t0 && wake <= t0 + Duration::from_millis(200),
            "{wake:?}"
        );
        assert_eq!(
            decide(
                &mut state,
                Event::Watched(watcher::Event::Apply(slice(1, 1))),
                t0
            ),
            [Action::Answered]
        );
        assert_eq!(
            decide(&mut state, Event::Desired { known: true }, t0),
            [Action::Publish]
        );
        assert_eq!(
            decide(&mut state, Event::Published(Ok(())), t0),
            [Action::Accepted]
        );
        assert!(!state.publish_problem.is_failing(), "the recovery is said");
    }

    #[test]
    fn a_refusal_is_noted_each_time_and_logged_once() {
        let t0 = Instant::now();
        let mut state = running(t0);
        let note = "the API server refuses this agent's writes: update ResourceSlice n1-media.liken.sh: refused, 422 Invalid: no";
        for _ in 0..2 {
            let refused = api_error("update", 422, "Invalid", None);
            let actions = decide(&mut state, Event::Published(Err(refused)), t0);
            assert_eq!(
                actions,
                [
                    Action::CountFailure,
                    Action::Refused {
                        verb: "update",
                        code: 422,
                        note: note.into()
                    }
                ]
            );
        }
        assert!(state.publish_problem.is_failing());
        // Logged once: the same kind again is not a new problem.
        assert!(
            !state
                .publish_problem
                .report(Level::ERROR, "422 Invalid no", "x")
        );
    }

    #[test]
    fn an_outage_is_the_agents_one_note_not_a_publish_problem() {
        let t0 = Instant::now();
        let mut state = running(t0);
        let down = PublishError::Api {
            verb: "update",
            what: "ResourceSlice n1-media.liken.sh".into(),
            cause: unreachable(),
        };
        let actions = decide(&mut state, Event::Published(Err(down)), t0);
        assert_eq!(
            actions,
            [Action::CountFailure, Action::Unanswered(unreachable())]
        );
        assert!(!state.publish_problem.is_failing());
        let failed = Event::WatchFailed {
            verb: "watch",
            cause: unreachable(),
        };
        assert_eq!(
            decide(&mut state, failed, t0),
            [Action::Unanswered(unreachable())]
        );
        assert!(!state.watch_problem.is_failing());
    }

    #[test]
    fn a_compacted_watch_is_no_problem_and_an_error_answer_is_one() {
        let t0 = Instant::now();
        let mut state = running(t0);
        let status = |code, reason: &str| ApiCause::Status {
            code,
            reason: reason.into(),
            message: "x".into(),
            retry_after: None,
        };
        let gone = Event::WatchFailed {
            verb: "watch",
            cause: status(410, "Expired"),
        };
        assert_eq!(decide(&mut state, gone, t0), [Action::Publish]);
        assert!(!state.watch_problem.is_failing());
        let forbidden = Event::WatchFailed {
            verb: "list",
            cause: status(403, "Forbidden"),
        };
        assert_eq!(
            decide(&mut state, forbidden, t0),
            [Action::Answered, Action::Publish]
        );
        assert!(state.list_problem.is_failing());
        // A read, or a page of the next listing, is no proof the listing works.
        decide(&mut state, Event::Read(Ok(None)), t0);
        decide(&mut state, Event::Watched(watcher::Event::Init), t0);
        let page = Event::Watched(watcher::Event::InitApply(slice(1, 1)));
        decide(&mut state, page, t0);
        assert!(state.list_problem.is_failing());
        decide(&mut state, Event::Watched(watcher::Event::InitDone), t0);
        assert!(
            !state.list_problem.is_failing(),
            "over once a listing completes"
        );
    }

    #[test]
    fn the_periodic_read_comes_once_per_interval() {
        let t0 = Instant::now();
        let mut state = running(t0);
        assert_eq!(state.wake_at(), t0 + 60 * SECOND);
        let late = t0 + 61 * SECOND;
        assert_eq!(decide(&mut state, Event::Timer, late), [Action::Read]);
        assert_eq!(state.wake_at(), late + 60 * SECOND);
        assert_eq!(
            decide(&mut state, Event::Read(Ok(None)), late),
            [Action::Publish]
        );
        assert!(state.stored.observed.is_none(), "found gone");
    }
}
