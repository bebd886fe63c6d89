//! Bounded fuzzing of the readers of outside text: recorded probes, `-f` objects, the API
//! server's answers to a listing (served by a stand-in, read by the plugin's lister) and the
//! kubeconfig. Fixed seeds and counts (per damage [`Class`], over two real inputs each: 2,400
//! cases for probes and objects, 960 for answers, 640 for kubeconfigs), so a run is reproducible
//! and takes seconds; each test says its count on stderr. The oracle: the reader returns (no
//! panic, stack overflow or hang), and a refusal is one bounded line naming the file or server.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use media_operator::agent::probing::read_records;
use media_operator::fleet::files::add_text;
use media_operator::fleet::objects::Objects;
use serde_json::Value;

const SEED: u64 = 0x6d65_6469_6121;
const CASES_PER_CLASS: usize = 150;
/// Fewer for the readers that cost a request and a parse of a fleet's page each.
const CASES_PER_CLASS_ANSWERS: usize = 60;
/// Fewer again where each case builds a client (its TLS configuration included).
const CASES_PER_CLASS_KUBECONFIG: usize = 40;
/// The longest error line a case may give: a huge value in the input is cut, never repeated.
const MAX_ERROR: usize = 4096;

/// The kinds of damage done to a real input.
#[derive(Clone, Copy, Debug)]
enum Class {
    /// Cut at a random byte (mid-token, mid-character).
    Truncate,
    /// A few bytes replaced by random ones, binary included.
    Flip,
    /// Structural characters of JSON and YAML inserted at random places.
    Punctuate,
    /// A random slice repeated, or moved elsewhere.
    Splice,
    /// Deep nesting inserted: `[`, `{"a":`, `- ` or indented keys, far past 128 levels.
    Nest,
    /// One value of the parsed input replaced by one of another type (null, number, string, a
    /// huge string, an array, an object), re-serialised in the seed's format.
    Retype,
    /// A random sequence of JSON and YAML tokens.
    Tokens,
    /// Random bytes, with no relation to the seed.
    Noise,
}

const CLASSES: [Class; 8] = [
    Class::Truncate,
    Class::Flip,
    Class::Punctuate,
    Class::Splice,
    Class::Nest,
    Class::Retype,
    Class::Tokens,
    Class::Noise,
];

const PUNCTUATION: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "\"",
    "'",
    "-",
    "\n",
    " ",
    "#",
    "&a",
    "*a",
    "!!str",
    "|",
    ">",
    "---",
    "...",
    "\\",
    "null",
    "~",
    "%YAML 1.2\n",
    "\t",
    "\u{feff}",
    "\u{0}",
];

