//! The product document, "Claim a GPU by what it decodes", end to end on the real control plane:
//! deploy/ as shipped, the real agent on two nodes from the example fleet (`mtl-1` decodes HEVC
//! Main 10 and scales 10-bit, `gen9-1` does neither), a stand-in for liken, and what `kubectl media
//! class` writes. A test per step on each release (`on_1_34::step_…`, `on_1_37::step_…`), `why`
//! checked against the real scheduler. Each flow has its own control plane: the document needs
//! DRAConsumableCapacity, off by default in 1.34 (so turned on) and on in 1.37; gates are
//! process-global.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use super::{AGENT, NAMESPACE, install, ok};
use crate::support::agent::AgentProcess;
use crate::support::controlplane::{self, ControlPlane, Release};
use crate::support::examples::{self, EXAMPLE_DIR};
use media_operator::catalogue::{self, Attribute};

pub(super) const AGENT_BIN: &str = env!("CARGO_BIN_EXE_media-capabilities");
pub(super) const KUBECTL_MEDIA: &str = env!("CARGO_BIN_EXE_kubectl-media");

/// The GPU that decodes HEVC Main 10 and scales 10-bit frames (the document's own device).
pub(super) const QUALIFIES: &str = "mtl-1";
/// The GPU that does neither (i965 on Skylake), but decodes VC-1, which `mtl-1` does not.
pub(super) const LACKS: &str = "gen9-1";
/// Where the workloads' pods and claims live.
pub(super) const PODS: &str = "default";

/// How long a publish, a scheduling decision or a claim's allocation may take.
pub(super) const WAIT: Duration = Duration::from_secs(90);

