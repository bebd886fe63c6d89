//! The search for an allocation (allocator_incubating.go `allocateOne`): Go's recursion as a
//! loop over frames on the heap, and the constraints each device must keep.

use super::*;

pub(super) struct Constraint<'s> {
    pub(super) requests: &'s [String],
    pub(super) attribute: &'s str,
    pub(super) kind: ConstraintKind,
}

/// What a constraint holds of the devices added so far.
pub(super) enum ConstraintKind {
    /// `matchAttribute`: the one value, and how many devices have it.
    Match {
        value: Option<OwnedAttribute>,
        count: usize,
    },
    /// `distinctAttribute` from 1.37: every value, in the order added (the search removes the
    /// last one first).
    Distinct(Vec<OwnedAttribute>),
    /// 1.34's and 1.36's `distinctAttribute` (constraint.go v0.34.13 experimental, v0.36.6):
    /// one entry per request name, replaced by each device the request adds and dropped whole
    /// by a removal, so a device is compared with the last one of each request only; the first
    /// device after the count drops to zero is never compared. 1.34 compares the values by
    /// pointer (`by_identity`: only the same device's attribute is a duplicate), 1.36 by value.
    /// Entries are (request, device index, value), with how many devices were added.
    DistinctPerRequest {
        entries: Vec<(String, usize, OwnedAttribute)>,
        count: usize,
        by_identity: bool,
    },
}

impl Constraint<'_> {
    /// allocator.go `matches`: the constraint names the request, or `request/sub-request`.
    pub(super) fn applies(&self, base: &str, sub: Option<&str>) -> bool {
        self.requests.is_empty()
            || self.requests.iter().any(|r| {
                r == base
                    || (sub.is_some()
                        && r.strip_prefix(base).and_then(|rest| rest.strip_prefix('/')) == sub)
            })
    }
}

/// One allocation attempt on one node.
pub(super) struct Search<'s> {
    pub(super) claims: &'s [Claim<'s>],
    /// The node's devices, gathered once for the attempt and the diagnosis's surveys.
    pub(super) gathered: &'s Gathered,
    /// Per claim, per request: the request, or its sub-requests in order.
    pub(super) requests: Vec<Vec<Vec<RequestData<'s>>>>,
    pub(super) constraints: Vec<Vec<Constraint<'s>>>,
    /// Devices being allocated (exclusive ones only), with the claims they go to.
    pub(super) allocating: HashMap<usize, Vec<usize>, Fast>,
    pub(super) result: Vec<Vec<(String, usize)>>,
    /// Calls and candidate devices tried so far (bounded by [`MAX_SEARCH_STEPS`]).
    pub(super) steps: u64,
}

/// How many calls and candidate devices one node's search may try before it is given up as
/// undecided: the scheduler bounds its search only by time (DRASchedulerFilterTimeout, 10 s),
/// and claims competing for few exclusive devices can make the search exponential.
pub(crate) const MAX_SEARCH_STEPS: u64 = 2_000_000;

impl Search<'_> {
    /// Counts one step of the search; past [`MAX_SEARCH_STEPS`], the search's end.
    pub(super) fn step(&mut self) -> Option<Flow> {
        self.steps += 1;
        (self.steps > MAX_SEARCH_STEPS).then_some(Flow::Return(Err(Stop::Error(
            AllocError::SearchTooLong {
                steps: MAX_SEARCH_STEPS,
            },
        ))))
    }
}

/// What [`Allocator::gather`] finds for a node.
pub(super) struct Gathered {
    /// The devices gathered for the node, in the scheduler's order.
    pub(super) devices: Vec<usize>,
    /// Gathered devices that are for other nodes (see [`Allocator::gather`]).
    pub(super) off_node: HashSet<usize, Fast>,
    /// The node's invalid pools, and the devices in them (index into `invalid`).
    pub(super) invalid: Vec<InvalidPool>,
    pub(super) invalid_of: HashMap<usize, usize, Fast>,
}

