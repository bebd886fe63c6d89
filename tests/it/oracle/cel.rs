//! The differential test of CEL: device selectors evaluated by the scheduler's `cel` package
//! (through the oracle's allocator) and by `why`, per release, on one device each: the same
//! true (allocatable), false (not allocatable) or runtime error (the attempt fails). `why`
//! says "cannot evaluate" (undecided) only where docs/why-format.md says it does not model
//! something; such cases are counted, not compared.

use serde_json::{Value, json};

use std::time::Instant;

use media_operator::explain::cel::{Outcome, evaluate_one};

use super::fleets::{Kind, why};
use super::selectors::{self, Selectors};
use crate::support::oracle::{Oracle, RELEASES, Verdict};

/// Selectors over every attribute type, the functions Kubernetes adds (semver, quantity,
/// string helpers) and the errors a selector meets at run time.
const EXPRESSIONS: &[&str] = &[
    r#"device.attributes["media.liken.sh"].decode"#,
    r#"device.attributes["media.liken.sh"].?decode.orValue(false)"#,
    r#"has(device.attributes["media.liken.sh"].decode) && device.attributes["media.liken.sh"].decode"#,
    r#"device.attributes["media.liken.sh"].vram >= 8"#,
    r#"device.attributes["media.liken.sh"].vram * 2 > 16"#,
    r#"device.attributes["media.liken.sh"].vram + 9223372036854775000 > 0"#,
    r#"100 / (device.attributes["media.liken.sh"].vram - 8) > 1"#,
    r#"device.attributes["media.liken.sh"].model == "arc""#,
    r#"device.attributes["media.liken.sh"].model.startsWith("a")"#,
    r#"device.attributes["media.liken.sh"].model.matches("^(arc|tgl)$")"#,
    r#"device.attributes["media.liken.sh"].model in ["arc", "amd"]"#,
    r#"size(device.attributes["media.liken.sh"].model) == 3"#,
    r#"device.attributes["media.liken.sh"].model.lowerAscii() == "arc""#,
    r#"device.attributes["media.liken.sh"].driverVersion.isGreaterThan(semver("23.0.0"))"#,
    r#"device.attributes["media.liken.sh"].driverVersion.compareTo(semver("24.2.4")) == 0"#,
    r#"device.attributes["media.liken.sh"].driverVersion.major() >= 24"#,
    r#"device.attributes["media.liken.sh"].driverVersion == semver("22.3.1")"#,
    r#"isSemver("1.2.3") && !isSemver("1.2")"#,
    r#"device.capacity["media.liken.sh"].memory.compareTo(quantity("8Gi")) >= 0"#,
    r#"device.capacity["media.liken.sh"].memory.isGreaterThan(quantity("4G"))"#,
    r#"device.capacity["media.liken.sh"].?memory.orValue(quantity("0")).asInteger() > 0"#,
    r#"device.attributes["resource.kubernetes.io"].pciBusID.endsWith(".0")"#,
    r#"device.attributes["resource.kubernetes.io"].?pciBusID.orValue("") != """#,
    r#"device.driver == "media.liken.sh" && device.attributes[device.driver].size() > 2"#,
    r#"device.attributes["media.liken.sh"].exists(k, k.startsWith("dec"))"#,
    r#"device.attributes["media.liken.sh"].all(k, k != "vram")"#,
    r#"cel.bind(a, device.attributes["media.liken.sh"], a.?vram.orValue(0) > 4 || a.?decode.orValue(false))"#,
    r#"device.attributes["media.liken.sh"].decode ? device.attributes["media.liken.sh"].vram > 4 : true"#,
    r#"int(device.attributes["media.liken.sh"].model) > 0"#,
    r#"string(device.attributes["media.liken.sh"].vram) == "16""#,
    r#"double(device.attributes["media.liken.sh"].vram) / 3.0 > 2.0"#,
    r#"device.allowMultipleAllocations"#,
    r#"device.attributes["other.example.com"].x"#,
    r#"device.attributes.exists(d, d == "media.liken.sh")"#,
];

