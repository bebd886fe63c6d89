//! The differential test of the static cost estimate: the API server's `result.MaxCost` for a
//! new selector (the oracle's `estimate`, from dra cel/compile.go with cel-go's estimator) and
//! why's ([`estimated_cost`]), number for number, per release, over hand-picked selectors, the
//! CEL differential's generated ones, and generated ones near the limit: nested comprehensions over attributes and lists, string
//! functions, regex, lists and sets, semver and quantity.

use serde_json::json;

use media_operator::explain::cel::estimated_cost;

use super::selectors::Selectors;
use crate::support::oracle::{Oracle, RELEASES};

/// Selectors whose estimate exercises one rule each.
const PICKED: &[&str] = &[
    r#"device.driver == "media.liken.sh""#,
    r#"device.attributes["media.liken.sh"].model == "arc""#,
    r#"device.attributes["media.liken.sh"].vram >= 8"#,
    r#"has(device.attributes["media.liken.sh"].decode)"#,
    r#"device.attributes["media.liken.sh"].?decode.orValue(false)"#,
    r#"device.attributes["media.liken.sh"].model.matches("^(arc|tgl)$")"#,
    r#"matches(device.attributes["media.liken.sh"].model, "^a+$")"#,
    r#"device.attributes["media.liken.sh"].model.contains(device.driver)"#,
    r#"device.attributes["media.liken.sh"].model.startsWith("a")"#,
    r#"device.attributes["media.liken.sh"].model < device.driver"#,
    r#"device.attributes["media.liken.sh"].model + device.driver == "x""#,
    r#"device.attributes["media.liken.sh"].model in ["arc", "tgl"]"#,
    r#""arc" in device.attributes["media.liken.sh"]"#,
    r#"size(device.attributes["media.liken.sh"]) > 2"#,
    r#"device.attributes["media.liken.sh"].exists(k, k.startsWith("dec"))"#,
    r#"device.attributes.exists(d, device.attributes[d].exists(n, n.size() > 3))"#,
    r#"device.attributes.all(d, device.attributes[d].all(n, device.attributes[d][n] != 0))"#,
    r#"cel.bind(a, device.attributes["media.liken.sh"], a.vram > 4 || a.decode)"#,
    r#"cel.bind(a, device.attributes["media.liken.sh"], a.model.lowerAscii() == "arc")"#,
    r#"cel.bind(x, 1, true)"#,
    // tests/it/why.rs's selector over the limit.
    r#"device.driver == "media.liken.sh" && cel.bind(m, device.attributes["media.liken.sh"], m.all(a, m.all(b, m.all(c, string(m[a]).matches(string(m[b]) + string(m[c]))))))"#,
    r#"device.attributes["media.liken.sh"].model.lowerAscii().upperAscii().trim() == "A""#,
    r#"device.attributes["media.liken.sh"].model.replace("a", "bb").size() > 2"#,
    r#"device.attributes["media.liken.sh"].model.split(",").size() > 1"#,
    r#"device.attributes["media.liken.sh"].model.split(",").join("-") == "a""#,
    r#"device.attributes["media.liken.sh"].model.substring(1) == "rc""#,
    r#"device.attributes["media.liken.sh"].model.indexOf("r") == 1"#,
    r#"device.attributes["media.liken.sh"].model.find("[a-z]+") == "arc""#,
    r#"device.attributes["media.liken.sh"].model.findAll("[a-z]").size() == 3"#,
    r#"string(device.attributes["media.liken.sh"].vram) == "16""#,
    r#"int(device.attributes["media.liken.sh"].model) > 0"#,
    r#"device.attributes["media.liken.sh"].driverVersion.isGreaterThan(semver("23.0.0"))"#,
    r#"device.attributes["media.liken.sh"].driverVersion == semver("22.3.1")"#,
    r#"semver("1.2.3") != semver("1.2.4")"#,
    r#"isSemver(device.attributes["media.liken.sh"].model)"#,
    r#"device.capacity["media.liken.sh"].memory.compareTo(quantity("8Gi")) >= 0"#,
    r#"device.capacity["media.liken.sh"]["memory"].isGreaterThan(quantity("4G"))"#,
    r#"quantity("1Gi") == device.capacity["media.liken.sh"].memory"#,
    r#"isQuantity(device.attributes["media.liken.sh"].model)"#,
    r#"[1, 2, 3].all(x, x > 0)"#,
    r#"[1, 2, 3].exists_one(x, x > 2)"#,
    r#"[1, 2, 3].map(x, x * 2).exists(y, y == 4)"#,
    r#"[1, 2, 3].filter(x, x > 1).size() == 2"#,
    r#"["a", "bb"].map(s, s + s).exists(t, t == "aa")"#,
    r#"lists.range(1000).all(x, x >= 0)"#,
    r#"lists.range(100).all(x, lists.range(100).exists(y, x == y))"#,
    r#"lists.range(10).reverse().sort() == lists.range(10)"#,
    r#"[3, 1, 2].sort().slice(0, 2) == [1, 2]"#,
    r#"["b", "a"].sort()[0] == "a""#,
    r#"[1, 1, 2].distinct().size() == 2"#,
    r#"[3, 1, 2].sortBy(x, -x)[0] == 3"#,
    r#"["b", "a"].sortBy(s, s.size()).size() == 2"#,
    r#"[[1], [2]].flatten().size() == 2"#,
    r#"[1, 2, 3].isSorted() && [1, 2].sum() == 3 && [1, 2].max() == 2"#,
    r#"["a", "b"].isSorted()"#,
    r#"[1, 2].indexOf(2) == 1"#,
    r#"sets.contains([1, 2, 3], [1, 2])"#,
    r#"sets.intersects(device.attributes["media.liken.sh"].map(k, k), ["vram"])"#,
    r#"sets.equivalent([1, 2], [2, 1])"#,
    r#"{"a": 1, "b": 2}.exists(k, k == "a")"#,
    r#"{"a": device.driver}["a"] == "x""#,
    r#"[device.driver, "abc"].exists(s, s.matches("^a"))"#,
    r#"device.allowMultipleAllocations"#,
    r#"dyn(device.attributes["media.liken.sh"].model) == "arc""#,
    r#"-1 < device.attributes["media.liken.sh"].vram"#,
    r#"device.attributes["media.liken.sh"].vram % 2 == 0 ? device.driver.size() > 2 : device.driver.endsWith("h")"#,
    r#"b"abc" + b"d" == b"abcd" && bytes("x") != b"y" && string(b"ab") == "ab""#,
];

