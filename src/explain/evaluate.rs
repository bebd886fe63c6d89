//! The allocator's part: node by node, the pod's node filters and the allocation the
//! scheduler's Filter would make; then the attempt error that fails every attempt.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::allocate::{
    self, AllocError, Allocator, Claim, DeviceStatus, Fleet, NodeReport, NodeVerdict,
};
use super::claims::requests;
use super::diagnose::Finding;
use super::filters::pod_filter;
use super::findings::{
    AttemptCode, AttemptError, Diagnosis, ErrorSummary, NodeFinding, NodeOutcome, NodePicks,
    NodeSummary, Note, Odds, PickedDevice, PoolReason, RequestGpus, Unsatisfied,
};
use super::model::{CandidateNode, SliceDevice};
use super::requests::{self as request_report, scope_ref};
use super::work::Work;
use super::{DeviceView, NodeInfo};
use crate::catalogue::PCI_BUS_ID;

/// What the pass over the nodes found.
pub(super) struct NodePass {
    outcomes: BTreeMap<NodeFinding, Vec<String>>,
    /// Per (claim, request): (device index, status), each device with the first status a node
    /// gave it (a device published for several nodes comes from each of them).
    statuses: Vec<Vec<(usize, DeviceStatus)>>,
    /// Per (claim, request): the devices in `statuses`, one bit each.
    seen: Vec<Vec<u64>>,
    /// The fleet's devices.
    fleet: usize,
    request_keys: Vec<(String, String)>,
    /// Where each key is in `request_keys`: a claim may have thousands of requests, and a scan
    /// per request and node made that minutes.
    request_slots: HashMap<(String, String), usize>,
    attempt_error: Option<AllocError>,
    /// The devices picked on each allocatable node, in node order.
    picks: Vec<NodePicks>,
    /// Nodes the scheduler filters on whose allocation fails with an error.
    erring: usize,
    /// Nodes not searched: the explanation had given up on enough searches already.
    pub(super) not_searched: usize,
}

impl NodePass {
    /// Each request's devices, each device with the first status a node gave it; moved, not
    /// copied (80,000 devices per request).
    fn record(&mut self, report: NodeReport) {
        for request in report.requests {
            let key = (request.claim, request.request);
            let slot = match self.request_slots.get(&key) {
                Some(&slot) => slot,
                None => {
                    self.request_keys.push(key.clone());
                    self.statuses.push(Vec::new());
                    self.seen.push(vec![0; self.fleet.div_ceil(64)]);
                    self.request_slots.insert(key, self.statuses.len() - 1);
                    self.statuses.len() - 1
                }
            };
            let seen = &mut self.seen[slot];
            self.statuses[slot].extend(request.devices.into_iter().filter(|&(d, _)| {
                let (word, bit) = (d / 64, 1u64 << (d % 64));
                let first = seen[word] & bit == 0;
                seen[word] |= bit;
                first
            }));
        }
    }

    /// Per request, its devices in fleet order.
    fn statuses(&mut self) -> Vec<Vec<(usize, DeviceStatus)>> {
        let mut all = std::mem::take(&mut self.statuses);
        for statuses in &mut all {
            statuses.sort_unstable_by_key(|(d, _)| *d);
        }
        all
    }
}

/// The allocator's part: node by node, then request by request.
pub(super) fn evaluate(work: &Work<'_, '_>, diagnosis: &mut Diagnosis) {
    let model = work.model;
    let fleet = Fleet {
        devices: &model.devices,
        taken: &model.taken,
        incomplete_pools: &model.incomplete_pools,
    };
    let mut allocator = Allocator::new(fleet, work.classes, work.input.features);
    let claims: Vec<Claim<'_>> = work
        .pending
        .iter()
        .map(|(_, label, spec)| Claim { name: label, spec })
        .collect();
    let mut pass = nodes(work, &mut allocator, &claims);

    // Per request, against the fleet, one request per take.
    // Devices of one CEL class (see Allocator::cel_class) fail a selector the same way: each
    // is diagnosed once per class and worker, not once per device.
    let known = request_report::known_attributes(model);
    let statuses = pass.statuses();
    let requests: Vec<_> = pass.request_keys.iter().zip(&statuses).collect();
    let accounts = Workers::new(work.input.threads, &mut allocator).run(
        &requests,
        1,
        HashMap::<(String, usize), Finding>::new,
        |allocator, diagnoses, (key, statuses)| {
            request_report::account(work, allocator, key, statuses, diagnoses, &known)
        },
    );
    for (claim_index, report) in accounts.into_iter().flatten() {
        diagnosis.claims[claim_index].requests.push(report);
    }
    summarise(work, &claims, pass, diagnosis);
}

