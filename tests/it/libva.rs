//! The probe through the real libva, with the test VA driver of `tests/vadriver` on fake nodes
//! (support/vadriver.rs): every recorded report in the repository replayed by the driver must
//! publish exactly what `probe --from` publishes for it, through `probe` and through the agent;
//! and every way a driver fails (init error, missing file, missing symbol, empty vtable slot,
//! segfault, abort, hang, stderr flood, odd vendor strings) fails only its own GPU, in libva's
//! words. These tests need libva (`apt-get install libva2 libva-drm2`); without it they are
//! reported as ignored, with that command.

use crate::agent::{Setup, setup};
use crate::support::agent::{AgentProcess, FAST};
use crate::support::vadriver::{
    FakeGpu, FakeNode, KERNEL_NO_FILE, KERNEL_NO_INIT, scenario_from_report,
};
use crate::support::vainfo::{captures, report_from_vainfo};
use media_operator::agent::probing::{Probed, read_records};
use media_operator::catalogue::Capability;
use media_operator::node::sysfs::PciIdentity;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_media-capabilities");

fn pci(address: &str, vendor: &str, product: &str, driver: &str) -> PciIdentity {
    PciIdentity {
        address: address.into(),
        vendor: vendor.into(),
        product: product.into(),
        driver: driver.into(),
        pci_name: None,
    }
}

/// Every recorded report of the repository: the example fleet's records and the vainfo captures
/// (with the PCI identity of the GPU each was taken on).
fn recorded() -> Vec<Probed> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/fleet");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut records: Vec<Probed> = dirs.iter().flat_map(|d| read_records(d).unwrap()).collect();
    let mut files: Vec<_> = std::fs::read_dir(captures())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    for file in files {
        let (mut pci, name) = if file.starts_with("amd") {
            (
                pci("", "1002", "744c", "amdgpu"),
                "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]",
            )
        } else if file.starts_with("intel") {
            (
                pci("", "8086", "9a49", "i915"),
                "TigerLake-LP GT2 [Iris Xe Graphics]",
            )
        } else if file.starts_with("nvidia") {
            (
                pci("", "10de", "2684", "nvidia-drm"),
                "AD102 [GeForce RTX 4090]",
            )
        } else {
            panic!("capture {file}: which GPU? (add its vendor here)")
        };
        pci.pci_name = Some(name.into());
        records.push(Probed {
            render_node: Default::default(),
            pci,
            report: Some(report_from_vainfo(&file)),
            failure: None,
            failure_kind: None,
        });
    }
    records
}

/// The records as GPUs of one fake node: each its own render node and PCI address.
fn fake_node(records: &mut [Probed]) -> FakeNode {
    let gpus = records
        .iter_mut()
        .enumerate()
        .map(|(i, record)| {
            record.pci.address = format!("0000:{:02x}:00.0", i + 1);
            FakeGpu {
                render: 128 + i as u32,
                pci: record.pci.clone(),
                scenario: scenario_from_report(record.report.as_ref().expect("a report")),
            }
        })
        .collect();
    let node = FakeNode::new(gpus);
    for (i, record) in records.iter_mut().enumerate() {
        record.render_node = node.render_node(128 + i as u32);
    }
    node
}

/// A scrubbed `media-capabilities` command (PATH only, for the driver's `sleep` helper).
fn command() -> Command {
    let mut command = Command::new(BIN);
    command
        .env_clear()
        .env("NO_COLOR", "1")
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    command
}

/// Output of a finished probe: the JSON it printed, its log, its peak memory (VmHWM, KiB).
struct Run {
    gpus: Vec<Value>,
    log: String,
    peak_kib: u64,
}

fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs `command` to the end, sampling its peak memory while it runs.
fn run(mut command: Command) -> Run {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start media-capabilities");
    let pid = child.id();
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        // The high-water mark only grows, so the last reading before the process ends is the
        // peak (up to its last few milliseconds).
        while let Some(kib) = vm_hwm(pid) {
            peak = peak.max(kib);
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    });
    let out = child
        .wait_with_output()
        .expect("wait for media-capabilities");
    let peak_kib = sampler.join().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "probe failed: {log}");
    let gpus: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe printed no JSON ({e}): {log}"));
    Run {
        gpus,
        log,
        peak_kib,
    }
}

