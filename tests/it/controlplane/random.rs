//! `why` against the real scheduler on seeded random fleets (the oracle's generator): `why` judges
//! the pod while a scheduling gate holds it, then the real kube-scheduler decides. The pod must be
//! placed on a node iff `why` said allocatable there, and stay unschedulable iff it found none. All
//! cases share one cluster, each under its own names and nodes; what 1.34's API server refuses is
//! restricted ([`isolate`]), and what it drops is dropped for both alike.
//!
//! `CONTROLPLANE_FLEETS=N` changes how many fleets run, `ORACLE_SEED=S` runs only fleet S.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::ok;
use crate::oracle::fleets::generate;
use crate::support::controlplane::{self, ControlPlane};

/// Fleets a run puts into the server; each costs about a second of the cluster's time.
const FLEETS: u64 = 40;

/// The label that keeps a case's pod to its case's nodes.
const CASE_LABEL: &str = "random.liken.test/case";

/// The scheduling gate that holds a pod until `why` has judged it.
const GATE: &str = "random.liken.test/why-first";

/// How long the scheduler may take to decide on every pod of the run.
const DECIDED: Duration = Duration::from_secs(120);

const KUBECTL_MEDIA: &str = env!("CARGO_BIN_EXE_kubectl-media");

/// This test's own control plane: the cluster-wide objects of its cases must not show in the
/// other tests' listings.
fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    CP.get_or_init(|| controlplane::shared_with("random", &[]))
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One fleet, named apart from the others.
struct Case {
    seed: u64,
    /// The prefix of its names, and its namespace.
    name: String,
    /// Its Node objects, with the status of a Ready node.
    nodes: Vec<Value>,
    /// The objects to create, the claims without their status.
    objects: Vec<Value>,
    /// The claims of other pods with the allocation they hold, for the status subresource.
    held: Vec<Value>,
    pod: Value,
}

