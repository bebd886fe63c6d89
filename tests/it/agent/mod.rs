//! The whole agent on the real control plane: the real `media-capabilities` with recorded reports,
//! a pod-bound token, kubelet sockets in a temp dir and a tonic client as the kubelet; one control
//! plane shared, a node per test (the test that stops the API server has its own). What the agent
//! asked and was answered is read from the server's audit log, never its counters; answers the
//! server cannot give on cue come from support/faultproxy.rs. Tests wait for events, never for a
//! fixed time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::agent::{AgentProcess, FAST, set_gpu_index, write_fleet, write_record};
use crate::support::audit::{Audit, Event};
use crate::support::controlplane::{self, ControlPlane};
use crate::support::faultproxy::{Fault, FaultProxy};
use crate::support::kube::{Kube, path};
use crate::support::kubelet::{channel, claims, prepare_and_unprepare};
use media_operator::agent::kubelet::proto::dra::{v1, v1beta1};
use media_operator::agent::kubelet::proto::pluginregistration::{
    InfoRequest, RegistrationStatus, registration_client::RegistrationClient,
};
use media_operator::catalogue::{Attribute, DRIVER};
use serde_json::{Value, json};

const AGENT: &str = env!("CARGO_BIN_EXE_media-capabilities");
/// How long any awaited event may take before the test fails (the control plane shares two
/// cores with everything else).
const DEADLINE: Duration = Duration::from_secs(60);
/// The agents' service accounts live here, one per node, each bound to the shipped ClusterRole.
const NAMESPACE: &str = "agent-tests";

/// The control plane these tests share: DRAConsumableCapacity on (else the API server drops
/// `allowMultipleAllocations`), DRADeviceTaints on (else it drops the failed GPUs' taints; on
/// 1.34 the scheduler then waits for DeviceTaintRules, served in resource.k8s.io/v1alpha3) and
/// MutatingAdmissionPolicy (beta in 1.34, off by default).
pub(crate) fn cluster() -> &'static ControlPlane {
    static CLUSTER: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            let cp = controlplane::shared_with(
                "agent",
                &[
                    "--feature-gates",
                    "DRAConsumableCapacity=true,DRADeviceTaints=true,MutatingAdmissionPolicy=true",
                    "--runtime-config",
                    "admissionregistration.k8s.io/v1beta1=true,resource.k8s.io/v1alpha3=true",
                ],
            )?;
            prepare(&cp);
            Ok(cp)
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The process's default control plane (1.34's default gates), prepared for agents.
pub(crate) fn default_cluster() -> &'static ControlPlane {
    static PREPARED: OnceLock<()> = OnceLock::new();
    let cp = controlplane::shared();
    PREPARED.get_or_init(|| prepare(cp));
    cp
}

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The agents' namespace, and the shipped ClusterRole (deploy/base/rbac.yaml) bound to every service
/// account in it: the agent meets every fault with the permissions it ships with.
fn prepare(cp: &ControlPlane) {
    ok(cp.kubectl(&["create", "namespace", NAMESPACE]));
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/rbac.yaml");
    let text = std::fs::read_to_string(rbac).unwrap();
    let role: Value = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|d: &Value| d["kind"] == "ClusterRole")
        .expect("the ClusterRole");
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": format!("system:serviceaccounts:{NAMESPACE}")}]
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rbac.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [role, binding]});
    std::fs::write(&file, list.to_string()).unwrap();
    ok(cp.kubectl(&["apply", "-f", file.to_str().unwrap()]));
}

/// A node of its own on a control plane, with a reports directory of `gpus` recorded GPUs and
/// a kubeconfig whose token is bound to a pod on that node.
pub(crate) struct Setup<'a> {
    pub cp: &'a ControlPlane,
    pub kube: Kube,
    pub node: String,
    pub slice_name: String,
    pub reports: tempfile::TempDir,
    pub node_uid: String,
    /// The agent's requests, from before it starts.
    pub audit: Audit,
    pub kubeconfig: PathBuf,
    _home: tempfile::TempDir,
}

/// A test's node on the shared control plane.
pub(crate) fn setup(node: &str, gpus: usize) -> Setup<'static> {
    Setup::on(cluster(), node, gpus)
}

