//! Re-probing through the real libva and the test VA driver (support/vadriver.rs), with the
//! real agent on the real control plane: a driver that stops answering is published failed one
//! confirmation after the periodic probe that saw it, and working again at the first good probe;
//! one bad probe between good ones writes nothing; a driver that hangs at every probe costs one
//! child (and its helper) per GPU at a time and nothing that grows, over many periods. What the
//! agent wrote is read from kube-apiserver's audit log.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::agent::{Setup, setup};
use crate::support::agent::{AgentProcess, FAST};
use crate::support::vadriver::{FakeGpu, FakeNode, scenario_from_report};
use crate::support::vainfo::report_from_vainfo;
use media_operator::node::sysfs::PciIdentity;

const BIN: &str = env!("CARGO_BIN_EXE_media-capabilities");

/// The GPU whose driver the tests break, at 0000:03:00.0 on renderD129.
const BROKEN: &str = "pci-0000-03-00-0";

/// How much longer than the agent's own bounds an awaited change may take on a loaded machine.
const SLACK: Duration = Duration::from_secs(10);

fn pci(address: &str, vendor: &str, product: &str, driver: &str) -> PciIdentity {
    PciIdentity {
        address: address.into(),
        vendor: vendor.into(),
        product: product.into(),
        driver: driver.into(),
        pci_name: None,
    }
}

/// What a working driver states (a Tiger Lake iHD capture).
fn working() -> String {
    scenario_from_report(&report_from_vainfo("intel-tgl-ihd-22.3.1.txt"))
}

/// A driver that stops answering in its first query after initialising, leaving a helper in
/// the probe's process group.
fn hanging() -> String {
    "vendor 6d65646961746573740a\nprofile 7\nconfig 7 1\nact vaQueryConfigEntrypoints hang-with-helper\n"
        .to_string()
}

/// A node of two GPUs whose drivers state `first` and `second`.
fn node(first: &str, second: &str) -> FakeNode {
    FakeNode::new(vec![
        FakeGpu {
            render: 128,
            pci: pci("0000:00:02.0", "8086", "9a49", "i915"),
            scenario: first.to_string(),
        },
        FakeGpu {
            render: 129,
            pci: pci("0000:03:00.0", "1002", "744c", "amdgpu"),
            scenario: second.to_string(),
        },
    ])
}

/// Replaces what GPU `render`'s driver states, atomically (a probe may read it at any moment).
fn set_scenario(node: &FakeNode, render: u32, scenario: &str) {
    let file = node.scenarios().join(format!("renderD{render}.scenario"));
    let tmp = node.scenarios().join(".tmp-scenario");
    std::fs::write(&tmp, scenario).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// The agent on a node of its own, probing `fake` through the real libva, with `args` after the
/// tests' fast periods (a flag given twice takes its last value).
fn agent(name: &str, fake: &FakeNode, args: &[&str]) -> (Setup<'static>, AgentProcess) {
    let s = setup(name, 0);
    let flags: Vec<&str> = FAST.iter().chain(args).copied().collect();
    let agent = AgentProcess::start_with(
        BIN,
        &s.node,
        &fake.args(),
        &fake.env(),
        &s.kubeconfig,
        &flags,
    );
    (s, agent)
}

fn device<'a>(slice: &'a Value, name: &str) -> &'a Value {
    slice["spec"]["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == name))
        .unwrap_or_else(|| panic!("no device {name} in {slice}"))
}

fn states_a_driver(slice: &Value, name: &str) -> bool {
    device(slice, name)["attributes"].get("vaDriver").is_some()
}

/// The value of the agent's metric `name`.
fn metric(agent: &AgentProcess, name: &str) -> f64 {
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name}: {body}"))
}