/// What one node gave: its finding, each request's devices, and (where the pod's filters let
/// it through) the attempt's error or the devices picked.
struct Visit {
    outcome: NodeFinding,
    report: NodeReport,
    error: Option<AllocError>,
    picks: Option<NodePicks>,
}

/// Nodes a worker takes at a time: enough to keep the shared counter cold, few enough that
/// two workers finish together.
const NODES_PER_TAKE: usize = 16;

/// Nodes visited before their reports are folded.
const NODES_PER_WINDOW: usize = 256;

/// Nodes whose search may hit its step limit (`MAX_SEARCH_STEPS`, 2,000,000 steps, about a
/// second each) before the rest are not searched: a fleet of hundreds of such nodes would
/// otherwise take many minutes to say, node after node, that it cannot decide. The nodes after
/// the last searched are said to be undecided, and a note says where it stopped.
pub(crate) const MAX_SEARCHES_GIVEN_UP: usize = 8;

/// Node by node: the pod's filters, then the allocation. Nodes are independent, so they are
/// visited on every core (each worker with a fork of the allocator) and recorded in node
/// order, which is what the first error and each device's first status depend on.
pub(super) fn nodes(
    work: &Work<'_, '_>,
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    claims: &[Claim<'_>],
) -> NodePass {
    let mut pass = NodePass {
        outcomes: BTreeMap::new(),
        statuses: Vec::new(),
        seen: Vec::new(),
        fleet: work.model.devices.len(),
        request_keys: Vec::new(),
        request_slots: HashMap::new(),
        attempt_error: None,
        picks: Vec::new(),
        erring: 0,
        not_searched: 0,
    };
    // A distinctAttribute constraint keeps requests apart rather than on one GPU.
    let distinct = claims.iter().any(|c| {
        c.spec
            .devices
            .as_ref()
            .and_then(|d| d.constraints.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|c| c.match_attribute.is_none())
    });
    // A window of nodes at a time: their reports wait for the fold, and a device usable from
    // every node is in each of them.
    let mut workers = Workers::new(work.input.threads, allocator);
    // Searches given up, as the workers meet them (any order), and in node order: a node is
    // searched only while fewer than MAX_SEARCHES_GIVEN_UP came before it, which the fold
    // decides (a node a worker skipped too early is searched there), so the outcome does not
    // depend on the workers' timing.
    let met = AtomicUsize::new(0);
    let mut given_up = 0;
    for window in work.model.nodes.chunks(NODES_PER_WINDOW) {
        let visits: Vec<Option<Visit>> = if given_up >= MAX_SEARCHES_GIVEN_UP {
            window.iter().map(|_| None).collect()
        } else {
            workers.run(
                window,
                NODES_PER_TAKE,
                || (),
                |allocator, (), c| {
                    if met.load(Ordering::Relaxed) >= MAX_SEARCHES_GIVEN_UP {
                        return None;
                    }
                    let visit = visit(work, allocator, claims, c, distinct);
                    if visit.gave_up() {
                        met.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(visit)
                },
            )
        };
        for (candidate, visited) in window.iter().zip(visits) {
            let visit = if given_up >= MAX_SEARCHES_GIVEN_UP {
                pass.not_searched += 1;
                not_searched(work, workers.allocator, claims, candidate, given_up)
            } else {
                visited
                    .unwrap_or_else(|| visit(work, workers.allocator, claims, candidate, distinct))
            };
            given_up += usize::from(visit.gave_up());
            if let Some(error) = visit.error {
                pass.erring += 1;
                pass.attempt_error.get_or_insert(error);
            }
            pass.picks.extend(visit.picks);
            pass.record(visit.report);
            pass.outcomes
                .entry(visit.outcome)
                .or_default()
                .push(candidate.info.name.clone());
        }
    }
    pass
}

/// Threads at most: the work per item is small, and the fold after them is serial.
const MAX_WORKERS: usize = 4;

/// The allocator and, for each further thread, a fork of it (its caches kept from one
/// [`Workers::run`] to the next).
struct Workers<'w, 'a, D: DeviceView> {
    allocator: &'w mut Allocator<'a, D>,
    forks: Vec<Allocator<'a, D>>,
}

impl<'w, 'a, D: DeviceView> Workers<'w, 'a, D> {
    fn new(threads: usize, allocator: &'w mut Allocator<'a, D>) -> Self {
        let forks = (1..threads.clamp(1, MAX_WORKERS))
            .map(|_| allocator.fork())
            .collect();
        Workers { allocator, forks }
    }

    /// `visit` over `items` on every worker (each with a `state` of its own), the results in
    /// the items' order. Workers take `per_take` items at a time; with fewer than two takes,
    /// or no fork, this thread does it all.
    fn run<T: Sync, S, R: Send>(
        &mut self,
        items: &[T],
        per_take: usize,
        state: impl Fn() -> S + Sync,
        visit: impl Fn(&mut Allocator<'a, D>, &mut S, &T) -> R + Sync,
    ) -> Vec<R> {
        if self.forks.is_empty() || items.len() < 2 * per_take {
            let mut state = state();
            return items
                .iter()
                .map(|i| visit(self.allocator, &mut state, i))
                .collect();
        }
        let next = AtomicUsize::new(0);
        let take = |allocator: &mut Allocator<'a, D>| {
            let mut state = state();
            let mut done = Vec::new();
            loop {
                let first = next.fetch_add(per_take, Ordering::Relaxed);
                let Some(taken) = items.get(first..).filter(|t| !t.is_empty()) else {
                    return done;
                };
                for (i, item) in taken.iter().take(per_take).enumerate() {
                    done.push((first + i, visit(allocator, &mut state, item)));
                }
            }
        };
        let mut done = std::thread::scope(|scope| {
            let helpers: Vec<_> = self
                .forks
                .iter_mut()
                .map(|fork| scope.spawn(|| take(fork)))
                .collect();
            let mut done = take(self.allocator);
            for helper in helpers {
                match helper.join() {
                    Ok(more) => done.extend(more),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            done
        });
        done.sort_unstable_by_key(|(i, _)| *i);
        done.into_iter().map(|(_, r)| r).collect()
    }
}

impl Visit {
    /// Whether the node's search hit its step limit.
    fn gave_up(&self) -> bool {
        matches!(self.error, Some(AllocError::SearchTooLong { .. }))
    }
}

/// A node left unsearched: its devices still accounted for, one request at a time (no search),
/// and the attempt undecided there.
fn not_searched(
    work: &Work<'_, '_>,
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    claims: &[Claim<'_>],
    candidate: &CandidateNode<'_>,
    given_up: usize,
) -> Visit {
    let report = survey(allocator, &candidate.info, claims);
    let filtered = work
        .pod
        .zip(candidate.node)
        .and_then(|(pod, node_object)| pod_filter(pod, &candidate.info, node_object));
    let error = AllocError::NotSearched { given_up };
    match filtered {
        Some(outcome) => Visit {
            outcome,
            report,
            error: None,
            picks: None,
        },
        None => Visit {
            outcome: NodeFinding::Error {
                error: error_summary(&error),
            },
            report,
            error: Some(error),
            picks: None,
        },
    }
}

/// One node: the pod's own node filters, then the allocation.
fn visit(
    work: &Work<'_, '_>,
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    claims: &[Claim<'_>],
    candidate: &CandidateNode<'_>,
    distinct: bool,
) -> Visit {
    let node = &candidate.info;
    // The pod's own node filters run before DynamicResources: an allocator error on a node
    // they reject never reaches the scheduler. Still computed, to say what it would allow.
    let filtered = work
        .pod
        .zip(candidate.node)
        .and_then(|(pod, node_object)| pod_filter(pod, node, node_object));
    match allocator.explain(node, claims) {
        Ok(report) => {
            let (outcome, picks) = match filtered {
                Some(filtered) => (filtered, None),
                None => node_outcome(work, allocator, claims, node, &report, distinct),
            };
            Visit {
                outcome,
                report,
                error: None,
                picks,
            }
        }
        Err(e) => {
            // The attempt fails on this node; each request's devices are still accounted
            // for, one request at a time (a runtime error shows on the device it hits).
            let report = survey(allocator, node, claims);
            match filtered {
                Some(outcome) => Visit {
                    outcome,
                    report,
                    error: None,
                    picks: None,
                },
                None => Visit {
                    outcome: NodeFinding::Error {
                        error: error_summary(&e),
                    },
                    report,
                    error: Some(e),
                    picks: None,
                },
            }
        }
    }
}

/// Each request's devices on a node where the attempt fails, one request at a time.
pub(super) fn survey(
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    node: &NodeInfo,
    claims: &[Claim<'_>],
) -> NodeReport {
    let mut surveyed = Vec::new();
    for claim in claims {
        for request in requests(claim.spec) {
            let subs = request.first_available.as_ref().map_or(0, Vec::len);
            for sub in (0..subs.max(1)).map(|i| (subs > 0).then_some(i)) {
                let name = match sub {
                    Some(i) => format!(
                        "{}/{}",
                        request.name,
                        request.first_available.as_deref().unwrap_or_default()[i].name
                    ),
                    None => request.name.clone(),
                };
                if let Ok(devices) = allocator.survey(node, *claim, request, sub) {
                    surveyed.push(allocate::RequestReport {
                        claim: claim.name.to_owned(),
                        request: name,
                        devices,
                    });
                }
            }
        }
    }
    NodeReport {
        verdict: NodeVerdict::CannotAllocate,
        requests: surveyed,
        constraints_block: false,
    }
}

/// What a node the pod's filters let through allows.
pub(super) fn node_outcome(
    work: &Work<'_, '_>,
    allocator: &Allocator<'_, SliceDevice<'_>>,
    claims: &[Claim<'_>],
    node: &NodeInfo,
    report: &NodeReport,
    distinct: bool,
) -> (NodeFinding, Option<NodePicks>) {
    if work.bound_nodes.iter().any(|s| !node.matches(s)) {
        return (NodeFinding::ClaimElsewhere, None);
    }
    let finding = match &report.verdict {
        NodeVerdict::Allocated(results) => {
            let picks = NodePicks {
                node: node.name.clone(),
                devices: claims
                    .iter()
                    .zip(results)
                    .flat_map(|(claim, results)| {
                        results.iter().map(|r| PickedDevice {
                            claim: claim.name.to_owned(),
                            request: r.request.clone(),
                            driver: r.device.driver.clone(),
                            pool: r.device.pool.clone(),
                            device: r.device.device.clone(),
                            sub_device: None,
                        })
                    })
                    .collect(),
            };
            return (
                NodeFinding::Allocatable {
                    checked: work.model.nodes_known,
                },
                Some(picks),
            );
        }
        NodeVerdict::CannotAllocate => why_not_on_node(allocator, report, distinct),
        NodeVerdict::InvalidPools(pools) => NodeFinding::InvalidPools {
            pools: pools
                .iter()
                .map(|p| PoolReason {
                    pool: p.pool.clone(),
                    reason: p.reason.clone(),
                })
                .collect(),
        },
    };
    (finding, None)
}

/// The nodes grouped by outcome, and the attempt error with what it does.
pub(super) fn summarise(
    work: &Work<'_, '_>,
    claims: &[Claim<'_>],
    pass: NodePass,
    diagnosis: &mut Diagnosis,
) {
    let input = work.input;
    let NodePass {
        outcomes,
        attempt_error,
        picks,
        erring,
        not_searched,
        ..
    } = pass;
    // A node is allocatable exactly where its picks are kept.
    let allocatable = picks.len();
    let total = work.model.nodes.len();

    let mut node_outcomes: Vec<NodeOutcome> = outcomes
        .into_iter()
        .map(|(detail, nodes)| NodeOutcome {
            outcome: detail.kind(),
            detail,
            count: nodes.len(),
            nodes,
        })
        .collect();
    node_outcomes.sort_by(|a, b| a.outcome.cmp(&b.outcome).then(b.count.cmp(&a.count)));
    diagnosis.nodes = Some(NodeSummary {
        total,
        allocatable,
        outcomes: node_outcomes,
        picks,
    });
    if not_searched > 0 {
        diagnosis.notes.push(Note::SearchStopped {
            searched: total - not_searched,
            total,
            given_up: MAX_SEARCHES_GIVEN_UP,
        });
    }
    if let Some(note) = all_mode_order_note(input.features.release, claims)
        && !matches!(
            attempt_error,
            Some(AllocError::Runtime(_) | AllocError::PoolInvalid { .. })
        )
    {
        diagnosis.notes.push(note);
    }
    if let Some(error) = attempt_error {
        let release = input.features.release;
        if release < 36 && matches!(error, AllocError::Runtime(_)) {
            diagnosis.notes.push(Note::RuntimeErrorOrder { release });
        }
        if matches!(error, AllocError::PoolInvalid { .. }) {
            diagnosis.notes.push(Note::InvalidPoolOrder { release });
        }
        let mut attempt = attempt(&error);
        // The scheduler stops after numFeasibleNodesToFind feasible nodes (schedule_one.go):
        // with fewer, it checks every node and an error fails every attempt; with as many, it
        // may stop before an erring one. (What we cannot decide is no scheduler error.)
        let to_find = num_feasible_nodes_to_find(total);
        let schedulers = !matches!(
            error,
            AllocError::CannotEvaluate(_)
                | AllocError::Unsupported { .. }
                | AllocError::CapacityUnmodelled { .. }
                | AllocError::SearchTooLong { .. }
                | AllocError::NotSearched { .. }
        );
        if schedulers && allocatable >= to_find {
            attempt.always = false;
            attempt.odds = Some(Odds {
                erring,
                allocatable,
                to_find,
            });
        }
        diagnosis.attempt_error = Some(attempt);
    }
}

/// Before 1.36 the order of a node's pools decides more of an `allocationMode: All` request
/// than which devices serve: whether the search meets a device that breaks a constraint (an
/// error) or one in use first (no error), and, for an `All` sub-request after the first,
/// which single device it takes (allocator_incubating.go v0.35.10 drops the sub-request). The
/// differential test against the real allocator found both (tests/it/oracle/fleets.rs).
pub(super) fn all_mode_order_note(release: u32, claims: &[Claim<'_>]) -> Option<Note> {
    let all = |mode: &Option<String>| mode.as_deref() == Some("All");
    let any_all = claims.iter().any(|c| {
        c.spec.devices.as_ref().is_some_and(|d| {
            d.requests.as_deref().unwrap_or_default().iter().any(|r| {
                r.exactly.as_ref().is_some_and(|e| all(&e.allocation_mode))
                    || r.first_available
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .any(|s| all(&s.allocation_mode))
            })
        })
    });
    (release < 36 && any_all).then_some(Note::AllModeOrder { release })
}

/// k/k pkg/scheduler/schedule_one.go `numFeasibleNodesToFind` with the default
/// percentageOfNodesToScore (0: adaptive): how many feasible nodes the scheduler looks for
/// before it stops filtering.
pub(super) fn num_feasible_nodes_to_find(all: usize) -> usize {
    const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
    const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;
    if all < MIN_FEASIBLE_NODES_TO_FIND {
        return all;
    }
    let percentage = 50usize
        .saturating_sub(all / 125)
        .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    (all * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// An attempt error without the device it was met on, so that nodes group by it.
pub(super) fn error_summary(error: &AllocError) -> ErrorSummary {
    match error {
        AllocError::Runtime(f) => ErrorSummary::RuntimeError {
            selector: scope_ref(f),
            message: f.message.clone(),
        },
        AllocError::CannotEvaluate(f) => ErrorSummary::CannotEvaluate {
            selector: scope_ref(f),
            message: f.message.clone(),
        },
        // One line for every node where only such devices would serve.
        AllocError::CapacityUnmodelled { claim, request, .. } => ErrorSummary::CapacityUnmodelled {
            claim: claim.clone(),
            request: request.clone(),
        },
        other => ErrorSummary::Other {
            message: other.to_string(),
        },
    }
}

/// Why the claims cannot be allocated on a node whose verdict is "cannot allocate".
pub(super) fn why_not_on_node(
    allocator: &Allocator<'_, SliceDevice<'_>>,
    report: &NodeReport,
    distinct: bool,
) -> NodeFinding {
    if report.constraints_block {
        // Each request is served alone; show the addresses each could use.
        let requests = report
            .requests
            .iter()
            .map(|r| {
                let mut gpus: Vec<Option<String>> = r
                    .devices
                    .iter()
                    .filter(|(_, s)| *s == DeviceStatus::Available)
                    .map(|(d, _)| allocator.device(*d).string(PCI_BUS_ID).map(str::to_owned))
                    .collect();
                // Sorted as the words sort: a device without an address reads `(no pciBusID)`.
                gpus.sort_unstable_by(|a, b| {
                    let key = |g: &Option<String>| g.clone().unwrap_or_else(|| "(".to_owned());
                    key(a).cmp(&key(b))
                });
                gpus.dedup();
                RequestGpus {
                    request: r.request.clone(),
                    gpus,
                }
            })
            .collect();
        return NodeFinding::Constraint { distinct, requests };
    }
    for r in &report.requests {
        // firstAvailable: the request fails only if every sub-request does; the first
        // sub-request stands for the request here.
        // (A device whose room is assumed is not why a node fails: the search assumed it.)
        if r.devices.iter().any(|(_, s)| {
            matches!(
                s,
                DeviceStatus::Available | DeviceStatus::CapacityUnmodelled
            )
        }) {
            continue;
        }
        let passing = r
            .devices
            .iter()
            .filter(|(_, s)| {
                matches!(
                    s,
                    DeviceStatus::Taken { .. }
                        | DeviceStatus::Untolerated { .. }
                        | DeviceStatus::CapacityUnmodelled
                )
            })
            .count();
        let pooled = r
            .devices
            .iter()
            .filter(|(_, s)| {
                matches!(
                    s,
                    DeviceStatus::PoolInvalid(_) | DeviceStatus::PoolUpdating { .. }
                )
            })
            .count();
        let why = if r.devices.is_empty() {
            Unsatisfied::NoDevices
        } else if pooled == r.devices.len() {
            Unsatisfied::PoolsUnusable
        } else if passing == 0 {
            Unsatisfied::NonePass
        } else {
            Unsatisfied::TakenOrTainted
        };
        if r.request.contains('/')
            && report.requests.iter().any(|o| {
                o.request.split('/').next() == r.request.split('/').next()
                    && o.devices.iter().any(|(_, s)| *s == DeviceStatus::Available)
            })
        {
            continue;
        }
        return NodeFinding::RequestUnsatisfied {
            request: r.request.clone(),
            why,
        };
    }
    NodeFinding::CannotAllocate
}

/// The attempt error as data: which, in the scheduler's words, and whether it is this
/// evaluator's limit rather than the scheduler's error.
pub(super) fn attempt(error: &AllocError) -> AttemptError {
    let (code, undecided) = match error {
        AllocError::Runtime(f) => (
            AttemptCode::RuntimeError {
                selector: scope_ref(f),
                missing_key: f.message.strip_prefix("no such key: ").map(str::to_owned),
            },
            false,
        ),
        AllocError::SearchTooLong { .. } | AllocError::NotSearched { .. } => {
            (AttemptCode::SearchTooLong, true)
        }
        AllocError::CannotEvaluate(_) => (AttemptCode::CannotEvaluate, true),
        AllocError::Unsupported { .. } => (AttemptCode::Unsupported, true),
        AllocError::CapacityUnmodelled { .. } => (AttemptCode::CapacityUnmodelled, true),
        AllocError::PoolIncomplete { .. } => (AttemptCode::PoolIncomplete, false),
        AllocError::PoolInvalidAll { pool, reason, .. } => (
            AttemptCode::PoolInvalidAll {
                pool: pool.clone(),
                reason: reason.clone(),
            },
            false,
        ),
        AllocError::PoolInvalid {
            driver,
            pool,
            reason,
        } => (
            AttemptCode::PoolInvalid {
                pool: format!("{driver}/{pool}"),
                reason: reason.clone(),
            },
            false,
        ),
        AllocError::ConstraintAll { .. } => (AttemptCode::ConstraintAll, false),
        AllocError::TooManyDevices { .. } => (AttemptCode::TooManyDevices, false),
        AllocError::EmptyConstraint { distinct, .. } => (
            AttemptCode::EmptyConstraint {
                distinct: *distinct,
            },
            false,
        ),
        AllocError::CapacityDisabled { .. } => (AttemptCode::CapacityDisabled, false),
        AllocError::ClassNotFound { .. } => (AttemptCode::ClassNotFound, false),
    };
    AttemptError {
        error: code,
        message: error.to_string(),
        always: true,
        undecided,
        odds: None,
    }
}