pub(super) enum Stop {
    Error(AllocError),
    MaxSize,
}

/// One call of `allocateOne`: the device `device_index` of (sub-)request `sub` of request
/// `request` of claim `claim`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Call {
    pub(super) claim: usize,
    pub(super) request: usize,
    pub(super) sub: usize,
    pub(super) device_index: usize,
    /// The node's device the search starts from (see `Allocator::next_device`).
    pub(super) start: usize,
    pub(super) allocating_sub: bool,
}

impl Call {
    /// The first device of a request.
    pub(super) fn first(claim: usize, request: usize) -> Call {
        Call {
            claim,
            request,
            sub: 0,
            device_index: 0,
            start: 0,
            allocating_sub: false,
        }
    }
}

/// What a call of `allocateOne` does once the call it made returns.
pub(super) enum Frame {
    /// The next claim was called: a MaxSize there is a plain failure here.
    NextClaim,
    /// firstAvailable: sub-request `next - 1` was tried; `next` is tried after it.
    Subs {
        at: Call,
        next: usize,
        subs: usize,
        all_exceeded: bool,
    },
    /// allocationMode All: device `d` was allocated; undone unless the rest succeeded.
    AllDevice { at: Call, d: usize },
    /// The node's device at `position`, `d`, was allocated; undone, and the next one tried,
    /// unless the rest succeeded.
    Candidate { at: Call, position: usize, d: usize },
}

/// The next step of the search: a call to make, or a call's result.
pub(super) enum Flow {
    Call(Call),
    Return(Result<bool, Stop>),
}

impl<'a, D: DeviceView> Allocator<'a, D> {
    /// allocator.go `allocateOne`: the device `device_index` of (sub-)request `sub` of request
    /// `request` of claim `claim`, and everything after it. Go's recursion (a level per device,
    /// request and claim: thousands for a pod of thousands of claims) runs here as a loop over
    /// a stack of [`Frame`]s on the heap, so no input can overflow the thread's stack; each
    /// frame is what the Go function does after the call it made returns.
    pub(super) fn allocate_one(&mut self, s: &mut Search<'_>, start: Call) -> Result<bool, Stop> {
        let mut stack: Vec<Frame> = Vec::new();
        let mut flow = Flow::Call(start);
        loop {
            flow = match flow {
                Flow::Call(call) => self.enter(s, call, &mut stack),
                Flow::Return(result) => match stack.pop() {
                    None => return result,
                    Some(frame) => self.resume(s, frame, result, &mut stack),
                },
            };
        }
    }

    /// `allocateOne` up to its first call of itself: the call to make next (with the frame to
    /// resume when it returns, if any), or its result.
    pub(super) fn enter(&mut self, s: &mut Search<'_>, c: Call, stack: &mut Vec<Frame>) -> Flow {
        if let Some(too_long) = s.step() {
            return too_long;
        }
        if c.claim >= s.claims.len() {
            return Flow::Return(Ok(true));
        }
        if c.request >= s.requests[c.claim].len() {
            stack.push(Frame::NextClaim);
            return Flow::Call(Call::first(c.claim + 1, 0));
        }
        let subs = s.requests[c.claim][c.request].len();
        if !c.allocating_sub && s.requests[c.claim][c.request][0].sub.is_some() {
            stack.push(Frame::Subs {
                at: c,
                next: 1,
                subs,
                all_exceeded: true,
            });
            return Flow::Call(Call {
                sub: 0,
                allocating_sub: true,
                ..c
            });
        }
        let (num_devices, is_all) = {
            let data = &s.requests[c.claim][c.request][c.sub];
            (data.mode.len(), matches!(data.mode, Mode::All(_)))
        };
        if is_all && num_devices == 0 {
            return Flow::Return(Ok(false));
        }
        if c.device_index >= num_devices {
            return Flow::Call(Call::first(c.claim, c.request + 1));
        }
        if s.result[c.claim].len() + num_devices - c.device_index > ALLOCATION_RESULTS_MAX_SIZE {
            return Flow::Return(Err(Stop::MaxSize));
        }
        if is_all {
            let d = match &s.requests[c.claim][c.request][c.sub].mode {
                Mode::All(devices) => devices[c.device_index],
                Mode::Count(_) => unreachable!("checked above"),
            };
            return match self.allocate_device(s, c.claim, c.request, c.sub, d, true) {
                Err(e) => Flow::Return(Err(e)),
                Ok(false) => Flow::Return(Ok(false)),
                Ok(true) => {
                    stack.push(Frame::AllDevice { at: c, d });
                    Flow::Call(self.next_device(c, None))
                }
            };
        }
        self.try_candidates(s, c, c.start, stack)
    }

