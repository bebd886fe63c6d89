//! No quadratic time in what a user can hand us, each input generated here and large enough
//! that a quadratic step would take minutes (the bounds below are for a hang or a blow-up in a
//! debug build on a loaded machine, not speed): one claim with 150,000 allocation results over
//! 5,000 GPUs, `why` over a hundred nodes whose searches each hit their step limit, a huge
//! `current-context`, `KUBECONFIG` with 16,000 paths, four kubeconfigs of 8,000 clusters each, merged, and one past kube-rs's reader's budget.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{error_line, kubectl_media};

/// How long any of these may take: a quadratic step in them takes hours. Not a performance
/// target (the benchmarks hold those): run alone with the debug build, the slowest, `why` over
/// 100 nodes whose searches give up, took 30 s; under the whole suite's load on two cores, 104 s.
const BOUND: Duration = Duration::from_secs(300);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_vec(value).unwrap()).unwrap();
}

fn timed<T>(what: &str, run: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = run();
    let took = started.elapsed();
    assert!(took < BOUND, "{what} took {took:?}");
    eprintln!("{what}: {took:?}");
    out
}

/// A kubeconfig path that does not exist: `kubectl media` then reads nothing but `-f`.
fn no_kubeconfig(dir: &Path) -> PathBuf {
    dir.join("no-kubeconfig")
}