/// Generated selectors: comprehensions nested over attributes and lists, around string, regex,
/// list, set, semver and quantity work, sized to land near the limit.
fn generated(rng: &mut fastrand::Rng) -> String {
    const STRINGS: [&str; 5] = [
        r#"device.attributes["media.liken.sh"].model"#,
        "device.driver",
        r#""some literal text""#,
        r#"device.attributes["media.liken.sh"].model.lowerAscii()"#,
        r#"(device.driver + device.attributes["media.liken.sh"].model)"#,
    ];
    let s = |rng: &mut fastrand::Rng| STRINGS[rng.usize(..STRINGS.len())];
    let leaf = |rng: &mut fastrand::Rng, var: &str| -> String {
        match rng.u8(..12) {
            0 => format!(
                r#"{}.matches("^[a-z]+{}$")"#,
                s(rng),
                "x".repeat(rng.usize(0..40))
            ),
            1 => format!("{}.contains({})", s(rng), s(rng)),
            2 => format!("{} == {}", s(rng), s(rng)),
            3 => format!("{} < {}", s(rng), s(rng)),
            4 => format!(r#"{}.split(",").size() > {var}"#, s(rng)),
            5 => format!(
                r#"semver("1.2.3").isLessThan(semver("{}.0.0"))"#,
                rng.u8(1..9)
            ),
            6 => format!(
                r#"device.capacity["media.liken.sh"].memory.compareTo(quantity("{}Gi")) > 0"#,
                rng.u8(1..64)
            ),
            7 => format!(
                r#"sets.contains(lists.range({}), [{var}])"#,
                rng.usize(1..200)
            ),
            8 => format!(
                r#"{}.replace("a", "{}").size() > 3"#,
                s(rng),
                "b".repeat(rng.usize(0..4))
            ),
            9 => format!("{var} in lists.range({})", rng.usize(1..300)),
            10 => format!(r#"string({var}).startsWith("1")"#),
            _ => format!("{var} == {var}"),
        }
    };
    let ranges = |rng: &mut fastrand::Rng| -> String {
        match rng.u8(..6) {
            0 => r#"device.attributes["media.liken.sh"]"#.to_owned(),
            1 => "device.attributes".to_owned(),
            2 => format!("lists.range({})", rng.usize(1..120)),
            3 => format!(
                "[{}]",
                (0..rng.usize(1..8))
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            4 => format!("lists.range({}).map(m, m * 2)", rng.usize(1..60)),
            _ => format!("lists.range({}).filter(f, f % 2 == 0)", rng.usize(1..60)),
        }
    };
    let depth = rng.usize(1..4);
    let vars = ["a", "b", "c", "d"];
    let mut body = leaf(rng, vars[depth - 1]);
    if rng.bool() {
        body = format!("{body} && {}", leaf(rng, vars[depth - 1]));
    }
    for level in (0..depth).rev() {
        let quantifier = ["all", "exists", "exists_one"][rng.usize(..3)];
        body = format!("{}.{quantifier}({}, {body})", ranges(rng), vars[level]);
    }
    if rng.u8(..4) == 0 {
        body = format!(
            r#"cel.bind(a0, device.attributes["media.liken.sh"], a0.model.size() > 1 && {body})"#
        );
    }
    body
}

/// Cases generated per release, by the generator above and by the CEL differential's.
const GENERATED: usize = 400;
const BROAD: usize = 600;

/// What one release's run compared: selectors, those near the limit (within a factor of ten
/// either side), those over it, and the disagreements.
struct Run {
    compared: usize,
    near: usize,
    over: usize,
    disagreements: Vec<String>,
}

fn differential(release: &str) -> Run {
    let minor: u32 = release[2..].parse().expect("a release is 1.NN");
    let mut oracle = Oracle::start(release).unwrap_or_else(|e| panic!("{e}"));
    let mut rng = fastrand::Rng::with_seed(0xe57 + u64::from(minor));
    let device = json!({"driver": "media.liken.sh", "attributes": {}});
    let mut broad = Selectors::new(0xb0ad + u64::from(minor));
    let expressions = PICKED
        .iter()
        .map(|e| (*e).to_owned())
        .chain((0..GENERATED).map(|_| generated(&mut rng)))
        .chain((0..BROAD).map(|_| broad.next()));
    let mut run = Run {
        compared: 0,
        near: 0,
        over: 0,
        disagreements: Vec::new(),
    };
    for (id, expression) in expressions.enumerate() {
        let answer = oracle
            .ask(&json!({"id": id, "cel": {"expression": expression, "device": device}}))
            .unwrap_or_else(|e| panic!("{e}"));
        // Only what compiles as new has an estimate (1.34's new expressions lack lists v3).
        let Some(theirs) = answer["estimate"].as_u64() else {
            continue;
        };
        run.compared += 1;
        run.near += usize::from((100_000..=10_000_000).contains(&theirs));
        run.over += usize::from(theirs > 1_000_000);
        let mine = estimated_cost(&expression, minor);
        if mine != Some(theirs) {
            run.disagreements.push(format!(
                "{release}: {expression}\n  why {mine:?}, the API server {theirs}"
            ));
        }
    }
    run
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_estimates_cost_as_the_api_server_does() {
    let mut all = Vec::new();
    for release in RELEASES {
        let run = differential(release);
        eprintln!(
            "estimate {release}: {} selectors compared ({} near the limit, {} over it), {} disagreements",
            run.compared,
            run.near,
            run.over,
            run.disagreements.len()
        );
        // Enough must compile as new, or the test compares little (1.34's new selectors have
        // no lists library: its API server's compatibility version is 1.33), and some must
        // come near the limit and pass it.
        assert!(
            run.compared > PICKED.len() / 2,
            "{release}: only {} compared",
            run.compared
        );
        assert!(
            run.near > 0 && run.over > 0,
            "{release}: none near or over the limit"
        );
        all.extend(run.disagreements);
    }
    for d in all.iter().take(80) {
        eprintln!("{d}");
    }
    assert!(
        all.is_empty(),
        "{} estimates disagree; the first:\n{}",
        all.len(),
        all[0]
    );
}