/// Fleet `seed` as a case of its own. Renamed: node `n1` is `rSEED-n1`, every pool and slice
/// gets the prefix, device names are lowercased (`renderD128` is not a DNS label), the namespace is `rSEED` (labelled for admin access, which the
/// generator's claims ask for), zone labels and the node selectors on them get the prefix,
/// and an `allNodes` slice selects its case's nodes instead (else every case's pod could take
/// its devices). Left out, as 1.34's API server refuses them with its default gates: the
/// `perDeviceNodeSelection` slice (DRAPartitionableDevices is off, so the field is dropped and
/// the slice has no placement), DeviceTaintRules (not served in resource.k8s.io/v1) and
/// `adminAccess` on sub-requests (no such field; the oracle's decoder drops it as well).
fn isolate(seed: u64) -> (Case, Vec<Value>) {
    let name = format!("r{seed}");
    let prefix = |s: &Value| json!(format!("{name}-{}", s.as_str().unwrap_or_default()));
    let mut case = Case {
        seed,
        name: name.clone(),
        nodes: Vec::new(),
        objects: vec![json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"resource.kubernetes.io/admin-access": "true"}}})],
        held: Vec::new(),
        pod: Value::Null,
    };
    let mut classes = Vec::new();
    for mut object in generate(seed) {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        // The server gives each object its uid, and refuses an update that names another.
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("uid");
        }
        match kind.as_str() {
            "Node" => {
                let zone = object["metadata"]["labels"]["zone"].as_str().unwrap_or("");
                let node = format!("{name}-{}", object["metadata"]["name"].as_str().unwrap());
                let resources = json!({"cpu": "8", "memory": "32Gi", "pods": "110"});
                case.nodes.push(json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node,
                        "zone": format!("{name}-{zone}"), CASE_LABEL: name}},
                    "status": {"capacity": resources, "allocatable": resources,
                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}));
            }
            "DeviceTaintRule" => {}
            "DeviceClass" => classes.push(object),
            "ResourceSlice" => {
                let spec = &mut object["spec"];
                if spec["perDeviceNodeSelection"] == true {
                    continue;
                }
                object["metadata"]["name"] = prefix(&object["metadata"]["name"]);
                let spec = &mut object["spec"];
                spec["pool"]["name"] = prefix(&spec["pool"]["name"]);
                for device in spec["devices"].as_array_mut().into_iter().flatten() {
                    device["name"] = lowercase(&device["name"]);
                }
                if spec.get("nodeName").is_some() {
                    spec["nodeName"] = prefix(&spec["nodeName"]);
                }
                if spec["allNodes"] == true {
                    spec.as_object_mut().unwrap().remove("allNodes");
                    spec["nodeSelector"] = json!({"nodeSelectorTerms": [{"matchExpressions":
                        [{"key": CASE_LABEL, "operator": "In", "values": [name]}]}]});
                }
                let terms = spec
                    .pointer_mut("/nodeSelector/nodeSelectorTerms")
                    .and_then(Value::as_array_mut);
                for term in terms.into_iter().flatten() {
                    for expression in term["matchExpressions"].as_array_mut().unwrap() {
                        if expression["key"] == "zone" {
                            let values = expression["values"].as_array().unwrap();
                            expression["values"] = values.iter().map(&prefix).collect();
                        }
                    }
                }
                case.objects.push(object);
            }
            "ResourceClaim" => {
                object["metadata"]["namespace"] = json!(name);
                // A sub-request has no adminAccess (the generator's Go decoder drops it too).
                let requests = object
                    .pointer_mut("/spec/devices/requests")
                    .and_then(Value::as_array_mut);
                for request in requests.into_iter().flatten() {
                    let subs = request
                        .get_mut("firstAvailable")
                        .and_then(Value::as_array_mut);
                    for sub in subs.into_iter().flatten() {
                        sub.as_object_mut().unwrap().remove("adminAccess");
                    }
                }
                let status = object.as_object_mut().unwrap().remove("status");
                if let Some(mut status) = status {
                    for result in status["allocation"]["devices"]["results"]
                        .as_array_mut()
                        .into_iter()
                        .flatten()
                    {
                        result["pool"] = prefix(&result["pool"]);
                        result["device"] = lowercase(&result["device"]);
                    }
                    let mut held = object.clone();
                    held["status"] = status;
                    case.held.push(held);
                }
                case.objects.push(object);
            }
            "Pod" => {
                object["metadata"]["namespace"] = json!(name);
                object["spec"]["nodeSelector"] = json!({CASE_LABEL: name});
                object["spec"]["schedulingGates"] = json!([{"name": GATE}]);
                case.pod = object;
            }
            other => panic!("the generator made a {other}, which this test does not place"),
        }
    }
    (case, classes)
}

/// A device name as the API server accepts it (a DNS label: `renderD128` is not one).
fn lowercase(name: &Value) -> Value {
    json!(name.as_str().unwrap_or_default().to_lowercase())
}

/// `kubectl VERB -f` on a List of `items`.
fn kubectl_file(cp: &ControlPlane, args: &[&str], items: &[Value]) {
    if items.is_empty() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(&file, list.to_string()).unwrap();
    let args: Vec<&str> = [args, &["-f", file.to_str().unwrap()]].concat();
    ok(cp.kubectl(&args));
}

/// Creates `nodes` Ready, as the harness's `node` command does (labels; capacity and the Ready
/// condition through the status subresource; the not-ready taint that admission adds on create
/// lifted), in three requests of kubectl for all of them: the harness's client is held to
/// client-go's 5 requests a second, 0.6 s a node.
fn ready_nodes(cp: &ControlPlane, nodes: &[Value]) {
    kubectl_file(cp, &["create"], nodes);
    kubectl_file(cp, &["replace", "--subresource=status"], nodes);
    ok(cp.kubectl(&[
        "taint",
        "nodes",
        "-l",
        CASE_LABEL,
        "node.kubernetes.io/not-ready:NoSchedule-",
    ]));
}