    /// What `allocateOne` does when the call it made returns `result`.
    pub(super) fn resume(
        &mut self,
        s: &mut Search<'_>,
        frame: Frame,
        result: Result<bool, Stop>,
        stack: &mut Vec<Frame>,
    ) -> Flow {
        match frame {
            // Retrying the claim with other choices might help a later firstAvailable.
            Frame::NextClaim => Flow::Return(match result {
                Err(Stop::MaxSize) => Ok(false),
                other => other,
            }),
            Frame::Subs {
                at,
                next,
                subs,
                mut all_exceeded,
            } => {
                match result {
                    Err(Stop::MaxSize) => {}
                    Err(e) => return Flow::Return(Err(e)),
                    Ok(true) => return Flow::Return(Ok(true)),
                    Ok(false) => all_exceeded = false,
                }
                if next < subs {
                    stack.push(Frame::Subs {
                        at,
                        next: next + 1,
                        subs,
                        all_exceeded,
                    });
                    return Flow::Call(Call {
                        sub: next,
                        allocating_sub: true,
                        ..at
                    });
                }
                Flow::Return(if all_exceeded {
                    Err(Stop::MaxSize)
                } else {
                    Ok(false)
                })
            }
            Frame::AllDevice { at, d } => {
                if !matches!(result, Ok(true)) {
                    self.deallocate(s, at.claim, at.request, at.sub, d);
                }
                Flow::Return(result)
            }
            Frame::Candidate { at, position, d } => match result {
                Ok(true) => Flow::Return(Ok(true)),
                Ok(false) => {
                    self.deallocate(s, at.claim, at.request, at.sub, d);
                    self.try_candidates(s, at, position + 1, stack)
                }
                Err(e) => {
                    self.deallocate(s, at.claim, at.request, at.sub, d);
                    Flow::Return(Err(e))
                }
            },
        }
    }

    /// The call for a request's next device, after one was allocated (at `position` of the
    /// node's devices, for a count; `None` for allocationMode All). From 1.36 it is searched
    /// after that one (`startLocation`), so a shareable device serves a request once; 1.34 and
    /// 1.35 search from the first again, and for All drop the sub-request
    /// (allocator_incubating.go v0.35.10 passes no subRequestIndex): an `All` sub-request after
    /// the first takes one device.
    pub(super) fn next_device(&self, c: Call, position: Option<usize>) -> Call {
        let fixed = self.features.release >= 36;
        Call {
            device_index: c.device_index + 1,
            start: match position {
                Some(p) if fixed => p + 1,
                _ => 0,
            },
            sub: if fixed || position.is_some() {
                c.sub
            } else {
                0
            },
            ..c
        }
    }

