//! `kubectl media why` as a user runs it: the real binary with a scrubbed environment, on the
//! pending-pod scenarios of docs/examples/why/ built on the example fleet. The explanations are
//! snapshotted; exit codes, the JSON schema, the same answer from the real control plane as from
//! the files, missing permissions (the real server's RBAC) and bad input are checked.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::support::controlplane::{self, ControlPlane};
use crate::support::objects;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example(name: &str) -> String {
    root()
        .join("docs/examples")
        .join(name)
        .display()
        .to_string()
}

/// The files every scenario reads: the fleet, its nodes and the product document's classes.
fn fleet_files() -> Vec<String> {
    let mut files: Vec<String> = ["fleet.yaml", "why/nodes.yaml"]
        .iter()
        .map(|f| example(f))
        .collect();
    files.push(
        root()
            .join("deploy/examples/classes.yaml")
            .display()
            .to_string(),
    );
    files
}

fn run(args: &[&str], kubeconfig: Option<&std::path::Path>) -> Output {
    match kubeconfig {
        Some(kubeconfig) => crate::kubectl_media(args, kubeconfig),
        None => {
            let home = tempfile::tempdir().unwrap();
            crate::support::timing::plugin(env!("CARGO_BIN_EXE_kubectl-media"), args, home.path())
                .output()
                .unwrap()
        }
    }
}

/// `why` on a scenario file, from files.
fn why_files(target: &str, scenario: &str, extra: &[&str]) -> Output {
    why_on(target, &example(&format!("why/{scenario}.yaml")), extra)
}

/// `why` on the fleet's files and `file`.
fn why_on(target: &str, file: &str, extra: &[&str]) -> Output {
    let args = why_args(target, file, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args, None)
}