/// A byte index of `text` on a character boundary, at random.
fn boundary(rng: &mut fastrand::Rng, text: &str) -> usize {
    let mut at = rng.usize(..=text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Replaces a random node of `value` (walked without recursion) by a value of another type.
fn retype(rng: &mut fastrand::Rng, value: &mut Value) {
    // A JSON pointer to a random node, a random number of levels down.
    let mut pointer = String::new();
    let mut node = &*value;
    for _ in 0..rng.usize(0..12) {
        let step = match node {
            Value::Object(map) if !map.is_empty() => {
                let (key, next) = map.iter().nth(rng.usize(..map.len())).unwrap();
                Some((key.replace('~', "~0").replace('/', "~1"), next))
            }
            Value::Array(items) if !items.is_empty() => {
                let i = rng.usize(..items.len());
                Some((i.to_string(), &items[i]))
            }
            _ => None,
        };
        let Some((key, next)) = step else { break };
        pointer.push('/');
        pointer.push_str(&key);
        node = next;
    }
    *value.pointer_mut(&pointer).expect("the pointer was walked") = match rng.usize(0..7) {
        0 => Value::Null,
        1 => Value::from(rng.i64(..)),
        2 => Value::from(rng.f64() * 1e300),
        3 => Value::from("3"),
        4 => Value::from("x".repeat(1 << 16)),
        5 => serde_json::json!([1, "a", null]),
        _ => serde_json::json!({"a": null}),
    };
}

/// One case: `seed` damaged by `class`. `yaml` says the seed's format, for [`Class::Retype`].
fn damage(rng: &mut fastrand::Rng, class: Class, seed: &str, yaml: bool) -> Vec<u8> {
    match class {
        Class::Truncate => seed.as_bytes()[..rng.usize(..=seed.len())].to_vec(),
        Class::Flip => {
            let mut bytes = seed.as_bytes().to_vec();
            for _ in 0..rng.usize(1..8) {
                let at = rng.usize(..bytes.len());
                bytes[at] = rng.u8(..);
            }
            bytes
        }
        Class::Punctuate => {
            let mut text = seed.to_string();
            for _ in 0..rng.usize(1..6) {
                let at = boundary(rng, &text);
                text.insert_str(at, PUNCTUATION[rng.usize(..PUNCTUATION.len())]);
            }
            text.into_bytes()
        }
        Class::Splice => {
            let (a, b) = (boundary(rng, seed), boundary(rng, seed));
            let (from, to) = (a.min(b), a.max(b));
            let piece = &seed[from..to];
            let mut text = seed.to_string();
            let at = boundary(rng, &text);
            for _ in 0..rng.usize(1..4) {
                text.insert_str(at, piece);
            }
            text.into_bytes()
        }
        Class::Nest => {
            let depth = rng.usize(129..20_000);
            let nest = match rng.usize(0..4) {
                0 => "[".repeat(depth),
                1 => "{\"a\":".repeat(depth),
                2 => "- ".repeat(depth),
                _ => (0..depth.min(2000))
                    .map(|i| format!("\n{}a:", " ".repeat(i)))
                    .collect(),
            };
            let mut text = seed.to_string();
            text.insert_str(boundary(rng, seed), &nest);
            text.into_bytes()
        }
        Class::Retype => {
            let mut value: Value = if yaml {
                serde_yaml::from_str(seed).expect("the seed parses")
            } else {
                serde_json::from_str(seed).expect("the seed parses")
            };
            retype(rng, &mut value);
            if yaml {
                serde_yaml::to_string(&value).unwrap().into_bytes()
            } else {
                serde_json::to_vec(&value).unwrap()
            }
        }
        Class::Tokens => {
            let tokens = [
                "{",
                "}",
                "[",
                "]",
                ":",
                ",",
                "\"a\"",
                "\"render_node\"",
                "\"kind\"",
                "\"Pod\"",
                "\"items\"",
                "1",
                "-1e999",
                "true",
                "null",
                "- ",
                "\n",
                "  ",
                "a: ",
                "---\n",
                "kind: Pod\n",
                "apiVersion: v1\n",
                "items:\n",
                "'x'",
            ];
            (0..rng.usize(0..200))
                .map(|_| tokens[rng.usize(..tokens.len())])
                .collect::<String>()
                .into_bytes()
        }
        Class::Noise => (0..rng.usize(0..4096)).map(|_| rng.u8(..)).collect(),
    }
}

/// Runs every case of every class on every seed through `read`, which says what went wrong
/// (an error's text) or nothing; checks the oracle and that the whole is bounded in time.
fn fuzz(
    seeds: &[(&str, bool)],
    cases: usize,
    read: &mut dyn FnMut(&[u8]) -> Option<String>,
    name: &str,
) {
    let mut rng = fastrand::Rng::with_seed(SEED);
    let start = Instant::now();
    let mut refused = 0;
    for (seed, yaml) in seeds {
        for class in CLASSES {
            for case in 0..cases {
                let input = damage(&mut rng, class, seed, *yaml);
                let said = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&input)))
                    .unwrap_or_else(|_| {
                        panic!(
                            "{class:?} case {case} panicked on: {:?}",
                            String::from_utf8_lossy(&input[..input.len().min(2000)])
                        )
                    });
                let Some(error) = said else { continue };
                refused += 1;
                assert!(
                    !error.contains('\n') && error.len() <= MAX_ERROR && error.contains(name),
                    "{class:?} case {case}: {:?}",
                    &error[..error.len().min(2000)]
                );
            }
        }
    }
    // Some damage leaves a readable input: most must still be refused, or the cases are no test.
    let total = seeds.len() * CLASSES.len() * cases;
    let _ = writeln!(
        std::io::stderr(),
        "fuzzed {name}: {total} cases, {refused} refused, in {:.1?}",
        start.elapsed()
    );
    assert!(refused > total / 2, "{refused} of {total} refused");
    // About 5 s unloaded in a debug build; the bound is for a hang or a blow-up, not speed.
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
}

