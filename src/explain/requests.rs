//! Per request, against the whole fleet: every device accounted for, grouped by reason and
//! GPU model, with the names no device has and the clauses that, dropped, let devices qualify.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use foldhash::fast::RandomState as Fast;
use k8s_openapi::api::resource::v1::ResourceClaimSpec;
use ustr::UstrSet;

use super::DeviceView;
use super::allocate::{AllocError, Allocator, DeviceStatus, SelectorFailure, cel_expressions};
use super::claims::requests;
use super::diagnose::{self, Finding, Read};
use super::findings::{
    Detail, DeviceLine, DeviceReason, Place, ReadValue, Reason, ReasonKey, ReasonKind, Relaxation,
    RequestAccount, SelectorRef, UnknownAttribute, reason_key,
};
use super::model::{FleetModel, SliceDevice};
use super::work::Work;
use crate::catalogue::PCI_BUS_ID;
use crate::fleet::objects::QualifiedName;
use crate::text::nearest;
use ustr::Ustr;

/// The PCI attribute the product's claims constrain on.
/// A group of devices that fail a request the same way: (reason, where, detail, model).
type GroupKey = (ReasonKind, Option<Place>, Detail, String);

/// What a group counts.
#[derive(Default)]
pub(super) struct Group {
    devices: usize,
    /// Interned: a fleet's devices name a few thousand nodes tens of thousands of times.
    nodes: UstrSet,
    claims: BTreeSet<String>,
}

/// Why a device does not serve: (reason, where, detail).
type Said = (ReasonKind, Option<Place>, Detail);

/// One device's status for a request.
pub(super) struct Accounted {
    /// It passes the selectors.
    qualifies: bool,
    /// It passes and is free (or assumed to have room).
    free: bool,
    /// It fails a selector (for the relaxations).
    failing: bool,
    /// Why it does not serve ([`Tally::said`]); none when it is available.
    said: Option<usize>,
}

/// A request's selectors: the class's and its own.
pub(super) struct Selectors<'s> {
    class: Vec<&'s str>,
    request: Vec<&'s str>,
}

/// What a group is counted under: the device's GPU model, or its driver for another
/// driver's device (worded once per group, not per device).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum ModelKey {
    Gpu(Ustr),
    Driver(Ustr),
}

/// A request's devices counted as they come. Each distinct reason is built once and named by
/// its index (devices of one CEL class fail a selector alike), so that counting 80,000
/// devices allocates per reason, not per device.
#[derive(Default)]
struct Tally {
    said: Vec<Said>,
    ids: HashMap<Said, usize, Fast>,
    /// A false selector's reason by (class, selector index, CEL class).
    not_selected: HashMap<(Option<Ustr>, usize, usize), usize, Fast>,
    groups: HashMap<(usize, ModelKey), Group, Fast>,
}

impl Tally {
    fn id(&mut self, said: Said) -> usize {
        let all = &mut self.said;
        *self.ids.entry(said).or_insert_with_key(|said| {
            all.push(said.clone());
            all.len() - 1
        })
    }

    /// The groups keyed as the report sorts them; keys that only differed by how they were
    /// reached merge.
    fn groups(self) -> BTreeMap<GroupKey, Group> {
        let mut merged: BTreeMap<GroupKey, Group> = BTreeMap::new();
        for ((id, model), group) in self.groups {
            let (kind, at, detail) = self.said[id].clone();
            let model = match model {
                ModelKey::Gpu(name) => name.to_string(),
                ModelKey::Driver(driver) => format!("{driver} devices"),
            };
            let entry = merged.entry((kind, at, detail, model)).or_default();
            entry.devices += group.devices;
            entry.nodes.extend(group.nodes);
            entry.claims.extend(group.claims);
        }
        merged
    }
}