/// Waits until the agent has probed `n` more times than `from`.
fn wait_probes(agent: &AgentProcess, from: f64, n: f64, within: Duration) {
    let deadline = Instant::now() + within;
    while metric(agent, "media_capabilities_probes_total") < from + n {
        assert!(
            Instant::now() < deadline,
            "fewer than {n} probes in {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[cfg_attr(
    not(all(have_libva, have_go, have_kubectl)),
    ignore = "needs libva2 and libva-drm2 (apt-get install libva2 libva-drm2), kubectl and Go 1.26 or newer for the control plane"
)]
fn a_driver_that_stops_answering_is_published_failed_then_working_and_a_glitch_writes_nothing() {
    let period = Duration::from_secs(2);
    let timeout = Duration::from_secs(1);
    let fake = node(&working(), &working());
    let (s, agent) = agent(
        "reprobe-flip",
        &fake,
        &["--reprobe-interval", "2s", "--probe-timeout", "1s"],
    );
    s.wait_slice("both GPUs working", |slice| {
        states_a_driver(slice, BROKEN) && states_a_driver(slice, "pci-0000-00-02-0")
    });

    // At rest, re-probing writes nothing.
    let mark = s.audit.mark();
    let probes = metric(&agent, "media_capabilities_probes_total");
    wait_probes(&agent, probes, 3.0, 3 * period + SLACK);
    let writes = s.slice_writes(mark);
    assert!(writes.is_empty(), "no write at rest: {writes:#?}");

    // The driver stops answering: published failed by the first periodic probe after it and
    // the confirmation (at most a period, the confirmation and two probe timeouts).
    set_scenario(&fake, 129, &hanging());
    let broke = Instant::now();
    let slice = s.wait_slice("the hung GPU published failed", |slice| {
        !states_a_driver(slice, BROKEN)
    });
    let took = broke.elapsed();
    assert!(
        took <= period + period + 2 * timeout + SLACK,
        "took {took:?}"
    );
    let capabilities = device(&slice, BROKEN)["attributes"].as_object().unwrap();
    assert!(
        capabilities
            .iter()
            .filter(|(_, v)| v.get("bool").is_some())
            .all(|(_, v)| v["bool"] == false),
        "every capability false: {capabilities:?}"
    );
    assert!(
        states_a_driver(&slice, "pci-0000-00-02-0"),
        "the other GPU is untouched"
    );
    agent
        .log
        .wait_for("failed after it worked; asking it again in 2s", SLACK);

    // It answers again: published working at the first good probe, without confirmation.
    set_scenario(&fake, 129, &working());
    let mended = Instant::now();
    s.wait_slice("the GPU published working again", |slice| {
        states_a_driver(slice, BROKEN)
    });
    let took = mended.elapsed();
    assert!(took <= period + timeout + SLACK, "took {took:?}");

    // One bad probe between good ones: held back, confirmed working, nothing written.
    let held = agent.log.count("failed after it worked");
    let mark = s.audit.mark();
    set_scenario(&fake, 129, &hanging());
    agent
        .log
        .wait_for_nth("failed after it worked", held + 1, period + timeout + SLACK);
    set_scenario(&fake, 129, &working());
    let confirmations = agent
        .log
        .count("asking again the GPUs whose probe failed once");
    agent.log.wait_for_nth(
        "asking again the GPUs whose probe failed once",
        confirmations,
        period + SLACK,
    );
    let probes = metric(&agent, "media_capabilities_probes_total");
    wait_probes(&agent, probes, 2.0, 2 * period + SLACK);
    let writes = s.slice_writes(mark);
    assert!(writes.is_empty(), "a glitch writes nothing: {writes:#?}");
    assert!(states_a_driver(&s.slice().unwrap(), BROKEN));
}

/// The agent's descendants now: (its direct children, all of them), zombies left out.
fn descendants(agent: u32) -> (usize, usize) {
    let mut parent = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        if let Some(ppid) = fields.get(1).and_then(|p| p.parse::<u32>().ok()) {
            parent.insert(pid, ppid);
        }
    }
    let descends = |mut pid: u32| {
        for _ in 0..64 {
            match parent.get(&pid) {
                Some(&ppid) if ppid == agent => return true,
                Some(&ppid) if ppid > 1 => pid = ppid,
                _ => return false,
            }
        }
        false
    };
    let children = parent.values().filter(|&&p| p == agent).count();
    let all = parent.keys().filter(|&&pid| descends(pid)).count();
    (children, all)
}