/// The arguments of [`why_on`].
fn why_args(target: &str, file: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["why".to_owned(), target.to_owned()];
    for fleet in fleet_files() {
        args.extend(["-f".to_owned(), fleet]);
    }
    args.extend(["-f".to_owned(), file.to_owned()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn text(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert!(stderr.is_empty(), "stderr: {stderr}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The product document's classes and the objects of `scenarios`, to load into a control plane.
/// The pods are kept from the real scheduler (`schedulerName`): a scenario is a recorded state,
/// which the scheduler would decide anew, writing its own events and conditions (the flow tests
/// in tests/it/controlplane/product.rs have it decide). `why` does not read the field.
pub(crate) fn scenario_objects(scenarios: &[&str]) -> Vec<Value> {
    let mut files = vec![root().join("deploy/examples/classes.yaml")];
    files.extend(
        scenarios
            .iter()
            .map(|s| root().join(format!("docs/examples/why/{s}.yaml"))),
    );
    let mut loaded = objects::from_files(&files);
    for object in &mut loaded {
        if object["kind"] == "Pod" {
            object["spec"]["schedulerName"] = "recorded-scenario".into();
        }
    }
    loaded
}

/// The control plane holding the example fleet and `scenario` (see [`scenario_objects`]).
/// all-taken allocates every GPU to the agents' claims, so it has one of its own, on 1.34's
/// default gates; the others share the fleet's ([`crate::cluster::fleet_cluster`]).
fn cluster_of(scenario: &str) -> &'static ControlPlane {
    static ALL_TAKEN: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    match scenario {
        "all-taken" => ALL_TAKEN
            .get_or_init(|| {
                let cp = controlplane::shared_with("all-taken", &[])?;
                let mut loaded = crate::cluster::example_fleet();
                loaded.extend(scenario_objects(&["all-taken"]));
                objects::create(&cp, &loaded);
                Ok(cp)
            })
            .as_ref()
            .unwrap_or_else(|e| panic!("{e}")),
        s if crate::cluster::FLEET_SCENARIOS.contains(&s) => crate::cluster::fleet_cluster(),
        s => panic!("no control plane holds the scenario {s}"),
    }
}

/// What `why` reads, each as `plural.group` for [`objects::reader`].
const READS: [&str; 7] = [
    "pods",
    "events",
    "nodes",
    "resourceslices.resource.k8s.io",
    "deviceclasses.resource.k8s.io",
    "resourceclaims.resource.k8s.io",
    "resourceclaimtemplates.resource.k8s.io",
];

/// A kubeconfig of a reader of `scenario`'s control plane who may list all that `why` reads
/// but `without`, and `in_media` in the namespace media only.
fn reader_without(
    scenario: &str,
    dir: &Path,
    name: &str,
    without: &[&str],
    in_media: &[&str],
) -> PathBuf {
    let granted: Vec<&str> = READS.into_iter().filter(|r| !without.contains(r)).collect();
    let namespaced: &[(&str, &[&str])] = &[("media", in_media)];
    objects::reader(
        cluster_of(scenario),
        dir,
        name,
        &granted,
        if in_media.is_empty() { &[] } else { namespaced },
    )
}

#[test]
fn no_gpu_the_pod_may_use_qualifies() {
    let out = why_files(
        "archive-0",
        "no-gpu-qualifies",
        &["--kubernetes-version", "1.36"],
    );
    let explanation = text(&out, 3);
    insta::assert_snapshot!("why-no-gpu-qualifies", explanation);
    assert!(explanation.contains("decodeVC1 is false"));
    assert!(
        explanation.contains("the pod's nodeSelector wants gpu-pool=datacenter: edge-1, tgl-1")
    );
    // The way forward: which clause, dropped, lets GPUs qualify; and the product's fallback.
    assert!(
        explanation
            .contains("without device.attributes[\"media.liken.sh\"].encodeHEVCMain10LowPower")
    );
    assert!(explanation.contains("a second claim on any render node"));
}

#[test]
fn qualifying_gpus_all_taken() {
    let out = why_files("film-0", "all-taken", &["--kubernetes-version", "1.35"]);
    let explanation = text(&out, 3);
    insta::assert_snapshot!("why-all-taken", explanation);
    assert!(explanation.contains("9 of 17 devices pass the selectors, 0 free"));
    assert!(explanation.contains("liken-system/media-capabilities-amd-1-render-2kq8x"));
}

#[test]
fn shareable_devices_held_by_unshared_allocations() {
    // At 1.36 the render nodes allow multiple allocations, and DRAConsumableCapacity is on; the
    // agents' claims were allocated without a shareID (as before the gate), so the scheduler
    // counts them as exclusive. Making the devices shareable is not the way: they are.
    let out = why_files("film-0", "all-taken", &["--kubernetes-version", "1.36"]);
    let explanation = text(&out, 3);
    assert!(
        explanation.contains(
            "    shareable, but held exclusively (the holders' allocations have no shareID):\n"
        ),
        "{explanation}"
    );
    assert!(!explanation.contains("not shareable"), "{explanation}");
    assert!(
        !explanation.contains("make the devices shareable"),
        "{explanation}"
    );
    assert!(
        explanation.contains("hold them exclusively: their allocations have no shareID"),
        "{explanation}"
    );
    assert!(
        explanation.contains(
            "for the media-capabilities agents, kubectl -n liken-system rollout restart daemonset/media-capabilities"
        ),
        "{explanation}"
    );
    // At 1.35 the gate is off: the devices are not shareable, and the advice says so.
    let explanation = text(
        &why_files("film-0", "all-taken", &["--kubernetes-version", "1.35"]),
        3,
    );
    assert!(explanation.contains("allocated to other claims, and not shareable:"));
    assert!(explanation.contains("make the devices shareable"));
}

#[test]
fn each_request_satisfiable_never_on_one_gpu() {
    let out = why_files(
        "proxy-0",
        "never-one-gpu",
        &["--kubernetes-version", "1.36"],
    );
    let explanation = text(&out, 3);
    insta::assert_snapshot!("why-never-one-gpu", explanation);
    assert!(explanation.contains(
        "each request can be served, never on one GPU (request decodes on GPU 0000:01:00.0; \
         request encodes on GPU 0000:00:02.0): ws-1"
    ));
    // The devices of the other driver: what the class wants, not the devices' driver twice.
    assert!(explanation.contains(
        "    liken.sh devices, where class media-gpu selector #0 wants device.driver == \
         \"media.liken.sh\": 11 devices on 10 nodes\n"
    ));
}

#[test]
fn a_typo_in_a_class() {
    let out = why_files("review-0", "class-typo", &["--kubernetes-version", "1.36"]);
    let explanation = text(&out, 3);
    insta::assert_snapshot!("why-class-typo", explanation);
    assert!(explanation.contains("CEL runtime error: no such key: decodeHevcMain10"));
    assert!(explanation.contains("did you mean media.liken.sh/decodeHEVCMain10?"));
}

/// A selector whose static cost estimate (8,852,659) is over the API server's limit.
const COSTLY: &str = "cel.bind(m, device.attributes[\"media.liken.sh\"], m.all(a, m.all(b, \
                      m.all(c, string(m[a]).matches(string(m[b]) + string(m[c]))))))";

#[test]
fn a_selector_too_complex_for_the_api_server_is_refused_from_files_only() {
    // review-0's class with a selector whose static cost estimate is over the API server's
    // limit: from files it could never have been created, and why says so. Objects read from a
    // cluster were admitted, and are evaluated as stored (no estimate), as the scheduler does.
    let scenario = std::fs::read_to_string(example("why/class-typo.yaml")).unwrap();
    let typo = "device.attributes[\"media.liken.sh\"].decodeHevcMain10";
    assert!(scenario.contains(typo), "the scenario's class reads {typo}");
    let costly = COSTLY;
    let edited = scenario.replace(typo, costly);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("class-costly.yaml");
    std::fs::write(&file, edited).unwrap();
    let explanation = text(&why_on("review-0", &file.display().to_string(), &[]), 4);
    let (verdict, _) = verdict_and_notes(&explanation);
    assert!(
        verdict.starts_with("Undecided for pod media/review-0: class hevc10: selector #0"),
        "{explanation}"
    );
    assert!(
        explanation.contains(
            "the API server would refuse this expression: too complex, exceeds cost limit \
             (estimated 8852659, limit 1000000)"
        ),
        "{explanation}"
    );
    // The cheap selector of the other class in the claim (gpu-render) is evaluated.
    assert!(
        explanation.contains(
            "Request gpu (class gpu-render, 1 device):\n    9 of 17 devices pass the selectors"
        ),
        "{explanation}"
    );
    assert!(
        !explanation
            .lines()
            .any(|l| l.contains("gpu-render") && l.contains("too complex")),
        "{explanation}"
    );
}

/// The real kube-apiserver refuses the selector `why -f` calls too complex, in its own words
/// (the estimate itself is compared with the API server's code in tests/it/oracle/estimate.rs).
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_real_server_refuses_the_selector_why_calls_too_complex() {
    let class = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "costly"},
        "spec": {"selectors": [{"cel": {"expression": COSTLY}}]}
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("costly.json");
    std::fs::write(&file, class.to_string()).unwrap();
    let out = controlplane::shared().kubectl(&[
        "apply",
        "--dry-run=server",
        "-f",
        file.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the server took the class: {stderr}");
    assert!(
        stderr.contains(
            "spec.selectors[0].cel.expression: Forbidden: too complex, exceeds cost limit"
        ),
        "{stderr}"
    );
}

#[test]
fn every_device_with_wide() {
    let out = why_files(
        "proxy-0",
        "never-one-gpu",
        &["--kubernetes-version", "1.36", "-o", "wide"],
    );
    let explanation = text(&out, 3);
    // Each request lists all 21 devices of the fleet, one line each.
    let lines = explanation
        .lines()
        .filter(|l| l.starts_with("      ws-1  "))
        .count();
    assert_eq!(lines, 8, "{explanation}");
    // In columns under a header, as kubectl's -o wide: every row's verdict starts where the
    // header's VERDICT does.
    let header = explanation
        .lines()
        .find(|l| l.trim_start().starts_with("NODE "))
        .expect("a header");
    let column = header.find("VERDICT").unwrap();
    let rows: Vec<&str> = explanation
        .lines()
        .filter(|l| l.starts_with("      ") && (l.contains("/renderd") || l.contains("/pci-")))
        .collect();
    assert_eq!(rows.len(), 42, "{explanation}");
    for row in &rows {
        assert_ne!(row.as_bytes()[column], b' ', "{row}");
        assert_eq!(&row[column - 2..column], "  ", "{row}");
    }
    assert!(
        explanation.contains(
            "      ws-1      media.liken.sh/ws-1/pci-0000-01-00-0      0000:01:00.0  AD104 [GeForce RTX 4070]                             Available"
        ),
        "{explanation}"
    );
}

#[test]
fn json_and_yaml_follow_the_documented_schema() {
    let out = why_files(
        "film-0",
        "all-taken",
        &["--kubernetes-version", "1.35", "-o", "json"],
    );
    let record: Value = serde_json::from_str(&text(&out, 3)).unwrap();
    assert_eq!(record["schema"], "kubectl-media/why/v2");
    assert_eq!(record["kind"], "Pod");
    assert_eq!(record["name"], "media/film-0");
    assert_eq!(record["blocked"], true);
    let claim = &record["claims"][0];
    assert_eq!(claim["claim"], "media/film-0-gpu-m4d8r");
    assert_eq!(claim["template"], "decode-10bit");
    assert_eq!(claim["state"], "Pending");
    let gpu = &claim["requests"][0];
    assert_eq!(gpu["name"], "gpu");
    assert_eq!(gpu["class"], "gpu-render");
    assert_eq!(
        (gpu["qualifying"].as_u64(), gpu["available"].as_u64()),
        (Some(9), Some(0))
    );
    let taken: u64 = gpu["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["reason"] == "Taken")
        .map(|r| r["devices"].as_u64().unwrap())
        .sum();
    assert_eq!(taken, 9);
    assert_eq!(record["nodes"]["total"], 9);
    assert_eq!(
        record["nodes"]["outcomes"][0]["outcome"],
        "RequestUnsatisfied"
    );
    assert_eq!(
        record["nodes"]["outcomes"][0]["nodes"]
            .as_array()
            .unwrap()
            .len(),
        9
    );
    assert!(
        record["scheduler"]["events"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("0/9 nodes are available")
    );
    // YAML says the same.
    let out = why_files(
        "film-0",
        "all-taken",
        &["--kubernetes-version", "1.35", "-o", "yaml"],
    );
    let yaml: Value = serde_yaml::from_str(&text(&out, 3)).unwrap();
    assert_eq!(yaml, record);
}

/// The lister and the reader agree on what the real server stores: the scenario loaded into
/// the control plane explains as its files do. all-taken's control plane is 1.34 on its default
/// gates, read at that release; the fleet's has DRAConsumableCapacity on, and is read as 1.36,
/// the release the files are read at.
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_real_server_gives_the_answer_the_files_give() {
    for (scenario, pod, version) in [
        ("all-taken", "film-0", "1.34"),
        ("no-gpu-qualifies", "archive-0", "1.36"),
        ("class-typo", "review-0", "1.36"),
        ("all-taken", "claim/film-0-gpu-m4d8r", "1.34"),
    ] {
        let cp = cluster_of(scenario);
        let mut args = vec!["why", pod, "-n", "media"];
        if version != "1.34" {
            args.extend(["--kubernetes-version", version]);
        }
        let from_server = run(&args, Some(cp.kubeconfig()));
        let from_files = why_files(
            pod,
            scenario,
            &["-n", "media", "--kubernetes-version", version],
        );
        // The same, but that a suggested `why` reads the files too (at the version given).
        let mut carried: String = fleet_files().iter().map(|f| format!(" -f {f}")).collect();
        carried.push_str(&format!(" -f {}", example(&format!("why/{scenario}.yaml"))));
        let mut from_files = text(&from_files, 3).replace(&carried, "");
        if version == "1.34" {
            from_files = from_files.replace(" --kubernetes-version 1.34", "");
        }
        assert_eq!(
            text(&from_server, 3),
            from_files,
            "{scenario}: the server (Kubernetes {version}) and the files disagree"
        );
    }
    // Read at its own release, the fleet's server says why it takes DRAConsumableCapacity as on.
    let out = run(
        &["why", "archive-0", "-n", "media"],
        Some(cluster_of("no-gpu-qualifies").kubeconfig()),
    );
    assert!(
        text(&out, 3).contains(
            "DRAConsumableCapacity taken as on: the API server stored allowMultipleAllocations"
        ),
        "{out:?}"
    );
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_kind_we_may_not_list_is_said_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let no_events = reader_without("all-taken", dir.path(), "why-no-events", &["events"], &[]);
    let out = run(&["why", "film-0", "-n", "media"], Some(&no_events));
    let explanation = text(&out, 3);
    assert!(
        explanation.contains(
            "note: events were not read (forbidden: cannot list events in the namespace \"media\""
        ),
        "{explanation}"
    );
    assert!(explanation.contains("the scheduler's and the kubelet's messages are not shown"));
    // The pod's own condition is still read; the events are not.
    assert!(
        explanation.contains("PodScheduled=False Unschedulable"),
        "{explanation}"
    );
    assert!(!explanation.contains("FailedScheduling"), "{explanation}");
    // The pod itself is another matter: without it there is nothing to explain.
    let no_pods = reader_without("all-taken", dir.path(), "why-no-pods", &["pods"], &[]);
    let out = run(&["why", "film-0", "-n", "media"], Some(&no_pods));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: forbidden: cannot list pods in the namespace \"media\""),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn bad_input_gets_one_line() {
    // A pod that is in another namespace; a near miss; none at all.
    let e = crate::one_error_line(
        why_files("archive-0", "no-gpu-qualifies", &["-n", "default"]),
        1,
    );
    assert_eq!(
        e,
        "error: pod default/archive-0 not found (hint: a pod of that name is in the namespace media: add -n media)\n"
    );
    let e = crate::one_error_line(
        why_files("archive-1", "no-gpu-qualifies", &["-n", "media"]),
        1,
    );
    assert!(e.contains("similar names: archive-0"), "{e}");
    // Its example reads what this run read: the namespace and the same files.
    assert!(
        e.contains(&format!(
            "e.g. kubectl media why archive-0 -n media -f {}",
            fleet_files()[0]
        )),
        "{e}"
    );
    assert!(
        e.trim_end()
            .ends_with(&format!("-f {})", example("why/no-gpu-qualifies.yaml"))),
        "{e}"
    );
    // -A: in no namespace at all, with close names from every one.
    let e = crate::one_error_line(why_files("archive-9", "no-gpu-qualifies", &["-A"]), 1);
    assert!(
        e.starts_with(
            "error: pod archive-9 not found in any namespace (hint: similar names: media/archive-0; e.g. kubectl media why archive-0 -n media -f "
        ),
        "{e}"
    );
    // Not something why explains.
    let e = crate::one_error_line(
        run(&["why", "deploy/x", "-f", &example("fleet.yaml")], None),
        2,
    );
    assert!(e.contains("cannot explain a \"deploy\""), "{e}");
    let e = crate::one_error_line(run(&["why", "x", "--kubernetes-version", "soon"], None), 2);
    assert!(e.contains("invalid Kubernetes version"), "{e}");
    let e = crate::one_error_line(run(&["why"], None), 2);
    assert!(e.contains("POD|claim/NAME"), "{e}");
    // A malformed file.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: Pod\n  metadata: [\n").unwrap();
    let e = crate::one_error_line(run(&["why", "p", "-f", bad.to_str().unwrap()], None), 1);
    assert!(e.contains("bad.yaml:"), "{e}");
    // A pod without claims.
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: plain, namespace: media}\nspec: {containers: [{name: c, image: i}]}\n",
    )
    .unwrap();
    let e = crate::one_error_line(run(&["why", "plain", "-f", pod.to_str().unwrap()], None), 1);
    assert!(e.contains("pod media/plain has no resource claims"), "{e}");
}

/// From files, a name that is not there gets the close names the files hold, from every
/// namespace unless -n chose one that has some, and never a command that asks the cluster.
#[test]
fn a_misspelt_name_in_files_gets_the_files_close_names() {
    let dir = tempfile::tempdir().unwrap();
    let pods: Vec<Value> = (0..12)
        .map(|i| {
            let (namespace, name) = if i % 2 == 0 {
                ("media", format!("film-{i}"))
            } else {
                ("jobs", format!("batch-{i}"))
            };
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            })
        })
        .collect();
    let file = dir.path().join("pods.yaml");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods});
    std::fs::write(&file, serde_yaml::to_string(&list).unwrap()).unwrap();
    let file = file.display().to_string();
    let why = |extra: &[&str]| {
        let mut args = vec!["why"];
        args.extend_from_slice(extra);
        args.extend(["-f", &file]);
        crate::error_line(run(&args, None))
    };
    let e = why(&["film0"]);
    assert_eq!(
        e,
        format!(
            "error: pod film0 not found in the files (hint: similar names: media/film-0; e.g. \
             kubectl media why film-0 -n media -f {file})"
        )
    );
    // -n of a namespace with nothing close: the files' close names, the namespace named.
    let e = why(&["batch1", "-n", "media"]);
    assert!(
        e.starts_with(
            "error: pod media/batch1 not found in the files (hint: similar names: jobs/batch-1, "
        ) && e.contains("; e.g. kubectl media why batch-1 -n jobs -f "),
        "{e}"
    );
    // -n of a namespace that has close names keeps them.
    let e = why(&["film2x", "-n", "media"]);
    assert!(
        e.starts_with("error: pod media/film2x not found (hint: similar names: film-"),
        "{e}"
    );
    // Nothing close anywhere; and claims alike.
    for (args, what) in [
        (&["zzz"][..], "pod zzz"),
        (&["claim/zzz"], "resourceclaim zzz"),
        (&["zzz", "-n", "media"], "pod media/zzz"),
    ] {
        let e = why(args);
        assert!(
            e.starts_with(&format!("error: {what} not found in the files (hint: no ")),
            "{e}"
        );
        assert!(e.ends_with("add the file that holds it with -f)"), "{e}");
    }
    for args in [&["film0"][..], &["zzz"], &["batch1", "-n", "media"]] {
        assert!(!why(args).contains("kubectl get"), "{args:?}");
    }
}

/// An object of a kind why reads that does not parse, made by editing a scenario: when it is
/// the one asked about, or a claim it names, it is the one error line, with its field; any
/// other is a warning, and the answer stands.
#[test]
fn an_object_that_does_not_parse_is_the_error_when_asked_about() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = "no-gpu-qualifies";
    // Sets `field` of the object at `pointer` (made if need be).
    let set = |kind: &'static str, name: &'static str, pointer: &'static str, to: Value| {
        move |mut v: Value| {
            if v["kind"] == kind && v["metadata"]["name"] == name {
                let (parent, field) = pointer.rsplit_once('/').unwrap();
                v.pointer_mut(parent).expect(parent)[field] = to.clone();
            }
            Some(v)
        }
    };
    let pod = edited(
        dir.path(),
        scenario,
        "pod",
        set("Pod", "archive-0", "/spec/nodeSelector", json!({"a": null})),
    );
    let e = crate::error_line(why_on("archive-0", &pod, &["-n", "media"]));
    assert_eq!(
        e,
        "error: pod media/archive-0: spec.nodeSelector.a: invalid type: null, expected a string \
         (hint: that field must have the type the Kubernetes API gives it; `kubectl get pods -n \
         media archive-0 -o yaml` shows the object as the API server keeps it)"
    );
    // Its namespace is found as a readable pod's would be.
    assert_eq!(crate::error_line(why_on("archive-0", &pod, &[])), e);
    let claim = edited(
        dir.path(),
        scenario,
        "claim",
        set(
            "ResourceClaim",
            "archive-0-gpu-x7k2q",
            "/spec/devices/requests/0/exactly/count",
            json!("3"),
        ),
    );
    let e = crate::error_line(why_on("archive-0", &claim, &["-n", "media"]));
    assert!(
        e.starts_with(
            "error: cannot explain pod media/archive-0: resourceclaim media/archive-0-gpu-x7k2q: \
             spec.devices.requests[0].exactly.count: invalid type: string \"3\", expected i64 \
             (hint: "
        ),
        "{e}"
    );
    let e = crate::error_line(why_on(
        "claim/archive-0-gpu-x7k2q",
        &claim,
        &["-n", "media"],
    ));
    assert!(
        e.starts_with("error: resourceclaim media/archive-0-gpu-x7k2q: spec.devices"),
        "{e}"
    );
    // Another pod that does not parse is a warning, its huge value cut; the answer is as
    // without it (exit 3: no GPU qualifies).
    let huge = "v".repeat(1 << 20);
    let other = edited(dir.path(), scenario, "other", move |v| {
        if v["kind"] != "Pod" {
            return Some(v);
        }
        let mut other = v.clone();
        other["metadata"]["name"] = json!("other");
        other["spec"]["priority"] = json!(huge.clone());
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [v, other]});
        Some(list)
    });
    let out = why_on("archive-0", &other, &["-n", "media"]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(
            "warning: skipped Pod \"media/other\": spec.priority: invalid type: string \"vvv"
        ) && stderr.contains("bytes cut) ...")
            && stderr.ends_with("\", expected i32\n")
            && stderr.lines().count() == 1
            && stderr.len() < 1000,
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
}