/// `run` on every case, a few processes at a time (they mostly wait for the server), the
/// results in the cases' order.
fn in_parallel<T: Send>(cases: &[Case], run: impl Fn(&Case) -> T + Sync) -> Vec<T> {
    const AT_ONCE: usize = 4;
    let chunk = cases.len().div_ceil(AT_ONCE).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = cases
            .chunks(chunk)
            .map(|chunk| scope.spawn(|| chunk.iter().map(&run).collect::<Vec<T>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// What `why` or the scheduler says of a node: the same words for both.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Allocatable,
    Unallocatable,
    Error,
}

/// What `why` said of the case's pod: its kind on each of the case's nodes, and whether it
/// noted that 1.34 tries a node's pools in no fixed order (so the scheduler may answer
/// otherwise).
struct Judged {
    nodes: BTreeMap<String, Kind>,
    unordered: bool,
    record: Value,
}

fn why(cp: &ControlPlane, case: &Case) -> Judged {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(KUBECTL_MEDIA)
        .args(["why", "p", "-n", &case.name, "-o", "json"])
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", cp.kubeconfig())
        .output()
        .unwrap();
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 3)),
        "why on fleet {}: exit {code:?}: {}",
        case.seed,
        String::from_utf8_lossy(&out.stderr)
    );
    let record: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        record["unchecked"].as_array().is_none_or(Vec::is_empty),
        "why on fleet {} left something undecided: {record:#}",
        case.seed
    );
    let ours: BTreeSet<&str> = case
        .nodes
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    let mut nodes = BTreeMap::new();
    for outcome in record["nodes"]["outcomes"].as_array().into_iter().flatten() {
        let kind = match outcome["outcome"].as_str().unwrap_or_default() {
            "Allocatable" => Kind::Allocatable,
            "Error" => Kind::Error,
            // The other cases' nodes, which the pod's node selector rules out.
            _ if outcome["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|n| !ours.contains(n.as_str().unwrap_or_default())) =>
            {
                continue;
            }
            "RequestUnsatisfied" | "Constraint" | "CannotAllocate" | "InvalidPools" => {
                Kind::Unallocatable
            }
            other => panic!(
                "why gave {other} for a node of fleet {}: {record:#}",
                case.seed
            ),
        };
        for node in outcome["nodes"].as_array().into_iter().flatten() {
            let node = node.as_str().unwrap_or_default();
            if ours.contains(node) {
                nodes.insert(node.to_owned(), kind.clone());
            }
        }
    }
    let unordered = record["notes"].as_array().is_some_and(|notes| {
        notes
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.contains("no fixed order")))
    });
    Judged {
        nodes,
        unordered,
        record,
    }
}

/// The scheduler's decision on a pod: bound to a node, unschedulable, or an error (a CEL
/// runtime error fails the attempt: `SchedulerError`).
enum Placed {
    On(String),
    Unschedulable(String),
    Failed(String),
}

impl Placed {
    fn describe(&self) -> String {
        match self {
            Placed::On(node) => format!("placed the pod on {node}"),
            Placed::Unschedulable(message) => format!("found it unschedulable: {message}"),
            Placed::Failed(message) => format!("failed the attempt: {message}"),
        }
    }
}

fn decision(pod: &Value) -> Option<Placed> {
    if let Some(node) = pod["spec"]["nodeName"].as_str() {
        return Some(Placed::On(node.to_owned()));
    }
    let condition = pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")?;
    let message = condition["message"].as_str().unwrap_or("").to_owned();
    match condition["reason"].as_str()? {
        "Unschedulable" => Some(Placed::Unschedulable(message)),
        "SchedulerError" => Some(Placed::Failed(message)),
        _ => None,
    }
}

