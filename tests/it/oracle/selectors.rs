//! A seeded generator of device selectors and devices for the differential test of CEL:
//! random well-typed selectors over every library Kubernetes enables for DRA (semver,
//! quantity, lists, sets, strings, regex, optional types, `cel.bind`), salted with what goes
//! wrong (no such key, unknown domains, type errors, overflow, division by zero), and
//! adversarial ones at the limits of the API server and scheduler (nesting around 250, length
//! around 10 KiB, cost around 1e6).

use media_operator::explain::{DeviceRecord, OwnedAttribute};
use serde_json::{Map, Value, json};

/// The driver of every generated device; its domain is where unqualified names live.
pub const DRIVER: &str = "media.liken.sh";

const DOMAINS: [&str; 3] = [DRIVER, "resource.kubernetes.io", "other.example.com"];
const BOOLS: [&str; 3] = ["decode", "encode", "hdr"];
const INTS: [&str; 3] = ["vram", "cores", "index"];
const STRINGS: [&str; 3] = ["model", "pciBusID", "family"];
const VERSIONS: [&str; 2] = ["driverVersion", "firmware"];
const CAPACITIES: [&str; 2] = ["memory", "slots"];

const INT_VALUES: [i64; 8] = [
    0,
    1,
    8,
    16,
    -3,
    9223372036854775807,
    -9223372036854775808,
    42,
];
const STRING_VALUES: [&str; 7] = ["arc", "tgl", "AMD", "42", "", "0000:03:00.0", "a,b,c"];
const VERSION_VALUES: [&str; 5] = ["22.3.1", "24.2.4", "26.1.2-rc.1", "1.0.0+build.5", "0.0.1"];
/// Each form `resource.Quantity` keeps: int64 at a negative, zero or positive scale, and a Dec.
const QUANTITIES: [&str; 10] = [
    "8Gi",
    "4G",
    "512Mi",
    "1",
    "0",
    "1500m",
    "1.5",
    "3e-1",
    "2k",
    "1234567890123456789",
];

/// A generated device: as the oracle reads it and as `why` does.
pub struct Device {
    pub json: Value,
    pub record: DeviceRecord,
}

/// A random device: some of each attribute type under the driver's domain (unqualified) and
/// the others (qualified), some capacities, and `allowMultipleAllocations` or not.
pub fn device(rng: &mut fastrand::Rng) -> Device {
    let mut attributes = Map::new();
    let mut record = DeviceRecord {
        driver: DRIVER.into(),
        pool: "n1".into(),
        name: "gpu0".into(),
        ..DeviceRecord::default()
    };
    let mut add = |name: &str, value: OwnedAttribute, rng: &mut fastrand::Rng| {
        // Two thirds under the driver's own domain, written unqualified.
        let domain = DOMAINS[rng.usize(0..DOMAINS.len())];
        let name = if domain == DRIVER && rng.bool() {
            name.to_owned()
        } else {
            format!("{domain}/{name}")
        };
        let typed = match &value {
            OwnedAttribute::Bool(b) => json!({"bool": b}),
            OwnedAttribute::Int(i) => json!({"int": i}),
            OwnedAttribute::String(s) => json!({"string": s}),
            OwnedAttribute::Version(v) => json!({"version": v}),
        };
        attributes.insert(name.clone(), typed);
        record.attributes.push((name, value));
    };
    for name in BOOLS {
        if rng.u8(0..3) != 0 {
            add(name, OwnedAttribute::Bool(rng.bool()), rng);
        }
    }
    for name in INTS {
        if rng.u8(0..3) != 0 {
            add(name, OwnedAttribute::Int(pick(rng, &INT_VALUES)), rng);
        }
    }
    for name in STRINGS {
        if rng.u8(0..3) != 0 {
            add(
                name,
                OwnedAttribute::String(pick(rng, &STRING_VALUES).into()),
                rng,
            );
        }
    }
    for name in VERSIONS {
        if rng.u8(0..3) != 0 {
            add(
                name,
                OwnedAttribute::Version(pick(rng, &VERSION_VALUES).into()),
                rng,
            );
        }
    }
    let mut capacity = Map::new();
    for name in CAPACITIES {
        if rng.bool() {
            let q = pick(rng, &QUANTITIES);
            capacity.insert(name.into(), json!({"value": q}));
            record.capacities.push((name.into(), q.into()));
        }
    }
    let mut json = json!({"driver": DRIVER, "attributes": attributes, "capacity": capacity});
    if rng.bool() {
        let shared = rng.bool();
        json["allowMultipleAllocations"] = json!(shared);
        record.allow_multiple_allocations = Some(shared);
    }
    Device { json, record }
}