/// One request, `(claim, request)`, against the devices the nodes saw (by fleet index, each
/// once, in index order): its report, for the claim at the returned index of the diagnosis.
pub(super) fn account(
    work: &Work<'_, '_>,
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    (claim_label, request_name): &(String, String),
    statuses: &[(usize, DeviceStatus)],
    diagnoses: &mut HashMap<(String, usize), Finding>,
    known: &HashSet<(String, String)>,
) -> Option<(usize, RequestAccount)> {
    let &(claim_index, _, spec) = work.pending.iter().find(|(_, l, _)| l == claim_label)?;
    let (class_name, request_selectors, mode, count) = request_shape(spec, request_name)?;
    let selectors = Selectors {
        class: work
            .classes
            .get(class_name)
            .and_then(|c| cel_expressions(c.selectors.as_deref().unwrap_or_default()))
            .unwrap_or_default(),
        request: request_selectors,
    };
    let mut report = RequestAccount {
        name: request_name.clone(),
        class: class_name.to_owned(),
        allocation_mode: mode.to_owned(),
        count,
        total: statuses.len(),
        qualifying: 0,
        available: 0,
        qualifying_nodes: Vec::new(),
        reasons: Vec::new(),
        unknown_attributes: Vec::new(),
        relaxations: Vec::new(),
        devices: Vec::new(),
    };
    let mut tally = Tally::default();
    let mut qualifying_nodes = UstrSet::default();
    let any_node = Ustr::from("(any node)");
    // Devices that fail selectors: their clause vectors, for the relaxations.
    let mut failing: Vec<usize> = Vec::new();
    for (d, status) in statuses {
        let d = *d;
        let node_name = allocator.device(d).node().unwrap_or(any_node);
        let accounted = device_status(
            work, allocator, &selectors, diagnoses, &mut tally, d, status,
        );
        report.qualifying += usize::from(accounted.qualifies);
        report.available += usize::from(accounted.free);
        if accounted.qualifies {
            qualifying_nodes.insert(node_name);
        }
        if accounted.failing {
            failing.push(d);
        }
        let Some(id) = accounted.said else {
            if work.input.every_device {
                report
                    .devices
                    .push(device_line(allocator.device(d), &work.models[d], None));
            }
            continue;
        };
        let (kind, at, detail) = &tally.said[id];
        if work.input.every_device {
            let status = DeviceReason {
                at: at.clone(),
                detail: detail.clone(),
            };
            report.devices.push(device_line(
                allocator.device(d),
                &work.models[d],
                Some(status),
            ));
        }
        let model = if *kind == ReasonKind::OtherDriver {
            ModelKey::Driver(allocator.device(d).driver_interned())
        } else {
            ModelKey::Gpu(work.models[d])
        };
        let entry = tally.groups.entry((id, model)).or_default();
        entry.devices += 1;
        entry.nodes.insert(node_name);
        if let DeviceStatus::Taken { claims } = status {
            for claim in claims {
                if !entry.claims.contains(claim) {
                    entry.claims.insert(claim.clone());
                }
            }
        }
    }
    report.reasons = reasons(tally.groups());
    let mut nodes: Vec<String> = qualifying_nodes.iter().map(|n| n.to_string()).collect();
    nodes.sort_by(|a, b| crate::fleet::inventory::natural_cmp(a, b));
    report.qualifying_nodes = nodes;

    // Names no device has (the fleet's names, gathered once for every request).
    let scoped: Vec<(SelectorRef, &str)> = selectors
        .class
        .iter()
        .enumerate()
        .map(|(index, e)| {
            let class = class_name.to_owned();
            (SelectorRef::Class { class, index }, *e)
        })
        .chain(
            selectors
                .request
                .iter()
                .enumerate()
                .map(|(index, e)| (SelectorRef::Request { index }, *e)),
        )
        .collect();
    report.unknown_attributes = unknown_attributes(allocator, &scoped, known);
    // Relaxations: a clause whose removal alone lets failing devices qualify.
    report.relaxations = relaxations(allocator, &scoped, &failing, work.model);
    Some((claim_index, report))
}

