//! Child isolation: stand-in probes (small shell scripts) that crash, abort, hang, print garbage
//! or fail must fail only their own GPU, with the log's words; the real binary's hidden
//! subcommand must round-trip a report; discovery + probing must work on a fake tree.

use crate::support::vainfo::{report_from_vainfo, script};
use media_operator::agent::probing::{
    CHILD_SUBCOMMAND, DriverOverride, Isolation, ProbeCommand, ProbeSource, probe_all,
    probe_in_child,
};
use media_operator::node::device::Outcome;
use media_operator::node::sysfs::{PciIdentity, RenderNode, Roots};
use media_operator::node::va::report::Report;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn node(n: u32, address: &str) -> RenderNode {
    RenderNode {
        path: PathBuf::from(format!("/dev/dri/renderD{n}")),
        pci: PciIdentity {
            address: address.into(),
            vendor: "1002".into(),
            product: "744c".into(),
            driver: "amdgpu".into(),
            pci_name: None,
        },
    }
}

/// Runs a stand-in script through `/bin/sh` rather than executing it: exec'ing a file this
/// process has just written fails with ETXTBSY ("Text file busy") when another test thread forks
/// while the file is still open for writing.
fn isolation(script: PathBuf, timeout: Duration) -> Isolation {
    let mut isolation = direct(PathBuf::from("/bin/sh"), timeout);
    isolation.command.args.push(script.into_os_string());
    isolation
}

/// Runs `program` itself.
fn direct(program: PathBuf, timeout: Duration) -> Isolation {
    Isolation {
        command: ProbeCommand {
            program,
            args: Vec::new(),
        },
        timeout,
        parallel: 2,
        overrides: Vec::new(),
    }
}

fn failure(outcome: Outcome) -> String {
    match outcome {
        Outcome::Failed(failure) => failure.text,
        Outcome::Report(r) => panic!("expected a failure, got {r:?}"),
    }
}

/// Checks `text` is `<head><elapsed>s<tail>` with a plausible elapsed time.
fn assert_failure(text: &str, head: &str, tail: &str) {
    let rest = text
        .strip_prefix(head)
        .unwrap_or_else(|| panic!("{text:?} does not start with {head:?}"));
    let (seconds, after) = rest.split_once('s').expect("elapsed seconds");
    assert!(seconds.parse::<f64>().is_ok(), "{text}");
    assert_eq!(after, tail, "{text}");
}

const TRYING: &str =
    "libva info: Trying to open /usr/lib/x86_64-linux-gnu/dri/radeonsi_drv_video.so";

#[tokio::test]
async fn a_crash_is_named_by_its_signal_with_what_libva_said() {
    let dir = tempfile::tempdir().unwrap();
    let crash = script(
        dir.path(),
        "crash",
        &format!("echo '{TRYING}' >&2\nkill -SEGV $$"),
    );
    let text = failure(
        probe_in_child(
            &node(129, "0000:03:00.0"),
            &isolation(crash, Duration::from_secs(10)),
        )
        .await,
    );
    assert_failure(
        &text,
        "probe of /dev/dri/renderD129 (0000:03:00.0) killed by SIGSEGV after ",
        &format!("; libva said: {TRYING}"),
    );
}

#[tokio::test]
async fn an_abort_is_a_signal_too() {
    let dir = tempfile::tempdir().unwrap();
    let abort = script(dir.path(), "abort", "kill -ABRT $$");
    let text = failure(
        probe_in_child(
            &node(128, "0000:00:02.0"),
            &isolation(abort, Duration::from_secs(10)),
        )
        .await,
    );
    assert_failure(
        &text,
        "probe of /dev/dri/renderD128 (0000:00:02.0) killed by SIGABRT after ",
        "; libva said nothing",
    );
}

