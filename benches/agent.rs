//! What one agent costs: the real `media-capabilities` binary with 8 recorded GPUs against the
//! in-process test API server. Prints the time from start to the slice being published, the
//! steady-state RSS, and the CPU time and API requests (writes and reads) over a window of
//! steady state (`AGENT_BENCH_SECONDS`, default 60; a 2 s smoke run under `cargo test`).
//!
//! Baselines measured in the same run: the time from spawning the process to its first log
//! line (what any program pays to start), and the window's wall-clock time for CPU.
//!
//! Run: `cargo bench --bench agent` (or `AGENT_BENCH_SECONDS=10 cargo bench --bench agent`).

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::agent::{AgentProcess, write_fleet};
use support::apiserver::TestApiServer;

const NODE: &str = "bench-node";
const SLICE: &str = "bench-node-media.liken.sh";
const GPUS: usize = 8;

/// utime + stime of `pid`, in clock ticks (/proc/<pid>/stat fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/<pid>/stat");
    // The command name (field 2) may hold spaces; fields after its closing parenthesis are plain.
    let rest = &stat[stat.rfind(')').expect("stat has a command name") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("read /proc/<pid>/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let window = Duration::from_secs(
        std::env::var("AGENT_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(if full { 60 } else { 2 }),
    );

    let server = TestApiServer::start();
    server
        .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}))
        .expect("create the Node");
    let reports = tempfile::tempdir().expect("reports dir");
    write_fleet(reports.path(), GPUS);

    let spawned = Instant::now();
    // Default periods (rescan 10 s, resync 5 min), as deployed.
    let agent = AgentProcess::start(
        env!("CARGO_BIN_EXE_media-capabilities"),
        NODE,
        reports.path(),
        server.kubeconfig(),
        &[],
    );
    let first_line = spawned.elapsed();
    server
        .wait_until(Duration::from_secs(30), |s| {
            s.get("resourceslices", "", SLICE).is_some()
        })
        .expect("the agent publishes its slice");
    let published = spawned.elapsed();
    let slice = server.get("resourceslices", "", SLICE).expect("published");
    let slice_bytes = serde_json::to_vec(&slice).expect("serialise").len();
    let devices = slice["spec"]["devices"].as_array().map_or(0, Vec::len);
    assert_eq!(devices, GPUS);
    // Let the first watch settle before measuring the steady state.
    server
        .wait_until(Duration::from_secs(10), |s| s.watch_count() == 1)
        .expect("the agent watches its slice");

    let pid = agent.pid();
    let mark = server.request_mark();
    let ticks_before = cpu_ticks(pid);
    let window_start = Instant::now();
    // The steady state is what is measured: nothing happens, so there is no event to await.
    std::thread::sleep(window);
    let elapsed = window_start.elapsed();
    let ticks = cpu_ticks(pid) - ticks_before;
    let rss = rss_kib(pid);
    let requests = server.requests_since(mark);
    let writes = requests.iter().filter(|r| r.is_write()).count();
    let per_second = clock_ticks_per_second();
    let cpu = Duration::from_secs_f64(ticks as f64 / per_second as f64);

    println!("agent, {GPUS} GPUs from recorded reports, against the test API server");
    println!(
        "  start → slice published:  {:>8.1} ms  ({:.1}× the baseline start → first log line, {:.1} ms; target ≤ 500 ms)",
        published.as_secs_f64() * 1000.0,
        published.as_secs_f64() / first_line.as_secs_f64(),
        first_line.as_secs_f64() * 1000.0
    );
    println!(
        "  steady-state RSS:         {:>8.1} MiB (target ≤ 20 MiB)",
        rss as f64 / 1024.0
    );
    println!(
        "  over {:.0} s of steady state: {writes} writes, {} requests in all ({} reads, open watch kept), CPU {:.3} s = {:.3}% of one core (resolution {} ms)",
        elapsed.as_secs_f64(),
        requests.len(),
        requests.len() - writes,
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64(),
        1000 / per_second
    );
    println!("  slice size: {slice_bytes} bytes of JSON for {devices} devices");
    assert_eq!(writes, 0, "no write in steady state: {requests:#?}");
}