/// What one device's status says for the request; its reason built once per [`Tally`].
fn device_status(
    work: &Work<'_, '_>,
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    selectors: &Selectors<'_>,
    diagnoses: &mut HashMap<(String, usize), Finding>,
    tally: &mut Tally,
    d: usize,
    status: &DeviceStatus,
) -> Accounted {
    let (qualifies, free, said) = match status {
        DeviceStatus::Available => (true, true, None),
        DeviceStatus::NotSelected { class, index } => {
            let key = (*class, *index, allocator.cel_class(d));
            let id = match tally.not_selected.get(&key) {
                Some(&id) => id,
                None => {
                    let said = not_selected(allocator, selectors, diagnoses, d, *class, *index);
                    let id = tally.id(said);
                    tally.not_selected.insert(key, id);
                    id
                }
            };
            return Accounted {
                qualifies: false,
                free: false,
                failing: true,
                said: Some(id),
            };
        }
        DeviceStatus::Taken { .. } => {
            // Only an allocation without a share ID takes a shareable device: it is
            // exclusive, as every one made with DRAConsumableCapacity off (allocateddevices.go).
            let shareable = work.input.features.consumable_capacity
                && allocator.device(d).allow_multiple_allocations() == Some(true);
            let said = (ReasonKind::Taken, None, Detail::Taken { shareable });
            (true, false, Some(said))
        }
        // It passes the selectors and is assumed to have room (what is not known).
        DeviceStatus::CapacityUnmodelled => (
            true,
            true,
            Some((ReasonKind::CannotEvaluate, None, Detail::CapacityUnmodelled)),
        ),
        DeviceStatus::CapacityShort(short) => (
            false,
            false,
            Some((
                ReasonKind::CapacityShort,
                None,
                Detail::CapacityShort {
                    capacity: short.capacity.clone(),
                    asked: short.asked.clone(),
                    has: short.has.clone(),
                },
            )),
        ),
        DeviceStatus::PoolInvalid(pool) => (
            false,
            false,
            Some((
                ReasonKind::PoolInvalid,
                None,
                Detail::PoolInvalid {
                    pool: pool.pool.clone(),
                    reason: pool.reason.clone(),
                },
            )),
        ),
        DeviceStatus::PoolUpdating { pool } => (
            false,
            false,
            Some((
                ReasonKind::PoolUpdating,
                None,
                Detail::PoolUpdating { pool: pool.clone() },
            )),
        ),
        DeviceStatus::Untolerated { taint } => (
            true,
            false,
            Some((
                ReasonKind::Untolerated,
                None,
                Detail::Untolerated {
                    key: taint.key.clone(),
                    value: taint.value.clone(),
                    effect: taint.effect.clone(),
                },
            )),
        ),
        DeviceStatus::Failed(e) => (false, false, Some(failed(e))),
    };
    Accounted {
        qualifies,
        free,
        failing: false,
        said: said.map(|said| tally.id(said)),
    }
}

/// A device a selector does not select: the first false clause with the values it read.
pub(super) fn not_selected(
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    selectors: &Selectors<'_>,
    diagnoses: &mut HashMap<(String, usize), Finding>,
    d: usize,
    class: Option<Ustr>,
    index: usize,
) -> Said {
    let device_signature = allocator.cel_class(d);
    let class_selectors = &selectors.class;
    let request_selectors = &selectors.request;
    let (selector, expression) = match class {
        Some(class) => (
            SelectorRef::Class {
                class: class.to_string(),
                index,
            },
            class_selectors.get(index).copied(),
        ),
        None => (
            SelectorRef::Request { index },
            request_selectors.get(index).copied(),
        ),
    };
    let expression = expression.unwrap_or_default();
    let finding = diagnoses
        .entry((expression.to_owned(), device_signature))
        .or_insert_with(|| allocator.diagnose(expression, d))
        .clone();
    let at = |clause: Option<String>| Some(Place { selector, clause });
    let reads = |reads: Vec<Read>| Detail::Reads {
        reads: reads
            .into_iter()
            .map(|r| ReadValue {
                name: r.name,
                value: r.value,
            })
            .collect(),
    };
    match finding {
        Finding::False { clause }
            if clause.reads.len() == 1 && clause.reads[0].domain.is_none() =>
        {
            let detail = reads(clause.reads);
            (ReasonKind::OtherDriver, at(Some(clause.text)), detail)
        }
        Finding::False { clause } => {
            let detail = reads(clause.reads);
            (ReasonKind::SelectorFalse, at(Some(clause.text)), detail)
        }
        Finding::RuntimeError { clause, message } => (
            ReasonKind::RuntimeError,
            at(Some(clause.text)),
            Detail::RuntimeError { message },
        ),
        Finding::CannotEvaluate { reason } => (
            ReasonKind::CannotEvaluate,
            at(None),
            Detail::CannotEvaluate { message: reason },
        ),
        Finding::Selected => (ReasonKind::SelectorFalse, at(None), reads(Vec::new())),
    }
}

/// A device the attempt fails on.
pub(super) fn failed(e: &AllocError) -> Said {
    let (kind, detail) = match e {
        AllocError::Runtime(f) => (
            ReasonKind::RuntimeError,
            Detail::RuntimeError {
                message: f.message.clone(),
            },
        ),
        AllocError::CannotEvaluate(f) => (
            ReasonKind::CannotEvaluate,
            Detail::CannotEvaluate {
                message: f.message.clone(),
            },
        ),
        other => (
            ReasonKind::CannotEvaluate,
            Detail::Failed {
                message: other.to_string(),
            },
        ),
    };
    let at = match e {
        AllocError::Runtime(f) | AllocError::CannotEvaluate(f) => Some(Place {
            selector: scope_ref(f),
            clause: None,
        }),
        _ => None,
    };
    (kind, at, detail)
}

/// A selector as the allocator names it.
pub(super) fn scope_ref(f: &SelectorFailure) -> SelectorRef {
    SelectorRef::Scope {
        scope: f.scope.clone(),
        index: f.index,
    }
}