impl<'a> Setup<'a> {
    pub fn on(cp: &'a ControlPlane, node: &str, gpus: usize) -> Setup<'a> {
        let kube = Kube::new(cp.kubeconfig());
        cp.node(node, &[]);
        let node_uid = kube.get(&path("nodes", Some(node))).expect("the Node")["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_string();
        let token = cp.token(NAMESPACE, node, &format!("agent-{node}"), node);
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = home.path().join("agent.kubeconfig");
        cp.token_kubeconfig(&token, &kubeconfig);
        let reports = tempfile::tempdir().expect("reports dir");
        write_fleet(reports.path(), gpus);
        Setup {
            cp,
            audit: Audit::follow(
                cp.audit_log(),
                &format!("system:serviceaccount:{NAMESPACE}:{node}"),
            ),
            kube,
            node: node.to_string(),
            slice_name: format!("{node}-{DRIVER}"),
            reports,
            node_uid,
            kubeconfig,
            _home: home,
        }
    }

    fn start(&self, extra: &[&str]) -> AgentProcess {
        self.start_with_kubeconfig(&self.kubeconfig, extra)
    }

    fn start_with_kubeconfig(&self, kubeconfig: &Path, extra: &[&str]) -> AgentProcess {
        let args: Vec<&str> = FAST.iter().chain(extra).copied().collect();
        AgentProcess::start(AGENT, &self.node, self.reports.path(), kubeconfig, &args)
    }

    /// A fault proxy in front of the server, and a kubeconfig of the agent's that goes through it.
    fn proxy(&self) -> (FaultProxy, PathBuf) {
        let proxy = FaultProxy::start(self.cp);
        let through = proxy.through(&self.kubeconfig);
        (proxy, through)
    }

    fn slice_path(&self) -> String {
        path("resourceslices", Some(&self.slice_name))
    }

    pub(crate) fn slice(&self) -> Option<Value> {
        self.kube.get(&self.slice_path())
    }

    /// A GPU appears on the node: the recorded report `example` of the example fleet, as GPU
    /// number `index`.
    fn add_gpu(&self, example: usize, index: usize) {
        let mut record = crate::support::agent::example_records()[example].clone();
        set_gpu_index(&mut record, index);
        write_record(self.reports.path(), &record);
    }

    /// The agent's writes of ResourceSlices after `mark`, as the server logged them.
    pub(crate) fn slice_writes(&self, mark: usize) -> Vec<Event> {
        self.audit
            .since(mark)
            .into_iter()
            .filter(|e| e.is_write() && e.resource == "resourceslices")
            .collect()
    }

    /// Waits until the stored slice satisfies `cond` and every write that led there is in the
    /// audit log; returns it. Each successful write of the agent bumps the pool generation by
    /// one from 1 (the tests' own edits keep it), so the agent's successful writes must number
    /// exactly the generation: no write is hidden, and none was wasted.
    pub(crate) fn wait_slice(&self, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(slice) = self.slice() {
                let written = self
                    .audit
                    .events()
                    .iter()
                    .filter(|e| {
                        e.is_write()
                            && e.verb != "delete"
                            && e.resource == "resourceslices"
                            && e.ok()
                    })
                    .count();
                if cond(&slice) && i64::try_from(written) == Ok(generation(&slice)) {
                    return slice;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {DEADLINE:?}; slice: {:#?}; the agent's writes: {:#?}",
                self.slice(),
                self.slice_writes(0)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the agent has read its slice `n` more times (its resync period), so that
    /// every reconcile period in between has passed.
    fn wait_resyncs(&self, mark: usize, n: usize) {
        self.audit
            .wait_until(DEADLINE, |events| {
                events[mark.min(events.len())..]
                    .iter()
                    .filter(|e| self.is_slice_get(e))
                    .count()
                    >= n
            })
            .expect("the agent keeps re-reading its slice");
    }

    fn is_slice_get(&self, e: &Event) -> bool {
        e.verb == "get" && e.is_complete() && e.name == self.slice_name
    }

    /// Deletes the agent's slice as another user would.
    fn delete_slice(&self) {
        assert!(self.kube.delete(&self.slice_path()), "no slice to delete");
    }
}

fn generation(slice: &Value) -> i64 {
    slice["spec"]["pool"]["generation"]
        .as_i64()
        .expect("generation")
}

fn devices(slice: &Value) -> &Vec<Value> {
    slice["spec"]["devices"].as_array().expect("devices")
}

/// The value of a metric line `name value`.
fn metric(agent: &AgentProcess, name: &str) -> f64 {
    agent.metric(name)
}

/// Polls `cond` until it holds; fails with `what` after [`DEADLINE`].
fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// --- the kubelet stand-in -------------------------------------------------------------------

/// Plays the kubelet's plugin watcher: GetInfo, then NotifyRegistrationStatus with `error`
/// (registered when empty). Returns the endpoint the plugin handed over.
async fn kubelet_registers(agent: &AgentProcess, error: &str) -> String {
    let mut client = RegistrationClient::new(channel(&agent.registration_socket()).await);
    let info = client
        .get_info(InfoRequest {})
        .await
        .expect("GetInfo")
        .into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, DRIVER);
    assert_eq!(
        info.supported_versions,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ]
    );
    client
        .notify_registration_status(RegistrationStatus {
            plugin_registered: error.is_empty(),
            error: error.to_string(),
        })
        .await
        .expect("NotifyRegistrationStatus");
    info.endpoint
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A test on the control plane: skipped where Go or kubectl is missing.
macro_rules! cp_test {
    ($(#[$meta:meta])* fn $name:ident() $body:block) => {
        #[test]
        #[cfg_attr(
            not(all(have_go, have_kubectl)),
            ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
        )]
        $(#[$meta])*
        fn $name() $body
    };
}

// The macro above is in scope from here on: the fault and taint tests use it too.
mod faults;
mod log;
mod paging;
mod taints;

// --- publishing -------------------------------------------------------------------------------

cp_test! {
fn first_publish_has_every_gpu_and_attribute_and_the_node_as_owner() {
    let s = setup("first-publish", 8);
    let agent = s.start(&[]);
    let slice = s.wait_slice("first publish", |_| true);

    assert_eq!(slice["spec"]["driver"], DRIVER);
    assert_eq!(slice["spec"]["nodeName"], s.node.as_str());
    assert_eq!(slice["spec"]["pool"]["name"], s.node.as_str());
    assert_eq!(slice["spec"]["pool"]["resourceSliceCount"], 1);
    assert_eq!(generation(&slice), 1);
    assert_eq!(
        slice["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": s.node, "uid": s.node_uid, "controller": true}])
    );
    let devices = devices(&slice);
    assert_eq!(devices.len(), 8);
    let names: BTreeSet<&str> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 8, "one device per GPU: {names:?}");
    let mut without_driver = Vec::new();
    for device in devices {
        assert_eq!(device["allowMultipleAllocations"], true, "{device}");
        let attributes = device["attributes"].as_object().expect("attributes");
        for attribute in Attribute::all() {
            if !attributes.contains_key(attribute.name()) {
                assert_eq!(attribute.name(), "vaDriver", "{} lacks it", device["name"]);
                without_driver.push(device["name"].as_str().unwrap().to_string());
            }
        }
    }
    // vaDriver is absent exactly where the query failed: one record of the example fleet
    // (amd-2, vaInitialize failed), and its log line has the failure word for word.
    assert_eq!(without_driver.len(), 1, "{without_driver:?}");
    let failed = agent
        .log
        .wait_for(&format!("probe: {}", without_driver[0]), DEADLINE);
    assert!(
        failed.contains("vaInitialize failed: unknown libva error (-1)"),
        "{failed}"
    );
    assert!(
        failed.contains(" ERROR "),
        "a failed query is logged as an error: {failed}"
    );

    // The log: one line per GPU with every value.
    wait("one probe line per GPU", || agent.log.count("probe: pci-") == 8);
    let line = agent.log.wait_for("probe: pci-0000-01-00-0", DEADLINE);
    for attribute in Attribute::all() {
        assert!(line.contains(&format!(" {}=", attribute.name())), "{line}");
    }

    // The agent counts the write once it has the answer, a moment after the server stored it.
    agent
        .log
        .wait_for(&format!("ResourceSlice {}: created", s.slice_name), DEADLINE);
    assert_eq!(metric(&agent, "media_capabilities_gpus"), 8.0);
    assert_eq!(
        metric(
            &agent,
            "media_capabilities_slice_writes_total{verb=\"create\"}"
        ),
        1.0
    );
    assert!(metric(&agent, "media_capabilities_last_publish_timestamp_seconds") > 1.0e9);
    assert_eq!(agent.get("/healthz").0, 200);
    // Published, but the kubelet has not registered the plugin yet.
    let (status, body) = agent.get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("kubelet registration"), "{body}");
}
}

cp_test! {
fn it_watches_only_its_own_slice_and_writes_nothing_at_rest() {
    let s = setup("at-rest", 2);
    let _agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);
    let mark = s.audit.mark();
    // Ten resync periods of 100 ms, and rescans of the reports every 50 ms, all reads.
    s.wait_resyncs(mark, 10);
    let writes: Vec<Event> = s.audit.since(mark).into_iter().filter(Event::is_write).collect();
    assert_eq!(writes.len(), 0, "no write of anything at rest: {writes:#?}");

    let events = s.audit.events();
    let watches: Vec<&Event> = events
        .iter()
        .filter(|e| e.verb == "watch" || (e.verb == "list" && e.resource == "resourceslices"))
        .collect();
    assert!(!watches.is_empty());
    for request in &watches {
        // Its own slice, or liken's render nodes of its node (see render_nodes.rs).
        let selector = request.query_param("fieldSelector").unwrap_or_default();
        assert!(
            selector.contains(&format!("spec.nodeName={}", s.node))
                && (selector.contains(&format!("spec.driver={DRIVER}"))
                    || (request.verb == "list" && selector.contains("spec.driver=liken.sh"))),
            "{request:?}"
        );
    }
    let opened = events
        .iter()
        .filter(|e| e.verb == "watch" && e.stage == "ResponseStarted")
        .count();
    assert_eq!(opened, 1, "one watch per agent: {watches:#?}");
}
}

