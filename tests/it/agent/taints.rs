//! The taints of failed GPUs on the real API server: with DRADeviceTaints on (the shared agent
//! control plane) the failed GPU carries the key and effect the agent was given and the value
//! saying why, keeps the time the server stamped while it stays failed, and loses the taint once
//! it works; with 1.34's default gates the server drops the taints, the agent says so once and
//! publishes the rest without fighting the server.

use super::*;

/// GPU number 1 of `write_fleet`: the example fleet's amd-2, whose vaInitialize failed.
const FAILED: &str = "pci-0000-02-00-0";
/// GPU number 0: amd-1, working.
const WORKING: &str = "pci-0000-01-00-0";

fn device<'a>(slice: &'a Value, name: &str) -> &'a Value {
    devices(slice)
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name}: {slice}"))
}

fn taints(slice: &Value, name: &str) -> Vec<Value> {
    device(slice, name)["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A record of GPU `index` whose probe timed out: the driver stopped answering.
fn not_answering(index: usize) -> Value {
    let mut record = crate::support::agent::example_records()[0].clone();
    set_gpu_index(&mut record, index);
    record.as_object_mut().unwrap().remove("report");
    record["failure"] = json!(
        "probe of /dev/dri/renderD129 (0000:02:00.0) timed out after 15.0s and was killed with its process group; libva said nothing"
    );
    record["failure_kind"] = json!("not-answering");
    record
}

cp_test! {
fn a_failed_gpu_carries_the_chosen_taint_until_it_works_again() {
    let s = setup("taint-on", 2);
    let agent = s.start(&["--taint-key", "media.liken.sh/gpu-lost", "--taint-effect", "NoExecute"]);
    let slice = s.wait_slice("the failed GPU tainted", |slice| !taints(slice, FAILED).is_empty());
    let taint = &taints(&slice, FAILED)[0];
    assert_eq!(taint["key"], "media.liken.sh/gpu-lost", "{taint}");
    assert_eq!(taint["value"], "query-failed", "{taint}");
    assert_eq!(taint["effect"], "NoExecute", "{taint}");
    let stamped = taint["timeAdded"].clone();
    assert!(stamped.is_string(), "the server stamps the time: {taint}");
    assert_eq!(taints(&slice, FAILED).len(), 1);
    assert!(taints(&slice, WORKING).is_empty());
    // The seed's rule stands beside the taint.
    let attributes = device(&slice, FAILED)["attributes"].as_object().unwrap();
    assert!(attributes.get("vaDriver").is_none());
    assert!(attributes.values().filter(|v| v.get("bool").is_some()).all(|v| v["bool"] == false));
    assert_eq!(metric(&agent, "media_capabilities_failed_gpus"), 1.0);
    assert_eq!(metric(&agent, "media_capabilities_taints_dropped"), 0.0);

    // Another GPU comes: the failed one keeps its taint and the time it was first stamped.
    s.add_gpu(0, 2);
    let slice = s.wait_slice("three GPUs", |slice| devices(slice).len() == 3);
    assert_eq!(taints(&slice, FAILED)[0]["timeAdded"], stamped);

    // It stops answering instead: the value says so (the failure was already published).
    write_record(s.reports.path(), &not_answering(1));
    let slice = s.wait_slice("not answering", |slice| {
        taints(slice, FAILED).first().is_some_and(|t| t["value"] == "not-answering")
    });
    assert_eq!(taints(&slice, FAILED).len(), 1);

    // It works again: no taint, its capabilities back.
    s.add_gpu(0, 1);
    let slice = s.wait_slice("working again", |slice| taints(slice, FAILED).is_empty());
    assert!(device(&slice, FAILED)["attributes"].get("vaDriver").is_some());
    wait("no failed GPU counted", || metric(&agent, "media_capabilities_failed_gpus") == 0.0);
    let problems: Vec<String> = agent
        .log
        .lines()
        .into_iter()
        .filter(|l| l.contains(" WARN ") && !l.contains("failed after it worked"))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}
}

cp_test! {
fn a_server_that_drops_taints_gets_one_warning_and_the_rest_is_published() {
    // 1.34 with its default gates: DRADeviceTaints is off.
    let s = Setup::on(default_cluster(), "taint-off", 2);
    let agent = s.start(&[]);
    let slice = s.wait_slice("published", |_| true);
    assert!(devices(&slice).iter().all(|d| d.get("taints").is_none()), "{slice}");
    let attributes = device(&slice, FAILED)["attributes"].as_object().unwrap();
    assert!(attributes.get("vaDriver").is_none(), "the rest is published as ever");
    assert!(device(&slice, WORKING)["attributes"].get("vaDriver").is_some());
    agent.log.wait_for("dropped the taints", DEADLINE);
    assert_eq!(metric(&agent, "media_capabilities_taints_dropped"), 1.0);
    let (_, body) = agent.get("/readyz");
    assert!(body.contains("warning:") && body.contains("DRADeviceTaints"), "{body}");
    assert!(body.contains("resource.k8s.io/v1alpha3=true"), "{body}");

    // Not fought: no rewrites over five resyncs, and the warning is said once.
    let mark = s.audit.mark();
    s.wait_resyncs(mark, 5);
    assert_eq!(s.slice_writes(mark).len(), 0, "{:#?}", s.slice_writes(mark));
    assert_eq!(agent.log.count("dropped the taints"), 1);
}
}