fn device(rng: &mut fastrand::Rng) -> Value {
    let mut attributes = serde_json::Map::new();
    if rng.u8(0..4) != 0 {
        attributes.insert("decode".into(), json!({"bool": rng.bool()}));
    }
    if rng.u8(0..4) != 0 {
        attributes.insert(
            "vram".into(),
            json!({"int": ([4, 8, 16, -3, 9223372036854775807i64])[rng.usize(0..5)]}),
        );
    }
    if rng.u8(0..4) != 0 {
        attributes.insert(
            "model".into(),
            json!({"string": (["arc", "tgl", "AMD", "42"])[rng.usize(0..4)]}),
        );
    }
    if rng.u8(0..4) != 0 {
        attributes.insert(
            "driverVersion".into(),
            json!({"version": (["22.3.1", "24.2.4", "26.1.2-rc.1"])[rng.usize(0..3)]}),
        );
    }
    if rng.bool() {
        attributes.insert(
            "resource.kubernetes.io/pciBusID".into(),
            json!({"string": "0000:03:00.0"}),
        );
    }
    let mut d = json!({"name": "gpu0", "attributes": attributes});
    if rng.bool() {
        let memory = ["8Gi", "4G", "512Mi"][rng.usize(0..3)];
        d["capacity"] = json!({"memory": {"value": memory}});
    } else if rng.bool() {
        d["allowMultipleAllocations"] = json!(rng.bool());
    }
    d
}

fn fleet(expression: &str, device: Value) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
               "spec": {"driver": "media.liken.sh", "nodeName": "n1",
                        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}, "devices": [device]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "sel"},
               "spec": {"selectors": [{"cel": {"expression": expression}}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "c0", "namespace": "media", "uid": "claim-uid-0"},
               "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "sel"}}]}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "media", "uid": "pod-uid"},
               "spec": {"resourceClaims": [{"name": "c0", "resourceClaimName": "c0"}],
                        "containers": [{"name": "c", "image": "i"}]}}),
    ]
}

/// Devices per expression and release.
const DEVICES: u64 = 12;