cp_test! {
fn a_deleted_slice_is_recreated_and_an_edited_one_restored() {
    let s = setup("deleted-slice", 2);
    let agent = s.start(&[]);
    let original = s.wait_slice("first publish", |_| true);

    // The kubelet's wipe at its start, or a person's kubectl delete.
    s.delete_slice();
    let recreated = s.wait_slice("re-created", |v| generation(v) == 2);
    assert_eq!(devices(&recreated), devices(&original));
    agent
        .log
        .wait_for("was deleted; publishing it again", DEADLINE);

    // Someone flips a capability by hand.
    let mut edited = recreated.clone();
    let first = &mut edited["spec"]["devices"][0]["attributes"]["decodeH264"]["bool"];
    *first = json!(!first.as_bool().expect("decodeH264 is a bool"));
    s.kube.replace(&s.slice_path(), &edited).expect("outside edit");
    let restored = s.wait_slice("restored", |v| generation(v) == 3);
    assert_eq!(devices(&restored), devices(&original));

    // Others' metadata is not content: a label, a finalizer, a backup tool's ownerReference and
    // a policy's blockOwnerDeletion on ours make no write...
    let ours = json!({"apiVersion": "v1", "kind": "Node", "name": s.node, "uid": s.node_uid,
                      "controller": true, "blockOwnerDeletion": true});
    let theirs = json!({"apiVersion": "backup.example.com/v1", "kind": "Snapshot",
                        "name": "nightly", "uid": "7b6d1c1e-0000-4000-8000-000000000001"});
    let mark = s.audit.mark();
    s.kube
        .patch(
            &s.slice_path(),
            &json!({"metadata": {
                "labels": {"team": "video"},
                "finalizers": ["backup.example.com/keep"],
                "ownerReferences": [ours, theirs],
            }}),
        )
        .expect("metadata edit");
    s.wait_resyncs(mark, 3);
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
    // ...and all of it is kept when the agent next writes.
    s.add_gpu(1, 2);
    let updated = s.wait_slice("a GPU more", |v| devices(v).len() == 3);
    assert_eq!(updated["metadata"]["labels"]["team"], "video");
    assert_eq!(
        updated["metadata"]["finalizers"],
        json!(["backup.example.com/keep"])
    );
    assert_eq!(
        updated["metadata"]["ownerReferences"],
        json!([ours, theirs])
    );
    // The finalizer would keep the slice from being deleted with the test's Node.
    s.kube
        .patch(&s.slice_path(), &json!({"metadata": {"finalizers": null}}))
        .expect("drop the finalizer");
}
}

