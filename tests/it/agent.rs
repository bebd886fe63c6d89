//! The whole agent: the real `media-capabilities` binary with recorded reports (`--reports`),
//! against the in-process Kubernetes API test server, with kubelet sockets in a temp dir and a
//! tonic client playing the kubelet. Each test waits for events (a log line, a request, a
//! stored object), never for a fixed time.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::support::agent::{AgentProcess, FAST, set_gpu_index, write_fleet, write_record};
use crate::support::apiserver::{Config, Fault, RequestRecord, TestApiServer};
use crate::support::kubelet::{channel, claims, prepare_and_unprepare};
use media_operator::agent::kubelet::proto::dra::{v1, v1beta1};
use media_operator::agent::kubelet::proto::pluginregistration::{
    InfoRequest, RegistrationStatus, registration_client::RegistrationClient,
};
use media_operator::catalogue::{Attribute, DRIVER};
use serde_json::{Value, json};

const AGENT: &str = env!("CARGO_BIN_EXE_media-capabilities");
const NODE: &str = "gpu-node-1";
const SLICE: &str = "gpu-node-1-media.liken.sh";
/// How long any awaited event may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(15);

/// A server with the Node, and a reports directory with `gpus` recorded GPUs.
struct Setup {
    server: TestApiServer,
    reports: tempfile::TempDir,
    node_uid: String,
}

fn setup_with(config: Config, gpus: usize) -> Setup {
    let server = TestApiServer::start_with(config);
    let node = server
        .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}))
        .expect("create the Node");
    let reports = tempfile::tempdir().expect("reports dir");
    write_fleet(reports.path(), gpus);
    Setup {
        server,
        reports,
        node_uid: node["metadata"]["uid"].as_str().expect("uid").to_string(),
    }
}

fn setup(gpus: usize) -> Setup {
    setup_with(Config::default(), gpus)
}

impl Setup {
    fn start(&self, extra: &[&str]) -> AgentProcess {
        let args: Vec<&str> = FAST.iter().chain(extra).copied().collect();
        AgentProcess::start(
            AGENT,
            NODE,
            self.reports.path(),
            self.server.kubeconfig(),
            &args,
        )
    }

    fn slice(&self) -> Option<Value> {
        self.server.get("resourceslices", "", SLICE)
    }

    /// A GPU appears on the node: the recorded report `example` of the example fleet, as GPU
    /// number `index`.
    fn add_gpu(&self, example: usize, index: usize) {
        let mut record = crate::support::agent::example_records()[example].clone();
        set_gpu_index(&mut record, index);
        write_record(self.reports.path(), &record);
    }

    /// Waits until the stored slice satisfies `cond` and every write that led there is in the
    /// request log; returns it. Each successful write of the agent bumps the pool generation by
    /// one from 1 (the tests' own edits go to the store directly, outside the log), so the
    /// logged successful writes must number exactly the generation: no write is hidden, and
    /// none was wasted.
    fn wait_slice(&self, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
        self.server
            .wait_until(DEADLINE, |s| {
                s.get("resourceslices", "", SLICE).is_some_and(|v| {
                    let written = s
                        .requests()
                        .iter()
                        .filter(|r| {
                            r.is_write()
                                && r.verb != "delete"
                                && r.resource.as_deref() == Some("resourceslices")
                                && (200..300).contains(&r.status)
                        })
                        .count();
                    cond(&v) && i64::try_from(written) == Ok(generation(&v))
                })
            })
            .unwrap_or_else(|e| panic!("{what}: {e}; slice: {:#?}", self.slice()));
        self.slice().expect("just seen")
    }

    /// Waits until the agent has read its slice `n` more times (its resync period), so that
    /// every reconcile period in between has passed.
    fn wait_resyncs(&self, mark: usize, n: usize) {
        self.server
            .wait_until(DEADLINE, |s| {
                s.requests_since(mark)
                    .iter()
                    .filter(|r| is_slice_get(r))
                    .count()
                    >= n
            })
            .expect("the agent keeps re-reading its slice");
    }
}

fn is_slice_get(r: &RequestRecord) -> bool {
    r.verb == "get" && r.path.ends_with(&format!("/resourceslices/{SLICE}"))
}

fn generation(slice: &Value) -> i64 {
    slice["spec"]["pool"]["generation"]
        .as_i64()
        .expect("generation")
}

fn devices(slice: &Value) -> &Vec<Value> {
    slice["spec"]["devices"].as_array().expect("devices")
}

fn slice_writes(server: &TestApiServer, mark: usize) -> Vec<RequestRecord> {
    server
        .writes_since(mark)
        .into_iter()
        .filter(|r| r.resource.as_deref() == Some("resourceslices"))
        .collect()
}

