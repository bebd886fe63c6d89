//! The agent's own cost per GPU beyond the driver's initialisation (issue 4: ≤ 10 ms per GPU): the
//! real `__probe-gpu` child replays a recorded report, so spawning, start-up, the report's printing
//! and parsing and the timeout machinery are timed, and the driver's work is not; the baseline
//! spawns `/bin/true` the same way. With libva installed (`cfg(have_libva)`), the same report is
//! also probed through the real libva and the test VA driver, against the `--from` path.
//!
//! Run: `cargo bench --bench probe`.

#[path = "../tests/it/support/mod.rs"]
mod support;

use media_operator::agent::probing::{
    CHILD_SUBCOMMAND, Isolation, ProbeCommand, probe_all, probe_in_child, read_records,
};
use media_operator::node::device::{Outcome, describe, log_line};
use media_operator::node::sysfs::RenderNode;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ROUNDS: u32 = 200;

fn main() {
    let dir = std::env::temp_dir().join(format!("media-probe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let record = dir.join("mtl.json");
    std::fs::write(&record, docs_example()).expect("write record");
    let probed = read_records(&record).expect("the docs example parses");
    let node = probed[0].node();
    let report_file = dir.join("report.json");
    std::fs::write(
        &report_file,
        serde_json::to_string(probed[0].report.as_ref().expect("a report")).unwrap(),
    )
    .unwrap();

    #[cfg(have_libva)]
    let fake = libva_node(&probed[0]);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let replay = isolation(ProbeCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_media-capabilities")),
        args: vec![
            CHILD_SUBCOMMAND.into(),
            "--replay".into(),
            report_file.clone().into_os_string(),
        ],
    });
    let trivial = isolation(ProbeCommand {
        program: PathBuf::from("/bin/true"),
        args: Vec::new(),
    });

    // Warm up the page cache and the runtime; then interleave so drift hits both alike.
    runtime.block_on(async {
        for _ in 0..10 {
            expect_report(probe_in_child(&node, &replay).await);
            let _ = probe_in_child(&node, &trivial).await;
        }
    });
    let (mut agent, mut baseline) = (Duration::ZERO, Duration::ZERO);
    runtime.block_on(async {
        for _ in 0..ROUNDS {
            let start = Instant::now();
            let outcome = probe_in_child(&node, &replay).await;
            agent += start.elapsed();
            expect_report(outcome);
            let start = Instant::now();
            let _ = probe_in_child(&node, &trivial).await;
            baseline += start.elapsed();
        }
    });
    let pure = time_pure_step(&node, &probed[0].outcome());

    // Eight GPUs, four at a time, as the agent runs them.
    let nodes: Vec<RenderNode> = (0..8).map(|_| node.clone()).collect();
    let start = Instant::now();
    let eight = runtime.block_on(probe_all(nodes, &replay));
    let eight_time = start.elapsed();
    assert!(eight.iter().all(|p| p.report.is_some()));

    let per = |total: Duration| total.as_secs_f64() * 1000.0 / f64::from(ROUNDS);
    let (agent_ms, baseline_ms) = (per(agent), per(baseline));
    println!("probe cost per GPU, recorded report, {ROUNDS} rounds (target <= 10 ms per GPU)");
    println!("  agent: spawn child + replay + parse      {agent_ms:8.3} ms");
    println!("  baseline: spawn /bin/true the same way   {baseline_ms:8.3} ms");
    println!(
        "  agent beyond baseline                    {:8.3} ms  (ratio {:.2}x)",
        agent_ms - baseline_ms,
        agent_ms / baseline_ms
    );
    println!("  pure step (rules + attributes + log)     {pure:8.3} ms");
    println!(
        "  8 GPUs, 4 at a time, wall clock          {:8.3} ms  ({:.3} ms per GPU)",
        eight_time.as_secs_f64() * 1000.0,
        eight_time.as_secs_f64() * 1000.0 / 8.0
    );
    #[cfg(have_libva)]
    libva_figures(&runtime, &fake, &record, agent_ms, baseline_ms);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fake node whose one GPU's test driver states what `probed` recorded, and this process's
/// environment set so that the probe children find it.
#[cfg(have_libva)]
fn libva_node(probed: &media_operator::agent::probing::Probed) -> support::vadriver::FakeNode {
    use support::vadriver::{FakeGpu, FakeNode, scenario_from_report};
    let node = FakeNode::new(vec![FakeGpu {
        render: 128,
        pci: probed.pci.clone(),
        scenario: scenario_from_report(probed.report.as_ref().expect("a report")),
    }]);
    for (key, value) in node.env() {
        // SAFETY: called before the runtime or any other thread exists.
        unsafe { std::env::set_var(key, value) };
    }
    node
}

#[cfg(have_libva)]
fn libva_figures(
    runtime: &tokio::runtime::Runtime,
    fake: &support::vadriver::FakeNode,
    record: &Path,
    replay_ms: f64,
    baseline_ms: f64,
) {
    let node = RenderNode {
        path: fake.render_node(128),
        pci: fake.gpus[0].pci.clone(),
    };
    let live = isolation(ProbeCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_media-capabilities")),
        args: vec![CHILD_SUBCOMMAND.into()],
    });
    let mut libva = Duration::ZERO;
    let mut children_cpu = Duration::ZERO;
    runtime.block_on(async {
        for _ in 0..10 {
            expect_report(probe_in_child(&node, &live).await);
        }
        let before = children_cpu_time();
        for _ in 0..ROUNDS {
            let start = Instant::now();
            let outcome = probe_in_child(&node, &live).await;
            libva += start.elapsed();
            expect_report(outcome);
        }
        children_cpu = children_cpu_time().saturating_sub(before);
    });
    // The --from path: read the record, derive the attributes and the log line.
    let start = Instant::now();
    for _ in 0..ROUNDS {
        let probed = read_records(record).expect("the record parses");
        std::hint::black_box(log_line(&describe(&probed[0].node(), &probed[0].outcome())));
    }
    let from_ms = start.elapsed().as_secs_f64() * 1000.0 / f64::from(ROUNDS);
    let libva_ms = libva.as_secs_f64() * 1000.0 / f64::from(ROUNDS);
    println!("probe cost per GPU through the real libva and the test VA driver, {ROUNDS} rounds");
    println!("  real libva: child + libva + test driver  {libva_ms:8.3} ms");
    println!(
        "  real libva against replay child          ratio {:.2}x ({:+.3} ms)",
        libva_ms / replay_ms,
        libva_ms - replay_ms
    );
    println!(
        "  real libva against /bin/true             ratio {:.2}x",
        libva_ms / baseline_ms
    );
    let cpu_ms = children_cpu.as_secs_f64() * 1000.0 / f64::from(ROUNDS);
    println!("  CPU of the child (user + system)         {cpu_ms:8.3} ms");
    // What re-probing costs at the default period (src/agent/cli.rs: --reprobe-interval 1m).
    let per_hour = 60.0;
    println!(
        "  re-probing every 1 min: {per_hour:.0} probes per GPU and hour, {:.2} s of wall time and {:.2} s of CPU per GPU and hour ({:.2} s of CPU for 8 GPUs)",
        per_hour * libva_ms / 1000.0,
        per_hour * cpu_ms / 1000.0,
        8.0 * per_hour * cpu_ms / 1000.0
    );
    println!("  --from: read record + derive + log line  {from_ms:8.3} ms");
    println!(
        "  real libva against --from                ratio {:.0}x",
        libva_ms / from_ms
    );
}

/// The CPU time (user + system) of this process's children that have ended and been waited for.
#[cfg(have_libva)]
fn children_cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn isolation(command: ProbeCommand) -> Isolation {
    Isolation {
        command,
        timeout: Duration::from_secs(15),
        parallel: 4,
        overrides: Vec::new(),
    }
}

fn expect_report(outcome: Outcome) {
    if let Outcome::Failed(f) = outcome {
        panic!("the replaying child failed: {f}");
    }
}

/// Milliseconds per GPU for the pure step from outcome to published values and log line.
fn time_pure_step(node: &RenderNode, outcome: &Outcome) -> f64 {
    let rounds = 10_000;
    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..rounds {
        bytes += log_line(&describe(node, std::hint::black_box(outcome))).len();
    }
    std::hint::black_box(bytes);
    start.elapsed().as_secs_f64() * 1000.0 / f64::from(rounds)
}

/// The example record of docs/report-format.md.
fn docs_example() -> String {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report-format.md"),
    )
    .expect("docs/report-format.md");
    let start = doc.find("```json\n").expect("a json block") + "```json\n".len();
    let end = start + doc[start..].find("```").expect("the block ends");
    doc[start..end].to_string()
}