/// Deterministic however loaded the machine: the clock is paused, so it moves only when the
/// runtime has nothing else to do, and the test holds the runtime until the child has written its
/// line. Whatever the child wrote before it was killed is read to the end of the pipe.
#[tokio::test(start_paused = true)]
async fn a_hang_is_killed_after_the_timeout_with_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    // Not `exec`: the sleep is a grandchild holding the pipes, which only the group kill ends.
    let hang = script(
        dir.path(),
        "hang",
        &format!(
            "echo '{TRYING}' >&2\n: > {}\nsleep 1000\necho done",
            ready.display()
        ),
    );
    let node = node(129, "0000:03:00.0");
    let isolation = isolation(hang, Duration::from_millis(300));
    let mut probe = std::pin::pin!(probe_in_child(&node, &isolation));
    // The first poll starts the child and arms the timeout.
    assert!(futures::poll!(probe.as_mut()).is_pending());
    let started = std::time::Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the stand-in never ran"
        );
        // Blocking on purpose: the paused clock cannot pass the timeout meanwhile.
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = failure(probe.await);
    assert_eq!(
        text,
        format!(
            "probe of /dev/dri/renderD129 (0000:03:00.0) timed out after 0.3s and was killed with \
             its process group; libva said: {TRYING}"
        )
    );
}

#[tokio::test]
async fn garbage_and_non_zero_exits_and_missing_programs_fail_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let n = node(129, "0000:03:00.0");
    let t = Duration::from_secs(10);
    let garbage = script(dir.path(), "garbage", "echo 'this is not json'");
    assert_failure(
        &failure(probe_in_child(&n, &isolation(garbage, t)).await),
        "probe of /dev/dri/renderD129 (0000:03:00.0) printed an unreadable report after ",
        " (expected ident at line 1 column 2); libva said: this is not json",
    );
    let silent = script(dir.path(), "silent", "true");
    assert_failure(
        &failure(probe_in_child(&n, &isolation(silent, t)).await),
        "probe of /dev/dri/renderD129 (0000:03:00.0) printed no report after ",
        "; libva said nothing",
    );
    let fails = script(
        dir.path(),
        "fails",
        "echo 'libva error: vaGetDriverNames() failed with unknown libva error' >&2\nexit 3",
    );
    assert_failure(
        &failure(probe_in_child(&n, &isolation(fails, t)).await),
        "probe of /dev/dri/renderD129 (0000:03:00.0) exited with status 3 after ",
        "; libva said: libva error: vaGetDriverNames() failed with unknown libva error",
    );
    let missing = dir.path().join("no-such-probe");
    assert_eq!(
        failure(probe_in_child(&n, &direct(missing.clone(), t)).await),
        format!(
            "probe of /dev/dri/renderD129 (0000:03:00.0) could not start {}: No such file or \
             directory (os error 2); libva said nothing",
            missing.display()
        )
    );
}

/// A stand-in that prints `report` after some driver chatter on stdout, and records its
/// arguments in `args.<renderD>`.
fn good_probe(dir: &Path, report: &Report) -> PathBuf {
    let json = dir.join("report.json");
    std::fs::write(&json, serde_json::to_string(report).unwrap()).unwrap();
    let args = dir.join("args");
    script(
        dir,
        "good",
        &format!(
            "echo \"$@\" > {args}.$(basename \"$2\")\necho 'driver chatter on stdout'\ncat {json}\necho",
            args = args.display(),
            json = json.display()
        ),
    )
}

#[tokio::test]
async fn one_bad_gpu_does_not_touch_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let report = report_from_vainfo("amd-rdna3-navi31-radeonsi.txt");
    let good = good_probe(dir.path(), &report);
    // One script for all GPUs: renderD129 crashes, the others behave.
    let both = script(
        dir.path(),
        "mixed",
        &format!(
            "case \"$2\" in *renderD129) kill -SEGV $$;; esac\nexec /bin/sh {} \"$@\"",
            good.display()
        ),
    );
    let mut iso = isolation(both, Duration::from_secs(10));
    iso.overrides = vec!["0000:00:02.0=iHD".parse::<DriverOverride>().unwrap()];
    let nodes = vec![
        node(128, "0000:00:02.0"),
        node(129, "0000:03:00.0"),
        node(130, "0000:04:00.0"),
    ];
    let probed = probe_all(nodes, &iso).await;
    assert_eq!(probed.len(), 3);
    assert_eq!(probed[0].report.as_ref(), Some(&report));
    assert!(
        probed[1]
            .failure
            .as_deref()
            .unwrap()
            .contains(" killed by SIGSEGV after ")
    );
    assert_eq!(probed[1].report, None);
    assert_eq!(probed[2].report.as_ref(), Some(&report));
    // The per-GPU override reached only the GPU it names.
    let args = |n: &str| std::fs::read_to_string(dir.path().join(format!("args.{n}"))).unwrap();
    assert_eq!(
        args("renderD128"),
        "--render-node /dev/dri/renderD128 --va-driver iHD\n"
    );
    assert_eq!(args("renderD130"), "--render-node /dev/dri/renderD130\n");
}