    /// `allocateOne`'s loop over the node's devices for one device of a request, from
    /// `position` on: the first that can be allocated is, and the rest of the search is called.
    pub(super) fn try_candidates(
        &mut self,
        s: &mut Search<'_>,
        c: Call,
        from: usize,
        stack: &mut Vec<Frame>,
    ) -> Flow {
        for position in from..s.gathered.devices.len() {
            if let Some(too_long) = s.step() {
                return too_long;
            }
            let d = s.gathered.devices[position];
            // allocateOne checks a pool's validity before any of its devices: 1.34 fails the
            // attempt on reaching an invalid pool, 1.35+ skips it.
            if let Some(&i) = s.gathered.invalid_of.get(&d) {
                if self.features.release < 35 {
                    let device = &self.fleet.devices[d];
                    return Flow::Return(Err(Stop::Error(AllocError::PoolInvalid {
                        driver: device.driver().to_owned(),
                        pool: device.pool().to_owned(),
                        reason: s.gathered.invalid[i].reason.clone(),
                    })));
                }
                continue;
            }
            if self.features.release >= 35 && self.pool_incomplete(d) {
                // From 1.35 devices of a pool being updated are not allocated (but other pools
                // may serve); 1.34's allocateOne checks only IsInvalid, and allocates them.
                continue;
            }
            {
                let data = &s.requests[c.claim][c.request][c.sub];
                if self.in_use(s, c.claim, data, d).is_some() {
                    continue;
                }
            }
            let claim_name = s.claims[c.claim].name;
            let selected = {
                let data = &s.requests[c.claim][c.request][c.sub];
                match self.selector_verdict(claim_name, data, d) {
                    Ok(verdict) => verdict.is_none(),
                    Err(e) => return Flow::Return(Err(Stop::Error(e))),
                }
            };
            // isSelectable: a device's own node (perDeviceNodeSelection) only after its
            // selectors.
            if !selected || s.gathered.off_node.contains(&d) {
                continue;
            }
            // A shareable device with capacities is assumed to have room (the most the
            // scheduler could find): a search that fails even so fails for the scheduler
            // too; one that succeeds on such a device is not decided (see `allocate`).
            match self.allocate_device(s, c.claim, c.request, c.sub, d, false) {
                Err(e) => return Flow::Return(Err(e)),
                Ok(false) => continue,
                Ok(true) => {
                    stack.push(Frame::Candidate { at: c, position, d });
                    return Flow::Call(self.next_device(c, Some(position)));
                }
            }
        }
        Flow::Return(Ok(false))
    }

    /// allocator.go `allocateDevice`: availability, taints and constraints of one candidate;
    /// on success the device is recorded as being allocated.
    pub(super) fn allocate_device(
        &mut self,
        s: &mut Search<'_>,
        claim: usize,
        request: usize,
        sub: usize,
        d: usize,
        must: bool,
    ) -> Result<bool, Stop> {
        let data = &s.requests[claim][request][sub];
        if self.in_use(s, claim, data, d).is_some() || self.untolerated(data, d).is_some() {
            return Ok(false);
        }
        let device = &self.fleet.devices[d];
        let (base, own_sub) = (data.base, data.sub);
        let constraints = &mut s.constraints[claim];
        for i in 0..constraints.len() {
            if !add_to_constraint(&mut constraints[i], base, own_sub, device, d) {
                if must {
                    return Err(Stop::Error(AllocError::ConstraintAll {
                        claim: s.claims[claim].name.to_owned(),
                        request: data.own_name().to_owned(),
                        device: device.id(),
                    }));
                }
                for c in constraints.iter_mut().take(i) {
                    remove_from_constraint(c, base, own_sub);
                }
                return Ok(false);
            }
        }
        let name = data.name();
        if !self.shareable(d) {
            s.allocating.entry(d).or_default().push(claim);
        }
        s.result[claim].push((name, d));
        Ok(true)
    }

    pub(super) fn deallocate(
        &self,
        s: &mut Search<'_>,
        claim: usize,
        request: usize,
        sub: usize,
        d: usize,
    ) {
        let data = &s.requests[claim][request][sub];
        for c in s.constraints[claim].iter_mut() {
            remove_from_constraint(c, data.base, data.sub);
        }
        if let Some(claims) = s.allocating.get_mut(&d)
            && let Some(pos) = claims.iter().rposition(|&c| c == claim)
        {
            claims.remove(pos);
        }
        s.result[claim].pop();
    }
}