/// The value of a metric line `name value`.
fn metric(agent: &AgentProcess, name: &str) -> f64 {
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{body}"))
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
        ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
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

// --- tests ------------------------------------------------------------------------------------

#[test]
fn first_publish_has_every_gpu_and_attribute_and_the_node_as_owner() {
    let s = setup(8);
    let agent = s.start(&[]);
    let slice = s.wait_slice("first publish", |_| true);

    assert_eq!(slice["spec"]["driver"], DRIVER);
    assert_eq!(slice["spec"]["nodeName"], NODE);
    assert_eq!(slice["spec"]["pool"]["name"], NODE);
    assert_eq!(slice["spec"]["pool"]["resourceSliceCount"], 1);
    assert_eq!(generation(&slice), 1);
    assert_eq!(
        slice["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": s.node_uid, "controller": true}])
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
    s.server
        .wait_until(DEADLINE, |_| agent.log.count("probe: pci-") == 8)
        .expect("one probe line per GPU");
    let line = agent.log.wait_for("probe: pci-0000-01-00-0", DEADLINE);
    for attribute in Attribute::all() {
        assert!(line.contains(&format!(" {}=", attribute.name())), "{line}");
    }

    // The agent counts the write once it has the answer, a moment after the server stored it.
    agent
        .log
        .wait_for(&format!("ResourceSlice {SLICE}: created"), DEADLINE);
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

#[test]
fn it_watches_only_its_own_slice_and_writes_nothing_in_steady_state() {
    let s = setup(2);
    let _agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);
    let mark = s.server.request_mark();
    s.server.send_bookmarks();
    // Ten resync periods of 100 ms, and rescans of the reports every 50 ms, all reads.
    s.wait_resyncs(mark, 10);
    assert_eq!(
        slice_writes(&s.server, mark),
        [],
        "no write in steady state"
    );
    assert_eq!(s.server.writes_since(mark), [], "no write of anything");

    let watches: Vec<RequestRecord> = s
        .server
        .requests()
        .into_iter()
        .filter(|r| {
            r.verb == "watch"
                || (r.verb == "list" && r.resource.as_deref() == Some("resourceslices"))
        })
        .collect();
    assert!(!watches.is_empty());
    for request in &watches {
        // Its own slice, or liken's render nodes of its node (see render_nodes.rs).
        let selector = request.query_param("fieldSelector").unwrap_or_default();
        assert!(
            selector.contains(&format!("spec.nodeName={NODE}"))
                && (selector.contains(&format!("spec.driver={DRIVER}"))
                    || (request.verb == "list" && selector.contains("spec.driver=liken.sh"))),
            "{request:?}"
        );
    }
    assert_eq!(s.server.watch_count(), 1, "one watch per agent");
}

#[test]
fn a_deleted_slice_is_recreated_and_an_edited_one_restored() {
    let s = setup(2);
    let agent = s.start(&[]);
    let original = s.wait_slice("first publish", |_| true);

    // The kubelet's wipe at its start.
    assert_eq!(
        s.server
            .delete_where("resourceslices", |o| o["spec"]["nodeName"] == NODE),
        1
    );
    let recreated = s.wait_slice("re-created", |v| generation(v) == 2);
    assert_eq!(devices(&recreated), devices(&original));
    agent
        .log
        .wait_for("was deleted; publishing it again", DEADLINE);

    // Someone flips a capability by hand.
    let mut edited = recreated.clone();
    let first = &mut edited["spec"]["devices"][0]["attributes"]["decodeH264"]["bool"];
    *first = json!(!first.as_bool().expect("decodeH264 is a bool"));
    s.server.put(edited).expect("outside edit");
    let restored = s.wait_slice("restored", |v| generation(v) == 3);
    assert_eq!(devices(&restored), devices(&original));

    // Others' metadata is not content: a label, a finalizer, a backup tool's ownerReference and
    // a policy's blockOwnerDeletion on ours make no write...
    let ours = json!({"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": s.node_uid,
                      "controller": true, "blockOwnerDeletion": true});
    let theirs = json!({"apiVersion": "backup.example.com/v1", "kind": "Snapshot",
                        "name": "nightly", "uid": "7b6d1c1e-0000-4000-8000-000000000001"});
    let mark = s.server.request_mark();
    s.server
        .patch(
            "resourceslices",
            "",
            SLICE,
            &json!({"metadata": {
                "labels": {"team": "video"},
                "finalizers": ["backup.example.com/keep"],
                "ownerReferences": [ours, theirs],
            }}),
        )
        .expect("metadata edit");
    s.wait_resyncs(mark, 3);
    assert_eq!(slice_writes(&s.server, mark), []);
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
}