cp_test! {
fn a_deleted_node_takes_its_slice_and_the_agent_waits_for_it() {
    let s = setup("deleted-node", 1);
    let agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.audit.mark();
    // The node goes; the garbage collector deletes what it owns.
    assert!(s.kube.delete(&path("nodes", Some(&s.node))));
    wait("the garbage collector deletes the slice", || s.slice().is_none());
    // The agent notices the deletion, looks for the Node, finds none, and does not re-create
    // a slice that would be collected at once.
    s.audit
        .wait_until(DEADLINE, |events| {
            events[mark..]
                .iter()
                .any(|e| e.verb == "get" && e.resource == "nodes" && e.code == 404)
        })
        .expect("the agent reads the Node");
    agent.log.wait_for("does not exist", DEADLINE);
    let mark_gone = s.audit.mark();
    s.wait_resyncs(mark_gone, 3);
    assert!(s.slice().is_none());
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));

    // The node registers again (new uid): the slice comes back, owned by the new Node.
    s.cp.node(&s.node, &[]);
    let uid = s.kube.get(&path("nodes", Some(&s.node))).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(uid, s.node_uid);
    let slice = s.wait_slice("published for the new Node", |v| {
        v["metadata"]["ownerReferences"][0]["uid"] == uid.as_str()
    });
    assert_eq!(
        generation(&slice),
        2,
        "never backwards after the collection"
    );
}
}

/// A slice that is not ours to keep: `name`, `driver`, `node`, one pool of its own.
fn foreign_slice(name: &str, driver: &str, node: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 7, "resourceSliceCount": 1},
            "devices": []
        }
    })
}

// --- what the server keeps of what the agent writes -------------------------------------------

cp_test! {
fn a_server_that_drops_allow_multiple_allocations_gets_one_warning() {
    // 1.34 with its default gates: DRAConsumableCapacity is off.
    let s = Setup::on(default_cluster(), "gate-off", 2);
    let agent = s.start(&[]);
    let slice = s.wait_slice("published", |_| true);
    assert!(
        devices(&slice)
            .iter()
            .all(|d| d.get("allowMultipleAllocations").is_none())
    );
    agent
        .log
        .wait_for("dropped allowMultipleAllocations", DEADLINE);
    assert_eq!(
        metric(
            &agent,
            "media_capabilities_allow_multiple_allocations_dropped"
        ),
        1.0
    );
    let (_, body) = agent.get("/readyz");
    assert!(
        body.contains("warning:") && body.contains("DRAConsumableCapacity"),
        "{body}"
    );

    // It does not fight the server: no rewrites, and the warning is not repeated.
    let mark = s.audit.mark();
    s.wait_resyncs(mark, 5);
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
    assert_eq!(agent.log.count("dropped allowMultipleAllocations"), 1);
}
}

cp_test! {
fn long_driver_and_pci_names_still_make_a_valid_slice() {
    let s = setup("long-names", 0);
    let mut record = crate::support::agent::example_records()
        .into_iter()
        .find(|r| {
            r["report"]["vendor"]
                .as_str()
                .is_some_and(|v| v.starts_with("Mesa"))
        })
        .expect("a Mesa record in the example fleet");
    let vendor = "Mesa Gallium driver 24.2.8-1ubuntu1~24.04.1 for AMD Radeon RX 7900 XTX (radeonsi, navi31, LLVM 19.1.1, DRM 3.59, 6.8.0)";
    assert_eq!(vendor.len(), 119);
    let pci_name = "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M] (Sapphire Nitro Edition)";
    assert_eq!(pci_name.len(), 76);
    record["report"]["vendor"] = json!(vendor);
    record["pci"]["pci_name"] = json!(pci_name);
    set_gpu_index(&mut record, 0);
    write_record(s.reports.path(), &record);

    let agent = s.start(&[]);
    let slice = s.wait_slice("published", |v| devices(v).len() == 1);
    let attributes = &devices(&slice)[0]["attributes"];
    for (name, attribute) in attributes.as_object().unwrap() {
        if let Some(text) = attribute["string"].as_str() {
            assert!(text.len() <= 64, "{name} is {} bytes: {text}", text.len());
        }
    }
    assert!(
        attributes["vaDriver"]["string"]
            .as_str()
            .unwrap()
            .starts_with("Mesa Gallium")
    );
    // The log keeps the full strings.
    let line = agent.log.wait_for("probe: pci-0000-01-00-0", DEADLINE);
    assert!(line.contains("trimmed from"), "{line}");
    // The real validation refused nothing on the way.
    let writes = s.slice_writes(0);
    assert!(writes.iter().all(|e| e.code == 201), "{writes:#?}");
}
}