fn docs_record() -> String {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report-format.md"),
    )
    .unwrap();
    let start = doc.find("```json\n").expect("a json block") + "```json\n".len();
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

#[test]
fn recorded_probes_reader() {
    let json = docs_record();
    let value: Value = serde_json::from_str(&json).unwrap();
    let yaml = serde_yaml::to_string(&vec![value]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("case.json");
    let name = file.display().to_string();
    fuzz(
        &[(&json, false), (&yaml, true)],
        CASES_PER_CLASS,
        &mut |input| {
            std::fs::write(&file, input).unwrap();
            read_records(&file).err().map(|e| e.to_string())
        },
        &name,
    );
}

#[test]
fn objects_reader() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let yaml = [
        "docs/examples/fleet.yaml",
        "docs/examples/why/no-gpu-qualifies.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
    .collect::<Vec<_>>()
    .join("---\n");
    let items: Vec<Value> = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    let json = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    // Retype reads the YAML seed as one document.
    let yaml_one = serde_yaml::to_string(&serde_json::from_str::<Value>(&json).unwrap()).unwrap();
    let name = "fuzzed.yaml";
    fuzz(
        &[(&yaml_one, true), (&json, false)],
        CASES_PER_CLASS,
        &mut |input| {
            // add_text takes text: bytes that are not UTF-8 come as replacement characters (the
            // refusal of binary files is tested in src/fleet/files.rs).
            let text = String::from_utf8_lossy(input);
            let mut objects = Objects::default();
            add_text(&mut objects, &text, name)
                .err()
                .map(|e| e.to_string())
        },
        name,
    );
}

/// The example fleet's ResourceSlices, as one page of a listing.
fn slices_page() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fleet: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("docs/examples/fleet.yaml")).unwrap(),
    )
    .unwrap();
    let items: Vec<&Value> = fleet["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "ResourceSlice")
        .collect();
    assert!(!items.is_empty());
    serde_json::json!({
        "kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"resourceVersion": "42"}, "items": items,
    })
    .to_string()
}