#[test]
fn a_deleted_node_takes_its_slice_and_the_agent_waits_for_it() {
    let s = setup(1);
    let agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.server.request_mark();
    s.server.delete("nodes", "", NODE).expect("delete the Node");
    assert!(s.slice().is_none(), "garbage-collected with the Node");
    // The agent notices the deletion, looks for the Node, finds none, and does not re-create
    // a slice that would be collected at once.
    s.server
        .wait_for_request(mark, DEADLINE, |r| {
            r.verb == "get" && r.path.ends_with(&format!("/nodes/{NODE}")) && r.status == 404
        })
        .expect("the agent reads the Node");
    agent.log.wait_for("does not exist", DEADLINE);
    assert!(s.slice().is_none());
    assert_eq!(slice_writes(&s.server, mark), []);

    // The node registers again (new uid): the slice comes back, owned by the new Node.
    let node = s
        .server
        .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}))
        .expect("re-create the Node");
    let uid = node["metadata"]["uid"].as_str().unwrap().to_string();
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

#[test]
fn an_api_server_down_at_start_is_waited_for() {
    let s = setup(1);
    s.server.stop();
    let mut agent = s.start(&[]);
    let down = agent.log.wait_for("is not working", DEADLINE);
    assert!(down.contains(" WARN "), "{down}");
    assert!(
        down.contains(&format!(
            "the API server at {} is not working: cannot reach",
            s.server.base_url()
        )),
        "names the server and the cause: {down}"
    );
    assert!(agent.running(), "an outage never ends the agent");
    assert_eq!(agent.get("/healthz").0, 200, "alive while the API is down");
    assert_eq!(agent.get("/readyz").0, 503);
    s.server.restart();
    s.wait_slice("published once the server is back", |_| true);
    // The server has the slice a moment before the agent's line saying so is read here.
    agent.log.wait_for("created with 1 device(s)", DEADLINE);
    let back = agent.log.wait_for("works again", DEADLINE);
    assert!(
        back.contains(&format!(
            "the API server at {} works again",
            s.server.base_url()
        )),
        "{back}"
    );
    let lines = agent.log.lines();
    let problems: Vec<&String> = lines
        .iter()
        .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && !l.contains("probe: "))
        .collect();
    assert_eq!(
        problems.len(),
        1,
        "the outage once, not per retry or per loop: {problems:#?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("kube_client") && !l.contains("kube_runtime")),
        "no lines from the client library: {lines:#?}"
    );
    assert!(agent.running());

    // An outage while running, seen by the server: every request answered 503 (an API server
    // behind a load balancer with no healthy backend). Nothing claims it is over before it is
    // (a restarted watcher is not a recovery), and each retry stays out of the log.
    let mark = s.server.request_mark();
    s.wait_resyncs(mark, 1);
    let recovered = agent.log.count("works again");
    let logged = agent.log.lines().len();
    let mark = s.server.request_mark();
    s.server.fail_next(1_000_000, Fault::ServiceUnavailable);
    agent
        .log
        .wait_for_nth("503 ServiceUnavailable", 1, DEADLINE);
    let failed_then = s.server.requests_since(mark).len();
    s.server
        .wait_until(DEADLINE, |s| {
            let failed = s.requests_since(mark + failed_then);
            let kinds = |verb: &str| {
                failed
                    .iter()
                    .filter(|r| r.status == 503 && r.verb == verb)
                    .count()
            };
            // After the first report, the watcher re-listed, the publisher's resync read and
            // the render-node check listed, several times each.
            kinds("list") >= 4 && kinds("get") >= 4
        })
        .expect("the agent keeps retrying");
    let lines = agent.log.lines();
    let during: Vec<&String> = lines[logged..]
        .iter()
        .filter(|l| !l.contains("probe: "))
        .collect();
    assert_eq!(
        agent.log.count("works again"),
        recovered,
        "no recovery while the server fails: {during:#?}"
    );
    // Each activity that met it says so once (following the slice, the render-node check),
    // however many retries there were.
    assert!(
        (1..=3).contains(&during.len())
            && during
                .iter()
                .all(|l| l.contains(" WARN ") && l.contains("503 ServiceUnavailable")),
        "{during:#?}"
    );
    // Deleted meanwhile: the agent re-creates it once the server works.
    s.server
        .delete_where("resourceslices", |o| o["spec"]["nodeName"] == NODE);
    s.server.clear_faults();
    s.wait_slice("re-created after the outage", |v| generation(v) == 2);
    agent
        .log
        .wait_for_nth("works again", recovered + 1, DEADLINE);
    assert!(agent.running());
    assert_eq!(agent.get("/healthz").0, 200);
}