#[test]
fn one_claim_with_150000_results_is_read_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    let templates = crate::support::examples::example_nodes(&root()).unwrap();
    let fleet = crate::support::examples::large_fleet(625, 8, &templates);
    let devices: Vec<(String, String, String)> = fleet
        .iter()
        .flat_map(|slice| {
            let spec = &slice["spec"];
            let (driver, pool) = (
                spec["driver"].as_str().unwrap(),
                spec["pool"]["name"].as_str().unwrap(),
            );
            spec["devices"].as_array().unwrap().iter().map(move |d| {
                (
                    driver.to_owned(),
                    pool.to_owned(),
                    d["name"].as_str().unwrap().to_owned(),
                )
            })
        })
        .collect();
    let fleet_file = dir.path().join("fleet.json");
    write_json(&fleet_file, &crate::support::examples::list(fleet));
    let results: Vec<Value> = (0..150_000)
        .map(|i| {
            let (driver, pool, device) = &devices[(i * 7919) % devices.len()];
            json!({"request": format!("r{i}"), "driver": driver, "pool": pool, "device": device})
        })
        .collect();
    let claim = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "huge", "namespace": "media", "uid": "u1"},
        "spec": {"devices": {"requests": [{"name": "r0", "exactly": {"deviceClassName": "gpu-render"}}]}},
        "status": {"allocation": {"devices": {"results": results}},
                   "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}]},
    });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "media", "uid": "pu"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "huge"}],
                 "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}]},
    });
    let claim_file = dir.path().join("claim.json");
    write_json(
        &claim_file,
        &json!({"apiVersion": "v1", "kind": "List", "items": [claim, pod]}),
    );
    let (fleet_arg, claim_arg) = (fleet_file.to_str().unwrap(), claim_file.to_str().unwrap());
    let kubeconfig = no_kubeconfig(dir.path());
    let out = timed("caps --claims, 150,000 results over 5,000 GPUs", || {
        kubectl_media(
            &[
                "caps", "--claims", "-o", "json", "-f", fleet_arg, "-f", claim_arg,
            ],
            &kubeconfig,
        )
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = timed("why of the pod holding them", || {
        kubectl_media(
            &[
                "why", "p", "-n", "media", "-o", "json", "-f", fleet_arg, "-f", claim_arg,
            ],
            &kubeconfig,
        )
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn why_over_a_hundred_nodes_whose_searches_hit_their_limit_stops_and_says_so() {
    // One claim more than each node has exclusive GPUs: every node's search is exponential.
    let nodes = 100;
    let mut items = vec![json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'media.liken.sh'"}}]},
    })];
    for n in 0..nodes {
        let devices: Vec<Value> = (0..12)
            .map(|g| json!({"name": format!("gpu-{g}")}))
            .collect();
        items.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("n{n:03}-media.liken.sh")},
            "spec": {"driver": "media.liken.sh", "nodeName": format!("n{n:03}"),
                     "pool": {"name": format!("n{n:03}"), "generation": 1, "resourceSliceCount": 1},
                     "devices": devices},
        }));
    }
    let mut claims = Vec::new();
    for c in 0..13 {
        let name = format!("c{c:02}");
        items.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "media", "uid": format!("uc{c}")},
            "spec": {"devices": {"requests": [{"name": "d", "exactly": {"deviceClassName": "gpu"}}]}},
        }));
        claims.push(json!({"name": name, "resourceClaimName": name}));
    }
    let refs: Vec<Value> = claims.iter().map(|c| json!({"name": c["name"]})).collect();
    items.push(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "greedy", "namespace": "media", "uid": "pg"},
        "spec": {"resourceClaims": claims,
                 "containers": [{"name": "c", "image": "x", "resources": {"claims": refs}}]},
    }));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fleet.json");
    write_json(
        &file,
        &json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    let out = timed("why over 100 nodes whose searches give up", || {
        kubectl_media(
            &[
                "why",
                "greedy",
                "-n",
                "media",
                "-o",
                "json",
                "-f",
                file.to_str().unwrap(),
            ],
            &no_kubeconfig(dir.path()),
        )
    });
    // Undecided (exit 4): nothing is guessed.
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diagnosis: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stopped = diagnosis["notes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["code"] == "SearchStopped")
        .unwrap_or_else(|| panic!("{:#}", diagnosis["notes"]));
    assert_eq!(stopped["searched"], 8, "{stopped}");
    assert_eq!(stopped["total"], nodes, "{stopped}");
    assert!(
        stopped["sentence"]
            .as_str()
            .unwrap()
            .contains("stopped after 8 of the 100 nodes: the other 92 are not decided"),
        "{stopped}"
    );
}

#[test]
fn kubeconfigs_of_thousands_and_a_huge_context_are_one_line_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    // KUBECONFIG with 16,000 paths, none there: the first few and the count. Short relative
    // paths: one environment string holds at most 128 KiB (Linux's MAX_ARG_STRLEN).
    let list: Vec<String> = (0..16_000).map(|i| format!("z{i}")).collect();
    let home = tempfile::tempdir().unwrap();
    let out = timed("KUBECONFIG of 16,000 missing paths", || {
        crate::support::timing::plugin(env!("CARGO_BIN_EXE_kubectl-media"), &["caps"], home.path())
            .env("KUBECONFIG", list.join(":"))
            .output()
            .unwrap()
    });
    let line = error_line(out);
    assert!(
        line.contains(
            "none of the 16000 files KUBECONFIG lists exists (z0, z1, z2 and 15997 more)"
        ) && line.len() < 1000,
        "{}",
        &line[..line.len().min(1000)]
    );

    // Four files of 8,000 clusters, contexts and users each (kube-rs's reader takes at most
    // 250,000 YAML nodes a file), 32,000 merged; a context not there.
    let file = |name: &str, offset: usize, count: usize| {
        let path = dir.path().join(name);
        let mut text = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
        for i in offset..offset + count {
            text.push_str(&format!(
                "- name: c{i}\n  cluster: {{server: 'https://127.0.0.1:9'}}\n"
            ));
        }
        text.push_str("contexts:\n");
        for i in offset..offset + count {
            text.push_str(&format!(
                "- name: x{i}\n  context: {{cluster: c{i}, user: u{i}}}\n"
            ));
        }
        text.push_str("users:\n");
        for i in offset..offset + count {
            text.push_str(&format!("- name: u{i}\n  user: {{}}\n"));
        }
        std::fs::write(&path, text).unwrap();
        path
    };
    let files: Vec<PathBuf> = (0..4)
        .map(|i| file(&format!("f{i}"), i * 8_000, 8_000))
        .collect();
    let listed: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let out = timed("four kubeconfigs of 8,000 clusters, merged", || {
        crate::support::timing::plugin(
            env!("CARGO_BIN_EXE_kubectl-media"),
            &["caps", "--context", "nosuch"],
            home.path(),
        )
        .env("KUBECONFIG", listed.join(":"))
        .output()
        .unwrap()
    });
    let line = error_line(out);
    assert!(
        line.contains("the context \"nosuch\" is not in the files KUBECONFIG lists, which has 32000 contexts: x0, x1, x10, x100, x1000 and 31995 more"),
        "{line}"
    );

    // A current-context of a megabyte: cut in the message, not compared with every context.
    let huge = "y".repeat(1 << 20);
    let text = std::fs::read_to_string(&files[0]).unwrap() + &format!("current-context: {huge}\n");
    let c = dir.path().join("c");
    std::fs::write(&c, text).unwrap();
    let line = timed("a current-context of 1 MiB", || {
        error_line(kubectl_media(&["caps"], &c))
    });
    assert!(
        line.contains("current-context \"yyyy") && line.contains("bytes cut") && line.len() < 2000,
        "{}",
        &line[..line.len().min(2000)]
    );

    // Past the reader's budget: said in words, not as the reader's Rust value.
    let e = file("e", 0, 12_000);
    let line = timed("a kubeconfig past the reader's budget", || {
        error_line(kubectl_media(&["caps"], &e))
    });
    assert!(
        line.contains(
            "it holds more YAML nodes than kube-rs's kubeconfig reader takes (250000 at most)"
        ) && !line.contains('{'),
        "{line}"
    );
}