fn pick<T: Copy>(rng: &mut fastrand::Rng, from: &[T]) -> T {
    from[rng.usize(0..from.len())]
}

/// What a generated expression is meant to be: the generator keeps to types so that most
/// selectors compile, and breaks them on purpose now and then.
#[derive(Clone, Copy)]
enum Ty {
    Bool,
    Int,
    Str,
    Version,
    Quantity,
    IntList,
    StrList,
}

/// The generator: `depth` bounds the random recursion (the adversarial cases are built
/// iteratively, so no recursion here grows with the sizes they reach).
pub struct Selectors {
    rng: fastrand::Rng,
    vars: Vec<(String, Ty)>,
}

impl Selectors {
    pub fn new(seed: u64) -> Selectors {
        Selectors {
            rng: fastrand::Rng::with_seed(seed),
            vars: Vec::new(),
        }
    }

    pub fn rng(&mut self) -> &mut fastrand::Rng {
        &mut self.rng
    }

    /// One selector: nine in ten random, one in ten adversarial.
    pub fn next(&mut self) -> String {
        self.vars.clear();
        if self.rng.u8(0..10) == 0 {
            self.adversarial()
        } else {
            self.expr(Ty::Bool, 4)
        }
    }

    fn attr(&mut self, names: &[&str]) -> String {
        let domain = pick(&mut self.rng, &DOMAINS);
        let name = pick(&mut self.rng, names);
        match self.rng.u8(0..6) {
            0 => format!("device.attributes[device.driver].{name}"),
            1 => format!(r#"device.attributes["{domain}"]["{name}"]"#),
            _ => format!(r#"device.attributes["{domain}"].{name}"#),
        }
    }

    /// An attribute read that may be absent: plain (no such key), optional or guarded.
    fn read(&mut self, names: &[&str], fallback: &str) -> String {
        let plain = self.attr(names);
        match self.rng.u8(0..4) {
            0 => {
                let (head, name) = plain.rsplit_once('.').unwrap_or((&plain, ""));
                if name.is_empty() || plain.ends_with(']') {
                    plain
                } else {
                    format!("{head}.?{name}.orValue({fallback})")
                }
            }
            _ => plain,
        }
    }

    fn var(&mut self, ty: Ty) -> Option<String> {
        let matching: Vec<String> = self
            .vars
            .iter()
            .filter(|(_, t)| std::mem::discriminant(t) == std::mem::discriminant(&ty))
            .map(|(n, _)| n.clone())
            .collect();
        (!matching.is_empty()).then(|| matching[self.rng.usize(0..matching.len())].clone())
    }

    fn expr(&mut self, ty: Ty, depth: u32) -> String {
        // Now and then the wrong type: a compile error (or, through dyn, a runtime one).
        if depth > 0 && self.rng.u8(0..40) == 0 {
            let wrong = pick(&mut self.rng, &[Ty::Bool, Ty::Int, Ty::Str, Ty::Version]);
            return self.expr(wrong, depth - 1);
        }
        if let Some(v) = self.var(ty).filter(|_| self.rng.u8(0..3) == 0) {
            return v;
        }
        if depth == 0 {
            return self.leaf(ty);
        }
        let d = depth - 1;
        match ty {
            Ty::Bool => match self.rng.u8(0..24) {
                0 => format!("{} && {}", self.expr(Ty::Bool, d), self.expr(Ty::Bool, d)),
                1 => format!("({} || {})", self.expr(Ty::Bool, d), self.expr(Ty::Bool, d)),
                2 => format!("!{}", self.expr(Ty::Bool, d)),
                3 => format!(
                    "({} ? {} : {})",
                    self.expr(Ty::Bool, d),
                    self.expr(Ty::Bool, d),
                    self.expr(Ty::Bool, d)
                ),
                4 | 5 => {
                    let op = pick(&mut self.rng, &["==", "!=", "<", "<=", ">", ">="]);
                    format!("{} {op} {}", self.expr(Ty::Int, d), self.expr(Ty::Int, d))
                }
                6 => {
                    let f = pick(&mut self.rng, &["startsWith", "endsWith", "contains"]);
                    format!("{}.{f}({})", self.expr(Ty::Str, d), self.expr(Ty::Str, d))
                }
                7 => {
                    let re = pick(
                        &mut self.rng,
                        &[
                            r#""^(arc|tgl)$""#,
                            r#""[0-9]+""#,
                            r#""^a.*""#,
                            r#""(""#,
                            r#""\\d{2}""#,
                        ],
                    );
                    format!("{}.matches({re})", self.expr(Ty::Str, d))
                }
                8 => format!("{} in {}", self.expr(Ty::Str, d), self.expr(Ty::StrList, d)),
                9 => {
                    let f = pick(&mut self.rng, &["isGreaterThan", "isLessThan"]);
                    format!(
                        "{}.{f}({})",
                        self.expr(Ty::Version, d),
                        self.expr(Ty::Version, d)
                    )
                }
                10 => {
                    let op = pick(&mut self.rng, &["==", "!=", "<", ">="]);
                    let other = if self.rng.bool() {
                        Ty::Version
                    } else {
                        Ty::Quantity
                    };
                    format!(
                        "{}.compareTo({}) {op} {}",
                        self.expr(other, d),
                        self.expr(other, d),
                        self.rng.i8(-1..=1)
                    )
                }
                11 => {
                    let f = pick(
                        &mut self.rng,
                        &[
                            "isGreaterThan",
                            "isLessThan",
                            "isInteger()",
                            "asApproximateFloat() > 0.3",
                        ],
                    );
                    if f.contains('(') {
                        format!("{}.{f}", self.expr(Ty::Quantity, d))
                    } else {
                        format!(
                            "{}.{f}({})",
                            self.expr(Ty::Quantity, d),
                            self.expr(Ty::Quantity, d)
                        )
                    }
                }
                12 => {
                    let f = pick(&mut self.rng, &["isSemver", "isQuantity"]);
                    let arg = pick(
                        &mut self.rng,
                        &[
                            r#""1.2.3""#,
                            r#""1.2""#,
                            r#""v1.0.0""#,
                            r#""8Gi""#,
                            r#""x""#,
                        ],
                    );
                    format!("{f}({arg})")
                }
                13 => {
                    let (m, list, var) = (
                        pick(&mut self.rng, &["all", "exists", "exists_one"]),
                        self.expr(Ty::IntList, d),
                        self.fresh(Ty::Int),
                    );
                    let body = self.expr(Ty::Bool, d);
                    self.vars.pop();
                    format!("{list}.{m}({var}, {body})")
                }
                14 => {
                    let f = pick(
                        &mut self.rng,
                        &[
                            "isSorted()",
                            "sum() > 3",
                            "min() < 2",
                            "max() == 16",
                            "indexOf(8) >= 0",
                        ],
                    );
                    format!("{}.{f}", self.expr(Ty::IntList, d))
                }
                15 => {
                    let f = pick(&mut self.rng, &["contains", "intersects", "equivalent"]);
                    format!(
                        "sets.{f}({}, {})",
                        self.expr(Ty::IntList, d),
                        self.expr(Ty::IntList, d)
                    )
                }
                16 => {
                    let ty = pick(&mut self.rng, &[Ty::Int, Ty::Str, Ty::Version]);
                    let value = self.expr(ty, d);
                    let var = self.fresh(ty);
                    let body = self.expr(Ty::Bool, d);
                    self.vars.pop();
                    format!("cel.bind({var}, {value}, {body})")
                }
                17 => {
                    let domain = pick(&mut self.rng, &DOMAINS);
                    let var = self.fresh(Ty::Str);
                    let body = self.expr(Ty::Bool, d);
                    self.vars.pop();
                    let m = pick(&mut self.rng, &["exists", "all"]);
                    format!(r#"device.attributes["{domain}"].{m}({var}, {body})"#)
                }
                18 => {
                    let names = pick(&mut self.rng, &[&BOOLS[..], &INTS[..], &STRINGS[..]]);
                    format!("has({})", self.attr(names))
                }
                19 => format!(
                    "{} == {}",
                    self.expr(Ty::Version, d),
                    self.expr(Ty::Version, d)
                ),
                20 => format!("{} == {}", self.expr(Ty::Str, d), self.expr(Ty::Str, d)),
                // Equality of quantities: an `add` result on the right is no overload.
                21 => format!(
                    "{} == {}",
                    self.expr(Ty::Quantity, d),
                    self.expr(Ty::Quantity, d)
                ),
                22 => format!("sign({}) >= 0", self.expr(Ty::Quantity, d)),
                _ => self.leaf(Ty::Bool),
            },
            Ty::Int => match self.rng.u8(0..12) {
                0..=3 => {
                    let op = pick(&mut self.rng, &["+", "-", "*", "/", "%"]);
                    format!("({} {op} {})", self.expr(Ty::Int, d), self.expr(Ty::Int, d))
                }
                4 => format!("size({})", self.expr(Ty::Str, d)),
                5 => format!("{}.size()", self.expr(Ty::IntList, d)),
                6 => format!("int({})", self.expr(Ty::Str, d)),
                7 => format!("{}.major()", self.expr(Ty::Version, d)),
                8 => format!("{}.asInteger()", self.expr(Ty::Quantity, d)),
                9 => format!("-{}", self.expr(Ty::Int, d)),
                10 => format!(
                    "{}.indexOf({})",
                    self.expr(Ty::Str, d),
                    self.expr(Ty::Str, d)
                ),
                _ => self.leaf(Ty::Int),
            },
            Ty::Str => match self.rng.u8(0..10) {
                0 => format!("{} + {}", self.expr(Ty::Str, d), self.expr(Ty::Str, d)),
                1 => format!("{}.lowerAscii()", self.expr(Ty::Str, d)),
                2 => format!("{}.upperAscii()", self.expr(Ty::Str, d)),
                3 => format!(
                    "{}.replace({}, {})",
                    self.expr(Ty::Str, d),
                    self.expr(Ty::Str, d),
                    self.expr(Ty::Str, d)
                ),
                4 => format!(
                    "{}.substring({})",
                    self.expr(Ty::Str, d),
                    self.rng.i8(-1..4)
                ),
                5 => format!("string({})", self.expr(Ty::Int, d)),
                6 => format!("{}.join(\"-\")", self.expr(Ty::StrList, d)),
                7 => format!("{}.trim()", self.expr(Ty::Str, d)),
                8 => format!("{}.charAt({})", self.expr(Ty::Str, d), self.rng.i8(-1..4)),
                _ => self.leaf(Ty::Str),
            },
            Ty::Version => match self.rng.u8(0..3) {
                0 => self.read(&VERSIONS, r#"semver("0.0.0")"#),
                _ => self.leaf(Ty::Version),
            },
            Ty::Quantity => match self.rng.u8(0..4) {
                0 => format!(
                    "{}.add({})",
                    self.expr(Ty::Quantity, d),
                    self.expr(Ty::Quantity, d)
                ),
                1 => format!("{}.sub({})", self.expr(Ty::Quantity, d), self.rng.i8(0..3)),
                _ => self.leaf(Ty::Quantity),
            },
            Ty::IntList => match self.rng.u8(0..5) {
                0 => format!("lists.range({})", self.rng.u8(0..6)),
                1 => {
                    // The list first: the variable is not in scope there.
                    let list = self.expr(Ty::IntList, d);
                    let var = self.fresh(Ty::Int);
                    let body = self.expr(Ty::Int, d);
                    self.vars.pop();
                    format!("{list}.map({var}, {body})")
                }
                2 => format!(
                    "{} + {}",
                    self.expr(Ty::IntList, d),
                    self.expr(Ty::IntList, d)
                ),
                _ => self.leaf(Ty::IntList),
            },
            Ty::StrList => match self.rng.u8(0..3) {
                0 => format!("{}.split(\",\")", self.expr(Ty::Str, d)),
                _ => self.leaf(Ty::StrList),
            },
        }
    }

    /// A new comprehension or bind variable of `ty`, in scope until the caller pops it.
    fn fresh(&mut self, ty: Ty) -> String {
        let name = format!("v{}", self.vars.len());
        self.vars.push((name.clone(), ty));
        name
    }

    fn leaf(&mut self, ty: Ty) -> String {
        match ty {
            Ty::Bool => match self.rng.u8(0..6) {
                0 => "true".into(),
                1 => "device.allowMultipleAllocations".into(),
                2 => format!(r#"device.driver == "{DRIVER}""#),
                _ => self.read(&BOOLS, "false"),
            },
            Ty::Int => match self.rng.u8(0..3) {
                0 => pick(&mut self.rng, &INT_VALUES)
                    .to_string()
                    .replace("-9223372036854775808", "(-9223372036854775807 - 1)"),
                _ => self.read(&INTS, "0"),
            },
            Ty::Str => match self.rng.u8(0..3) {
                0 => format!("{:?}", pick(&mut self.rng, &STRING_VALUES)),
                _ => self.read(&STRINGS, r#""""#),
            },
            Ty::Version => format!(
                "semver({:?})",
                pick(
                    &mut self.rng,
                    &["1.2.3", "24.2.4", "26.1.2-rc.1", "1.2", "bad"]
                )
            ),
            Ty::Quantity => match self.rng.u8(0..3) {
                0 => format!("quantity({:?})", pick(&mut self.rng, &QUANTITIES)),
                _ => {
                    let domain = pick(&mut self.rng, &DOMAINS);
                    let name = pick(&mut self.rng, &CAPACITIES);
                    format!(r#"device.capacity["{domain}"].{name}"#)
                }
            },
            Ty::IntList => match self.rng.u8(0..3) {
                0 => "[]".into(),
                _ => {
                    let n = self.rng.usize(1..5);
                    let items: Vec<String> =
                        (0..n).map(|_| self.rng.i8(-2..20).to_string()).collect();
                    format!("[{}]", items.join(", "))
                }
            },
            Ty::StrList => r#"["arc", "tgl", "42"]"#.into(),
        }
    }

    /// A selector at a limit: nesting, length or cost near where the API server or the
    /// scheduler stops, on either side.
    fn adversarial(&mut self) -> String {
        let near = |rng: &mut fastrand::Rng, limit: usize, spread: usize| {
            rng.usize(limit.saturating_sub(spread)..=limit + spread)
        };
        match self.rng.u8(0..14) {
            // Nesting: each form counted its own way by cel-go's parser.
            0 => {
                let n = near(&mut self.rng, 250, 6);
                format!("{}true{}", "(".repeat(n), ")".repeat(n))
            }
            1 => {
                let n = near(&mut self.rng, 125, 6);
                format!("{}{}", "!".repeat(2 * n), "true")
            }
            2 => {
                let n = near(&mut self.rng, 250, 6);
                format!("{} == {}", vec!["1"; n].join(" + "), n)
            }
            3 => {
                let n = near(&mut self.rng, 250, 6);
                format!("{}1{}.size() > 0", "[".repeat(n), "]".repeat(n))
            }
            4 => {
                let n = near(&mut self.rng, 250, 6);
                format!("{}true{}", "(true ? ".repeat(n), " : false)".repeat(n))
            }
            5 => {
                let n = near(&mut self.rng, 250, 6);
                format!(
                    r#"device.attributes["{DRIVER}"].?model{}.orValue("") != "x""#,
                    ".lowerAscii()".repeat(n.saturating_sub(3))
                )
            }
            6 => {
                // The chain too long for any stack: 5,000 operands within the length limit.
                let n = near(&mut self.rng, 5000, 100);
                format!("{} > 0", vec!["1"; n].join("+"))
            }
            7 => {
                // Length: a string literal filling the limit, on either side.
                let n = near(&mut self.rng, 10 * 1024 - 40, 60);
                format!(r#""{}".startsWith("a") || true"#, "a".repeat(n))
            }
            // Cost: comprehensions sized around 1e6 at run time and in the estimate.
            // Sized so that the limit falls within the spread (about 6ab and 217a) while the
            // loops stay short: cel-go's cost tracker slows quadratically with iterations.
            8 => {
                let (a, b) = (near(&mut self.rng, 408, 120), near(&mut self.rng, 408, 120));
                format!("lists.range({a}).all(i, lists.range({b}).all(j, i + j >= 0))")
            }
            9 => {
                let a = near(&mut self.rng, 4600, 400);
                format!("lists.range({a}).exists(i, lists.range(200).size() < 0)")
            }
            10 => {
                let n = near(&mut self.rng, 4000, 3000);
                format!(r#""{}".matches("^(a|b)*c$")"#, "ab".repeat(n / 2))
            }
            11 => {
                let n = near(&mut self.rng, 2000, 1500);
                let inner = near(&mut self.rng, 500, 450);
                format!(
                    r#"lists.range({inner}).all(i, "{}".replace("a", "bb").size() > i)"#,
                    "a".repeat(n)
                )
            }
            12 => {
                let n = near(&mut self.rng, 1000, 900);
                format!(
                    r#"lists.range({n}).map(i, string(i)).join(",").size() > 0 && device.attributes["{DRIVER}"].?model.orValue("") < "z""#
                )
            }
            _ => {
                let a = near(&mut self.rng, 1000, 600);
                format!("sets.intersects(lists.range({a}), lists.range({a}).map(i, i + {a}))")
            }
        }
    }
}