#[test]
fn errors_throttling_and_conflicts_mid_update_are_retried() {
    let s = setup(1);
    let agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.server.request_mark();
    let (update, slices) = (Some("update"), Some("resourceslices"));
    s.server
        .fail_next_matching(3, Fault::InternalError, update, slices);
    s.server.fail_next_matching(
        1,
        Fault::TooManyRequests {
            retry_after_seconds: 0,
        },
        update,
        slices,
    );
    s.server
        .fail_next_matching(2, Fault::Conflict, update, slices);
    // A second GPU appears: the agent must update its slice through all of that.
    s.add_gpu(1, 1);

    let slice = s.wait_slice("updated", |v| devices(v).len() == 2);
    s.server
        .wait_for_request(mark, DEADLINE, |r| r.verb == "update" && r.status == 200)
        .expect("the update succeeded in the end");
    assert_eq!(generation(&slice), 2, "one change, one generation");
    let statuses: Vec<u16> = slice_writes(&s.server, mark)
        .iter()
        .map(|r| r.status)
        .collect();
    for status in [500, 429, 409, 200] {
        assert!(statuses.contains(&status), "{status} in {statuses:?}");
    }
    // Conflicts re-read the slice.
    assert!(
        s.server
            .requests_since(mark)
            .iter()
            .any(|r| is_slice_get(r) && r.status == 200)
    );
    // Three identical 500s: one warning, and a recovery line.
    agent
        .log
        .wait_for("publish the ResourceSlice: works again", DEADLINE);
    assert_eq!(
        agent
            .log
            .count("publish the ResourceSlice: update ResourceSlice gpu-node-1-media.liken.sh: 500 InternalError: Internal error occurred: injected fault; retrying"),
        1,
        "{:#?}",
        agent.log.lines()
    );
    assert!(metric(&agent, "media_capabilities_publish_errors_total") >= 3.0);
}

#[test]
fn a_throttled_write_waits_as_long_as_the_server_asks() {
    // Priority and fairness answers 429 in plain text, with only a Retry-After header to say
    // how long to wait (kube-rs's error keeps the body alone).
    let s = setup(1);
    let agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.server.request_mark();
    s.server.fail_next_matching(
        1,
        Fault::TooManyRequests {
            retry_after_seconds: 3,
        },
        Some("update"),
        Some("resourceslices"),
    );
    s.add_gpu(1, 1);
    s.wait_slice("updated", |v| devices(v).len() == 2);
    let writes = slice_writes(&s.server, mark);
    let statuses: Vec<u16> = writes.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 200], "{writes:#?}");
    let waited = writes[1].answered_at - writes[0].answered_at;
    assert!(
        waited >= Duration::from_secs(3),
        "written again after {waited:?}, though the server asked for 3 s"
    );
    assert_eq!(
        agent.log.count(
            "publish the ResourceSlice: update ResourceSlice gpu-node-1-media.liken.sh: 429 \
             TooManyRequests: Too many requests, please try again later.; retrying"
        ),
        1,
        "{:#?}",
        agent.log.lines()
    );
}

#[test]
fn a_cut_watch_and_410_gone_are_resumed_and_relisted() {
    let s = setup(1);
    let _agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);

    s.server
        .wait_until(DEADLINE, |s| s.watch_count() == 1)
        .expect("the agent watches");
    let mark = s.server.request_mark();
    assert_eq!(s.server.cut_watches(), 1);
    s.server
        .wait_for_request(mark, DEADLINE, |r| r.verb == "watch")
        .expect("the agent watches again");
    s.server
        .delete("resourceslices", "", SLICE)
        .expect("delete");
    s.wait_slice("re-created through the new watch", |v| generation(v) == 2);

    // History gone: resuming answers 410, and the agent lists again.
    let mark = s.server.request_mark();
    s.server
        .wait_until(DEADLINE, |s| s.watch_count() == 1)
        .expect("the agent watches again");
    // A change the agent's watch does not see moves the store past the watch's last version;
    // with the history gone, resuming from that version is answered 410 Gone.
    s.server
        .patch(
            "nodes",
            "",
            NODE,
            &json!({"metadata": {"labels": {"moved": "on"}}}),
        )
        .expect("label the Node");
    s.server.compact();
    assert_eq!(s.server.cut_watches(), 1);
    s.server
        .wait_for_request(mark, DEADLINE, |r| {
            r.verb == "list" && r.resource.as_deref() == Some("resourceslices")
        })
        .expect("the agent re-lists after 410");
    s.server
        .delete("resourceslices", "", SLICE)
        .expect("delete");
    s.wait_slice("re-created after the re-list", |v| generation(v) == 3);
}