/// The groups as reasons: grouped by reason (the most devices first), models within; other
/// drivers' devices last.
pub(super) fn reasons(groups: BTreeMap<GroupKey, Group>) -> Vec<Reason> {
    let mut reasons: Vec<Reason> = groups
        .into_iter()
        .map(|((reason, at, detail, model), group)| Reason {
            reason,
            at,
            detail,
            model,
            devices: group.devices,
            nodes: group.nodes.len(),
            claims: group.claims.into_iter().collect(),
        })
        .collect();
    let mut totals: HashMap<ReasonKey, usize> = HashMap::new();
    for r in &reasons {
        *totals.entry(reason_key(r)).or_default() += r.devices;
    }
    reasons.sort_by(|a, b| {
        let (ta, tb) = (totals[&reason_key(a)], totals[&reason_key(b)]);
        (a.reason == ReasonKind::OtherDriver)
            .cmp(&(b.reason == ReasonKind::OtherDriver))
            .then(tb.cmp(&ta))
            .then(reason_key(a).cmp(&reason_key(b)))
            .then(b.devices.cmp(&a.devices))
            .then(a.model.cmp(&b.model))
    });
    reasons
}

/// The attribute names the selectors read that no device of the fleet has.
pub(super) fn unknown_attributes(
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    selectors: &[(SelectorRef, &str)],
    known: &HashSet<(String, String)>,
) -> Vec<UnknownAttribute> {
    let mut out = Vec::new();
    for (scope, expression) in selectors {
        for (domain, name) in diagnose::attribute_names(allocator.selector(expression)) {
            if known.contains(&(domain.clone(), name.clone())) {
                continue;
            }
            let nearest = nearest(
                &format!("{domain}/{name}"),
                known
                    .iter()
                    .map(|(d, n)| format!("{d}/{n}"))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str),
            );
            out.push(UnknownAttribute {
                attribute: format!("{domain}/{name}"),
                selector: scope.clone(),
                nearest,
            });
        }
    }
    out
}

/// A GPU's model name for each device: a media.liken.sh device's `name` attribute, and for
/// other drivers' devices the name of the media device at the same node and PCI address.
pub(super) fn gpu_models(model: &FleetModel<'_>) -> Vec<Ustr> {
    // Interned names: two look-ups on each of 80,000 devices compare pointers, not text.
    let name_attribute = QualifiedName::new(crate::catalogue::DRIVER, "name");
    let pci_bus_id = QualifiedName::parse(PCI_BUS_ID, "");
    let media = Ustr::from(crate::catalogue::DRIVER);
    // Where the two names sit in a device's shape, found once per run of one shape.
    let mut positions = Positions::default();
    let mut by_address: HashMap<(Option<Ustr>, Ustr), Ustr, Fast> = HashMap::default();
    for device in &model.devices {
        if device.driver_interned() == media {
            let [pci, name] = positions.of(device, [pci_bus_id, name_attribute]);
            if let (Some(pci), Some(name)) = (pci, name) {
                by_address.insert((device.node(), pci), name);
            }
        }
    }
    let mut unnamed: HashMap<Ustr, Ustr, Fast> = HashMap::default();
    model
        .devices
        .iter()
        .map(|device| {
            let [pci, name] = positions.of(device, [pci_bus_id, name_attribute]);
            let own = (device.driver_interned() == media)
                .then_some(name)
                .flatten();
            let joined = pci.and_then(|pci| by_address.get(&(device.node(), pci)).copied());
            own.or(joined).unwrap_or_else(|| {
                let driver = device.driver_interned();
                *unnamed
                    .entry(driver)
                    .or_insert_with(|| Ustr::from(&format!("{driver} device")))
            })
        })
        .collect()
}

/// The positions of two names in the last shape asked about.
#[derive(Default)]
struct Positions {
    shape: Option<(usize, Ustr)>,
    at: [Option<usize>; 2],
}

impl Positions {
    /// The string values of `names` on `device` (the shape's positions found once per run).
    fn of(&mut self, device: &SliceDevice<'_>, names: [QualifiedName; 2]) -> [Option<Ustr>; 2] {
        let shape = device.shape_id();
        if self.shape != Some(shape) {
            self.shape = Some(shape);
            self.at = names.map(|n| device.position(n));
        }
        self.at.map(|at| at.and_then(|i| device.interned_at(i)))
    }
}