/// A field of /proc/PID/status in its first unit (kB for VmRSS).
fn status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
#[cfg_attr(
    not(all(have_libva, have_go, have_kubectl)),
    ignore = "needs libva2 and libva-drm2 (apt-get install libva2 libva-drm2), kubectl and Go 1.26 or newer for the control plane"
)]
fn a_driver_that_hangs_at_every_probe_costs_one_child_per_gpu_and_nothing_that_grows() {
    let fake = node(&hanging(), &hanging());
    let (s, mut agent) = agent(
        "reprobe-hang",
        &fake,
        &["--reprobe-interval", "200ms", "--probe-timeout", "300ms"],
    );
    s.wait_slice("both GPUs published failed", |slice| {
        !states_a_driver(slice, BROKEN) && !states_a_driver(slice, "pci-0000-00-02-0")
    });
    let pid = agent.pid();
    let warmed = metric(&agent, "media_capabilities_probes_total");
    wait_probes(&agent, warmed, 5.0, Duration::from_secs(60));
    let (rss, threads, files) = (
        status(pid, "VmRSS:"),
        status(pid, "Threads:"),
        open_files(pid),
    );
    let mark = s.audit.mark();
    let from = metric(&agent, "media_capabilities_probes_total");
    let (mut most_children, mut most_processes) = (0, 0);
    while metric(&agent, "media_capabilities_probes_total") < from + 40.0 {
        // Two scans back to back, the smaller count kept: one scan of /proc is not atomic, and
        // a child replaced while it reads (killed at its timeout, the next probe started) is
        // counted twice in it; a child too many that really runs is in both.
        let (first, first_all) = descendants(pid);
        let (second, second_all) = descendants(pid);
        let (children, all) = (first.min(second), first_all.min(second_all));
        most_children = most_children.max(children);
        most_processes = most_processes.max(all);
        std::thread::sleep(Duration::from_millis(20));
    }
    // One probe child per GPU at a time, each with the helper its driver started.
    assert!(most_children >= 1, "the probes were never seen running");
    assert!(most_children <= 2, "{most_children} probe children at once");
    assert!(
        most_processes <= 4,
        "{most_processes} processes under the agent at once"
    );
    let grown_rss = status(pid, "VmRSS:").saturating_sub(rss);
    assert!(
        grown_rss < 4 << 10,
        "RSS grew by {grown_rss} kB over 40 probes"
    );
    let grown_threads = status(pid, "Threads:").saturating_sub(threads);
    assert!(
        grown_threads <= 4,
        "{grown_threads} more threads over 40 probes"
    );
    let grown_files = open_files(pid).saturating_sub(files);
    assert!(
        grown_files <= 4,
        "{grown_files} more open files over 40 probes"
    );
    // Failed it stays: nothing to write, and no probe left behind once it has stopped.
    let writes = s.slice_writes(mark);
    assert!(
        writes.is_empty(),
        "no write while nothing changes: {writes:#?}"
    );
    let helpers = helper_pids(&fake.scenarios());
    assert!(
        helpers.len() >= 40,
        "each probe started its helper: {}",
        helpers.len()
    );
    let lingering = helpers.iter().filter(|p| alive(**p)).count();
    assert!(
        lingering <= 2,
        "{lingering} helpers of ended probes still run"
    );
    // SIGTERM ends the probes in flight with their groups.
    agent.terminate();
    agent
        .wait_exit(Duration::from_secs(30))
        .expect("the agent stops");
    let deadline = Instant::now() + Duration::from_secs(10);
    while helpers.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "a helper outlived the agent");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The helpers the hanging drivers started, from the driver's pid notes.
fn helper_pids(scenarios: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for render in [128, 129] {
        let notes = std::fs::read_to_string(scenarios.join(format!("renderD{render}.pids")))
            .unwrap_or_default();
        pids.extend(notes.lines().filter_map(|l| {
            let (what, pid) = l.split_once(' ')?;
            (what == "helper")
                .then(|| pid.trim().parse::<u32>().ok())
                .flatten()
        }));
    }
    pids
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}