#[test]
fn a_server_that_drops_allow_multiple_allocations_gets_one_warning() {
    let s = setup_with(
        Config {
            consumable_capacity: false,
            ..Config::default()
        },
        2,
    );
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
    let mark = s.server.request_mark();
    s.wait_resyncs(mark, 5);
    assert_eq!(slice_writes(&s.server, mark), []);
    assert_eq!(agent.log.count("dropped allowMultipleAllocations"), 1);
}

#[test]
fn long_driver_and_pci_names_still_make_a_valid_slice() {
    let s = setup(0);
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
    // No create was refused on the way.
    assert!(
        s.server
            .requests()
            .iter()
            .filter(|r| r.verb == "create")
            .all(|r| r.status == 201),
        "{:#?}",
        s.server.requests()
    );
}

#[test]
fn a_node_without_gpus_publishes_an_empty_slice_and_follows_new_ones() {
    let s = setup(0);
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
        .wait_for("changed; probing the GPUs again", DEADLINE);

    for entry in std::fs::read_dir(s.reports.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let none = s.wait_slice("the GPU went away", |v| {
        v["spec"]["devices"].as_array().is_none_or(Vec::is_empty)
    });
    assert_eq!(generation(&none), 3);
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

#[test]
fn bad_files_appearing_in_the_reports_directory_cost_only_themselves() {
    let s = setup(2);
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
        let line = agent
            .log
            .wait_for(&format!(" {}", path.display()), DEADLINE);
        assert!(
            line.contains("skipping a file, reading the others: "),
            "{line}"
        );
    }
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

#[test]
fn the_kubelet_registers_and_prepares_through_the_agent() {
    let s = setup(1);
    let agent = s.start(&[]);
    s.wait_slice("published", |_| true);
    agent
        .log
        .wait_for(&format!("ResourceSlice {SLICE}: created"), DEADLINE);
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
        prepare_and_unprepare!(v1, dra.clone(), claims("one", 1));
        prepare_and_unprepare!(v1beta1, dra.clone(), claims("beta", 4));
        // Concurrent calls on both versions, as the kubelet makes for several pods.
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..8 {
            let dra = dra.clone();
            calls.spawn(async move {
                if i % 2 == 0 {
                    prepare_and_unprepare!(v1, dra, claims(&format!("pod{i}"), 3));
                } else {
                    prepare_and_unprepare!(v1beta1, dra, claims(&format!("pod{i}"), 3));
                }
            });
        }
        while let Some(done) = calls.join_next().await {
            done.expect("a concurrent call failed");
        }
    });
}