/// The request (or `request/sub`) of a spec: class, request selectors, mode and count.
pub(super) fn request_shape<'s>(
    spec: &'s ResourceClaimSpec,
    name: &str,
) -> Option<(&'s str, Vec<&'s str>, &'s str, i64)> {
    let (base, sub) = match name.split_once('/') {
        Some((b, s)) => (b, Some(s)),
        None => (name, None),
    };
    let request = requests(spec).iter().find(|r| r.name == base)?;
    match sub {
        None => {
            let exact = request.exactly.as_ref()?;
            Some((
                &exact.device_class_name,
                cel_expressions(exact.selectors.as_deref().unwrap_or_default())?,
                exact.allocation_mode.as_deref().unwrap_or("ExactCount"),
                exact.count.unwrap_or(1),
            ))
        }
        Some(sub) => {
            let sub = request
                .first_available
                .as_deref()?
                .iter()
                .find(|s| s.name == sub)?;
            Some((
                &sub.device_class_name,
                cel_expressions(sub.selectors.as_deref().unwrap_or_default())?,
                sub.allocation_mode.as_deref().unwrap_or("ExactCount"),
                sub.count.unwrap_or(1),
            ))
        }
    }
}

pub(super) fn device_line(
    device: &SliceDevice<'_>,
    model: &Ustr,
    status: Option<DeviceReason>,
) -> DeviceLine {
    DeviceLine {
        node: device
            .node()
            .map(|n| n.to_string())
            .unwrap_or_else(|| "(any node)".to_owned()),
        device: device.id().to_string(),
        pci_bus_id: device.string(PCI_BUS_ID).map(str::to_owned),
        model: model.to_string(),
        status,
    }
}

/// Every (domain, name) some device of the fleet has.
pub(super) fn known_attributes(model: &FleetModel<'_>) -> HashSet<(String, String)> {
    let mut seen: HashSet<(usize, Ustr), Fast> = HashSet::default();
    let mut known = HashSet::new();
    let mut last = None;
    for device in &model.devices {
        // Devices of one shape share their names: each shape is read once (and mostly
        // follows itself).
        let shape = device.shape_id();
        if last == Some(shape) || !seen.insert(shape) {
            continue;
        }
        last = Some(shape);
        for (name, _) in device.attributes() {
            let (domain, id) = super::split_qualified(name, device.driver());
            known.insert((domain.to_owned(), id.to_owned()));
        }
    }
    known
}

/// For the clauses of the request's selectors: how many failing devices would qualify were
/// that one clause dropped (every other clause true).
pub(super) fn relaxations(
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    selectors: &[(SelectorRef, &str)],
    failing: &[usize],
    model: &FleetModel<'_>,
) -> Vec<Relaxation> {
    let texts: Vec<Vec<String>> = selectors
        .iter()
        .map(|(_, e)| diagnose::clause_texts(allocator.selector(e)).unwrap_or_default())
        .collect();
    let mut memo: HashMap<usize, Option<(usize, usize)>> = HashMap::new();
    let mut gains: BTreeMap<(usize, usize), (usize, usize, UstrSet)> = BTreeMap::new();
    for &d in failing {
        let key = allocator.cel_class(d);
        let only = match memo.get(&key) {
            Some(only) => *only,
            None => {
                let mut false_clauses = Vec::new();
                let mut undecided = false;
                for (s, (_, expression)) in selectors.iter().enumerate() {
                    match allocator.clause_values(expression, d) {
                        Some(values) => {
                            for (c, v) in values.iter().enumerate() {
                                match v {
                                    Some(true) => {}
                                    Some(false) => false_clauses.push((s, c)),
                                    None => undecided = true,
                                }
                            }
                        }
                        None => undecided = true,
                    }
                }
                let only = (!undecided && false_clauses.len() == 1).then(|| false_clauses[0]);
                memo.insert(key, only);
                only
            }
        };
        if let Some(position) = only {
            let device = allocator.device(d);
            // An id is built only where some device is taken: not per device of a free fleet.
            let free = device.taints().is_empty()
                && (model.taken.is_empty() || !model.taken.contains_key(&device.id()));
            let entry = gains.entry(position).or_default();
            entry.0 += 1;
            entry.1 += usize::from(free);
            if let Some(node) = device.node() {
                entry.2.insert(node);
            }
        }
    }
    let mut out: Vec<Relaxation> = gains
        .into_iter()
        // Dropping the class's driver clause is not a way forward: it picks other drivers.
        .filter(|((s, c), _)| {
            !texts[*s]
                .get(*c)
                .is_some_and(|t| t.starts_with("device.driver"))
        })
        .map(|((s, c), (qualifying, available, nodes))| Relaxation {
            selector: selectors[s].0.clone(),
            clause: texts[s].get(c).cloned().unwrap_or_default(),
            qualifying,
            available,
            nodes: nodes.len(),
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.qualifying));
    out
}
