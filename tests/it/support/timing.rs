//! Timing the programs for the benchmarks: one run, and the best and median of several.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `kubectl-media` (or another build of it) with `args`, in an empty environment but for
/// `HOME` and `NO_COLOR`, so that every run of a benchmark reads the same configuration.
pub fn plugin(program: &str, args: &[&str], home: &Path) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("HOME", home);
    command
}

/// The wall time of one run of `command` (stdout discarded) and its exit code; an exit code
/// not in `ok` ends the benchmark with the program's stderr.
pub fn timed(mut command: Command, ok: &[i32]) -> (Duration, i32) {
    let start = Instant::now();
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn");
    let elapsed = start.elapsed();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        ok.contains(&code),
        "{command:?} exited {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (elapsed, code)
}

/// The best and the median of some runs, and the last run's exit code.
#[derive(Clone, Copy)]
pub struct Timing {
    pub best: Duration,
    pub median: Duration,
    pub code: i32,
}

/// Summarises runs as [`timed`] gives them (at least one).
pub fn summarise(mut runs: Vec<(Duration, i32)>) -> Timing {
    let code = runs.last().expect("at least one run").1;
    runs.sort();
    Timing {
        best: runs[0].0,
        median: runs[runs.len() / 2].0,
        code,
    }
}

/// `rounds` runs of the command `make` gives.
pub fn sample(rounds: usize, ok: &[i32], make: impl Fn() -> Command) -> Timing {
    summarise((0..rounds).map(|_| timed(make(), ok)).collect())
}

/// Runs `command` with its output in files; returns its exit code, stdout and the CPU time it
/// used (user and system), read from /proc while it is a zombie, before it is reaped. CPU time,
/// unlike wall time, does not grow with the load of other tests on the machine.
pub fn cpu_timed(mut command: Command) -> (i32, String, Duration) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = std::fs::File::create(dir.path().join("out")).expect("out file");
    let mut child = command
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stat = format!("/proc/{}/stat", child.id());
    let ticks = loop {
        let text = std::fs::read_to_string(&stat).expect("the child is not reaped yet");
        // After the command's name, in parentheses: state, then utime and stime at fields
        // 14 and 15 of the whole line (11 and 12 after the state).
        let fields: Vec<&str> = text[text.rfind(')').expect("comm") + 2..]
            .split(' ')
            .collect();
        if fields[0] == "Z" {
            let field = |i: usize| fields[i].parse::<u64>().expect("a tick count");
            break field(11) + field(12);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let code = child.wait().expect("wait").code().unwrap_or(-1);
    let stdout = std::fs::read_to_string(dir.path().join("out")).expect("stdout");
    // USER_HZ: 100 on every Linux this runs on (sysconf(_SC_CLK_TCK)).
    (code, stdout, Duration::from_millis(ticks * 10))
}