#[test]
fn sigterm_exits_promptly_and_leaves_the_slice() {
    let s = setup(1);
    let mut agent = s.start(&[]);
    let slice = s.wait_slice("published", |_| true);
    runtime().block_on(kubelet_registers(&agent, ""));
    assert!(agent.registration_socket().exists() && agent.dra_socket().exists());

    let mark = s.server.request_mark();
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
    assert_eq!(slice_writes(&s.server, mark), [], "the slice is left alone");
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

#[test]
fn a_health_port_in_use_ends_the_start_and_leaves_no_sockets_for_the_kubelet() {
    // Sockets left behind would be dialled by the kubelet's plugin watcher, each dial blocking
    // and backing off per path, which can delay the next agent's registration.
    let s = setup(1);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("plugins_registry");
    let plugins = dir.path().join("plugins/media.liken.sh");
    let out = std::process::Command::new(AGENT)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("NODE_NAME", NODE)
        .arg("--reports")
        .arg(s.reports.path())
        .arg("--kubeconfig")
        .arg(s.server.kubeconfig())
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

#[test]
fn slices_in_the_way_are_replaced_or_removed() {
    let s = setup(1);
    // Our name and driver, but another pool: immutable, so it can only be replaced.
    let mut other_pool = foreign_slice(SLICE, DRIVER, NODE);
    other_pool["spec"]["pool"]["name"] = json!("old-pool");
    s.server.put(other_pool).expect("a slice with our name");
    // Our driver and node under another name: it would compete with our pool.
    s.server
        .put(foreign_slice("gpu-node-1-old", DRIVER, NODE))
        .expect("a stray slice");
    // Another node's slice of our driver: none of this agent's business.
    s.server
        .put(foreign_slice(
            "gpu-node-2-media.liken.sh",
            DRIVER,
            "gpu-node-2",
        ))
        .expect("another node's slice");

    let agent = s.start(&[]);
    s.server
        .wait_until(DEADLINE, |s| {
            s.get("resourceslices", "", SLICE)
                .is_some_and(|v| v["spec"]["pool"]["name"] == NODE)
                && s.get("resourceslices", "", "gpu-node-1-old").is_none()
        })
        .expect("ours replaced, the stray one deleted");
    agent.log.wait_for(
        "which cannot be changed; deleting it and creating this node's",
        DEADLINE,
    );
    let slice = s.slice().unwrap();
    assert!(
        generation(&slice) > 7,
        "never behind what was stored: {slice}"
    );
    assert_eq!(devices(&slice).len(), 1);
    assert!(
        s.server
            .get("resourceslices", "", "gpu-node-2-media.liken.sh")
            .is_some()
    );
}

#[test]
fn a_stray_that_cannot_be_deleted_is_outbid_in_the_pool() {
    // A slice of our pool under another name, at a high generation, whose deletion is refused:
    // the scheduler takes a pool's slices of its highest generation only, so ours must be above.
    let s = setup(1);
    s.server
        .put(foreign_slice("gpu-node-1-old", DRIVER, NODE))
        .expect("a stray slice at generation 7");
    s.server
        .fail_next_matching(1, Fault::Forbidden, Some("delete"), Some("resourceslices"));
    let agent = s.start(&[]);
    agent.log.wait_for(
        "delete ResourceSlice gpu-node-1-old: refused, 403 Forbidden",
        DEADLINE,
    );
    s.server
        .wait_until(DEADLINE, |s| {
            s.get("resourceslices", "", SLICE)
                .is_some_and(|v| generation(&v) > 7)
        })
        .expect("ours published above the stray");
    assert!(
        s.server
            .get("resourceslices", "", "gpu-node-1-old")
            .is_some(),
        "the refused delete left it"
    );
}

#[test]
fn another_drivers_slice_with_our_name_is_left_alone_and_said() {
    let s = setup(1);
    let theirs = s
        .server
        .put(foreign_slice(SLICE, "other.example.com", NODE))
        .expect("another driver's slice with our name");
    let mut agent = s.start(&[]);
    let line = agent
        .log
        .wait_for("belongs to driver other.example.com", DEADLINE);
    assert!(line.contains(" ERROR "), "{line}");
    assert!(
        line.contains(&format!(
            "ResourceSlice {SLICE} belongs to driver other.example.com, not media.liken.sh, so \
             this node's slice cannot be published under its name; another driver's object is \
             left alone (hint: see who made it: kubectl get resourceslice {SLICE} -o yaml; \
             delete it if nothing needs it)"
        )),
        "{line}"
    );
    // Retried (read again) with backoff, said once, never deleted or overwritten.
    let mark = s.server.request_mark();
    s.wait_resyncs(mark, 3);
    assert_eq!(slice_writes(&s.server, mark), []);
    assert_eq!(
        s.slice().unwrap()["metadata"]["uid"],
        theirs["metadata"]["uid"]
    );
    assert_eq!(agent.log.count("belongs to driver other.example.com"), 1);
    assert_eq!(agent.get("/readyz").0, 503);
    assert!(agent.running());

    // Once it is gone (the agent's watch does not see other drivers' slices), ours follows.
    s.server
        .delete("resourceslices", "", SLICE)
        .expect("someone removes it");
    s.wait_slice("published", |v| v["spec"]["driver"] == DRIVER);
}

// --- refusals, server changes, liveness, render nodes ------------------------------------------

const POLICY: &str = "media-capabilities-node-bound";

/// The ValidatingAdmissionPolicy of deploy/ denying a write (issue 14): as kube-apiserver
/// answers it, 422 Invalid unless the validation's reason is Forbidden.
fn denied(forbidden: bool) -> Fault {
    Fault::AdmissionDenied {
        policy: POLICY,
        binding: POLICY,
        message: "a media-capabilities agent may write only the media.liken.sh ResourceSlice of its own node",
        forbidden,
    }
}

#[test]
fn a_denied_write_leaves_the_slice_and_is_reported_once() {
    let s = setup(1);
    let agent = s.start(&[]);
    let original = s.wait_slice("first publish", |_| true);
    agent
        .log
        .wait_for(&format!("ResourceSlice {SLICE}: created"), DEADLINE);

    // A policy denies every update from now on; a second GPU appears, so the agent must try.
    let mark = s.server.request_mark();
    s.server.fail_next_matching(
        1_000_000,
        denied(false),
        Some("update"),
        Some("resourceslices"),
    );
    s.add_gpu(1, 1);

    // Several refused attempts, with backoff between them.
    s.server
        .wait_until(DEADLINE, |s| {
            s.requests_since(mark)
                .iter()
                .filter(|r| r.verb == "update" && r.status == 422)
                .count()
                >= 3
        })
        .expect("the agent retries the refused update");
    let line = agent.log.wait_for("denied request", DEADLINE);
    assert!(line.contains(" ERROR "), "{line}");
    assert!(
        line.contains(&format!(
            "update ResourceSlice {SLICE}: refused, 422 Invalid: resourceslices.resource.k8s.io \"{SLICE}\" is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: a media-capabilities agent may write only"
        )),
        "the verb, the resource and the server's message: {line}"
    );
    assert!(line.contains("the stored slice is left as it is"), "{line}");
    assert_eq!(agent.log.count("denied request"), 1, "once, not per retry");
    assert!(
        agent
            .log
            .lines()
            .iter()
            .all(|l| !l.contains("{") || l.contains("probe: ")),
        "no Debug dumps: {:#?}",
        agent.log.lines()
    );
    // The slice stays as it was: never deleted, not re-created.
    assert!(
        s.server
            .requests_since(mark)
            .iter()
            .all(|r| r.verb != "delete" && r.verb != "create"),
        "{:#?}",
        s.server.requests_since(mark)
    );
    let stored = s.slice().expect("the slice stays");
    assert_eq!(stored["metadata"]["uid"], original["metadata"]["uid"]);
    assert_eq!(devices(&stored), devices(&original));
    let (status, body) = agent.get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("the API server refuses this agent's writes"),
        "{body}"
    );
    assert!(
        metric(
            &agent,
            "media_capabilities_slice_write_refusals_total{verb=\"update\",code=\"422\"}"
        ) >= 1.0
    );

    // The policy is fixed: the update goes through, and the agent says so once.
    s.server.clear_faults();
    s.wait_slice("updated once the policy allows it", |v| {
        devices(v).len() == 2
    });
    agent
        .log
        .wait_for("accepts this agent's requests again", DEADLINE);
    agent
        .log
        .wait_for("publish the ResourceSlice: works again", DEADLINE);
    let (_, body) = agent.get("/readyz");
    assert!(!body.contains("refuses"), "{body}");
    assert_eq!(
        s.slice().unwrap()["metadata"]["uid"],
        original["metadata"]["uid"]
    );
}

/// A load balancer's HTML page instead of the API server's answer (as while the control plane is
/// upgraded) is a server error like any other: retried, said once on one line by its HTTP code
/// and the page's own words, and the update gets through once the API answers again.
#[test]
fn a_load_balancers_page_is_retried_and_said_by_its_code() {
    let s = setup(1);
    let agent = s.start(&[]);
    s.wait_slice("first publish", |_| true);

    let mark = s.server.request_mark();
    s.server.fail_next_matching(
        3,
        Fault::GatewayPage { code: 502 },
        Some("update"),
        Some("resourceslices"),
    );
    s.add_gpu(1, 1);

    let slice = s.wait_slice("updated", |v| devices(v).len() == 2);
    assert_eq!(generation(&slice), 2);
    let statuses: Vec<u16> = slice_writes(&s.server, mark)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [502, 502, 502, 200]);
    agent
        .log
        .wait_for("publish the ResourceSlice: works again", DEADLINE);
    let said = "publish the ResourceSlice: update ResourceSlice gpu-node-1-media.liken.sh: \
                502 BadGateway: <html> <head><title>502 Bad Gateway</title></head> <body> \
                <center><h1>502 Bad Gateway</h1></center> </body> </html>; retrying";
    assert_eq!(agent.log.count(said), 1, "{:#?}", agent.log.lines());
}