/// `probe -o json` on `node`, through the real libva.
fn probe_live(node: &FakeNode, extra: &[&str]) -> Run {
    let mut command = command();
    command
        .envs(node.env())
        .arg("probe")
        .args(node.args())
        .args(["-o", "json"])
        .args(extra)
        // probe's log is quiet unless asked for; these tests read its line per GPU.
        .env("RUST_LOG", "info");
    run(command)
}

/// `probe --from` the same records.
fn probe_from(records: &[Probed]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.json");
    std::fs::write(&file, serde_json::to_vec(records).unwrap()).unwrap();
    let mut command = command();
    command
        .arg("probe")
        .arg("--from")
        .arg(&file)
        .args(["-o", "json"]);
    run(command).gpus
}

/// What a GPU publishes, and the failure up to libva's messages (which are libva's, not the
/// record's: the record's were said by another libva on another machine).
fn published(gpu: &Value) -> Value {
    let failure = gpu["failure"]
        .as_str()
        .map(|f| f.split("; libva said").next().unwrap_or(f).to_string());
    json!({
        "name": gpu["name"],
        "render_node": gpu["render_node"],
        "pci": gpu["pci"],
        "attributes": gpu["attributes"],
        "failure": failure,
    })
}

/// The attributes (and failures) that differ, for a readable assertion message.
fn differences(live: &Value, from: &Value) -> String {
    let mut out = Vec::new();
    for (key, value) in live["attributes"].as_object().into_iter().flatten() {
        if from["attributes"][key] != *value {
            out.push(format!(
                "{key}: live {value}, --from {}",
                from["attributes"][key]
            ));
        }
    }
    if live["failure"] != from["failure"] {
        out.push(format!(
            "failure: live {}, --from {}",
            live["failure"], from["failure"]
        ));
    }
    out.join("; ")
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn every_recorded_report_round_trips_through_the_real_libva() {
    let mut records = recorded();
    let node = fake_node(&mut records);
    let live = probe_live(&node, &[]);
    let from = probe_from(&records);
    assert_eq!(live.gpus.len(), records.len(), "{}", live.log);
    assert!(
        records.len() >= 11,
        "the example fleet and the vainfo captures"
    );
    for ((live, from), record) in live.gpus.iter().zip(&from).zip(&records) {
        assert_eq!(
            published(live),
            published(from),
            "{}: {}; live report: {}",
            record.pci.address,
            differences(&published(live), &published(from)),
            live["report"]
        );
        // The driver's statements came through the FFI unchanged.
        let recorded = record.report.as_ref().unwrap();
        if recorded.error.is_some() {
            continue;
        }
        let render: u32 = record.render_node.file_name().unwrap().to_str().unwrap()
            ["renderD".len()..]
            .parse()
            .unwrap();
        let pids = std::fs::read_to_string(node.scenarios().join(format!("renderD{render}.pids")))
            .unwrap();
        assert!(
            pids.contains("terminated "),
            "vaTerminate was called: {pids}"
        );
        let report = &live["report"];
        let pairs = |configs: &Value| -> Vec<(Value, Value)> {
            configs
                .as_array()
                .unwrap()
                .iter()
                .map(|c| (c["profile"].clone(), c["entrypoint"].clone()))
                .collect()
        };
        let want = serde_json::to_value(recorded).unwrap();
        assert_eq!(pairs(&report["configs"]), pairs(&want["configs"]));
        assert_eq!(report["vendor"], want["vendor"]);
        for (got, want) in report["configs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(want["configs"].as_array().unwrap())
        {
            if !want["rt_format"].is_null() {
                assert_eq!(got["rt_format"], want["rt_format"], "{got}");
            }
        }
        for key in ["video_proc", "av1_surfaces"] {
            if !want[key].is_null() {
                assert_eq!(report[key], want[key], "{key}");
            }
        }
    }
    eprintln!(
        "{} recorded reports round-tripped through the real libva",
        records.len()
    );
}

#[test]
#[cfg_attr(
    not(all(have_libva, have_go, have_kubectl)),
    ignore = "needs libva2 and libva-drm2 (apt-get install libva2 libva-drm2), kubectl and Go 1.26 or newer for the control plane"
)]
fn the_agent_publishes_the_same_slice_live_as_from_reports() {
    let mut records = recorded();
    let node = fake_node(&mut records);
    let reports = tempfile::tempdir().unwrap();
    for (i, record) in records.iter().enumerate() {
        std::fs::write(
            reports.path().join(format!("{i:02}.json")),
            serde_json::to_vec(record).unwrap(),
        )
        .unwrap();
    }
    // Each agent on a node of its own; the slices compare without the node's name.
    let slice = |source: &[std::ffi::OsString], env: &[(&str, std::ffi::OsString)]| {
        let s = setup(&next_node(), 0);
        let _agent = AgentProcess::start_with(BIN, &s.node, source, env, &s.kubeconfig, FAST);
        let mut spec = s.wait_slice("the agent publishes its slice", |_| true)["spec"].clone();
        spec["nodeName"] = json!("NODE");
        spec["pool"]["name"] = json!("NODE");
        // The server stamps when each taint was added: the second agent ran a moment later.
        for device in spec["devices"].as_array_mut().unwrap() {
            for taint in device["taints"].as_array_mut().into_iter().flatten() {
                taint.as_object_mut().unwrap().remove("timeAdded");
            }
        }
        spec
    };
    let live = slice(&node.args(), &node.env());
    let recorded = slice(&["--reports".into(), reports.path().into()], &[]);
    assert_eq!(live["devices"].as_array().unwrap().len(), records.len());
    if live != recorded {
        let l = serde_json::to_string_pretty(&live).unwrap();
        let r = serde_json::to_string_pretty(&recorded).unwrap();
        let diff: Vec<String> = l
            .lines()
            .zip(r.lines())
            .filter(|(a, b)| a != b)
            .take(20)
            .map(|(a, b)| format!("live {a} | recorded {b}"))
            .collect();
        panic!("live and recorded differ:\n{}", diff.join("\n"));
    }
}