cp_test! {
fn a_node_without_gpus_publishes_an_empty_slice_and_follows_new_ones() {
    let s = setup("no-gpus", 0);
    let agent = s.start(&[]);
    let empty = s.wait_slice("published", |_| true);
    assert!(
        empty["spec"]["devices"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    assert_eq!(generation(&empty), 1);

    write_fleet(s.reports.path(), 1);
    let one = s.wait_slice("a GPU appeared", |v| {
        v["spec"]["devices"]
            .as_array()
            .is_some_and(|d| d.len() == 1)
    });
    assert_eq!(generation(&one), 2);
    agent
        .log
        .wait_for("; probing the GPUs again", DEADLINE);

    for entry in std::fs::read_dir(s.reports.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let none = s.wait_slice("the GPU went away", |v| {
        v["spec"]["devices"].as_array().is_none_or(Vec::is_empty)
    });
    assert_eq!(generation(&none), 3);
}
}

/// The agent's resident memory in KiB, from /proc.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the agent is running")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

cp_test! {
fn bad_files_appearing_in_the_reports_directory_cost_only_themselves() {
    let s = setup("bad-files", 2);
    let agent = s.start(&[]);
    s.wait_slice("published", |v| devices(v).len() == 2);
    let dir = s.reports.path();
    // Each appears on its own, so each is a change the agent reads.
    let fifo = dir.join("fifo.json");
    type Make<'a> = &'a dyn Fn(&Path);
    let bad: [(&str, Make); 6] = [
        ("empty.json", &|p| std::fs::write(p, "").unwrap()),
        ("null.json", &|p| std::fs::write(p, "null").unwrap()),
        ("marker.yaml", &|p| {
            std::fs::write(p, "---\n# nothing\n").unwrap()
        }),
        ("deep.yml", &|p| {
            std::fs::write(p, "- ".repeat(100_000)).unwrap()
        }),
        ("zero.json", &|p| {
            std::os::unix::fs::symlink("/dev/zero", p).unwrap()
        }),
        ("fifo.json", &|p| {
            let made = std::process::Command::new("mkfifo").arg(p).status();
            assert!(made.unwrap().success());
        }),
    ];
    for (name, make) in bad {
        let path = dir.join(name);
        make(&path);
        // The file's appearing is logged first ("... appeared; probing the GPUs again").
        let line = agent
            .log
            .wait_for(&format!("recorded probes {}", path.display()), DEADLINE);
        assert!(
            line.contains(" ERROR ") && line.contains("skipping a file, reading the others: "),
            "{line}"
        );
    }
    // Re-probed every period since, each bad file was told at ERROR once.
    let empty = format!("recorded probes {}:", dir.join("empty.json").display());
    let told = agent
        .log
        .lines()
        .iter()
        .filter(|l| l.contains(" ERROR ") && l.contains(&empty))
        .count();
    assert_eq!(told, 1, "{:#?}", agent.log.lines());
    assert!(fifo.exists());
    // Still alive and following: a GPU added now is published.
    s.add_gpu(0, 2);
    s.wait_slice("a GPU added after the bad files", |v| devices(v).len() == 3);
    assert!(
        rss_kib(agent.pid()) < 200 * 1024,
        "the agent read what it should have refused: {} KiB",
        rss_kib(agent.pid())
    );
    // Only bad files left: an error, and the GPUs published stay (no "no GPUs" from a guess).
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("0000-")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    agent.log.wait_for(
        &format!(
            "no readable recorded probes in {}: its 6 files",
            dir.display()
        ),
        DEADLINE,
    );
    assert_eq!(devices(&s.slice().expect("the slice stays")).len(), 3);
    s.add_gpu(1, 5);
    s.wait_slice("a GPU beside the bad files", |v| devices(v).len() == 1);
}
}

// --- the kubelet's side, signals, flags ----------------------------------------------------------

cp_test! {
fn the_kubelet_registers_and_prepares_through_the_agent() {
    let s = setup("kubelet", 1);
    let agent = s.start(&[]);
    s.wait_slice("published", |_| true);
    agent
        .log
        .wait_for(&format!("ResourceSlice {}: created", s.slice_name), DEADLINE);
    let rt = runtime();
    rt.block_on(async {
        // A refusal first: logged verbatim, not ready.
        let endpoint = kubelet_registers(&agent, "plugin version v9 is not supported").await;
        assert_eq!(Path::new(&endpoint), agent.dra_socket());
        agent
            .log
            .wait_for("plugin version v9 is not supported", DEADLINE);
        assert_eq!(agent.get("/readyz").0, 503);

        kubelet_registers(&agent, "").await;
        agent
            .log
            .wait_for("the kubelet registered the media.liken.sh plugin", DEADLINE);
        let (status, body) = agent.get("/readyz");
        assert_eq!(status, 200, "{body}");
        assert_eq!(metric(&agent, "media_capabilities_kubelet_registered"), 1.0);

        let dra = channel(&agent.dra_socket()).await;
        // Claims never made: each answered with its error, the call itself a success.
        prepare_and_unprepare!(v1, dra.clone(), claims("one", 1), missing);
        prepare_and_unprepare!(v1beta1, dra.clone(), claims("beta", 4), missing);
        // Concurrent calls on both versions, as the kubelet makes for several pods.
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..8 {
            let dra = dra.clone();
            calls.spawn(async move {
                if i % 2 == 0 {
                    prepare_and_unprepare!(v1, dra, claims(&format!("pod{i}"), 3), missing);
                } else {
                    prepare_and_unprepare!(v1beta1, dra, claims(&format!("pod{i}"), 3), missing);
                }
            });
        }
        while let Some(done) = calls.join_next().await {
            done.expect("a concurrent call failed");
        }
    });
}
}

cp_test! {
fn sigterm_exits_promptly_and_leaves_the_slice() {
    let s = setup("sigterm", 1);
    let mut agent = s.start(&[]);
    let slice = s.wait_slice("published", |_| true);
    runtime().block_on(kubelet_registers(&agent, ""));
    assert!(agent.registration_socket().exists() && agent.dra_socket().exists());

    let mark = s.audit.mark();
    agent.terminate();
    // Prompt means: every loop stopped within the agent's own bound, which the agent itself
    // reports; a wall-clock limit here would fail on a loaded machine, not on a slow agent.
    let (status, _) = agent
        .wait_exit(media_operator::agent::run::SHUTDOWN_BOUND + DEADLINE)
        .expect("the agent exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    agent.log.wait_for("shutting down (signal)", DEADLINE);
    agent.log.wait_for("every loop stopped; exiting", DEADLINE);
    assert_eq!(
        agent.log.count("gave up waiting"),
        0,
        "{:#?}",
        agent.log.lines()
    );
    assert_eq!(s.slice_writes(mark).len(), 0, "the slice is left alone");
    assert_eq!(
        s.slice().unwrap()["metadata"]["uid"],
        slice["metadata"]["uid"]
    );
    assert!(
        !agent.registration_socket().exists(),
        "registration socket removed"
    );
    assert!(!agent.dra_socket().exists(), "DRA socket removed");
}
}

#[test]
fn a_health_port_in_use_ends_the_start_and_leaves_no_sockets_for_the_kubelet() {
    // Sockets left behind would be dialled by the kubelet's plugin watcher, each dial blocking
    // and backing off per path, which can delay the next agent's registration. The port is
    // bound before the agent talks to any server: a kubeconfig naming none will do.
    let reports = tempfile::tempdir().unwrap();
    write_fleet(reports.path(), 1);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://{}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
             current-context: x\n",
            nowhere.local_addr().unwrap()
        ),
    )
    .unwrap();
    let registry = dir.path().join("plugins_registry");
    let plugins = dir.path().join("plugins/media.liken.sh");
    let out = std::process::Command::new(AGENT)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("NODE_NAME", "health-port")
        .arg("--reports")
        .arg(reports.path())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--kubelet-registry-dir")
        .arg(&registry)
        .arg("--kubelet-plugins-dir")
        .arg(&plugins)
        .args(["--health-addr", &addr])
        .output()
        .expect("run media-capabilities");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("error: listen on {addr} for /healthz")),
        "{stderr}"
    );
    for dir in [&registry, &plugins] {
        let left: Vec<_> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(
            left,
            Vec::<std::ffi::OsString>::new(),
            "in {}",
            dir.display()
        );
    }
}
#[test]
fn bad_flags_are_usage_errors_before_anything_starts() {
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let out = std::process::Command::new(AGENT)
            .env_clear()
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .args(args)
            .output()
            .expect("run media-capabilities");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&[], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--node-name"), "{stderr}");

    let (code, stderr) = run(&[("NODE_NAME", "Bad_Name")], &["--reports", "/"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not a valid node name"), "{stderr}");

    let (code, stderr) = run(&[("NODE_NAME", "n1")], &["--reports", "/nonexistent"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --reports /nonexistent"),
        "{stderr}"
    );

    // A taint the API server would refuse: one line naming the valid ones.
    let (code, stderr) = run(&[("NODE_NAME", "n1")], &["--taint-key", "example.com/x"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: --taint-key \"example.com/x\" cannot be this agent's taint key: it is not in the media.liken.sh domain (hint: valid keys are media.liken.sh/NAME"),
        "{stderr}"
    );
    let (code, stderr) = run(
        &[("NODE_NAME", "n1"), ("TAINT_EFFECT", "NoScheduling")],
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "error: --taint-effect \"NoScheduling\" is not a device taint effect (hint: valid effects are NoSchedule, NoExecute and None; the nearest is NoSchedule)\n"
    );
}

cp_test! {
fn a_server_that_adds_a_field_is_told_once_and_not_fought() {
    let s = setup("adds-a-field", 2);
    // A MutatingAdmissionPolicy tags every device of this node's slice with a zone.
    let policy = format!("zone-{}", s.node);
    let mutating = "/apis/admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies";
    let bindings = "/apis/admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicybindings";
    s.kube.apply(
        mutating,
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["resourceslices"]}]},
                "matchConditions": [{"name": "this-node",
                    "expression": format!("object.spec.nodeName == '{}'", s.node)}],
                // CEL has no index in map(): the patches are for the first devices that exist.
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[0, 1, 2, 3, 4, 5, 6, 7].filter(i, i < size(object.spec.devices)).map(i, \
                     JSONPatch{op: \"add\", path: \"/spec/devices/\" + string(i) + \"/attributes/example.com~1zone\", \
                     value: {\"string\": \"zone-a\"}})"}}]
            }
        }),
    );
    s.kube.apply(
        bindings,
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1beta1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy}
        }),
    );
    // Applied once a dry run of a slice of this node comes back tagged.
    let probe = foreign_slice(&format!("{}-probe", s.node), DRIVER, &s.node);
    let mut probe = probe;
    // JSON Patch adds into an existing attributes map, as the agent's devices have.
    probe["spec"]["devices"] = json!([{"name": "d0", "attributes": {"x": {"bool": true}}}]);
    wait("the mutating policy applies", || {
        s.kube
            .create(&format!("{}?dryRun=All", path("resourceslices", None)), &probe)
            .is_ok_and(|v| v["spec"]["devices"][0]["attributes"]["example.com/zone"].is_object())
    });

    let agent = s.start(&[]);
    let slice = s.wait_slice("published", |_| true);
    assert!(
        devices(&slice)
            .iter()
            .all(|d| d["attributes"]["example.com/zone"]["string"] == "zone-a"),
        "{slice:#}"
    );
    let line = agent
        .log
        .wait_for("the API server changes what this agent writes", DEADLINE);
    assert!(line.contains(" WARN "), "{line}");
    assert!(
        line.contains(
            r#"spec.devices[*].attributes[example.com/zone] added ({"string":"zone-a"})"#
        ),
        "{line}"
    );
    assert_eq!(
        metric(&agent, "media_capabilities_server_changed_fields"),
        1.0
    );
    let (_, body) = agent.get("/readyz");
    assert!(
        body.contains("warning: the API server changes what this agent writes"),
        "{body}"
    );

    // No rewrite on the watch events and resyncs that follow, and no second warning.
    let mark = s.audit.mark();
    s.wait_resyncs(mark, 5);
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
    // A real change is still written, once.
    s.add_gpu(2, 2);
    s.wait_slice("a GPU appeared", |v| devices(v).len() == 3);
    let mark = s.audit.mark();
    s.wait_resyncs(mark, 5);
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
    assert_eq!(
        agent
            .log
            .count("the API server changes what this agent writes"),
        1
    );

    // The policy goes away: the next write's answer keeps what was sent, and the agent says so.
    assert!(s.kube.delete(&format!("{bindings}/{policy}")));
    assert!(s.kube.delete(&format!("{mutating}/{policy}")));
    wait("the mutating policy is gone", || {
        s.kube
            .create(&format!("{}?dryRun=All", path("resourceslices", None)), &probe)
            .is_ok_and(|v| v["spec"]["devices"][0]["attributes"].get("example.com/zone").is_none())
    });
    s.delete_slice();
    s.wait_slice("re-created", |v| {
        devices(v)
            .iter()
            .all(|d| d["attributes"].get("example.com/zone").is_none())
    });
    agent.log.wait_for(
        &format!("stores ResourceSlice {} as sent again", s.slice_name),
        DEADLINE,
    );
    assert_eq!(
        metric(&agent, "media_capabilities_server_changed_fields"),
        0.0
    );
}
}