#[test]
fn api_answers_reader() {
    use crate::support::fakeapi::{FakeApi, Reply};
    use media_operator::fleet::cluster::{Cluster, Connection, ListRequest, Namespaces};
    use media_operator::fleet::objects::Kind;
    // The answer every request gets: the case's bytes, as JSON.
    let answer = Arc::new(Mutex::new(Vec::new()));
    let served = Arc::clone(&answer);
    let api = FakeApi::start(move |_, _| Reply {
        code: 200,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: served.lock().unwrap().clone(),
    });
    let dir = tempfile::tempdir().unwrap();
    let connection = Connection {
        source: media_operator::kubeconfig::Source {
            kubeconfig: Some(api.kubeconfig(dir.path())),
            context: None,
        },
        namespace: None,
        request_timeout: Some(Duration::from_secs(10)),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let cluster = runtime.block_on(Cluster::connect(&connection)).unwrap();
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","details":{"retryAfterSeconds":1},"code":500}"#;
    let page = slices_page();
    let name = api.url();
    fuzz(
        &[(&page, false), (status, false)],
        CASES_PER_CLASS_ANSWERS,
        &mut |input| {
            *answer.lock().unwrap() = input.to_vec();
            let request = ListRequest {
                kind: Kind::ResourceSlice,
                namespaces: &Namespaces::All,
                label_selector: None,
                field_selector: None,
            };
            let mut objects = Objects::default();
            runtime
                .block_on(cluster.list(&request, &mut objects))
                .err()
                .map(|e| e.to_string())
        },
        &name,
    );
}

#[test]
fn kubeconfig_reader() {
    use media_operator::fleet::cluster::{Cluster, Connection};
    let yaml = "apiVersion: v1\nkind: Config\npreferences: {}\ncurrent-context: admin@media\n\
        clusters:\n- name: media\n  cluster:\n    server: https://10.0.0.1:6443\n    \
        insecure-skip-tls-verify: true\n- name: other\n  cluster: {server: 'http://127.0.0.1:9'}\n\
        contexts:\n- name: admin@media\n  context: {cluster: media, user: admin, namespace: media}\n\
        - name: other\n  context: {cluster: other, user: other}\n\
        users:\n- name: admin\n  user: {token: abc.def}\n- name: other\n  user:\n    \
        username: u\n    password: p\n";
    let json = serde_json::to_string(&serde_yaml::from_str::<Value>(yaml).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubeconfig");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let connection = Connection {
        source: media_operator::kubeconfig::Source {
            kubeconfig: Some(file.clone()),
            context: None,
        },
        namespace: None,
        request_timeout: Some(Duration::from_secs(2)),
    };
    fuzz(
        &[(yaml, true), (&json, false)],
        CASES_PER_CLASS_KUBECONFIG,
        &mut |input| {
            std::fs::write(&file, input).unwrap();
            runtime
                .block_on(Cluster::connect(&connection))
                .err()
                .map(|e| e.to_string())
        },
        "kubeconfig",
    );
}

/// A protobuf ResourceSliceList as kube-apiserver encodes it (the `k8s\0` envelope around a
/// `runtime.Unknown`): the example fleet's slices, each device with every attribute kind.
fn protobuf_slices_page() -> Vec<u8> {
    use k8s_pb::api::resource::v1 as resource;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    use prost::Message;
    let page: Value = serde_json::from_str(&slices_page()).unwrap();
    let items = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let spec = &item["spec"];
            let devices = spec["devices"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|device| {
                    let attributes = device["attributes"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(name, value)| {
                            let attribute = resource::DeviceAttribute {
                                bool: value["bool"].as_bool(),
                                int: value["int"].as_i64(),
                                string: value["string"].as_str().map(Into::into),
                                version: value["version"].as_str().map(Into::into),
                            };
                            (name.clone(), attribute)
                        })
                        .collect();
                    resource::Device {
                        name: device["name"].as_str().map(Into::into),
                        attributes,
                        ..Default::default()
                    }
                })
                .collect();
            resource::ResourceSlice {
                metadata: Some(meta::ObjectMeta {
                    name: item["metadata"]["name"].as_str().map(Into::into),
                    ..Default::default()
                }),
                spec: Some(resource::ResourceSliceSpec {
                    driver: spec["driver"].as_str().map(Into::into),
                    node_name: spec["nodeName"].as_str().map(Into::into),
                    pool: Some(resource::ResourcePool {
                        name: spec["pool"]["name"].as_str().map(Into::into),
                        generation: spec["pool"]["generation"].as_i64(),
                        resource_slice_count: spec["pool"]["resourceSliceCount"].as_i64(),
                    }),
                    devices,
                    ..Default::default()
                }),
            }
        })
        .collect();
    let list = resource::ResourceSliceList {
        metadata: Some(meta::ListMeta {
            resource_version: Some("42".into()),
            ..Default::default()
        }),
        items,
    };
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("resource.k8s.io/v1".into()),
            kind: Some("ResourceSliceList".into()),
        }),
        raw: Some(list.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [&b"k8s\0"[..], &unknown.encode_to_vec()].concat()
}