/// The flow's control plane of `release` with everything the document's steps start from.
pub(super) fn flow(release: Release) -> &'static ControlPlane {
    static FLOW: [OnceLock<Result<ControlPlane, String>>; 2] = [const { OnceLock::new() }; 2];
    FLOW[release as usize]
        .get_or_init(|| {
            let name = format!("flow-{}", release.name());
            match release {
                Release::V1_34 => prepared(
                    release,
                    &name,
                    &["--feature-gates", "DRAConsumableCapacity=true"],
                ),
                // On by default from 1.36 (beta).
                Release::V1_37 => prepared(release, &name, &[]),
            }
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The same on 1.34's default gates, where the API server drops `allowMultipleAllocations`.
pub(super) fn flow_without_the_gate() -> &'static ControlPlane {
    static FLOW: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    FLOW.get_or_init(|| prepared(Release::V1_34, "gate-off", &[]))
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn prepared(release: Release, name: &str, flags: &[&str]) -> Result<ControlPlane, String> {
    let cp = controlplane::shared_with_on(release, name, flags)?;
    install(&cp);
    for node in [QUALIFIES, LACKS] {
        cp.node(node, &[]);
        publish_with_the_agent(&cp, node);
        stand_in_for_liken(&cp, node);
    }
    apply_classes(&cp);
    Ok(cp)
}

pub(super) fn reports(node: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(EXAMPLE_DIR)
        .join(node)
}

/// Runs the real agent on `node` with its recorded reports and a token bound to a pod on that
/// node, until its slice is stored. It is then stopped with SIGKILL: the slice stays (owned by
/// the Node), and the scheduler reads only the slice.
fn publish_with_the_agent(cp: &ControlPlane, node: &str) {
    drop(publish_with_the_agent_from(cp, node, &reports(node), &[]));
}

/// Runs the real agent on `node` with the recorded reports in `reports`, `extra` flags and a
/// token bound to a pod on that node, until its slice is stored; returns it running (its
/// kubeconfig's directory lives as long as the process).
pub(super) fn publish_with_the_agent_from(
    cp: &ControlPlane,
    node: &str,
    reports: &Path,
    extra: &[&str],
) -> (AgentProcess, tempfile::TempDir) {
    let token = cp.token(NAMESPACE, AGENT, &format!("{AGENT}-{node}"), node);
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("agent.kubeconfig");
    cp.token_kubeconfig(&token, &kubeconfig);
    let agent = AgentProcess::start(AGENT_BIN, node, reports, &kubeconfig, extra);
    let name = format!("{node}-{}", catalogue::DRIVER);
    wait(&format!("the agent on {node} publishes {name}"), || {
        let out = cp.kubectl(&["get", "resourceslice", &name, "-o", "json"]);
        out.status.success().then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}; agent log:\n{}", agent.log.lines().join("\n")));
    // The shipped ClusterRole and policy let it do all it tried.
    let refused: Vec<String> = agent
        .log
        .lines()
        .into_iter()
        .filter(|l| l.contains("refused"))
        .collect();
    assert!(refused.is_empty(), "the agent on {node}: {refused:#?}");
    (agent, home)
}

/// liken's slice of `node`'s render nodes (not ours to ship), created as its driver would,
/// owned by the Node (the example's made-up uid would have the garbage collector delete it).
fn stand_in_for_liken(cp: &ControlPlane, node: &str) {
    let probed = media_operator::agent::probing::read_records(&reports(node)).unwrap();
    let render_nodes: Vec<(String, String)> = probed
        .iter()
        .map(|p| (p.render_node.display().to_string(), p.pci.address.clone()))
        .collect();
    let mut slice = examples::liken_slice(node, &render_nodes);
    slice["metadata"]["ownerReferences"][0]["uid"] =
        get(cp, &["node", node])["metadata"]["uid"].clone();
    apply(cp, &slice.to_string());
}

/// `kubectl media class ARGS`, the YAML it writes.
pub(super) fn class(args: &[&str]) -> String {
    let out = Command::new(KUBECTL_MEDIA)
        .arg("class")
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    ok(out)
}

/// The classes and templates of the document, as `kubectl media class` writes them.
fn apply_classes(cp: &ControlPlane) {
    // Step 2 and 3: decode-10bit with its claim template.
    apply(
        cp,
        &class(&[
            "decode-10bit",
            "--decode",
            "HEVCMain10",
            "--scale",
            "10bit",
            "--claim",
        ]),
    );
    // Step 4: the document's selector on media-gpu (with the classes gpu-render and
    // media-gpu), and one that only gen9-1 satisfies.
    let vp9 = [
        "--decode",
        "VP9",
        "--scale",
        "8bit",
        "--selector",
        "--with-base-class",
    ];
    apply(
        cp,
        &class(&[&["vp9-8bit", "--with-render-class"][..], &vp9[..]].concat()),
    );
    apply(cp, &class(&["vc1", "--decode", "VC1", "--selector"]));
    // Step 5: a selector on decode-10bit asks for VC-1 too, which no GPU states with 10-bit.
    apply(
        cp,
        &class(&[
            "hevc10-vc1",
            "--decode",
            "VC1",
            "--selector",
            "--base-class",
            "decode-10bit",
        ]),
    );
    // Step 5's fallback, and step 2's probes: one request on one class.
    for class in ["gpu-render", "decode-10bit", "media-gpu"] {
        apply(cp, &single_request_template(class).to_string());
    }
}

fn single_request_template(class: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": format!("only-{class}"), "namespace": PODS},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": class}}
        ]}}},
    })
}

pub(super) fn apply(cp: &ControlPlane, text: &str) {
    apply_in(cp, PODS, text);
}

/// `kubectl apply` of `text`, its namespaced objects in `namespace`.
pub(super) fn apply_in(cp: &ControlPlane, namespace: &str, text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, text).unwrap();
    ok(cp.kubectl(&["apply", "-n", namespace, "-f", file.to_str().unwrap()]));
}

pub(super) fn get(cp: &ControlPlane, args: &[&str]) -> Value {
    let args: Vec<&str> = [&["get"][..], args, &["-o", "json"]].concat();
    serde_json::from_str(&ok(cp.kubectl(&args))).unwrap()
}

