//! `explain::allocate` against a brute-force reference allocator on hundreds of seeded random small
//! fleets (every allocation mode, constraints, shareable and taken devices, taints, firstAvailable,
//! updating pools, both feature-gate eras). The reference enumerates every choice and its selectors
//! are Rust closures, so the allocator's CEL is checked too. Where the scheduler's answer depends
//! on its search order, the reference computes whether that error is reachable and the test accepts
//! exactly the answers the scheduler can give.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::resource::v1::{DeviceClassSpec, DeviceTaint, ResourceClaimSpec};
use media_operator::explain::allocate::{
    AllocError, Allocator, Claim, Features, Fleet, NodeVerdict,
};
use media_operator::explain::{
    DeviceId, DeviceRecord, DeviceView, NodeInfo, OwnedAttribute, OwnedPlacement,
};
use serde_json::json;

const PCI: &str = "resource.kubernetes.io/pciBusID";
const FLEETS: u64 = 600;

#[derive(Clone, Debug)]
struct GenDevice {
    driver: &'static str,
    pool: String,
    name: String,
    /// None: published for all nodes.
    node: Option<&'static str>,
    a: bool,
    b: bool,
    pci: Option<u8>,
    shareable: Option<bool>,
    taint: Option<(&'static str, &'static str, &'static str)>,
    taken: bool,
}

/// Class name, CEL expression, and the reference's own reading of it.
type Rule = (&'static str, &'static str, fn(&GenDevice) -> bool);

const CLASSES: [Rule; 5] = [
    ("any1", r#"device.driver == "d1""#, |d| d.driver == "d1"),
    (
        "a1",
        r#"device.driver == "d1" && device.attributes["d1"].a"#,
        |d| d.driver == "d1" && d.a,
    ),
    (
        "b1",
        r#"device.driver == "d1" && device.attributes["d1"].b"#,
        |d| d.driver == "d1" && d.b,
    ),
    ("any2", r#"device.driver == "d2""#, |d| d.driver == "d2"),
    (
        "pci2",
        r#"device.driver == "d2" && has(device.attributes["resource.kubernetes.io"].pciBusID)"#,
        |d| d.driver == "d2" && d.pci.is_some(),
    ),
];

const SELECTORS: [Rule; 3] = [
    ("not-a", r#"!device.attributes[device.driver].a"#, |d| !d.a),
    (
        "pci01",
        r#"device.attributes["resource.kubernetes.io"].?pciBusID.orValue("") in ["p0", "p1"]"#,
        |d| matches!(d.pci, Some(0 | 1)),
    ),
    (
        "a-or-b",
        r#"cel.bind(x, device.attributes[device.driver], x.a || x.b)"#,
        |d| d.a || d.b,
    ),
];

/// Tolerations as JSON, and the reference's reading: does it tolerate (key, value, effect)?
type Tol = (fn() -> serde_json::Value, fn(&str, &str, &str) -> bool);

const TOLERATIONS: [Tol; 5] = [
    (|| json!(null), |_, _, _| false),
    (|| json!({"operator": "Exists"}), |_, _, _| true),
    (
        || json!({"key": "k", "operator": "Exists"}),
        |k, _, _| k == "k",
    ),
    (
        || json!({"key": "k", "value": "v"}),
        |k, v, _| k == "k" && v == "v",
    ),
    (
        || json!({"key": "k", "value": "v", "effect": "NoExecute"}),
        |k, v, e| k == "k" && v == "v" && e == "NoExecute",
    ),
];

#[derive(Clone, Debug)]
struct GenSub {
    name: String,
    class: usize,
    selector: Option<usize>,
    all: bool,
    count: usize,
    toleration: usize,
}

#[derive(Clone, Debug)]
struct GenRequest {
    name: String,
    /// One entry: `exactly`; more: `firstAvailable`.
    subs: Vec<GenSub>,
    first_available: bool,
}

#[derive(Clone, Debug)]
struct GenClaim {
    requests: Vec<GenRequest>,
    /// (attribute, requests it covers; empty = all)
    constraint: Option<(&'static str, Vec<String>)>,
}

struct Case {
    devices: Vec<GenDevice>,
    claims: Vec<GenClaim>,
    incomplete: HashSet<(String, String)>,
    features: Features,
}

fn generate(rng: &mut fastrand::Rng) -> Case {
    let mut devices = Vec::new();
    for i in 0..rng.usize(2..=7) {
        let driver = if rng.bool() { "d1" } else { "d2" };
        let node = match rng.u8(0..10) {
            0 => None,
            1..=5 => Some("n1"),
            _ => Some("n2"),
        };
        devices.push(GenDevice {
            driver,
            pool: node.unwrap_or("shared").to_owned(),
            name: format!("dev-{i}"),
            node,
            a: rng.bool(),
            b: rng.bool(),
            pci: (rng.u8(0..5) != 0).then(|| rng.u8(0..3)),
            shareable: [None, Some(false), Some(true), Some(true)][rng.usize(0..4)],
            taint: match rng.u8(0..8) {
                0 => Some(("k", "v", "NoSchedule")),
                1 => Some(("k", "v", "NoExecute")),
                2 => Some(("other", "v", "NoSchedule")),
                _ => None,
            },
            taken: rng.u8(0..6) == 0,
        });
    }
    let mut incomplete = HashSet::new();
    if rng.u8(0..10) == 0 {
        let d = &devices[rng.usize(0..devices.len())];
        incomplete.insert((d.driver.to_owned(), d.pool.clone()));
    }
    let sub = |rng: &mut fastrand::Rng, name: String| GenSub {
        name,
        class: rng.usize(0..CLASSES.len()),
        selector: (rng.u8(0..3) == 0).then(|| rng.usize(0..SELECTORS.len())),
        all: rng.u8(0..5) == 0,
        count: if rng.u8(0..4) == 0 { 2 } else { 1 },
        toleration: if rng.u8(0..3) == 0 {
            rng.usize(1..TOLERATIONS.len())
        } else {
            0
        },
    };
    let mut claims = Vec::new();
    let mut total_requests = 0;
    for _ in 0..rng.usize(1..=2) {
        let mut requests = Vec::new();
        for r in 0..rng.usize(1..=3) {
            if total_requests == 4 {
                break;
            }
            total_requests += 1;
            let name = format!("r{r}");
            let first_available = rng.u8(0..4) == 0;
            let subs = if first_available {
                (0..2).map(|s| sub(rng, format!("s{s}"))).collect()
            } else {
                vec![sub(rng, String::new())]
            };
            requests.push(GenRequest {
                name,
                subs,
                first_available,
            });
        }
        let constraint = (rng.u8(0..3) != 0).then(|| {
            let attribute = if rng.u8(0..4) == 0 { "d1/a" } else { PCI };
            let mut covered = Vec::new();
            for r in &requests {
                match rng.u8(0..4) {
                    0 => {}
                    1 if r.first_available => {
                        covered.push(format!("{}/{}", r.name, r.subs[0].name))
                    }
                    _ => covered.push(r.name.clone()),
                }
            }
            (attribute, covered)
        });
        claims.push(GenClaim {
            requests,
            constraint,
        });
    }
    let features = if rng.u8(0..3) == 0 {
        Features::for_minor(35)
    } else {
        Features::for_minor(36)
    };
    // 1.34 and 1.35 mishandle an `All` sub-request after the first (it takes one device, or
    // the first's devices): this reference knows the intended rules only, so those releases'
    // quirks are checked against the real allocator instead (tests/it/oracle/fleets.rs).
    if features.release < 36 {
        for claim in &mut claims {
            for request in &mut claim.requests {
                for sub in request.subs.iter_mut().skip(1) {
                    sub.all = false;
                }
            }
        }
    }
    Case {
        devices,
        claims,
        incomplete,
        features,
    }
}

// ---------------------------------------------------------------------------------------------
// The case as API objects, for the allocator under test

fn record(d: &GenDevice) -> DeviceRecord {
    let mut attributes = vec![
        ("a".to_owned(), OwnedAttribute::Bool(d.a)),
        ("b".to_owned(), OwnedAttribute::Bool(d.b)),
    ];
    if let Some(p) = d.pci {
        attributes.push((PCI.to_owned(), OwnedAttribute::String(format!("p{p}"))));
    }
    DeviceRecord {
        driver: d.driver.to_owned(),
        pool: d.pool.clone(),
        name: d.name.clone(),
        attributes,
        capacities: vec![],
        allow_multiple_allocations: d.shareable,
        taints: d
            .taint
            .iter()
            .map(|(k, v, e)| {
                serde_json::from_value::<DeviceTaint>(json!({"key": k, "value": v, "effect": e}))
                    .unwrap()
            })
            .collect(),
        placement: d.node.map_or(OwnedPlacement::AllNodes, |n| {
            OwnedPlacement::Node(n.to_owned())
        }),
    }
}

fn sub_json(s: &GenSub) -> serde_json::Value {
    let mut v = json!({"deviceClassName": CLASSES[s.class].0});
    if let Some(sel) = s.selector {
        v["selectors"] = json!([{"cel": {"expression": SELECTORS[sel].1}}]);
    }
    if s.all {
        v["allocationMode"] = json!("All");
    } else {
        v["count"] = json!(s.count);
    }
    let toleration = (TOLERATIONS[s.toleration].0)();
    if !toleration.is_null() {
        v["tolerations"] = json!([toleration]);
    }
    v
}

fn claim_spec(c: &GenClaim) -> ResourceClaimSpec {
    let requests: Vec<_> = c
        .requests
        .iter()
        .map(|r| {
            if r.first_available {
                let subs: Vec<_> = r
                    .subs
                    .iter()
                    .map(|s| {
                        let mut v = sub_json(s);
                        v["name"] = json!(s.name);
                        v
                    })
                    .collect();
                json!({"name": r.name, "firstAvailable": subs})
            } else {
                json!({"name": r.name, "exactly": sub_json(&r.subs[0])})
            }
        })
        .collect();
    let mut devices = json!({ "requests": requests });
    if let Some((attribute, covered)) = &c.constraint {
        devices["constraints"] = json!([{"requests": covered, "matchAttribute": attribute}]);
    }
    serde_json::from_value(json!({ "devices": devices })).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The reference

#[derive(Debug, Default)]
struct Reference {
    feasible: bool,
    constraint_error_reachable: bool,
    pool_error: bool,
}

struct Ctx<'c> {
    case: &'c Case,
    node_devices: Vec<usize>,
    /// Flattened (claim, request) in order.
    order: Vec<(usize, usize)>,
}

impl Ctx<'_> {
    fn dev(&self, i: usize) -> &GenDevice {
        &self.case.devices[i]
    }
    fn shareable(&self, i: usize) -> bool {
        self.case.features.consumable_capacity && self.dev(i).shareable == Some(true)
    }
    fn selected(&self, s: &GenSub, i: usize) -> bool {
        let d = self.dev(i);
        (CLASSES[s.class].2)(d) && s.selector.is_none_or(|sel| (SELECTORS[sel].2)(d))
    }
    fn tolerated(&self, s: &GenSub, i: usize) -> bool {
        match self.dev(i).taint {
            Some((k, v, e)) if self.case.features.device_taints => {
                (TOLERATIONS[s.toleration].1)(k, v, e)
            }
            _ => true,
        }
    }
    fn attribute(&self, name: &str, i: usize) -> Option<String> {
        let d = self.dev(i);
        match name {
            PCI => d.pci.map(|p| format!("p{p}")),
            // An unqualified attribute is `<driver>/<name>`: only d1's devices have `d1/a`.
            "d1/a" => (d.driver == "d1").then(|| d.a.to_string()),
            _ => unreachable!(),
        }
    }
    fn covers(&self, claim: usize, request: &str, sub: &str) -> bool {
        match &self.case.claims[claim].constraint {
            None => false,
            Some((_, covered)) => {
                covered.is_empty()
                    || covered.iter().any(|c| {
                        c == request || (!sub.is_empty() && *c == format!("{request}/{sub}"))
                    })
            }
        }
    }
}

#[derive(Clone, Default)]
struct State {
    used: HashSet<usize>,
    /// Per claim: the constraint's value once fixed.
    value: Vec<Option<String>>,
}

fn reference(case: &Case, node: &'static str) -> Reference {
    let node_devices: Vec<usize> = (0..case.devices.len())
        .filter(|&i| case.devices[i].node.is_none_or(|n| n == node))
        .collect();
    let mut out = Reference::default();
    let any_all = case
        .claims
        .iter()
        .flat_map(|c| &c.requests)
        .flat_map(|r| &r.subs)
        .any(|s| s.all);
    let pools: HashSet<_> = node_devices
        .iter()
        .map(|&i| {
            (
                case.devices[i].driver.to_owned(),
                case.devices[i].pool.clone(),
            )
        })
        .collect();
    if any_all && pools.iter().any(|p| case.incomplete.contains(p)) {
        out.pool_error = true;
        return out;
    }
    let order = case
        .claims
        .iter()
        .enumerate()
        .flat_map(|(c, claim)| (0..claim.requests.len()).map(move |r| (c, r)))
        .collect();
    let ctx = Ctx {
        case,
        node_devices,
        order,
    };
    let state = State {
        used: HashSet::new(),
        value: vec![None; case.claims.len()],
    };
    walk(&ctx, 0, state, &mut out);
    out
}

/// Tries every choice for the request at `step` of the flattened order.
fn walk(ctx: &Ctx<'_>, step: usize, state: State, out: &mut Reference) {
    if out.feasible && out.constraint_error_reachable {
        return;
    }
    let Some(&(c, r)) = ctx.order.get(step) else {
        out.feasible = true;
        return;
    };
    let request = &ctx.case.claims[c].requests[r];
    for sub in &request.subs {
        if sub.all {
            let set: Vec<usize> = ctx
                .node_devices
                .iter()
                .copied()
                .filter(|&i| ctx.selected(sub, i))
                .collect();
            if set.is_empty() {
                continue;
            }
            let mut st = state.clone();
            let mut ok = true;
            for &i in &set {
                if ctx.dev(i).taken
                    || !ctx.tolerated(sub, i)
                    || (!ctx.shareable(i) && st.used.contains(&i))
                {
                    ok = false;
                    break;
                }
                if !add(ctx, &mut st, c, &request.name, &sub.name, i) {
                    out.constraint_error_reachable = true;
                    ok = false;
                    break;
                }
                if !ctx.shareable(i) {
                    st.used.insert(i);
                }
            }
            if ok {
                walk(ctx, step + 1, st, out);
            }
        } else {
            pick(ctx, step, c, request, sub, 0, 0, state.clone(), out);
        }
    }
}

/// Chooses the remaining devices of an ExactCount (sub-)request: indices increase, so no device
/// serves one request twice, shareable or not (from 1.36, the allocator searches a request's
/// next device after the previous one; 1.34 and 1.35 have no shareable devices). Shareable
/// devices still serve several requests and claims.
#[allow(clippy::too_many_arguments)]
fn pick(
    ctx: &Ctx<'_>,
    step: usize,
    c: usize,
    request: &GenRequest,
    sub: &GenSub,
    chosen: usize,
    from: usize,
    state: State,
    out: &mut Reference,
) {
    if chosen == sub.count {
        walk(ctx, step + 1, state, out);
        return;
    }
    for position in from..ctx.node_devices.len() {
        let i = ctx.node_devices[position];
        let d = ctx.dev(i);
        let incomplete = ctx
            .case
            .incomplete
            .contains(&(d.driver.to_owned(), d.pool.clone()));
        if incomplete
            || d.taken
            || !ctx.selected(sub, i)
            || !ctx.tolerated(sub, i)
            || (!ctx.shareable(i) && state.used.contains(&i))
        {
            continue;
        }
        let mut st = state.clone();
        if !add(ctx, &mut st, c, &request.name, &sub.name, i) {
            continue;
        }
        if !ctx.shareable(i) {
            st.used.insert(i);
        }
        pick(
            ctx,
            step,
            c,
            request,
            sub,
            chosen + 1,
            position + 1,
            st,
            out,
        );
    }
}

fn add(ctx: &Ctx<'_>, st: &mut State, c: usize, request: &str, sub: &str, i: usize) -> bool {
    if !ctx.covers(c, request, sub) {
        return true;
    }
    let (attribute, _) = ctx.case.claims[c].constraint.as_ref().unwrap();
    let Some(value) = ctx.attribute(attribute, i) else {
        return false;
    };
    match &st.value[c] {
        Some(fixed) => *fixed == value,
        None => {
            st.value[c] = Some(value);
            true
        }
    }
}

/// Checks an allocation the allocator returned against the rules, device by device.
fn check_allocation(
    ctx: &Ctx<'_>,
    result: &[Vec<media_operator::explain::allocate::DeviceResult>],
) -> Result<(), String> {
    let index: HashMap<DeviceId, usize> = ctx
        .case
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| (record(d).id(), i))
        .collect();
    let mut exclusive_uses: HashMap<usize, usize> = HashMap::new();
    for (c, devices) in result.iter().enumerate() {
        let claim = &ctx.case.claims[c];
        let mut values = HashSet::new();
        for request in &claim.requests {
            let mine: Vec<_> = devices
                .iter()
                .filter(|d| {
                    d.request == request.name
                        || d.request.starts_with(&format!("{}/", request.name))
                })
                .collect();
            let sub_name = mine
                .first()
                .map(|d| d.request.split_once('/').map_or("", |(_, s)| s))
                .unwrap_or("");
            let sub = request
                .subs
                .iter()
                .find(|s| s.name == sub_name)
                .ok_or("unknown sub-request")?;
            let expected = if sub.all {
                ctx.node_devices
                    .iter()
                    .filter(|&&i| ctx.selected(sub, i))
                    .count()
            } else {
                sub.count
            };
            if mine.len() != expected {
                return Err(format!(
                    "request {} got {} devices, wants {expected}",
                    request.name,
                    mine.len()
                ));
            }
            for d in mine {
                let i = *index.get(&d.device).ok_or("unknown device")?;
                if !ctx.node_devices.contains(&i)
                    || ctx.dev(i).taken
                    || !ctx.selected(sub, i)
                    || !ctx.tolerated(sub, i)
                {
                    return Err(format!("{} is not usable for {}", d.device, d.request));
                }
                if !ctx.shareable(i) {
                    *exclusive_uses.entry(i).or_default() += 1;
                }
                if ctx.covers(c, &request.name, &sub.name) {
                    let (attribute, _) = claim.constraint.as_ref().unwrap();
                    values.insert(
                        ctx.attribute(attribute, i)
                            .ok_or("constrained device without the attribute")?,
                    );
                }
            }
        }
        if values.len() > 1 {
            return Err(format!("claim {c}: constraint broken: {values:?}"));
        }
    }
    match exclusive_uses.iter().find(|(_, n)| **n > 1) {
        Some((i, _)) => Err(format!("exclusive device {} used twice", ctx.dev(*i).name)),
        None => Ok(()),
    }
}

#[test]
fn the_allocator_agrees_with_a_brute_force_reference() {
    let classes: HashMap<String, DeviceClassSpec> = CLASSES
        .iter()
        .map(|(name, expr, _)| {
            (
                name.to_string(),
                serde_json::from_value(json!({"selectors": [{"cel": {"expression": expr}}]}))
                    .unwrap(),
            )
        })
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for seed in 0..FLEETS {
        let mut rng = fastrand::Rng::with_seed(seed);
        let case = generate(&mut rng);
        let records: Vec<DeviceRecord> = case.devices.iter().map(record).collect();
        let taken: HashMap<DeviceId, Vec<String>> = case
            .devices
            .iter()
            .zip(&records)
            .filter(|(g, _)| g.taken)
            .map(|(_, r)| (r.id(), vec!["other/holder".to_owned()]))
            .collect();
        let specs: Vec<ResourceClaimSpec> = case.claims.iter().map(claim_spec).collect();
        let names: Vec<String> = (0..specs.len()).map(|i| format!("ns/claim-{i}")).collect();
        let claims: Vec<Claim> = specs
            .iter()
            .zip(&names)
            .map(|(spec, name)| Claim { name, spec })
            .collect();
        let fleet = Fleet {
            devices: &records,
            taken: &taken,
            incomplete_pools: &case.incomplete,
        };
        let mut allocator = Allocator::new(fleet, &classes, case.features);
        for node in ["n1", "n2"] {
            let expected = reference(&case, node);
            let got = allocator.allocate(
                &NodeInfo {
                    name: node.into(),
                    ..Default::default()
                },
                &claims,
            );
            let context = || {
                format!(
                    "seed {seed}, node {node}: got {got:?}, reference {expected:?}\ncase: {:#?}\n{:#?}",
                    case.devices, case.claims
                )
            };
            match &got {
                Ok(NodeVerdict::Allocated(result)) => {
                    assert!(expected.feasible && !expected.pool_error, "{}", context());
                    let node_devices = (0..case.devices.len())
                        .filter(|&i| case.devices[i].node.is_none_or(|n| n == node))
                        .collect();
                    let order = vec![];
                    let ctx = Ctx {
                        case: &case,
                        node_devices,
                        order,
                    };
                    if let Err(problem) = check_allocation(&ctx, result) {
                        panic!("{problem}: {}", context());
                    }
                    *seen.entry("allocated").or_default() += 1;
                }
                Ok(NodeVerdict::InvalidPools(pools)) => {
                    // The generated devices have distinct names: no pool is invalid.
                    panic!("invalid pools {pools:?}: {}", context());
                }
                Ok(NodeVerdict::CannotAllocate) => {
                    assert!(
                        !expected.feasible
                            && !expected.constraint_error_reachable
                            && !expected.pool_error,
                        "{}",
                        context()
                    );
                    *seen.entry("cannot allocate").or_default() += 1;
                }
                Err(AllocError::ConstraintAll { .. }) => {
                    assert!(
                        expected.constraint_error_reachable && !expected.pool_error,
                        "{}",
                        context()
                    );
                    *seen.entry("constraint error").or_default() += 1;
                }
                Err(AllocError::PoolIncomplete { .. }) => {
                    assert!(expected.pool_error, "{}", context());
                    *seen.entry("pool error").or_default() += 1;
                }
                Err(other) => panic!("unexpected error {other}: {}", context()),
            }
        }
    }
    eprintln!("answers: {seen:?}");
    // Every kind of answer occurs, so no branch above is vacuous.
    for kind in [
        "allocated",
        "cannot allocate",
        "constraint error",
        "pool error",
    ] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) >= 5,
            "too few {kind:?} cases: {seen:?}"
        );
    }
}