/// Protobuf answers, damaged as bytes (the text classes above are JSON's and YAML's): cut short,
/// bits flipped, a stretch repeated or moved, noise written over a stretch, lengths stretched
/// (a varint's high bits set), each read by the listing code as a page from the API server.
#[test]
fn protobuf_answers_reader() {
    use crate::support::fakeapi::{FakeApi, Reply};
    use media_operator::fleet::cluster::{
        Cluster, Connection, ListEncoding, ListRequest, Namespaces,
    };
    use media_operator::fleet::objects::Kind;
    let answer = Arc::new(Mutex::new(Vec::new()));
    let served = Arc::clone(&answer);
    let api = FakeApi::start(move |_, _| Reply {
        code: 200,
        headers: vec![(
            "Content-Type".into(),
            "application/vnd.kubernetes.protobuf".into(),
        )],
        body: served.lock().unwrap().clone(),
    });
    let dir = tempfile::tempdir().unwrap();
    let connection = Connection {
        source: media_operator::kubeconfig::Source {
            kubeconfig: Some(api.kubeconfig(dir.path())),
            context: None,
        },
        namespace: None,
        request_timeout: Some(Duration::from_secs(10)),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut cluster = runtime.block_on(Cluster::connect(&connection)).unwrap();
    cluster.list_encoding(ListEncoding::Protobuf);
    let seed = protobuf_slices_page();
    let name = api.url();
    let read = |input: &[u8]| {
        *answer.lock().unwrap() = input.to_vec();
        let request = ListRequest {
            kind: Kind::ResourceSlice,
            namespaces: &Namespaces::All,
            label_selector: None,
            field_selector: None,
        };
        let mut objects = Objects::default();
        runtime
            .block_on(cluster.list(&request, &mut objects))
            .err()
            .map(|e| e.to_string())
    };
    // The seed itself is read: the damage, not the encoding, is what is refused below.
    assert_eq!(read(&seed), None);
    let mut rng = fastrand::Rng::with_seed(SEED);
    let start = Instant::now();
    let (mut total, mut refused) = (0, 0);
    const KINDS: usize = 5;
    for kind in 0..KINDS {
        for case in 0..CASES_PER_CLASS_ANSWERS * 2 {
            let mut input = seed.clone();
            let at = rng.usize(..input.len());
            match kind {
                0 => input.truncate(at),
                1 => {
                    for _ in 0..rng.usize(1..8) {
                        let i = rng.usize(..input.len());
                        input[i] ^= 1 << rng.u8(..8);
                    }
                }
                2 => {
                    let len = rng.usize(..(input.len() - at).min(256));
                    let stretch = input[at..at + len].to_vec();
                    let to = rng.usize(..input.len());
                    let copies = rng.usize(1..64);
                    for _ in 0..copies {
                        input.splice(to..to, stretch.iter().copied());
                    }
                }
                3 => {
                    let len = rng.usize(..(input.len() - at).min(64));
                    for byte in &mut input[at..at + len] {
                        *byte = rng.u8(..);
                    }
                }
                _ => {
                    // A length prefix stretched: five bytes of 0xff, then a varint's end.
                    input.splice(at..at, [0xff, 0xff, 0xff, 0xff, 0x0f]);
                }
            }
            total += 1;
            let said = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&input)))
                .unwrap_or_else(|_| panic!("kind {kind} case {case} panicked"));
            let Some(error) = said else { continue };
            refused += 1;
            assert!(
                !error.contains('\n') && error.len() <= MAX_ERROR && error.contains(&name),
                "kind {kind} case {case}: {:?}",
                &error[..error.len().min(2000)]
            );
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "fuzzed protobuf answers from {name}: {total} cases, {refused} refused, in {:.1?}",
        start.elapsed()
    );
    assert!(refused * 2 > total, "{refused} of {total} refused");
}