/// Polls `check` until it gives a value, for at most [`WAIT`].
pub(super) fn wait<T>(what: &str, check: impl FnMut() -> Option<T>) -> Result<T, String> {
    crate::controlplane::poll(what, WAIT, check)
}

// --- pods ---------------------------------------------------------------------------------------

/// The document's pod: one claim from `template`, optionally kept to `node` (step 2's probes).
pub(super) fn create_pod(cp: &ControlPlane, name: &str, template: &str, node: Option<&str>) {
    create_pod_in(cp, PODS, name, template, node);
}

/// [`create_pod`] in `namespace`.
pub(super) fn create_pod_in(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
    template: &str,
    node: Option<&str>,
) {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{
                "name": "worker",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": [{"name": "gpu"}]},
            }],
        },
    });
    if let Some(node) = node {
        pod["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    apply_in(cp, namespace, &pod.to_string());
}

/// Where the scheduler put a pod: bound to a node, or found unschedulable.
#[derive(Debug, PartialEq)]
pub(super) enum Placed {
    On(String),
    Pending(String),
}

/// Waits for the scheduler's decision on `pod`.
pub(super) fn placed(cp: &ControlPlane, pod: &str) -> Placed {
    placed_in(cp, PODS, pod)
}

/// [`placed`] for a pod in `namespace`.
pub(super) fn placed_in(cp: &ControlPlane, namespace: &str, pod: &str) -> Placed {
    wait(&format!("the scheduler decides on {pod}"), || {
        let pod = get(cp, &["pod", "-n", namespace, pod]);
        if let Some(node) = pod["spec"]["nodeName"].as_str() {
            return Some(Placed::On(node.to_string()));
        }
        let conditions = pod["status"]["conditions"].as_array()?;
        conditions
            .iter()
            .find(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
            .map(|c| Placed::Pending(c["message"].as_str().unwrap_or("").to_string()))
    })
    .unwrap_or_else(|e| panic!("{e}; log: {}", cp.log_tail()))
}

/// The allocated claim of `pod`'s claim `gpu`.
pub(super) fn claim_of(cp: &ControlPlane, pod: &str) -> Value {
    claim_of_in(cp, PODS, pod)
}

/// [`claim_of`] for a pod in `namespace`.
pub(super) fn claim_of_in(cp: &ControlPlane, namespace: &str, pod: &str) -> Value {
    let p = get(cp, &["pod", "-n", namespace, pod]);
    let name = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .unwrap_or_else(|| panic!("{pod} has no claim: {p}"))
        .to_string();
    wait(&format!("claim {name} is allocated"), || {
        let claim = get(cp, &["resourceclaim", "-n", namespace, &name]);
        claim["status"]["allocation"].is_object().then_some(claim)
    })
    .unwrap()
}

/// The allocation's results as (request, driver, pool, device).
pub(super) fn results(claim: &Value) -> Vec<(String, String, String, String)> {
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("request"), s("driver"), s("pool"), s("device"))
        })
        .collect()
}