/// liken's slice of render nodes for `node`, one device per PCI address.
fn liken_slice(node: &str, addresses: &[&str]) -> Value {
    let devices: Vec<Value> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            json!({
                "name": format!("renderd{}", 128 + i),
                "attributes": {
                    "renderNode": {"string": format!("/dev/dri/renderD{}", 128 + i)},
                    "resource.kubernetes.io/pciBusID": {"string": a}
                }
            })
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-liken.sh")},
        "spec": {
            "driver": "liken.sh",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices
        }
    })
}

cp_test! {
fn gpus_liken_publishes_that_the_claim_did_not_bring_are_named() {
    let s = setup("liken", 1); // The agent can open 0000:01:00.0.
    let slices = path("resourceslices", None);
    s.kube
        .create(&slices, &liken_slice(&s.node, &["0000:01:00.0", "0000:09:00.0"]))
        .expect("liken's slice");
    // Another node's GPUs are not this agent's business.
    let other = format!("{}-2", s.node);
    s.kube
        .create(&slices, &liken_slice(&other, &["0000:07:00.0"]))
        .expect("another node's liken slice");
    let agent = s.start(&[]);
    s.wait_slice("published", |_| true);
    let line = agent
        .log
        .wait_for("that this agent's container does not have", DEADLINE);
    assert!(line.contains(" WARN "), "{line}");
    assert!(
        line.contains("1 GPU(s)") && line.contains(": 0000:09:00.0 "),
        "{line}"
    );
    assert!(!line.contains("0000:07:00.0"), "{line}");
    assert!(line.contains("delete this agent's pod"), "{line}");
    assert_eq!(metric(&agent, "media_capabilities_gpus_not_in_claim"), 1.0);
    let (_, body) = agent.get("/readyz");
    assert!(body.contains("warning: liken publishes 1 GPU(s)"), "{body}");
    let mark = s.audit.mark();
    s.wait_resyncs(mark, 3);
    assert_eq!(
        agent.log.count("that this agent's container does not have"),
        1,
        "once"
    );

    // The pod is made anew with a claim that brings the GPU: the agent finds it.
    s.add_gpu(1, 8);
    s.wait_slice("the new GPU published", |v| devices(v).len() == 2);
    agent.log.wait_for(
        "every GPU liken publishes on this node is in this agent's container",
        DEADLINE,
    );
    assert_eq!(metric(&agent, "media_capabilities_gpus_not_in_claim"), 0.0);
    assert!(s.kube.delete(&path("resourceslices", Some(&format!("{other}-liken.sh")))));
}
}