#[tokio::test]
async fn a_live_source_discovers_a_fake_tree_and_probes_it() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("dev/dri");
    std::fs::create_dir_all(&dev).unwrap();
    for (name, address) in [
        ("renderD128", "0000:00:02.0"),
        ("renderD129", "0000:03:00.0"),
    ] {
        std::fs::write(dev.join(name), "").unwrap();
        let device = dir.path().join("sys/class/drm").join(name).join("device");
        std::fs::create_dir_all(&device).unwrap();
        std::fs::write(device.join("vendor"), "0x8086\n").unwrap();
        std::fs::write(device.join("device"), "0x9a49\n").unwrap();
        std::fs::write(
            device.join("uevent"),
            format!("DRIVER=i915\nPCI_SLOT_NAME={address}\n"),
        )
        .unwrap();
    }
    let report = report_from_vainfo("intel-tgl-ihd-22.3.1.txt");
    let source = ProbeSource::Live {
        roots: Roots {
            dev: dev.clone(),
            sys: dir.path().join("sys"),
        },
        pci_ids: Some(dir.path().join("pci.ids")),
        only: Some(dev.join("renderD129")),
        isolation: isolation(good_probe(dir.path(), &report), Duration::from_secs(10)),
    };
    std::fs::write(
        dir.path().join("pci.ids"),
        "8086  Intel Corporation\n\t9a49  TigerLake-LP GT2 [Iris Xe Graphics]\n",
    )
    .unwrap();
    let probed = source.probe().await.unwrap();
    assert_eq!(probed.len(), 1);
    assert_eq!(probed[0].pci.address, "0000:03:00.0");
    assert_eq!(
        probed[0].pci.pci_name.as_deref(),
        Some("TigerLake-LP GT2 [Iris Xe Graphics]")
    );
    assert_eq!(probed[0].report.as_ref(), Some(&report));

    let ProbeSource::Live {
        roots,
        pci_ids,
        isolation,
        ..
    } = source
    else {
        unreachable!()
    };
    let missing = ProbeSource::Live {
        roots,
        pci_ids,
        only: Some(dev.join("renderD140")),
        isolation,
    };
    let err = missing.probe().await.unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "no PCI render node {}/renderD140 (found: ",
            dev.display()
        )),
        "{err}"
    );
}

fn real_binary() -> ProbeCommand {
    ProbeCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_media-capabilities")),
        args: vec![CHILD_SUBCOMMAND.into()],
    }
}

#[tokio::test]
async fn the_real_child_replays_a_report_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let report = report_from_vainfo("nvidia-nvdec-direct.txt");
    let file = dir.path().join("nvidia.json");
    std::fs::write(&file, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let mut command = real_binary();
    command
        .args
        .extend(["--replay".into(), file.into_os_string()]);
    let mut iso = direct(PathBuf::new(), Duration::from_secs(10));
    iso.command = command;
    match probe_in_child(&node(128, "0000:01:00.0"), &iso).await {
        Outcome::Report(got) => assert_eq!(*got, report),
        Outcome::Failed(f) => panic!("{f}"),
    }
}

#[tokio::test]
async fn the_real_child_reports_libva_absent_in_the_loaders_words() {
    let mut command = real_binary();
    command.args.extend([
        "--libva".into(),
        "/nonexistent/libva.so.2".into(),
        "--libva-drm".into(),
        "/nonexistent/libva-drm.so.2".into(),
    ]);
    let mut iso = direct(PathBuf::new(), Duration::from_secs(10));
    iso.command = command;
    let node = node(128, "0000:01:00.0");
    let Outcome::Report(report) = probe_in_child(&node, &iso).await else {
        panic!("the child should report, not fail")
    };
    let loader = "dlopen failed: /nonexistent/libva.so.2: cannot open shared object file: No such file or directory";
    assert_eq!(report.error.as_deref(), Some(loader));
    let device = media_operator::node::device::describe(&node, &Outcome::Report(report));
    assert_eq!(
        device.failure.as_ref().map(|f| f.text.as_str()),
        Some(
            format!(
                "probe of /dev/dri/renderD128 (0000:01:00.0) failed: {loader}; libva said nothing"
            )
            .as_str()
        )
    );
}