// --- failures ---------------------------------------------------------------------------------

/// A healthy GPU (renderD128) beside the one under test (renderD129 at 0000:03:00.0).
fn healthy() -> Probed {
    Probed {
        render_node: Default::default(),
        pci: pci("0000:00:02.0", "8086", "9a49", "i915"),
        report: Some(report_from_vainfo("intel-tgl-ihd-22.3.1.txt")),
        failure: None,
        failure_kind: None,
    }
}

/// Probes a node of a healthy GPU and a GPU whose driver acts out `scenario` under kernel driver
/// `kernel`; checks the healthy one publishes what its record does, and returns the other.
fn beside_a_healthy_gpu(kernel: &str, scenario: &str, extra: &[&str]) -> (FakeNode, Run, Value) {
    let mut good = healthy();
    let node = FakeNode::new(vec![
        FakeGpu {
            render: 128,
            pci: good.pci.clone(),
            scenario: scenario_from_report(good.report.as_ref().unwrap()),
        },
        FakeGpu {
            render: 129,
            pci: pci("0000:03:00.0", "1002", "744c", kernel),
            scenario: scenario.to_string(),
        },
    ]);
    good.render_node = node.render_node(128);
    let live = probe_live(&node, extra);
    assert_eq!(live.gpus.len(), 2, "{}", live.log);
    assert_eq!(
        published(&live.gpus[0]),
        published(&probe_from(&[good])[0]),
        "the healthy GPU is probed and published: {}",
        live.log
    );
    let other = live.gpus[1].clone();
    (node, live, other)
}

/// The failed GPU publishes every capability false and no vaDriver; returns its failure.
fn failed(gpu: &Value) -> String {
    for capability in Capability::ALL {
        assert_eq!(gpu["attributes"][capability.attribute()], false, "{gpu}");
    }
    assert!(gpu["attributes"].get("vaDriver").is_none(), "{gpu}");
    gpu["failure"].as_str().expect("a failure").to_string()
}