/// A device's `pciBusID`, as its slice states it.
pub(super) fn pci_bus_id(cp: &ControlPlane, driver: &str, pool: &str, device: &str) -> String {
    stored_device(cp, driver, pool, device)["attributes"][catalogue::PCI_BUS_ID]["string"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A device as the server stores it, found in the slices of `driver`'s pool `pool`.
pub(super) fn stored_device(cp: &ControlPlane, driver: &str, pool: &str, device: &str) -> Value {
    let slices = get(cp, &["resourceslices"]);
    slices["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["spec"]["driver"] == driver && s["spec"]["pool"]["name"] == pool)
        .flat_map(|s| s["spec"]["devices"].as_array().into_iter().flatten())
        .find(|d| d["name"] == device)
        .unwrap_or_else(|| panic!("no device {device} in pool {pool} of {driver}"))
        .clone()
}

/// The scheduler's FailedScheduling messages for `pod`, as it wrote them.
fn scheduler_events(cp: &ControlPlane, pod: &str) -> Vec<String> {
    scheduler_events_in(cp, PODS, pod)
}

/// [`scheduler_events`] for a pod in `namespace`.
pub(super) fn scheduler_events_in(cp: &ControlPlane, namespace: &str, pod: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={pod},reason=FailedScheduling");
    let events = get(
        cp,
        &["events", "-n", namespace, "--field-selector", &selector],
    );
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}

/// `kubectl media why POD -o json` against the flow's server: (exit code, diagnosis).
fn why(cp: &ControlPlane, pod: &str) -> (i32, Value) {
    why_in(cp, PODS, pod)
}

/// [`why`] for a pod in `namespace`.
pub(super) fn why_in(cp: &ControlPlane, namespace: &str, pod: &str) -> (i32, Value) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(KUBECTL_MEDIA)
        .args(["why", pod, "-n", namespace, "-o", "json"])
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", cp.kubeconfig())
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    let diagnosis = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "why {pod}: exit {code}, {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, diagnosis)
}

/// The requests of every claim `why` diagnosed.
fn requests(diagnosis: &Value) -> impl Iterator<Item = &Value> {
    diagnosis["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["requests"].as_array().into_iter().flatten())
}

/// `why` agrees with the scheduler: exit 0 for a placed pod; for a pending one exit 3, blocked,
/// and the scheduler's events quoted as it wrote them.
fn why_agrees(cp: &ControlPlane, pod: &str, placed: &Placed) {
    why_agrees_in(cp, PODS, pod, placed, Devices::Shared);
}

/// How the devices a test's pods claim are allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Devices {
    /// Shareable, and the scheduler shares them (the flow's, with DRAConsumableCapacity).
    Shared,
    /// Held by one claim at a time (the vendors' GPUs; media devices on 1.34's default gates).
    Exclusive,
}

/// [`why_agrees`] for a pod in `namespace`, whose devices are `devices`.
pub(super) fn why_agrees_in(
    cp: &ControlPlane,
    namespace: &str,
    pod: &str,
    placed: &Placed,
    devices: Devices,
) {
    // Read first: the scheduler may add an event while why runs, never remove one.
    let events = scheduler_events_in(cp, namespace, pod);
    let (code, diagnosis) = why_in(cp, namespace, pod);
    match placed {
        Placed::On(_) => assert_eq!(code, 0, "why {pod} on a placed pod: {diagnosis:#}"),
        Placed::Pending(_) => {
            assert_eq!(code, 3, "why {pod} on a pending pod: {diagnosis:#}");
            assert_eq!(diagnosis["blocked"], true, "{diagnosis:#}");
            let quoted: Vec<&str> = diagnosis["scheduler"]["events"]
                .as_array()
                .map(|events| {
                    events
                        .iter()
                        .filter_map(|e| e["message"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            let taken: Vec<&Value> = requests(&diagnosis)
                .flat_map(|r| r["reasons"].as_array().into_iter().flatten())
                .filter(|reason| reason["reason"] == "Taken")
                .collect();
            match devices {
                // The scheduler shares every device of the flow (step 3): a reason "taken"
                // would be why's, not the scheduler's.
                Devices::Shared => assert!(taken.is_empty(), "why {pod}: {diagnosis:#}"),
                // Each claim why says holds a device is one the server has allocated (claims
                // are only added meanwhile, so reading them after why is enough).
                Devices::Exclusive => {
                    let allocated = super::claims::allocated(cp);
                    for claim in taken
                        .iter()
                        .flat_map(|r| r["claims"].as_array().into_iter().flatten())
                    {
                        assert!(
                            allocated.iter().any(|(c, ..)| claim == c.as_str()),
                            "why {pod}: {claim} holds no device: {diagnosis:#}"
                        );
                    }
                }
            }
            assert!(
                !events.is_empty() && events.iter().all(|e| quoted.contains(&e.as_str())),
                "why quotes {quoted:?}, the scheduler wrote {events:?}"
            );
        }
    }
}

// --- the document's steps -----------------------------------------------------------------------

super::on_each_release!(
    step_1_kubectl_get_resourceslices_shows_each_gpu_with_every_attribute,
    step_2_the_classes_select_what_they_should,
    step_3_a_decode_10bit_pod_lands_on_the_gpu_that_qualifies_and_two_pods_share_it,
    step_4_a_requests_own_selector_narrows_the_class,
    step_5_a_pod_asking_what_no_gpu_states_stays_pending_and_the_fallback_is_allocated,
);

fn step_1_kubectl_get_resourceslices_shows_each_gpu_with_every_attribute(release: Release) {
    let cp = flow(release);
    let listed = ok(cp.kubectl(&["get", "resourceslices"]));
    for node in [QUALIFIES, LACKS] {
        for driver in [
            catalogue::DRIVER,
            media_operator::render_drivers::LIKEN.name,
        ] {
            let name = format!("{node}-{driver}");
            assert!(
                listed
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(&name)),
                "{name} not in:\n{listed}"
            );
        }
        // What the server stores is what the agent's own code makes of the node's reports.
        let yaml = ok(cp.kubectl(&[
            "get",
            "resourceslice",
            &format!("{node}-{}", catalogue::DRIVER),
            "-o",
            "yaml",
        ]));
        let stored: Value = serde_yaml::from_str(&yaml).unwrap();
        let probed = media_operator::agent::probing::read_records(&reports(node)).unwrap();
        let desired = examples::media_slice(node, &probed);
        assert_eq!(
            stored["spec"]["devices"], desired["spec"]["devices"],
            "{node}"
        );
        for device in stored["spec"]["devices"].as_array().unwrap() {
            assert_eq!(device["allowMultipleAllocations"], true, "{device}");
            for attribute in Attribute::all() {
                let kind = attribute.kind().as_str();
                let value = &device["attributes"][attribute.name()][kind];
                assert!(
                    value.is_string() || value.is_boolean(),
                    "{node}: no {kind} {} in {device}",
                    attribute.name()
                );
            }
        }
    }
}

fn step_2_the_classes_select_what_they_should(release: Release) {
    let cp = flow(release);
    // One pod per class and node, kept to the node: placed exactly where the class selects.
    let expected = [
        ("decode-10bit", QUALIFIES, true),
        ("decode-10bit", LACKS, false),
        ("gpu-render", QUALIFIES, true),
        ("gpu-render", LACKS, true),
        ("media-gpu", QUALIFIES, true),
        ("media-gpu", LACKS, true),
    ];
    for (class, node, _) in expected {
        create_pod(
            cp,
            &format!("step2-{class}-{node}"),
            &format!("only-{class}"),
            Some(node),
        );
    }
    for (class, node, selects) in expected {
        let pod = format!("step2-{class}-{node}");
        let placed = placed(cp, &pod);
        match selects {
            true => assert_eq!(placed, Placed::On(node.to_string()), "{pod}"),
            false => assert!(matches!(placed, Placed::Pending(_)), "{pod}: {placed:?}"),
        }
        why_agrees(cp, &pod, &placed);
    }
}

fn step_3_a_decode_10bit_pod_lands_on_the_gpu_that_qualifies_and_two_pods_share_it(
    release: Release,
) {
    let cp = flow(release);
    let pods = ["step3-film-a", "step3-film-b"];
    for pod in pods {
        create_pod(cp, pod, "decode-10bit", None);
    }
    let mut allocated = Vec::new();
    for pod in pods {
        let placed = placed(cp, pod);
        assert_eq!(placed, Placed::On(QUALIFIES.to_string()), "{pod}");
        let results = results(&claim_of(cp, pod));
        assert_eq!(results.len(), 2, "{results:?}");
        let gpu = &results[0];
        let decodes = &results[1];
        assert_eq!(
            (gpu.0.as_str(), gpu.1.as_str()),
            ("gpu", media_operator::render_drivers::LIKEN.name),
            "{results:?}"
        );
        assert_eq!(
            (decodes.0.as_str(), decodes.1.as_str()),
            ("decodes", catalogue::DRIVER),
            "{results:?}"
        );
        assert_eq!(
            pci_bus_id(cp, &gpu.1, &gpu.2, &gpu.3),
            pci_bus_id(cp, &decodes.1, &decodes.2, &decodes.3),
            "{results:?}"
        );
        why_agrees(cp, pod, &placed);
        allocated.push(results);
    }
    // Both claims hold the same render node and media device at once.
    assert_eq!(allocated[0], allocated[1]);
}

fn step_4_a_requests_own_selector_narrows_the_class(release: Release) {
    let cp = flow(release);
    // media-gpu selects both GPUs; the document's selector (VP9, 8-bit) leaves mtl-1, and one
    // asking for VC-1 leaves gen9-1.
    let expected = [
        ("step4-vp9", "vp9-8bit", QUALIFIES),
        ("step4-vc1", "vc1", LACKS),
    ];
    for (pod, template, _) in expected {
        create_pod(cp, pod, template, None);
    }
    for (pod, _, node) in expected {
        let placed = placed(cp, pod);
        assert_eq!(placed, Placed::On(node.to_string()), "{pod}");
        let results = results(&claim_of(cp, pod));
        assert!(results.iter().all(|r| r.2 == node), "{results:?}");
        why_agrees(cp, pod, &placed);
    }
}

fn step_5_a_pod_asking_what_no_gpu_states_stays_pending_and_the_fallback_is_allocated(
    release: Release,
) {
    let cp = flow(release);
    create_pod(cp, "step5-film", "hevc10-vc1", None);
    create_pod(cp, "step5-fallback", "only-gpu-render", None);

    let pending = placed(cp, "step5-film");
    assert!(matches!(pending, Placed::Pending(_)), "{pending:?}");
    let events = wait("the scheduler's event", || {
        let events = scheduler_events(cp, "step5-film");
        (!events.is_empty()).then_some(events)
    })
    .unwrap();
    // The document says the events name the claim; the scheduler (1.34 and 1.37 alike) writes
    // only a count of nodes: "0/2 nodes are available: 2 cannot allocate all claims. ...".
    assert!(
        events
            .iter()
            .all(|e| e.starts_with("0/2 nodes are available: 2 cannot allocate all claims.")),
        "{events:?}"
    );
    let described = ok(cp.kubectl(&["describe", "pod", "-n", PODS, "step5-film"]));
    for event in &events {
        assert!(
            described
                .lines()
                .any(|l| l.contains("FailedScheduling") && l.contains(event.as_str())),
            "{event:?} not in:\n{described}"
        );
    }
    why_agrees(cp, "step5-film", &pending);
    // The render node is free to share on both GPUs; the media device is what no GPU states.
    let (_, diagnosis) = why(cp, "step5-film");
    let available: Vec<(&str, i64)> = requests(&diagnosis)
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["available"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(available, [("gpu", 2), ("decodes", 0)], "{diagnosis:#}");
    // 1.34's defaults have the gate off: why read it from what the server stored. 1.37's
    // have it on, so why takes it from the release and says nothing.
    let notes = diagnosis["notes"].as_array().unwrap();
    let assumed = notes.iter().any(|n| {
        n["code"] == "ConsumableCapacityAssumed"
            && n["sentence"]
                .as_str()
                .unwrap()
                .starts_with("DRAConsumableCapacity taken as on")
    });
    assert_eq!(assumed, release == Release::V1_34, "{notes:?}");

    let fallback = placed(cp, "step5-fallback");
    assert!(matches!(fallback, Placed::On(_)), "{fallback:?}");
    let results = results(&claim_of(cp, "step5-fallback"));
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        results[0].1,
        media_operator::render_drivers::LIKEN.name,
        "{results:?}"
    );
    why_agrees(cp, "step5-fallback", &fallback);
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn caps_prints_the_same_from_the_server_as_from_saved_objects() {
    let cp = flow(Release::V1_34);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("saved.yaml");
    let caps = |args: &[&str]| -> Output {
        Command::new(KUBECTL_MEDIA)
            .arg("caps")
            .args(args)
            .env_clear()
            .env("HOME", dir.path())
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200")
            .env("KUBECONFIG", cp.kubeconfig())
            .output()
            .unwrap()
    };
    // caps counts the claims that hold each GPU, and the other tests of the flow allocate claims
    // meanwhile: the comparison counts only on a moment when the claims stood still.
    for _ in 0..20 {
        let before = super::claims::allocated(cp);
        let saved = ok(cp.kubectl(&[
            "get",
            "resourceslices,pods,resourceclaims",
            "-A",
            "-o",
            "yaml",
        ]));
        std::fs::write(&file, saved).unwrap();
        let mut compared = Vec::new();
        for output in [&[][..], &["-o", "wide"][..], &["-o", "yaml"][..]] {
            let live = ok(caps(output));
            let from_file = ok(caps(
                &[output, &["-f", file.to_str().unwrap()][..]].concat(),
            ));
            compared.push((output, live, from_file));
        }
        if super::claims::allocated(cp) != before {
            continue;
        }
        for (output, live, from_file) in compared {
            assert_eq!(live, from_file, "caps {output:?}");
            for node in [QUALIFIES, LACKS] {
                assert!(live.contains(node), "{node} not in:\n{live}");
            }
        }
        return;
    }
    panic!("the claims never stood still for one comparison");
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn step_3_without_the_gate_on_1_34_a_second_pod_cannot_share_the_gpu_and_why_says_so() {
    let cp = flow_without_the_gate();
    let stored = get(
        cp,
        &[
            "resourceslice",
            &format!("{QUALIFIES}-{}", catalogue::DRIVER),
        ],
    );
    assert!(
        stored["spec"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d.get("allowMultipleAllocations").is_none()),
        "the server kept allowMultipleAllocations: {stored}"
    );
    create_pod(cp, "gate-off-film-a", "decode-10bit", None);
    let first = placed(cp, "gate-off-film-a");
    assert_eq!(first, Placed::On(QUALIFIES.to_string()));
    why_agrees(cp, "gate-off-film-a", &first);
    create_pod(cp, "gate-off-film-b", "decode-10bit", None);
    let pending = placed(cp, "gate-off-film-b");
    assert!(matches!(pending, Placed::Pending(_)), "{pending:?}");

    let events = scheduler_events(cp, "gate-off-film-b");
    let (code, diagnosis) = why(cp, "gate-off-film-b");
    assert_eq!(code, 3, "{diagnosis:#}");
    let quoted: Vec<&str> = diagnosis["scheduler"]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        events.iter().all(|e| quoted.contains(&e.as_str())),
        "{quoted:?} {events:?}"
    );
    // The devices are exclusive here, and gate-off-film-a's claim holds mtl-1's.
    let taken: Vec<&Value> = requests(&diagnosis)
        .flat_map(|r| r["reasons"].as_array().into_iter().flatten())
        .filter(|reason| reason["reason"] == "Taken")
        .collect();
    assert!(!taken.is_empty(), "{diagnosis:#}");
    let notes = diagnosis["notes"].as_array().unwrap();
    assert!(
        !notes
            .iter()
            .any(|n| n["code"] == "ConsumableCapacityAssumed"),
        "{notes:?}"
    );
}