/// A pod of thousands of claims, and a claim of 10,000 requests, made here: each is answered
/// (no stack overflow in the allocator's search) in seconds of CPU. Before, the first
/// overflowed the stack and the second took 35 s, quadratic in the requests.
#[test]
fn thousands_of_claims_and_requests_are_answered_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let request = |name: String| json!({"name": name, "exactly": {"deviceClassName": "media-gpu"}});
    let claim = |name: String, requests: Vec<Value>| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "media"},
            "spec": {"devices": {"requests": requests}}})
    };
    let pod = |claims: Vec<Value>| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "big", "namespace": "media", "uid": "u"},
            "spec": {"resourceClaims": claims, "containers": [{"name": "w", "image": "i"}]}})
    };
    let many_claims = 3000;
    let mut items = vec![pod((0..many_claims)
        .map(|i| json!({"name": format!("c{i}"), "resourceClaimName": format!("claim-{i}")}))
        .collect())];
    items
        .extend((0..many_claims).map(|i| claim(format!("claim-{i}"), vec![request("gpu".into())])));
    let claims_file = dir.path().join("claims.json");
    std::fs::write(
        &claims_file,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    let requests_file = dir.path().join("requests.json");
    let items = [
        pod(vec![json!({"name": "c", "resourceClaimName": "claim"})]),
        claim(
            "claim".into(),
            (0..10_000).map(|i| request(format!("r{i}"))).collect(),
        ),
    ];
    std::fs::write(
        &requests_file,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    for (file, code, verdict) in [
        (&claims_file, 0, "Nothing in the fleet blocks pod media/big"),
        (
            &requests_file,
            3,
            "claim media/claim: number of requested devices 10000 exceeds the claim limit of 32",
        ),
    ] {
        let args = why_args("big", file.to_str().unwrap(), &["-n", "media"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let home = tempfile::tempdir().unwrap();
        let command =
            crate::support::timing::plugin(env!("CARGO_BIN_EXE_kubectl-media"), &args, home.path());
        let (exit, stdout, cpu) = crate::support::timing::cpu_timed(command);
        assert_eq!(exit, code, "{}", &stdout[..stdout.len().min(2000)]);
        assert!(
            stdout.contains(verdict),
            "{}",
            &stdout[..stdout.len().min(2000)]
        );
        // About 3 s of CPU each in a debug build (35 s before, for the requests); CPU time, so
        // that a loaded machine does not fail it.
        assert!(
            cpu > std::time::Duration::ZERO && cpu < std::time::Duration::from_secs(15),
            "{}: {cpu:?} of CPU",
            file.display()
        );
    }
}

#[test]
fn a_claim_on_its_own() {
    let out = why_files(
        "claim/film-0-gpu-m4d8r",
        "all-taken",
        &["--kubernetes-version", "1.35"],
    );
    let explanation = text(&out, 3);
    assert!(
        explanation.starts_with("No node can allocate claim media/film-0-gpu-m4d8r:"),
        "{explanation}"
    );
    assert!(
        explanation.contains("\nClaim media/film-0-gpu-m4d8r: not allocated\n"),
        "{explanation}"
    );
    // The pod that uses it lends its scheduler messages, and is pointed at.
    assert!(explanation.contains("The scheduler says, of pod media/film-0:"));
    let step = explanation
        .lines()
        .find(|l| l.contains("the claim is used by pod"))
        .unwrap_or_else(|| panic!("{explanation}"));
    let (said, command) = step
        .split_once(": kubectl media ")
        .unwrap_or_else(|| panic!("{step}"));
    assert_eq!(
        said,
        "  - the claim is used by pod media/film-0 (its node filters are applied here); for all of the pod's claims"
    );
    // From files, the suggestion reads the same files at the same version, and runs as printed:
    // it explains the pod, not a pod of the cluster.
    let mut files = fleet_files();
    files.push(example("why/all-taken.yaml"));
    let expected: String = files.iter().map(|f| format!(" -f {f}")).collect();
    assert_eq!(
        command,
        format!("why film-0 -n media{expected} --kubernetes-version 1.35")
    );
    let words: Vec<&str> = command.split(' ').collect();
    let pod = text(&run(&words, None), 3);
    assert!(
        pod.starts_with("No node can allocate the claims of pod media/film-0:"),
        "{pod}"
    );
    // From the cluster, it reads the cluster (no -f).
    #[cfg(all(have_go, have_kubectl))]
    {
        let out = run(
            &["why", "claim/film-0-gpu-m4d8r", "-n", "media"],
            Some(cluster_of("all-taken").kubeconfig()),
        );
        let explanation = String::from_utf8(out.stdout).unwrap();
        assert!(
            explanation
                .contains("; for all of the pod's claims: kubectl media why film-0 -n media\n"),
            "{explanation}"
        );
    }
}

/// `scenario` with its documents of `kind` left out, written to a file in `dir`.
fn without_kind(dir: &std::path::Path, scenario: &str, kind: &str) -> String {
    edited(dir, scenario, &format!("without-{kind}"), |v| {
        (v["kind"] != kind).then_some(v)
    })
}

/// `scenario` with each document passed through `edit` (`None` leaves it out), written to a
/// file in `dir` named after both.
fn edited(
    dir: &std::path::Path,
    scenario: &str,
    what: &str,
    edit: impl FnMut(Value) -> Option<Value>,
) -> String {
    let text = std::fs::read_to_string(example(&format!("why/{scenario}.yaml"))).unwrap();
    let kept: Vec<String> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .filter_map(edit)
        .map(|v| serde_yaml::to_string(&v).unwrap())
        .collect();
    let file = dir.join(format!("{scenario}-{what}.yaml"));
    std::fs::write(&file, kept.join("---\n")).unwrap();
    file.display().to_string()
}

#[test]
fn render_nodes_with_capacities_are_assumed_to_have_room_never_guessed() {
    // liken's render nodes shareable with a capacity (1.36, DRAConsumableCapacity on): whether
    // one more allocation fits is not modelled, so they are assumed to have room. archive-0
    // fails even so (no GPU its nodeSelector allows transcodes), which the scheduler finds
    // too: decided, exit 3, as without the capacities.
    let dir = tempfile::tempdir().unwrap();
    let text_of = std::fs::read_to_string(example("fleet.yaml")).unwrap();
    let mut fleet: Value = serde_yaml::from_str(&text_of).unwrap();
    let mut shareable = 0;
    for slice in fleet["items"].as_array_mut().unwrap() {
        if slice["spec"]["driver"] != "liken.sh" {
            continue;
        }
        for device in slice["spec"]["devices"].as_array_mut().unwrap() {
            device["allowMultipleAllocations"] = Value::Bool(true);
            device["capacity"] = serde_json::json!({"slots": {"value": "4"}});
            shareable += 1;
        }
    }
    assert_eq!(shareable, 9);
    let file = dir.path().join("fleet-capacities.yaml");
    std::fs::write(&file, serde_yaml::to_string(&fleet).unwrap()).unwrap();
    let mut args: Vec<String> = vec!["why".into(), "archive-0".into()];
    for f in [
        file.display().to_string(),
        example("why/nodes.yaml"),
        root()
            .join("deploy/examples/classes.yaml")
            .display()
            .to_string(),
        example("why/no-gpu-qualifies.yaml"),
    ] {
        args.extend(["-f".into(), f]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let explanation = text(&run(&args, None), 3);
    assert!(
        explanation.starts_with("No node can allocate the claims of pod media/archive-0: request transcodes: no device passes the selectors (7 of 9 nodes)."),
        "{explanation}"
    );
    // They pass the selectors, in one group, said once.
    assert!(
        explanation.contains("9 of 17 devices pass the selectors, 9 free"),
        "{explanation}"
    );
    assert_eq!(
        explanation
            .matches("has capacities: whether what one more allocation consumes fits")
            .count(),
        1,
        "{explanation}"
    );
}

#[test]
fn files_without_claims_leave_what_other_claims_hold_unknown() {
    // The scenario's pod before its claim was made, and its template, without ResourceClaims:
    // what other claims hold is not in the files, and that is said.
    let dir = tempfile::tempdir().unwrap();
    let file = edited(dir.path(), "no-gpu-qualifies", "not-created", |mut v| {
        if v["kind"] == "Pod" {
            v["status"]
                .as_object_mut()
                .unwrap()
                .remove("resourceClaimStatuses");
        }
        (v["kind"] != "ResourceClaim").then_some(v)
    });
    let out = why_on("archive-0", &file, &["-o", "json"]);
    let record: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let notes = record["notes"].to_string();
    assert!(
        notes.contains("resourceclaims were not read (the files hold none"),
        "{record:#}"
    );
}

#[test]
fn a_claim_whose_pod_is_unknown_or_missing_is_never_fine() {
    let dir = tempfile::tempdir().unwrap();
    let run_with = |target: &str, file: &str, code: i32| text(&why_on(target, file, &[]), code);
    // archive-0's claim names its pod (ownerReference), which the files do not hold: the
    // pod's nodeSelector, which rules tgl-1 out, is unknown. Undecided, never "nothing blocks".
    let nopod = without_kind(dir.path(), "no-gpu-qualifies", "Pod");
    let explanation = run_with("claim/archive-0-gpu-x7k2q", &nopod, 4);
    assert!(
        explanation.starts_with("Undecided for claim media/archive-0-gpu-x7k2q: the devices allow it on 1 of 9 nodes (tgl-1), but what was not checked may still block it: the node filters of pod media/archive-0, which uses the claim"),
        "{explanation}"
    );
    // Said in a note, and the step says to read the pod, not to explain it (it was not read).
    assert!(
        explanation.contains("note: not checked: the node filters of pod media/archive-0"),
        "{explanation}"
    );
    assert!(
        explanation.contains(
            "the claim is used by pod media/archive-0, which was not read: read the pod too"
        ),
        "{explanation}"
    );
    assert!(
        !explanation.contains("kubectl media why archive-0"),
        "{explanation}"
    );
    // A claim no pod uses stays Pending for that reason: the scheduler allocates claims for
    // the pods it schedules.
    let text_of = std::fs::read_to_string(example("why/no-gpu-qualifies.yaml")).unwrap();
    let lonely: Vec<Value> = serde_yaml::Deserializer::from_str(&text_of)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| v["kind"] == "ResourceClaim")
        .map(|mut v| {
            v["metadata"]["name"] = Value::from("lonely");
            v["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("ownerReferences");
            v
        })
        .collect();
    assert_eq!(lonely.len(), 1);
    let file = dir.path().join("lonely.yaml");
    let mut yaml = serde_yaml::to_string(&lonely[0]).unwrap();
    // With the pods: archive-0 is there, and uses another claim.
    yaml.push_str("---\n");
    yaml.push_str(&text_of);
    std::fs::write(&file, yaml).unwrap();
    let explanation = run_with("claim/lonely", file.to_str().unwrap(), 3);
    assert!(
        explanation.starts_with("Claim media/lonely waits: no pod uses it"),
        "{explanation}"
    );
}

#[test]
fn a_claim_takes_its_pod_s_node_filters() {
    // archive-0's nodeSelector rules out tgl-1, the only node whose devices serve its claim:
    // the claim on its own is blocked, for the same reason as the pod.
    let explanation = text(
        &why_files(
            "claim/archive-0-gpu-x7k2q",
            "no-gpu-qualifies",
            &["--kubernetes-version", "1.36"],
        ),
        3,
    );
    assert!(
        explanation.starts_with("No node can allocate claim media/archive-0-gpu-x7k2q: request transcodes: no device passes the selectors (7 of 9 nodes)."),
        "{explanation}"
    );
    assert!(
        explanation.contains("the pod's nodeSelector wants gpu-pool=datacenter: edge-1, tgl-1"),
        "{explanation}"
    );
    assert!(!explanation.contains("Nothing in the fleet blocks"));
    assert!(explanation.contains("kubectl media why archive-0 -n media"));

    // A claim reserved for a pod that is not among the objects: reserved all the same.
    let explanation = text(
        &why_files(
            "claim/media-capabilities-amd-1-render-2kq8x",
            "all-taken",
            &["-n", "liken-system", "--kubernetes-version", "1.36"],
        ),
        0,
    );
    assert!(
        explanation.starts_with("Claim liken-system/media-capabilities-amd-1-render-2kq8x is allocated on node amd-1; DRA does not hold it."),
        "{explanation}"
    );
    assert!(
        explanation.contains("\nClaim liken-system/media-capabilities-amd-1-render-2kq8x: allocated and reserved for pod liken-system/media-capabilities-amd-1\n"),
        "{explanation}"
    );
    let record: Value = serde_json::from_str(&text(
        &why_files(
            "claim/media-capabilities-amd-1-render-2kq8x",
            "all-taken",
            &["-n", "liken-system", "-o", "json"],
        ),
        0,
    ))
    .unwrap();
    assert_eq!(record["claims"][0]["state"], "Reserved");
    assert_eq!(
        record["claims"][0]["reservedFor"][0],
        "pod liken-system/media-capabilities-amd-1"
    );
    assert_eq!(record["usedBy"][0], "liken-system/media-capabilities-amd-1");
}

/// The first line of an explanation, and every `note:` line.
fn verdict_and_notes(explanation: &str) -> (String, Vec<String>) {
    let verdict = explanation.lines().next().unwrap_or_default().to_owned();
    let notes = explanation
        .lines()
        .filter(|l| l.starts_with("note: "))
        .map(str::to_owned)
        .collect();
    (verdict, notes)
}

#[test]
fn a_selector_why_does_not_evaluate_is_undecided_never_a_verdict() {
    // review-0's class, with CEL's IP library in it (which why does not evaluate): no verdict
    // either way, exit 4, and the selector named.
    let scenario = std::fs::read_to_string(example("why/class-typo.yaml")).unwrap();
    let typo = "device.attributes[\"media.liken.sh\"].decodeHevcMain10";
    assert!(scenario.contains(typo), "the scenario's class reads {typo}");
    let edited = scenario.replace(typo, "isIP(\"10.0.0.1\")");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("class-ip.yaml");
    std::fs::write(&file, edited).unwrap();
    let explanation = text(&why_on("review-0", &file.display().to_string(), &[]), 4);
    let (verdict, _) = verdict_and_notes(&explanation);
    assert!(
        verdict.starts_with("Undecided for pod media/review-0: class hevc10: selector #0"),
        "{explanation}"
    );
    // The expression, written over lines in the class, is quoted on the verdict's one line.
    assert!(
        verdict
            .ends_with(r#"(expression: device.driver == "media.liken.sh" && isIP("10.0.0.1"))."#),
        "{verdict}"
    );
    assert!(explanation.contains("Not decided:"), "{explanation}");
    assert!(
        !explanation.contains("Every scheduling attempt fails"),
        "{explanation}"
    );
}

#[test]
fn without_nodes_the_node_side_is_unchecked_never_fine() {
    // archive-0's nodeSelector rules out tgl-1, the only node whose devices serve it. Without
    // the Node objects that cannot be seen: no "nothing blocks", no exit 0.
    let mut args = vec!["why", "archive-0", "--kubernetes-version", "1.36"];
    let (fleet, classes, scenario) = (
        example("fleet.yaml"),
        root()
            .join("deploy/examples/classes.yaml")
            .display()
            .to_string(),
        example("why/no-gpu-qualifies.yaml"),
    );
    for file in [&fleet, &classes, &scenario] {
        args.extend(["-f", file]);
    }
    let explanation = text(&run(&args, None), 4);
    let (verdict, notes) = verdict_and_notes(&explanation);
    assert!(
        !explanation.contains("Nothing in the fleet blocks"),
        "{explanation}"
    );
    assert_eq!(
        verdict,
        "Undecided for pod media/archive-0: the devices allow its claims on 1 of 9 nodes (tgl-1), but what was not checked may still block it: the nodes' own filters (the pod's nodeSelector, affinity and tolerations of node taints), as no Node objects were read."
    );
    // The scheduler's own reason is not contradicted silently.
    assert!(
        explanation.contains(
            "the scheduler says \"2 node(s) didn't match Pod's node affinity/selector\": that is the side this explanation could not check"
        ),
        "{explanation}"
    );
    // One note for the nodes, with the hint for files.
    let about_nodes: Vec<&String> = notes.iter().filter(|n| n.contains("node")).collect();
    assert_eq!(about_nodes.len(), 1, "{notes:#?}");
    assert!(
        about_nodes[0].contains("kubectl get nodes -o yaml"),
        "{notes:#?}"
    );

    // From the cluster, nodes forbidden by RBAC: the same verdict and one note, with no -f hint.
    #[cfg(all(have_go, have_kubectl))]
    {
        let dir = tempfile::tempdir().unwrap();
        let reader = reader_without(
            "no-gpu-qualifies",
            dir.path(),
            "why-no-nodes",
            &["nodes"],
            &[],
        );
        let explanation = text(
            &run(
                &[
                    "why",
                    "archive-0",
                    "-n",
                    "media",
                    "--kubernetes-version",
                    "1.36",
                ],
                Some(&reader),
            ),
            4,
        );
        let (from_cluster, notes) = verdict_and_notes(&explanation);
        assert_eq!(from_cluster, verdict);
        let about_nodes: Vec<&String> = notes.iter().filter(|n| n.contains("node")).collect();
        assert_eq!(about_nodes.len(), 1, "{notes:#?}");
        assert!(
            about_nodes[0].starts_with("note: nodes were not read (forbidden: cannot list nodes"),
            "{notes:#?}"
        );
        assert!(!about_nodes[0].contains("-f"), "{notes:#?}");
    }

    // JSON says what was not checked, and blocked stays false.
    let mut json_args = args.clone();
    json_args.extend(["-o", "json"]);
    let record: Value = serde_json::from_str(&text(&run(&json_args, None), 4)).unwrap();
    assert_eq!(record["blocked"], false);
    assert_eq!(record["unchecked"].as_array().map(Vec::len), Some(1));
}

#[test]
fn without_slices_or_classes_one_error_line() {
    // From the cluster, refused by RBAC: the permission, and how to check it.
    #[cfg(all(have_go, have_kubectl))]
    for (resource, plural) in [
        ("resourceslices", "resourceslices.resource.k8s.io"),
        ("deviceclasses", "deviceclasses.resource.k8s.io"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let reader = reader_without(
            "all-taken",
            dir.path(),
            &format!("why-no-{resource}"),
            &[plural],
            &[],
        );
        let e = crate::one_error_line(run(&["why", "film-0", "-n", "media"], Some(&reader)), 1);
        assert!(
            e.starts_with(&format!(
                "error: cannot explain pod media/film-0 without {resource}: they may not be listed: "
            )),
            "{e}"
        );
        assert!(
            e.trim_end().ends_with(&format!(
                "(hint: ask for a role that allows 'list' on {plural}; check with kubectl auth can-i list {plural})"
            )),
            "{e}"
        );
    }
    // From files that hold none.
    let classes = root()
        .join("deploy/examples/classes.yaml")
        .display()
        .to_string();
    let (fleet, nodes, scenario) = (
        example("fleet.yaml"),
        example("why/nodes.yaml"),
        example("why/no-gpu-qualifies.yaml"),
    );
    let e = crate::one_error_line(
        run(
            &[
                "why",
                "archive-0",
                "-f",
                &nodes,
                "-f",
                &classes,
                "-f",
                &scenario,
            ],
            None,
        ),
        1,
    );
    assert_eq!(
        e,
        "error: cannot explain pod media/archive-0 without resourceslices: the files hold none (hint: save them too: kubectl get resourceslices -o yaml > resourceslices.yaml, and add -f resourceslices.yaml)\n"
    );
    let e = crate::one_error_line(
        run(
            &[
                "why",
                "archive-0",
                "-f",
                &nodes,
                "-f",
                &fleet,
                "-f",
                &scenario,
            ],
            None,
        ),
        1,
    );
    assert!(
        e.contains("without deviceclasses: the files hold none"),
        "{e}"
    );
    // An allocated claim is explained without them; what the slices would add is said missing.
    let explanation = text(
        &run(
            &[
                "why",
                "claim/media-capabilities-amd-1-render-2kq8x",
                "-n",
                "liken-system",
                "-f",
                &nodes,
                "-f",
                &example("why/all-taken.yaml"),
            ],
            None,
        ),
        0,
    );
    assert!(
        explanation.contains("\nnote: resourceslices were not read (the files hold none): the allocated devices' GPU addresses and render nodes are not shown\n"),
        "{explanation}"
    );
}

#[test]
fn claims_not_in_the_files_are_not_said_missing() {
    // The scenario without its ResourceClaims: archive-0's status names its claim, which the
    // files do not hold. That is not "the claim does not exist".
    let dir = tempfile::tempdir().unwrap();
    let scenario = std::fs::read_to_string(example("why/no-gpu-qualifies.yaml")).unwrap();
    let kept: Vec<&str> = scenario
        .split("\n---\n")
        .filter(|d| !d.contains("\nkind: ResourceClaim\n"))
        .collect();
    assert!(kept.len() < scenario.split("\n---\n").count());
    let without = dir.path().join("without-claims.yaml");
    std::fs::write(&without, kept.join("\n---\n")).unwrap();
    let e = crate::one_error_line(why_on("archive-0", &without.display().to_string(), &[]), 1);
    assert_eq!(
        e,
        "error: cannot explain pod media/archive-0 without resourceclaims: the files hold none (hint: save them too: kubectl get resourceclaims -A -o yaml > resourceclaims.yaml, and add -f resourceclaims.yaml)\n"
    );
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn claims_readable_in_the_namespace_only() {
    let dir = tempfile::tempdir().unwrap();
    let claims = "resourceclaims.resource.k8s.io";
    let reader = reader_without(
        "no-gpu-qualifies",
        dir.path(),
        "why-claims-in-media",
        &[claims],
        &[claims],
    );
    let explanation = text(&run(&["why", "archive-0", "-n", "media"], Some(&reader)), 3);
    let (_, notes) = verdict_and_notes(&explanation);
    let about_claims: Vec<&String> = notes
        .iter()
        .filter(|n| n.contains("resourceclaims"))
        .collect();
    assert_eq!(about_claims.len(), 1, "{notes:#?}");
    assert!(
        about_claims[0].starts_with("note: resourceclaims outside the namespace media were not read (forbidden: cannot list resourceclaims"),
        "{notes:#?}"
    );
    assert!(
        about_claims[0].ends_with(
            "devices they hold are not known to be taken; the namespace's own claims were read"
        ),
        "{notes:#?}"
    );
    // The pod's claim was read.
    assert!(
        explanation.contains(
            "Claim gpu: media/archive-0-gpu-x7k2q (from template vc1-archive): not allocated"
        ),
        "{explanation}"
    );
}

#[test]
fn text_wraps_at_the_terminal_with_a_hanging_indent() {
    let args = why_args("film-0", &example("why/all-taken.yaml"), &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Into a pipe: one line each, as before (the snapshots).
    let piped = text(&run(&args, None), 3);
    assert!(piped.lines().any(|l| l.chars().count() > 200));
    for columns in [120u16, 100, 80] {
        let plain = crate::caps::in_terminal_exiting(&args, columns, &[("NO_COLOR", "1")], 3);
        let mut wrapped = plain.lines();
        for line in piped.lines() {
            // Each line is its first piece, then continuations indented deeper than it, the
            // words in order and none lost.
            let first = wrapped
                .next()
                .unwrap_or_else(|| panic!("{columns}: ends early"));
            assert!(line.starts_with(first), "{columns}: {first:?} of {line:?}");
            let indent = line.len() - line.trim_start().len();
            let mut rest = line[first.len()..].trim_start();
            while !rest.is_empty() {
                let next = wrapped
                    .next()
                    .unwrap_or_else(|| panic!("{columns}: ends early"));
                let hang = next.len() - next.trim_start().len();
                assert!(hang > indent, "{columns}: {next:?} under {line:?}");
                assert!(
                    rest.starts_with(next.trim_start()),
                    "{columns}: {next:?} of {line:?}"
                );
                rest = rest[next.trim_start().len()..].trim_start();
            }
        }
        assert_eq!(wrapped.next(), None);
        if columns == 100 {
            insta::assert_snapshot!("why-all-taken-at-100-columns", plain);
        }
        for line in plain.lines() {
            assert!(
                line.chars().count() <= usize::from(columns),
                "{columns}: {line:?}"
            );
        }
        // A command is never parted by a line break: it goes to the next line whole.
        assert!(
            plain
                .lines()
                .any(|l| l
                    == "    kubectl -n liken-system rollout restart daemonset/media-capabilities"),
            "{columns}: {plain}"
        );
        // Colour changes nothing but the escapes.
        let coloured = crate::caps::in_terminal_exiting(&args, columns, &[], 3);
        assert_ne!(coloured, plain);
        assert_eq!(crate::caps::strip_ansi(&coloured), plain, "{columns}");
    }
}

#[test]
fn the_help_s_examples_copy_as_they_read() {
    // clap wraps help at the terminal's width (at most 100): a command wrapped onto two lines
    // breaks when copied. Each example line is kept whole at 80, 100 and 120 columns.
    let section = |help: &str| -> String {
        let start = help.find("Examples:").expect("examples");
        help[start..].to_owned()
    };
    let piped = run(&["why", "--help"], None);
    assert!(piped.status.success());
    let expected = section(&String::from_utf8(piped.stdout).unwrap());
    assert!(
        expected.contains(
            "  kubectl get resourceclaims,resourceclaimtemplates -A -o yaml \\\n    > claims.yaml\n"
        ),
        "{expected}"
    );
    assert!(
        expected.contains(
            "  kubectl media why transcode-0 -n media \\\n    -f pods.yaml -f claims.yaml -f devices.yaml\n"
        ),
        "{expected}"
    );
    // The exit codes, 3 and 4 among them.
    assert!(
        expected.contains("\n  3  a claim cannot be allocated"),
        "{expected}"
    );
    assert!(expected.contains("\n  4  undecided:"), "{expected}");
    for columns in [80, 100, 120] {
        let help = crate::caps::in_terminal(&["why", "--help"], columns, &[("NO_COLOR", "1")]);
        assert_eq!(section(&help), expected, "at {columns} columns");
    }
}

/// The help's saved-objects recipe, run as written with the real kubectl against the real
/// control plane: what it saves explains the pod as the cluster does.
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_help_s_recipe_saves_what_why_needs() {
    let help = String::from_utf8(run(&["why", "--help"], None).stdout).unwrap();
    let recipe: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.contains("# From saved objects"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(recipe.len() >= 4, "{help}");
    let script = recipe.join("\n").replace(
        "kubectl media why transcode-0",
        &format!("{} why film-0", env!("CARGO_BIN_EXE_kubectl-media")),
    );
    let server = cluster_of("all-taken");
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(dir.path())
        .env_clear()
        .env("HOME", dir.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", server.kubeconfig())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let from_cluster = run(&["why", "film-0", "-n", "media"], Some(server.kubeconfig()));
    // The same explanation, but for the note that files carry no Kubernetes version (the
    // server's feature gates are off here, and its slices have no allowMultipleAllocations).
    let saved = text(&out, 3);
    let note = "\nnote: feature gates as in Kubernetes 1.36 (DRAConsumableCapacity, DRADeviceTaints and DRAPartitionableDevices on); pass --kubernetes-version for another release\n";
    assert!(saved.contains(note), "{saved}");
    assert_eq!(saved.replace(note, ""), text(&from_cluster, 3), "{script}");
}

/// Every field the record has, in every scenario, and every finding's code, is documented in
/// docs/why-format.md.
#[test]
fn every_field_of_the_record_is_documented() {
    fn keys(value: &Value, out: &mut std::collections::BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    out.insert(k.clone());
                    // A code (and whose selector) is a name scripts match on.
                    if let ("code" | "of", Some(code)) = (k.as_str(), v.as_str()) {
                        out.insert(code.to_owned());
                    }
                    keys(v, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let format = std::fs::read_to_string(root().join("docs/why-format.md")).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for (target, scenario, extra, code) in [
        ("film-0", "all-taken", &[][..], 3),
        ("archive-0", "no-gpu-qualifies", &[], 3),
        ("proxy-0", "never-one-gpu", &[], 3),
        ("review-0", "class-typo", &[], 3),
        ("claim/archive-0-gpu-x7k2q", "no-gpu-qualifies", &[], 3),
        // An allocated claim: reservedFor, usedBy, allocation.
        (
            "claim/media-capabilities-amd-1-render-2kq8x",
            "all-taken",
            &["-n", "liken-system"],
            0,
        ),
    ] {
        let mut args = extra.to_vec();
        args.extend(["-o", "json"]);
        let out = why_files(target, scenario, &args);
        keys(&serde_json::from_str(&text(&out, code)).unwrap(), &mut seen);
    }
    let undocumented: Vec<&String> = seen
        .iter()
        .filter(|k| !format.contains(&format!("`{k}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/why-format.md: {undocumented:?}"
    );
}

/// archive-0 of the scenario, again in the namespace `other`.
fn archive_0_in(namespace: &str) -> Value {
    let mut files = fleet_files();
    files.push(example("why/no-gpu-qualifies.yaml"));
    let mut pod = objects::from_files(&files)
        .into_iter()
        .find(|o| o["kind"] == "Pod" && o["metadata"]["name"] == "archive-0")
        .expect("the scenario's pod");
    pod["metadata"]["namespace"] = namespace.into();
    if let Some(meta) = pod["metadata"].as_object_mut() {
        meta.remove("uid");
    }
    pod
}

/// The first line of an explanation, or of an error.
fn first_line(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    stdout
        .lines()
        .next()
        .or(stderr.lines().next())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn namespaces_from_files_as_kubectl_s_flags_mean_them() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.json");
    std::fs::write(
        &other,
        serde_json::to_string(&archive_0_in("other")).unwrap(),
    )
    .unwrap();
    let other = other.display().to_string();
    // A kubeconfig whose context's namespace is `other` (no server is ever asked).
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: x, context: {cluster: c, user: u, namespace: other}}, {name: y, context: {cluster: c, user: u}}]\n\
         current-context: x\n",
    )
    .unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let media = "No node can allocate the claims of pod media/archive-0:";
    let other_pod = "Pod other/archive-0 waits:";

    // The files' only pod of that name, whatever the context says.
    let out = why_files(
        "archive-0",
        "no-gpu-qualifies",
        &["--kubeconfig", &kubeconfig],
    );
    assert!(first_line(&out).starts_with(media), "{out:?}");
    // In two namespaces: the context's namespace...
    let two = |extra: &[&str]| {
        let mut args = vec!["-f", other.as_str()];
        args.extend(extra);
        why_files("archive-0", "no-gpu-qualifies", &args)
    };
    let out = two(&["--kubeconfig", &kubeconfig]);
    assert!(first_line(&out).starts_with(other_pod), "{out:?}");
    // ...`default` for a context without one, or without any kubeconfig.
    for extra in [&["--kubeconfig", &kubeconfig, "--context", "y"][..], &[]] {
        assert_eq!(
            crate::one_error_line(two(extra), 1),
            "error: pod default/archive-0 not found (hint: a pod of that name is in the namespace media: add -n media; also in other)\n",
            "{extra:?}"
        );
    }
    // A context that is not there is an error, as in kubectl.
    let e = crate::one_error_line(two(&["--kubeconfig", &kubeconfig, "--context", "z"]), 1);
    assert!(e.contains("\"z\""), "{e}");
    // -n chooses, over the files and the context.
    let out = two(&["-n", "media", "--kubeconfig", &kubeconfig]);
    assert!(first_line(&out).starts_with(media), "{out:?}");
    // -A, which wins over -n: the pod of that name in any namespace; in two, an error naming
    // them (none is chosen for the user).
    let out = why_files("archive-0", "no-gpu-qualifies", &["-A", "-n", "other"]);
    assert!(first_line(&out).starts_with(media), "{out:?}");
    let out = why_files(
        "claim/archive-0-gpu-x7k2q",
        "no-gpu-qualifies",
        &["-n", "other", "-A"],
    );
    assert!(
        first_line(&out).starts_with("No node can allocate claim media/archive-0-gpu-x7k2q:"),
        "{out:?}"
    );
    for extra in [&["-A"][..], &["-n", "media", "-A"]] {
        assert_eq!(
            crate::one_error_line(two(extra), 1),
            "error: pod archive-0 is in 2 namespaces: media, other (hint: choose one with -n, without -A)\n",
            "{extra:?}"
        );
    }
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn all_namespaces_from_the_cluster_never_chooses_for_the_user() {
    let cp = cluster_of("no-gpu-qualifies");
    // In one namespace: -A finds it there, whatever -n says.
    let out = run(
        &[
            "why",
            "archive-0",
            "-A",
            "-n",
            "other",
            "--kubernetes-version",
            "1.36",
        ],
        Some(cp.kubeconfig()),
    );
    assert!(
        first_line(&out).starts_with("No node can allocate the claims of pod media/archive-0:"),
        "{out:?}"
    );
    // In two: an error naming both, as from files. (Only this test uses the namespace other.)
    let mut pod = archive_0_in("other");
    pod["spec"]["schedulerName"] = "recorded-scenario".into();
    objects::create(cp, &[pod]);
    assert_eq!(
        crate::one_error_line(run(&["why", "archive-0", "-A"], Some(cp.kubeconfig())), 1),
        "error: pod archive-0 is in 2 namespaces: media, other (hint: choose one with -n, without -A)\n"
    );
}

/// At 1.37 `why` applies DeviceTaintRules as that release's scheduler does; at 1.36 it does not.
/// (From a cluster it lists them only from a 1.37 server, which the control plane, pinned at
/// 1.34, is not.)
#[test]
fn device_taint_rules_at_1_37() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("rule.json");
    std::fs::write(
        &rule,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": "maintenance"},
            "spec": {"deviceSelector": {"driver": "media.liken.sh"},
                     "taint": {"key": "maintenance", "effect": "NoSchedule"}}})
        .to_string(),
    )
    .unwrap();
    let rule = rule.display().to_string();
    let why = |version: &str| {
        text(
            &why_files(
                "proxy-0",
                "never-one-gpu",
                &["-n", "media", "-f", &rule, "--kubernetes-version", version],
            ),
            3,
        )
    };
    let before = why("1.36");
    assert!(!before.contains("taint maintenance"), "{before}");
    let tainted = why("1.37");
    assert!(
        tainted.contains("taint maintenance:NoSchedule is not tolerated"),
        "{tainted}"
    );
}