/// The agent in this process (so a test can reach its loops), with its heartbeats allowed
/// `margin` of lateness.
struct InProcess {
    runtime: tokio::runtime::Runtime,
    health: std::sync::Arc<media_operator::agent::health::Health>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _sockets: tempfile::TempDir,
}

impl InProcess {
    fn start(s: &Setup, margin: Duration) -> InProcess {
        use clap::Parser;
        use media_operator::agent::cli::Cli;
        use media_operator::agent::health::Health;
        use media_operator::agent::liveness::Liveness;

        let sockets = tempfile::tempdir().expect("temp dir for the kubelet sockets");
        let reports = s.reports.path().to_str().unwrap().to_string();
        let kubeconfig = s.kubeconfig.to_str().unwrap().to_string();
        let registry = sockets.path().join("plugins_registry");
        let plugins = sockets.path().join("plugins/media.liken.sh");
        let mut args: Vec<String> = [
            "media-capabilities",
            "--node-name",
            &s.node,
            "--reports",
            &reports,
            "--kubeconfig",
            &kubeconfig,
            "--health-addr",
            "127.0.0.1:0",
            "--kubelet-registry-dir",
            registry.to_str().unwrap(),
            "--kubelet-plugins-dir",
            plugins.to_str().unwrap(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(FAST.iter().map(|a| a.to_string()));
        let config = Cli::try_parse_from(args)
            .expect("the agent's flags")
            .agent
            .validate()
            .expect("a valid configuration");
        let health = std::sync::Arc::new(Health {
            liveness: std::sync::Arc::new(Liveness::new(margin)),
            ..Health::default()
        });
        let runtime = runtime();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(media_operator::agent::run::run_with(
            config,
            async {
                let _ = stopped.await;
            },
            std::sync::Arc::clone(&health),
        ));
        InProcess {
            runtime,
            health,
            stop: Some(stop),
            _sockets: sockets,
        }
    }

    fn healthz(&self) -> (u16, String) {
        let addr = *self
            .health
            .local_addr
            .get()
            .expect("the health port is bound");
        crate::support::agent::http_get(addr, "/healthz")
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = &self.runtime;
    }
}

cp_test! {
fn a_wedged_loop_fails_healthz_and_names_it() {
    // One agent per loop, side by side: each waits out its liveness margin, and four of those in
    // a row were the slowest test here. Each has its own API server and sockets.
    let loops = ["prober", "publisher", "kubelet plugin", "render-node check"];
    std::thread::scope(|scope| {
        for wedged in loops {
            scope.spawn(move || a_wedged_loop_is_named(wedged));
        }
    });
}
}

fn a_wedged_loop_is_named(wedged: &str) {
    let s = setup(&format!("wedged-{}", wedged.replace(' ', "-")), 1);
    // A second of margin: a loaded test machine never makes a healthy loop that late.
    let agent = InProcess::start(&s, Duration::from_secs(1));
    s.wait_slice("published", |_| true);
    let (status, body) = agent.healthz();
    assert_eq!(status, 200, "{wedged}: {body}");

    assert!(
        agent.health.liveness.wedge(wedged),
        "{wedged} has a heartbeat"
    );
    let deadline = Instant::now() + DEADLINE;
    let last = loop {
        let last = agent.healthz();
        if last.0 == 500 {
            break last;
        }
        assert!(
            Instant::now() < deadline,
            "{wedged}: last /healthz: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let body = &last.1;
    assert!(
        body.contains(&format!("the {wedged} made no progress for")),
        "{wedged}: {body}"
    );
    for other in ["prober", "publisher", "kubelet plugin", "render-node check"] {
        if other != wedged {
            assert!(!body.contains(&format!("the {other} ")), "{wedged}: {body}");
        }
    }
}
