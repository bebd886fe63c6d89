//! `kubectl media class` is local and should feel instant: target under 20 ms wall time per run,
//! process start-up included. Measures the real binary end to end, next to the cost of spawning
//! a trivial process (`true`) in the same run, so the figure can be read on any machine.
//!
//! Run: `cargo bench --bench class`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 200;

fn time_runs(program: &str, args: &[&str]) -> Vec<Duration> {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let status = Command::new(program)
                .args(args)
                .env("NO_COLOR", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("spawn");
            let elapsed = start.elapsed();
            assert!(status.success(), "{program} {args:?} failed");
            elapsed
        })
        .collect();
    times.sort();
    times
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(label: &str, times: &[Duration]) -> f64 {
    let median = times[times.len() / 2];
    let p95 = times[times.len() * 95 / 100];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "{label:<44} median {:>6.2} ms   mean {:>6.2} ms   p95 {:>6.2} ms",
        ms(median),
        ms(mean),
        ms(p95)
    );
    ms(median)
}

fn main() {
    let binary = env!("CARGO_BIN_EXE_kubectl-media");
    println!("kubectl media class, {RUNS} runs each (wall time, start-up included)");
    let baseline = report("baseline: spawn `true`", &time_runs("true", &[]));
    let class = report(
        "class decode-10bit (one class)",
        &time_runs(
            binary,
            &[
                "class",
                "decode-10bit",
                "--decode",
                "HEVCMain10",
                "--scale",
                "10bit",
            ],
        ),
    );
    let full = report(
        "class --claim --with-render-class -o json",
        &time_runs(
            binary,
            &[
                "class",
                "--decode",
                "AV1Main10,HEVCMain10,VP9Profile2",
                "--encode",
                "HEVCMain10",
                "--scale",
                "10bit",
                "--claim",
                "--with-render-class",
                "-o",
                "json",
            ],
        ),
    );
    println!(
        "class / baseline: {:.1}x and {:.1}x; target: under 20 ms -> {}",
        class / baseline,
        full / baseline,
        if class.max(full) < 20.0 {
            "met"
        } else {
            "NOT met"
        }
    );
}