/// libva's messages on the way to driver `name` of `node`, up to "Trying to open".
fn opening(node: &FakeNode, name: &str) -> String {
    format!(
        "libva info: VA-API version 1.17.0 | libva info: Trying to open {}/{name}_drv_video.so",
        node.drivers().display()
    )
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn a_driver_init_error_is_the_status_and_libvas_words() {
    let (node, _, gpu) = beside_a_healthy_gpu("amdgpu", "init 0x1\n", &[]);
    let path = format!("{}/radeonsi_drv_video.so", node.drivers().display());
    assert_eq!(
        failed(&gpu),
        format!(
            "probe of {} (0000:03:00.0) failed: vaInitialize failed: operation failed (0x1); \
             libva said: {} | libva info: Found init function __vaDriverInit_1_0 | \
             libva error: {path} init failed | libva info: va_openDriver() returns 1",
            node.render_node(129).display(),
            opening(&node, "radeonsi"),
        )
    );
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn a_missing_driver_file_is_libvas_unknown_error() {
    let (node, _, gpu) = beside_a_healthy_gpu(KERNEL_NO_FILE, "", &[]);
    assert_eq!(
        failed(&gpu),
        format!(
            "probe of {} (0000:03:00.0) failed: vaInitialize failed: unknown libva error (-1); \
             libva said: {} | libva info: va_openDriver() returns -1",
            node.render_node(129).display(),
            opening(&node, KERNEL_NO_FILE),
        )
    );
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn a_driver_without_an_init_symbol_is_named() {
    let (node, _, gpu) = beside_a_healthy_gpu(KERNEL_NO_INIT, "", &[]);
    let text = failed(&gpu);
    let path = format!("{}/{KERNEL_NO_INIT}_drv_video.so", node.drivers().display());
    assert!(
        text.contains(&format!(
            "libva error: {path} has no function __vaDriverInit_1_0"
        )),
        "{text}"
    );
    assert!(
        text.contains(" failed: vaInitialize failed: unknown libva error (-1); "),
        "{text}"
    );
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn an_empty_vtable_slot_is_refused_by_libva() {
    // Slot 5 is vaDestroyConfig, one of the 41 libva checks.
    let (_, _, gpu) = beside_a_healthy_gpu("amdgpu", "null-slot 5\n", &[]);
    let text = failed(&gpu);
    assert!(
        text.contains(
            " failed: vaInitialize failed: the requested function is not implemented (0x14); "
        ),
        "{text}"
    );
    assert!(
        text.contains("libva error: No valid vtable entry for vaDestroyConfig"),
        "{text}"
    );
}

/// A scenario stating one H.264 decoder and failing as `act` says.
fn acting(act: &str) -> String {
    format!("vendor 6d65646961746573740a\nprofile 7\nconfig 7 1\nact {act}\n")
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn a_segfault_inside_a_query_fails_only_its_gpu() {
    let (node, _, gpu) =
        beside_a_healthy_gpu("amdgpu", &acting("vaQueryConfigEntrypoints segv"), &[]);
    let text = failed(&gpu);
    let head = format!(
        "probe of {} (0000:03:00.0) killed by SIGSEGV after ",
        node.render_node(129).display()
    );
    assert!(text.starts_with(&head), "{text}");
    assert!(
        text.ends_with("mediatest: segv in vaQueryConfigEntrypoints"),
        "{text}"
    );
    assert!(
        text.contains("libva info: va_openDriver() returns 0"),
        "{text}"
    );
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn an_abort_and_a_driver_panic_are_sigabrt() {
    let (_, _, gpu) = beside_a_healthy_gpu("amdgpu", &acting("vaQueryConfigProfiles abort"), &[]);
    assert!(failed(&gpu).contains(") killed by SIGABRT after "));
    let (_, _, gpu) = beside_a_healthy_gpu("amdgpu", &acting("vaQueryConfigProfiles panic"), &[]);
    let text = failed(&gpu);
    assert!(text.contains(") killed by SIGABRT after "), "{text}");
    assert!(
        text.contains("mediatest panics in vaQueryConfigProfiles"),
        "{text}"
    );
}

fn pids(node: &FakeNode, render: u32) -> Vec<i32> {
    std::fs::read_to_string(node.scenarios().join(format!("renderD{render}.pids")))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("probe ") || l.starts_with("helper "))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// Whether `pid` is gone (or a zombie waiting for a parent that is not us to reap it).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn wait_gone(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|p| gone(*p)) {
        assert!(Instant::now() < deadline, "still running: {pids:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until none of `pids` exists any more, not even as a zombie: their parent reaped them.
fn wait_reaped(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
    {
        let states: Vec<String> = pids
            .iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
            .filter_map(|s| {
                s.lines()
                    .find(|l| l.starts_with("State:"))
                    .map(str::to_string)
            })
            .collect();
        assert!(Instant::now() < deadline, "not reaped: {pids:?} {states:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A node name of its own for each agent of these tests.
fn next_node() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    format!(
        "libva-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}

/// The agent on `node` (with `args`), on a node of its own of the agent tests' control plane;
/// and its log line for the GPU at 0000:03:00.0 once that was probed.
fn agent_probing(node: &FakeNode, args: &[&str]) -> (Setup<'static>, AgentProcess, String) {
    let s = setup(&next_node(), 0);
    let agent =
        AgentProcess::start_with(BIN, &s.node, &node.args(), &node.env(), &s.kubeconfig, args);
    let line = agent
        .log
        .wait_for("pci-0000-03-00-0 (", Duration::from_secs(30));
    (s, agent, line)
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn a_hang_is_killed_at_the_timeout_with_its_whole_process_group() {
    let (node, _, gpu) = beside_a_healthy_gpu(
        "amdgpu",
        &acting("vaQueryConfigEntrypoints hang-with-helper"),
        &["--probe-timeout", "2s"],
    );
    let text = failed(&gpu);
    assert!(
        text.starts_with(&format!(
            "probe of {} (0000:03:00.0) timed out after 2.0s and was killed with its process group; ",
            node.render_node(129).display()
        )),
        "{text}"
    );
    assert!(
        text.ends_with("mediatest: hang-with-helper in vaQueryConfigEntrypoints"),
        "{text}"
    );
    let pids = pids(&node, 129);
    assert_eq!(pids.len(), 2, "the probe and its helper");
    wait_gone(&pids);
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn a_driver_flooding_stderr_is_bounded_in_memory_and_in_the_failure() {
    let (_, run, gpu) = beside_a_healthy_gpu(
        "amdgpu",
        &format!("spew {}\nact init segv\n", 64 << 20),
        &[],
    );
    let text = failed(&gpu);
    eprintln!(
        "peak RSS of probe with a 64 MiB stderr flood: {} KiB",
        run.peak_kib
    );
    assert!(
        text.contains(") killed by SIGSEGV after "),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert!(text.len() < 16 << 10, "the failure is {} bytes", text.len());
    // The head (with its bad byte read lossily) and the tail are kept, the middle counted.
    assert!(
        text.contains("libva said: libva info: VA-API version"),
        "{text}"
    );
    assert!(text.contains("mediatest: spewing | "), "{text}");
    assert!(
        text.contains("mediatest: spewed, and one byte that is not UTF-8: \u{fffd} | "),
        "{text}"
    );
    assert!(text.contains(" lines dropped "), "{text}");
    assert!(text.ends_with("mediatest: segv in init"), "{text}");
    assert!(run.peak_kib < 64 << 10, "peak RSS {} KiB", run.peak_kib);
    let line = run
        .log
        .lines()
        .find(|l| l.contains("pci-0000-03-00-0"))
        .expect("the GPU's log line");
    assert!(line.len() < 20 << 10, "log line of {} bytes", line.len());
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn long_and_invalid_utf8_vendor_strings_are_published_sanitised() {
    let long = "Mesa Gallium driver 24.1.7 for AMD Radeon Graphics ".repeat(4);
    let long = &long[..200];
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let scenario = |vendor: &[u8]| format!("vendor {}\nprofile 7\nconfig 7 1\n", hex(vendor));
    let (_, _, gpu) = beside_a_healthy_gpu("amdgpu", &scenario(long.as_bytes()), &[]);
    let published = gpu["attributes"]["vaDriver"].as_str().unwrap();
    assert_eq!(published, long[..64].trim_end());
    assert_eq!(gpu["report"]["vendor"], long);
    assert_eq!(gpu["attributes"]["decodeH264"], true);

    let (_, _, gpu) = beside_a_healthy_gpu("amdgpu", &scenario(b"Bad \xff\xfe vendor"), &[]);
    assert_eq!(gpu["attributes"]["vaDriver"], "Bad \u{fffd}\u{fffd} vendor");
    assert_eq!(gpu["attributes"]["decodeH264"], true);
}

#[test]
#[cfg_attr(
    not(all(have_libva, have_go, have_kubectl)),
    ignore = "needs libva2 and libva-drm2 (apt-get install libva2 libva-drm2), kubectl and Go 1.26 or newer for the control plane"
)]
fn the_agent_stays_small_while_a_driver_floods_stderr() {
    let good = healthy();
    let node = FakeNode::new(vec![
        FakeGpu {
            render: 128,
            pci: good.pci.clone(),
            scenario: scenario_from_report(good.report.as_ref().unwrap()),
        },
        FakeGpu {
            render: 129,
            pci: pci("0000:03:00.0", "1002", "744c", "amdgpu"),
            scenario: format!("spew {}\nact init segv\n", 64 << 20),
        },
    ]);
    let (s, agent, line) = agent_probing(&node, FAST);
    let slice = s.wait_slice("the agent publishes its slice", |_| true);
    let devices = slice["spec"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "both GPUs are published");
    let peak = vm_hwm(agent.pid()).expect("the agent runs");
    eprintln!(
        "peak RSS of the agent with a 64 MiB stderr flood: {peak} KiB; log line {} bytes",
        line.len()
    );
    assert!(line.len() < 20 << 10, "log line of {} bytes", line.len());
    assert!(peak < 64 << 10, "peak RSS {peak} KiB");
}

#[test]
#[cfg_attr(
    not(have_libva),
    ignore = "needs libva2 and libva-drm2: apt-get install libva2 libva-drm2"
)]
fn ctrl_c_and_sigterm_end_probe_and_every_probe_child_with_it() {
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        let node = FakeNode::new(vec![FakeGpu {
            render: 128,
            pci: pci("0000:03:00.0", "1002", "744c", "amdgpu"),
            scenario: acting("vaQueryConfigProfiles hang-with-helper"),
        }]);
        let probe = command()
            .envs(node.env())
            .arg("probe")
            .args(node.args())
            .args(["--probe-timeout", "60s"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The probe child and its helper are running once the helper's pid is written.
        let deadline = Instant::now() + Duration::from_secs(20);
        while pids(&node, 128).len() < 2 {
            assert!(
                Instant::now() < deadline,
                "the driver never started its helper"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(probe.id() as i32), signal).unwrap();
        let out = probe.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{signal}: {log}");
        assert!(
            log.contains("error: interrupted; every probe child was killed"),
            "{log}"
        );
        wait_gone(&pids(&node, 128));
    }
}

#[test]
#[cfg_attr(
    not(all(have_libva, have_go, have_kubectl)),
    ignore = "needs libva2 and libva-drm2 (apt-get install libva2 libva-drm2), kubectl and Go 1.26 or newer for the control plane"
)]
fn the_agent_reaps_what_a_killed_probe_leaves_behind() {
    let node = FakeNode::new(vec![FakeGpu {
        render: 128,
        pci: pci("0000:03:00.0", "1002", "744c", "amdgpu"),
        scenario: acting("vaQueryConfigProfiles hang-with-helper"),
    }]);
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend(["--probe-timeout", "1s"]);
    let (_node, _agent, line) = agent_probing(&node, &args);
    assert!(
        line.contains("timed out after 1.0s and was killed with its process group"),
        "{line}"
    );
    let pids = pids(&node, 128);
    assert_eq!(pids.len(), 2, "the probe and its helper");
    // The helper was re-parented to the agent (a subreaper), killed with the group, and reaped:
    // not even a zombie is left.
    wait_reaped(&pids);
}

#[test]
#[cfg_attr(
    not(all(have_libva, have_go, have_kubectl)),
    ignore = "needs libva2 and libva-drm2 (apt-get install libva2 libva-drm2), kubectl and Go 1.26 or newer for the control plane"
)]
fn the_agent_reaps_a_helper_that_left_the_probes_process_group() {
    let node = FakeNode::new(vec![FakeGpu {
        render: 128,
        pci: pci("0000:03:00.0", "1002", "744c", "amdgpu"),
        scenario: acting("vaQueryConfigProfiles escape-then-segv"),
    }]);
    let (_node, _agent, line) = agent_probing(&node, FAST);
    assert!(line.contains("killed by SIGSEGV"), "{line}");
    let escapee: i32 = std::fs::read_to_string(node.scenarios().join("renderD128.pids"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("escapee ")?.parse().ok())
        .expect("the driver started its helper");
    // The helper (its own session, out of reach of the group kill) sleeps half a second, ends,
    // is re-parented to the agent, and must not stay a zombie there.
    wait_reaped(&[escapee]);
}
