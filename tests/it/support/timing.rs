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