#[test]
fn no_sequence_of_answers_takes_the_node_s_slice_away() {
    // Property-style: rounds of random answers to the agent's writes (outages, throttling,
    // conflicts, refusals of every kind), each followed by a content change the agent must get
    // through. Whatever the sequence, the slice is never deleted or re-created, and once the
    // server answers normally again it holds exactly what the agent wants.
    let seed = std::env::var("AGENT_PROPERTY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("no_sequence_of_answers_takes_the_node_s_slice_away: AGENT_PROPERTY_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let answers = [
        Fault::InternalError,
        Fault::ServiceUnavailable,
        Fault::TooManyRequests {
            retry_after_seconds: 0,
        },
        Fault::Conflict,
        Fault::Forbidden,
        Fault::Unauthorized,
        denied(false),
        denied(true),
        Fault::Invalid {
            field: "spec.devices[0].attributes[vaDriver].string",
            value: "\"x\"",
            detail: "must be no more than 64 bytes",
        },
        Fault::GatewayPage { code: 502 },
        Fault::GatewayPage { code: 503 },
    ];
    let s = setup(1);
    let _agent = s.start(&[]);
    let original = s.wait_slice("first publish", |_| true);
    let records = crate::support::agent::example_records();
    let rounds = 6;
    for round in 1..=rounds {
        let mark = s.server.request_mark();
        let n = rng.usize(1..=5);
        let mut injected = Vec::new();
        for _ in 0..n {
            let fault = answers[rng.usize(..answers.len())];
            // Mostly on the write; sometimes on the read a conflict makes, or on the Node.
            let (verb, resource) = match rng.u8(..10) {
                0 => (Some("get"), Some("resourceslices")),
                1 => (Some("get"), Some("nodes")),
                _ => (Some("update"), Some("resourceslices")),
            };
            injected.push(format!("{fault:?} on {verb:?} {resource:?}"));
            s.server.fail_next_matching(1, fault, verb, resource);
        }
        let mut record = records[round % records.len()].clone();
        set_gpu_index(&mut record, round);
        write_record(s.reports.path(), &record);
        let slice = s.wait_slice(
            &format!("round {round} (seed {seed}) after {injected:?}"),
            |v| devices(v).len() == round + 1,
        );
        assert_eq!(
            generation(&slice),
            i64::try_from(round).unwrap() + 1,
            "seed {seed}"
        );
        assert_eq!(
            slice["metadata"]["uid"], original["metadata"]["uid"],
            "never re-created (seed {seed}, {injected:?})"
        );
        let writes = slice_writes(&s.server, mark);
        assert!(
            writes.iter().all(|r| r.verb == "update"),
            "only updates (seed {seed}, {injected:?}): {writes:#?}"
        );
        s.server.clear_faults();
    }
}

#[test]
fn a_server_that_adds_a_field_is_told_once_and_not_fought() {
    let s = setup(2);
    // A mutating admission policy tags every device with a zone.
    s.server
        .set_device_attribute_default(Some(("example.com/zone", json!({"string": "zone-a"}))));
    let agent = s.start(&[]);
    let slice = s.wait_slice("published", |_| true);
    assert!(
        devices(&slice)
            .iter()
            .all(|d| d["attributes"]["example.com/zone"]["string"] == "zone-a")
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
    let mark = s.server.request_mark();
    s.server.send_bookmarks();
    s.wait_resyncs(mark, 5);
    assert_eq!(slice_writes(&s.server, mark), []);
    // A real change is still written, once.
    s.add_gpu(2, 2);
    s.wait_slice("a GPU appeared", |v| devices(v).len() == 3);
    let mark = s.server.request_mark();
    s.wait_resyncs(mark, 5);
    assert_eq!(slice_writes(&s.server, mark), []);
    assert_eq!(
        agent
            .log
            .count("the API server changes what this agent writes"),
        1
    );

    // The policy goes away: the next write's answer keeps what was sent, and the agent says so.
    s.server.set_device_attribute_default(None);
    s.server
        .delete_where("resourceslices", |o| o["spec"]["nodeName"] == NODE);
    s.wait_slice("re-created", |v| {
        devices(v)
            .iter()
            .all(|d| d["attributes"].get("example.com/zone").is_none())
    });
    agent.log.wait_for(
        "stores ResourceSlice gpu-node-1-media.liken.sh as sent again",
        DEADLINE,
    );
    assert_eq!(
        metric(&agent, "media_capabilities_server_changed_fields"),
        0.0
    );
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

#[test]
fn gpus_liken_publishes_that_the_claim_did_not_bring_are_named() {
    let s = setup(1); // The agent can open 0000:01:00.0.
    s.server
        .put(liken_slice(NODE, &["0000:01:00.0", "0000:09:00.0"]))
        .expect("liken's slice");
    // Another node's GPUs are not this agent's business.
    s.server
        .put(liken_slice("gpu-node-2", &["0000:07:00.0"]))
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
    let mark = s.server.request_mark();
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
        use media_operator::agent::health::{Health, Liveness};

        let sockets = tempfile::tempdir().expect("temp dir for the kubelet sockets");
        let reports = s.reports.path().to_str().unwrap().to_string();
        let kubeconfig = s.server.kubeconfig().to_str().unwrap().to_string();
        let registry = sockets.path().join("plugins_registry");
        let plugins = sockets.path().join("plugins/media.liken.sh");
        let mut args: Vec<String> = [
            "media-capabilities",
            "--node-name",
            NODE,
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

#[test]
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

fn a_wedged_loop_is_named(wedged: &str) {
    let s = setup(1);
    // A second of margin: a loaded test machine never makes a healthy loop that late.
    let agent = InProcess::start(&s, Duration::from_secs(1));
    s.wait_slice("published", |_| true);
    let (status, body) = agent.healthz();
    assert_eq!(status, 200, "{wedged}: {body}");

    assert!(
        agent.health.liveness.wedge(wedged),
        "{wedged} has a heartbeat"
    );
    let mut last = (0, String::new());
    s.server
        .wait_until(DEADLINE, |_| {
            last = agent.healthz();
            last.0 == 500
        })
        .unwrap_or_else(|e| panic!("{wedged}: {e}; last /healthz: {last:?}"));
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