/// allocator_incubating.go `Allocate`: `matchAttribute`, or `distinctAttribute` where the
/// release's allocator knows it ([`Features::distinct_attribute`]).
pub(super) fn prepare_constraints<'s>(
    claim: &Claim<'s>,
    constraints: &'s [DeviceConstraint],
    distinct_attribute: bool,
    release: u32,
) -> Result<Vec<Constraint<'s>>, AllocError> {
    let mut out = Vec::new();
    for (index, constraint) in constraints.iter().enumerate() {
        let requests = constraint.requests.as_deref().unwrap_or_default();
        let (attribute, kind) = match (
            constraint.match_attribute.as_deref(),
            constraint.distinct_attribute.as_deref(),
        ) {
            (Some(attribute), _) => (
                attribute,
                ConstraintKind::Match {
                    value: None,
                    count: 0,
                },
            ),
            (None, Some(attribute)) if distinct_attribute && matches!(release, 34 | 36) => (
                attribute,
                ConstraintKind::DistinctPerRequest {
                    entries: Vec::new(),
                    count: 0,
                    by_identity: release == 34,
                },
            ),
            (None, Some(attribute)) if distinct_attribute => {
                (attribute, ConstraintKind::Distinct(Vec::new()))
            }
            (None, _) => {
                return Err(AllocError::EmptyConstraint {
                    claim: claim.name.to_owned(),
                    index,
                    distinct: constraint.distinct_attribute.is_some(),
                });
            }
        };
        out.push(Constraint {
            requests,
            attribute,
            kind,
        });
    }
    Ok(out)
}

/// Adds device `d` (`device`) of request `base` (sub-request `sub`) to a constraint, if it
/// applies; false when the device breaks it.
pub(super) fn add_to_constraint<D: DeviceView>(
    c: &mut Constraint<'_>,
    base: &str,
    sub: Option<&str>,
    device: &D,
    d: usize,
) -> bool {
    if !c.applies(base, sub) {
        return true;
    }
    let Some(value) = lookup_attribute(device, c.attribute) else {
        return false;
    };
    let value = owned(value);
    // Same type and value; versions compare as strings (semver's minimal form makes that exact).
    match &mut c.kind {
        ConstraintKind::Match {
            value: first,
            count,
        } => {
            if *count == 0 {
                *first = Some(value);
            } else if first.as_ref() != Some(&value) {
                return false;
            }
            *count += 1;
        }
        // constraint.go `matchesAttribute`: a value of another type is no duplicate.
        ConstraintKind::Distinct(values) => {
            if values.contains(&value) {
                return false;
            }
            values.push(value);
        }
        ConstraintKind::DistinctPerRequest {
            entries,
            count,
            by_identity,
        } => {
            let duplicate = |(_, e, v): &(String, usize, OwnedAttribute)| match by_identity {
                true => *e == d,
                false => *v == value,
            };
            if *count > 0 && entries.iter().any(duplicate) {
                return false;
            }
            entries.retain(|(r, _, _)| r != base);
            entries.push((base.to_owned(), d, value));
            *count += 1;
        }
    }
    true
}

pub(super) fn remove_from_constraint(c: &mut Constraint<'_>, base: &str, sub: Option<&str>) {
    if c.applies(base, sub) {
        match &mut c.kind {
            ConstraintKind::Match { count, .. } => *count -= 1,
            ConstraintKind::Distinct(values) => {
                values.pop();
            }
            ConstraintKind::DistinctPerRequest { entries, count, .. } => {
                entries.retain(|(r, _, _)| r != base);
                *count -= 1;
            }
        }
    }
}