/// Whether the scheduler's decision is the one `why` foresaw: placed on a node `why` found
/// allocatable; unschedulable where it found none allocatable and no error; an error where
/// it found one.
fn agrees(placed: &Placed, judged: &Judged) -> bool {
    let any = |kind: Kind| judged.nodes.values().any(|k| *k == kind);
    match placed {
        Placed::On(node) => judged.nodes.get(node) == Some(&Kind::Allocatable),
        Placed::Unschedulable(_) => !any(Kind::Allocatable) && !any(Kind::Error),
        Placed::Failed(_) => any(Kind::Error),
    }
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_foresees_the_real_schedulers_placement_on_random_fleets() {
    let seeds = match std::env::var("ORACLE_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        Some(seed) => seed..seed + 1,
        None => {
            let fleets = std::env::var("CONTROLPLANE_FLEETS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(FLEETS);
            0..fleets
        }
    };
    let cp = control_plane();
    let start = Instant::now();
    let mut cases = Vec::new();
    let mut classes = BTreeMap::new();
    for seed in seeds {
        let (case, its_classes) = isolate(seed);
        for class in its_classes {
            let name = class["metadata"]["name"].as_str().unwrap().to_owned();
            classes.insert(name, class);
        }
        cases.push(case);
    }
    let mut phases = Vec::new();
    let mut phase = |name: &'static str, since: &mut Instant| {
        phases.push(format!("{name} {:.1} s", since.elapsed().as_secs_f64()));
        *since = Instant::now();
    };
    let mut since = Instant::now();
    let nodes: Vec<Value> = cases.iter().flat_map(|c| c.nodes.iter().cloned()).collect();
    ready_nodes(cp, &nodes);
    phase("nodes", &mut since);
    let objects: Vec<Value> = classes
        .into_values()
        .chain(cases.iter().flat_map(|c| c.objects.iter().cloned()))
        .collect();
    kubectl_file(cp, &["create"], &objects);
    phase("objects", &mut since);
    let held: Vec<Value> = cases.iter().flat_map(|c| c.held.iter().cloned()).collect();
    kubectl_file(cp, &["replace", "--subresource=status"], &held);
    let pods: Vec<Value> = cases.iter().map(|c| c.pod.clone()).collect();
    kubectl_file(cp, &["create"], &pods);
    phase("claims' status and pods", &mut since);

    // why first, while the gate holds every pod; then the scheduler.
    let judged = in_parallel(&cases, |case| why(cp, case));
    phase("why", &mut since);
    in_parallel(&cases, |case| {
        ok(cp.kubectl(&[
            "patch",
            "pod",
            "p",
            "-n",
            &case.name,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/spec/schedulingGates"}]"#,
        ]))
    });
    let deadline = Instant::now() + DECIDED;
    let placed: BTreeMap<String, Placed> = loop {
        let pods: Value =
            serde_json::from_str(&ok(cp.kubectl(&["get", "pods", "-A", "-o", "json"]))).unwrap();
        let decided: BTreeMap<String, Placed> = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|pod| {
                let namespace = pod["metadata"]["namespace"].as_str()?.to_owned();
                Some((namespace, decision(pod)?))
            })
            .collect();
        if cases.iter().all(|c| decided.contains_key(&c.name)) {
            break decided;
        }
        assert!(
            Instant::now() < deadline,
            "the scheduler decided on {} of {} pods within {DECIDED:?}; log: {}",
            decided.len(),
            cases.len(),
            cp.log_tail()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    phase("gates lifted and scheduled", &mut since);

    let mut disagreements = Vec::new();
    let mut unordered = 0;
    let mut tally = BTreeMap::new();
    for (case, judged) in cases.iter().zip(&judged) {
        let placed = &placed[&case.name];
        *tally
            .entry(match placed {
                Placed::On(_) => "placed",
                Placed::Unschedulable(_) => "unschedulable",
                Placed::Failed(_) => "failed",
            })
            .or_insert(0) += 1;
        if agrees(placed, judged) {
            continue;
        }
        // 1.34 tries a node's pools in map order: why says so where the order matters.
        if judged.unordered {
            unordered += 1;
            continue;
        }
        disagreements.push(format!(
            "fleet {}: the scheduler {}, why {:?}\nwhy's verdict: {}",
            case.seed,
            placed.describe(),
            judged.nodes,
            judged.record["verdict"]
        ));
    }
    let seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "{} fleets in {seconds:.1} s ({:.1} per second; {}): {tally:?}; {unordered} where the pools' order decides and why says so; {} disagreements",
        cases.len(),
        cases.len() as f64 / seconds,
        phases.join(", "),
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} of {} fleets disagree; the first:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements[0]
    );
}