fn differential(release: &str) {
    let mut oracle = Oracle::start(release).unwrap_or_else(|e| panic!("{e}"));
    let mut disagreements = Vec::new();
    let mut undecided = 0;
    for (e, expression) in EXPRESSIONS.iter().enumerate() {
        let mut rng = fastrand::Rng::with_seed(e as u64);
        for _ in 0..DEVICES {
            let objects = fleet(expression, device(&mut rng));
            let theirs = oracle
                .fleet(&objects, "media/p")
                .unwrap_or_else(|e| panic!("{e}"));
            let (Some(theirs), (mine, record)) = (theirs.on("n1").cloned(), why(&objects, release))
            else {
                panic!("the oracle answered no node n1")
            };
            let mine = mine.first().map(|(_, k)| k.clone());
            // why's "cannot evaluate" lists itself under unchecked: counted, not compared.
            if record["unchecked"]
                .as_array()
                .is_some_and(|u| !u.is_empty())
            {
                undecided += 1;
                continue;
            }
            let agree = matches!(
                (&mine, &theirs),
                (Some(Kind::Allocatable), Verdict::Allocated(_))
                    | (Some(Kind::Unallocatable), Verdict::Unallocatable)
                    | (Some(Kind::Error), Verdict::Error(_))
            );
            if agree {
                continue;
            }
            disagreements.push(format!(
                "{release}: {expression}\n  device {}\n  why {mine:?} ({}), the scheduler {theirs:?}",
                objects[1]["spec"]["devices"][0], record["verdict"]
            ));
        }
    }
    let cases = EXPRESSIONS.len() as u64 * DEVICES;
    eprintln!(
        "CEL {release}: {cases} cases, {undecided} undecided by why, {} disagreements",
        disagreements.len()
    );
    for d in &disagreements {
        eprintln!("{d}");
    }
    assert!(
        disagreements.is_empty(),
        "{} of {cases} CEL cases disagree; the first:\n{}",
        disagreements.len(),
        disagreements[0]
    );
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_evaluates_selectors_as_the_scheduler_does() {
    for release in RELEASES {
        differential(release);
    }
}

/// The oracle's own CEL mode: each outcome class on a case whose answer is plain.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_oracles_cel_mode_gives_each_outcome() {
    let mut oracle = Oracle::start(RELEASES[3]).unwrap_or_else(|e| panic!("{e}"));
    let device = json!({"driver": "media.liken.sh", "attributes": {"vram": {"int": 8}}});
    for (expression, result, class) in [
        (
            r#"device.attributes["media.liken.sh"].vram == 8"#,
            "true",
            None,
        ),
        (
            r#"device.attributes["media.liken.sh"].vram > 8"#,
            "false",
            None,
        ),
        (
            r#"device.attributes["media.liken.sh"].decode"#,
            "error",
            Some("runtime"),
        ),
        (
            r#"device.attributes["media.liken.sh"].vram >"#,
            "error",
            Some("compile"),
        ),
    ] {
        let answer = oracle
            .ask(&json!({"id": 1, "cel": {"expression": expression, "device": device}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer["result"], result, "{expression}: {answer}");
        assert_eq!(
            answer["errorClass"].as_str(),
            class,
            "{expression}: {answer}"
        );
    }
}

/// The class of an answer, as the scheduler and the API server would see it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Class {
    True,
    False,
    /// A runtime error other than the cost limit.
    Runtime,
    /// The runtime cost limit.
    Cost,
    /// The scheduler cannot compile the stored selector: the attempt fails.
    Compile,
    /// The API server refuses it as a new selector (length, recursion, cost estimate).
    Refused,
    /// why's "cannot evaluate" for a gap of its own: counted, never compared.
    Undecided,
}

/// The prefix of why's reason when it refuses what the API server refuses.
const REFUSED: &str = "the API server would refuse this expression";

fn why_class(outcome: &Outcome) -> Class {
    match outcome {
        Outcome::Match(true) => Class::True,
        Outcome::Match(false) => Class::False,
        Outcome::RuntimeError(m) if m.contains("actual cost limit exceeded") => Class::Cost,
        Outcome::RuntimeError(_) => Class::Runtime,
        Outcome::CannotEvaluate(r) if r.starts_with(REFUSED) => Class::Refused,
        Outcome::CannotEvaluate(_) => Class::Undecided,
    }
}

/// What why must answer, from the oracle's two views: refused where the API server refuses a
/// new selector for its length (why refuses those: no stored one can be longer), else what the
/// scheduler does with the stored selector, which it compiles without a cost estimate.
fn oracle_class(answer: &Value) -> Class {
    match (
        answer["new"].as_str(),
        answer["result"].as_str(),
        answer["errorClass"].as_str(),
    ) {
        (Some("length"), _, _) => Class::Refused,
        (_, Some("true"), _) => Class::True,
        (_, Some("false"), _) => Class::False,
        (_, _, Some("cost")) => Class::Cost,
        (_, _, Some("compile")) => Class::Compile,
        (_, _, Some("runtime")) => Class::Runtime,
        _ => panic!("the oracle's answer has no class: {answer}"),
    }
}

/// Whether why's class matches: a compile error of the stored selector fails the attempt, so
/// why's runtime error agrees with it, and so does its refusal when the API server also
/// refuses the selector as new (the recursion and code point limits are the parser's).
fn agrees(theirs: &Class, answer: &Value, mine: &Class) -> bool {
    theirs == mine
        || (*theirs == Class::Compile && *mine == Class::Runtime)
        || (*theirs == Class::Compile && *mine == Class::Refused && answer["new"] == "compile")
}

/// Whether the scheduler's compile error is its checker's or planner's (which why lacks): no
/// overload for the argument types, a type where another is required, an undeclared name, a
/// constant argument that does not convert.
fn is_type_error(answer: &Value) -> bool {
    let error = answer["error"].as_str().unwrap_or_default();
    [
        "found no matching overload",
        "expected type",
        "undeclared reference",
        "cannot be range of a comprehension",
        // The planner converts constant arguments (`int("x")`) before any evaluation.
        "program instantiation failed",
    ]
    .iter()
    .any(|m| error.contains(m))
}

/// Cases per release: enough for every production of the generator many times over (a tenth
/// are adversarial, mostly long loops: fewer in an unoptimized build, to stay within seconds).
const GENERATED: usize = if cfg!(debug_assertions) { 1200 } else { 3000 };

/// The generator's seed for `release`: `ORACLE_SEED` picks another run of cases.
fn seed(minor: u32) -> u64 {
    let run = std::env::var("ORACLE_SEED")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    0x5e1ec7 + u64::from(minor) + (run << 8)
}

/// Runs the generated cases of `release`; returns its disagreements.
fn generated(release: &str) -> Vec<String> {
    let minor: u32 = release[2..].parse().expect("a release is 1.NN");
    let mut oracle = Oracle::start(release).unwrap_or_else(|e| panic!("{e}"));
    let mut selectors = Selectors::new(seed(minor));
    let (mut undecided, mut disagreements) = (Vec::new(), Vec::new());
    let mut type_errors = Vec::new();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let start = Instant::now();
    for id in 0..GENERATED {
        let expression = selectors.next();
        let device = selectors::device(selectors.rng());
        let answer = oracle
            .ask(&json!({"id": id, "cel": {"expression": expression, "device": device.json}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let theirs = oracle_class(&answer);
        let outcome = evaluate_one(&expression, &device.record, minor);
        let mine = why_class(&outcome);
        *counts.entry(format!("{theirs:?}")).or_default() += 1;
        if mine == Class::Undecided {
            undecided.push(format!("{expression:.200}: {outcome:?}"));
            continue;
        }
        if theirs == Class::Compile && !agrees(&theirs, &answer, &mine) && is_type_error(&answer) {
            // The `cel` crate has no type checker: documented, counted, never a pass.
            type_errors.push(format!("{expression:.200}: {outcome:?}"));
            continue;
        }
        if !agrees(&theirs, &answer, &mine) {
            disagreements.push(format!(
                "{release} case {id}: {expression:.300}\n  device {}\n  why {mine:?} ({outcome:?})\n  the scheduler {theirs:?} ({answer})",
                device.json
            ));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "CEL {release}: {GENERATED} generated cases in {seconds:.1}s ({:.0}/s), {counts:?}, {} undecided by why, {} static type errors why evaluates, {} disagreements",
        GENERATED as f64 / seconds,
        undecided.len(),
        type_errors.len(),
        disagreements.len()
    );
    for u in undecided.iter().take(20) {
        eprintln!("undecided: {u}");
    }
    for t in type_errors.iter().take(5) {
        eprintln!("type error: {t}");
    }
    for d in disagreements.iter().take(60) {
        eprintln!("{d}");
    }
    disagreements
}

/// The differential test of generated selectors: random and adversarial selectors on random
/// devices, the scheduler's `cel` package and the API server's validation against why's,
/// thousands per release through one oracle process each.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_classes_generated_selectors_as_the_scheduler_does() {
    // Every release runs, so one run shows every release's disagreements.
    let disagreements: Vec<String> = RELEASES.iter().flat_map(|r| generated(r)).collect();
    assert!(
        disagreements.is_empty(),
        "{} of {} generated CEL cases disagree; the first:\n{}",
        disagreements.len(),
        GENERATED * RELEASES.len(),
        disagreements[0]
    );
}
