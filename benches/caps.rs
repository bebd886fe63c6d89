//! `kubectl media caps` on a fleet of 5,000 nodes × 8 GPUs (40,000 GPUs; a liken.sh and a
//! media.liken.sh slice per node, built from the example fleet's recorded probes with the agent's
//! own code). Reports, in one run:
//!
//! - `caps -f fleet.json` (the table, and `--summary`);
//! - `caps` against the project's test API server holding the same slices;
//! - `kubectl get resourceslices` against the same server (the baseline: what a user runs
//!   without the plugin), when kubectl is installed;
//! - the peak RSS of the `caps` runs next to the size of the fleet's JSON;
//! - `caps --claims -f fleet.json -f claims.json` with one allocated claim per GPU (its render
//!   node and its media device, reserved for one pod), against `caps` without `--claims` on the
//!   same files and on the fleet alone (target: within 1.5x).
//!
//! The server holds every slice encoded ahead of time, as JSON and as kubectl's server-side
//! `Table` row ([`TestApiServer::encode_ahead`]), as kube-apiserver's watch cache keeps
//! encodings, so that both clients are measured against a server that only copies bytes.
//!
//! Targets (issue 13): ≤ 0.3 s wall for the whole fleet, ≥ 10× faster than kubectl on the same
//! server in the same run, peak memory ≤ 2× the JSON.
//! Run: `cargo bench --bench caps` (`CAPS_BENCH_NODES=500` for a quicker look).
//!
//! `CAPS_BENCH_BASELINE=/path/to/kubectl-media` also runs an older build of the plugin (say, the
//! commit before a change to the read path, built into another target dir) on the same fleet,
//! its runs interleaved with this build's so that a loaded machine slows both alike, and prints
//! this build's time and memory as ratios of the baseline's.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::timing::{Timing, plugin, sample, summarise, timed};

use support::apiserver::TestApiServer;

const GPUS_PER_NODE: usize = 8;
/// Runs of each `caps` measurement; kubectl is slower, so it runs fewer.
const ROUNDS: usize = 7;
const KUBECTL_ROUNDS: usize = 3;

/// This build and the baseline, run by turns (new, old, new, old...).
fn interleaved(
    rounds: usize,
    make: impl Fn(&str) -> Command,
    new: &str,
    old: &str,
) -> (Timing, Timing) {
    let (mut news, mut olds) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        news.push(timed(make(new), &[0]));
        olds.push(timed(make(old), &[0]));
    }
    (summarise(news), summarise(olds))
}

/// The peak resident set (MiB) and CPU time (user + system, ms) of one run of `command`,
/// measured by GNU time; `None` where /usr/bin/time is not installed (Debian package `time`).
/// The benchmark's own rusage cannot tell: a child forked from this large process starts out
/// with its resident set.
fn rss_and_cpu(command: &Command) -> Option<(f64, f64)> {
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M %U %S", "--"])
        .arg(command.get_program())
        .args(command.get_args());
    timed.env_clear();
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            timed.env(key, value);
        }
    }
    let out = timed
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .ok()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fields: Vec<f64> = stderr
        .lines()
        .last()?
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    match fields[..] {
        [kib, user, system] => Some((kib / 1024.0, (user + system) * 1e3)),
        _ => None,
    }
}

fn main() {
    let nodes: usize = std::env::var("CAPS_BENCH_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5_000);
    // Under `cargo test --all-targets` (no --bench flag) only check that the benchmark runs.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let nodes = if smoke { 20 } else { nodes };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let binary = env!("CARGO_BIN_EXE_kubectl-media");

    let templates = crate::support::examples::example_nodes(&root).expect("example fleet");
    let items = crate::support::examples::large_fleet(nodes, GPUS_PER_NODE, &templates);
    let json =
        serde_json::to_string(&crate::support::examples::list(items.clone())).expect("serialise");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("fleet.json");
    std::fs::write(&file, &json).expect("write fleet");
    // To look at the fleet, or profile `caps` on it by hand.
    if let Some(keep) = std::env::var_os("CAPS_BENCH_FLEET_OUT") {
        std::fs::write(keep, &json).expect("write CAPS_BENCH_FLEET_OUT");
    }
    let json_mib = json.len() as f64 / (1024.0 * 1024.0);
    println!(
        "fleet: {nodes} nodes x {GPUS_PER_NODE} GPUs = {} GPUs, {} slices, {json_mib:.1} MiB of JSON",
        nodes * GPUS_PER_NODE,
        items.len()
    );

    let baseline = std::env::var("CAPS_BENCH_BASELINE").ok();
    let caps_of = |program: &str, args: &[&str]| plugin(program, args, dir.path());
    let caps = |args: &[&str]| plugin(binary, args, dir.path());
    let file_arg = file.to_str().expect("utf-8 path").to_string();
    let from_file = sample(ROUNDS, &[0], || caps(&["caps", "-f", &file_arg]));
    let summary = sample(ROUNDS, &[0], || {
        caps(&["caps", "-f", &file_arg, "--summary"])
    });
    let file_rss = rss_and_cpu(&caps(&["caps", "-f", &file_arg]));
    let file_against_baseline = baseline.as_deref().map(|old| {
        let timings = interleaved(
            ROUNDS,
            |program| caps_of(program, &["caps", "-f", &file_arg]),
            binary,
            old,
        );
        let rss = rss_and_cpu(&caps_of(old, &["caps", "-f", &file_arg]));
        (timings, rss)
    });

    // One allocated claim per GPU, as the scheduler writes them: the render node and the media
    // device of one GPU, joined by their PCI address within the node's pool.
    let claims_file = dir.path().join("claims.json");
    let claims = claims_of(&items);
    let claim_count = claims.len();
    std::fs::write(
        &claims_file,
        serde_json::to_string(&crate::support::examples::list(claims)).expect("serialise"),
    )
    .expect("write claims");
    let claims_arg = claims_file.to_str().expect("utf-8 path").to_string();
    let with_claims_file = sample(ROUNDS, &[0], || {
        caps(&["caps", "-f", &file_arg, "-f", &claims_arg])
    });
    let listing_claims = sample(ROUNDS, &[0], || {
        caps(&["caps", "-f", &file_arg, "-f", &claims_arg, "--claims"])
    });

    let server = TestApiServer::start();
    let load = Instant::now();
    for item in items {
        server.put(item).expect("the test server accepts the fleet");
    }
    server.encode_ahead("resourceslices");
    println!(
        "(loading the test server and encoding its slices took {:.1} s)",
        load.elapsed().as_secs_f64()
    );
    let kubeconfig = server.kubeconfig().to_path_buf();
    let from_server = sample(ROUNDS, &[0], || {
        let mut command = caps(&["caps"]);
        command.env("KUBECONFIG", &kubeconfig);
        command
    });
    let server_rss = rss_and_cpu(&{
        let mut command = caps(&["caps"]);
        command.env("KUBECONFIG", &kubeconfig);
        command
    });
    let server_against_baseline = baseline.as_deref().map(|old| {
        let with_server = |program: &str| {
            let mut command = caps_of(program, &["caps"]);
            command.env("KUBECONFIG", &kubeconfig);
            command
        };
        let timings = interleaved(ROUNDS, with_server, binary, old);
        (timings, rss_and_cpu(&with_server(old)))
    });
    // The same data as caps reads, in full: a heavier baseline than the table.
    let kubectl_json = kubectl_installed().then(|| {
        sample(1, &[0], || {
            let mut command = Command::new("kubectl");
            command
                .args(["get", "resourceslices", "-o", "json"])
                .env("KUBECONFIG", &kubeconfig);
            command
        })
    });

    let kubectl = kubectl_installed().then(|| {
        sample(KUBECTL_ROUNDS, &[0], || {
            let mut command = Command::new("kubectl");
            command
                .args(["get", "resourceslices"])
                .env("KUBECONFIG", &kubeconfig);
            command
        })
    });

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let line = |label: &str, t: Timing| {
        println!(
            "  {label:<36} best {:>6.0} ms   median {:>6.0} ms",
            ms(t.best),
            ms(t.median)
        )
    };
    println!(
        "wall time, start-up included ({ROUNDS} runs of each caps, {KUBECTL_ROUNDS} of kubectl get):"
    );
    line("caps -f fleet.json", from_file);
    line("caps -f fleet.json --summary", summary);
    line("caps -f fleet.json -f claims.json", with_claims_file);
    line("caps ... -f claims.json --claims", listing_claims);
    println!(
        "  --claims with {claim_count} allocated claims: {:.2}x caps on the same files, {:.2}x caps on the fleet alone (medians; target: <= 1.5x)",
        listing_claims.median.as_secs_f64() / with_claims_file.median.as_secs_f64(),
        listing_claims.median.as_secs_f64() / from_file.median.as_secs_f64()
    );
    line("caps (test API server)", from_server);
    match kubectl {
        Some(kubectl) => {
            line("kubectl get resourceslices (baseline)", kubectl);
            if let Some(json) = kubectl_json {
                println!(
                    "  {:<36} {:>6.0} ms (one run)",
                    "kubectl get resourceslices -o json",
                    ms(json.best)
                );
            }
            println!(
                "  caps from the server is {:.1}x faster than kubectl get, best against best; {:.1}x median against median (target: >= 10x)",
                kubectl.best.as_secs_f64() / from_server.best.as_secs_f64(),
                kubectl.median.as_secs_f64() / from_server.median.as_secs_f64()
            );
        }
        None => println!("  kubectl get resourceslices: not measured, kubectl is not installed"),
    }
    match (file_rss, server_rss) {
        (Some((file_rss, file_cpu)), Some((server_rss, server_cpu))) => {
            println!(
                "peak RSS: caps -f {file_rss:.0} MiB = {:.2}x the JSON; caps from the server {server_rss:.0} MiB = {:.2}x (target: <= 2x)",
                file_rss / json_mib,
                server_rss / json_mib
            );
            println!(
                "CPU time of the caps process: {file_cpu:.0} ms from the file, {server_cpu:.0} ms from the server (the rest of the wall time is waiting for the server)"
            );
        }
        _ => println!("peak RSS: not measured (/usr/bin/time is not installed)"),
    }
    if let (
        Some(old),
        Some(((file_new, file_old), file_old_rss)),
        Some(((server_new, server_old), server_old_rss)),
    ) = (&baseline, file_against_baseline, server_against_baseline)
    {
        println!("against the baseline {old} ({ROUNDS} runs of each, interleaved):");
        let ratio = |label: &str, new: Timing, old: Timing| {
            println!(
                "  {label:<24} new best {:>6.0} ms, old {:>6.0} ms: {:.3}x;  median new {:>6.0} ms, old {:>6.0} ms: {:.3}x (target: <= 1.10x)",
                ms(new.best),
                ms(old.best),
                new.best.as_secs_f64() / old.best.as_secs_f64(),
                ms(new.median),
                ms(old.median),
                new.median.as_secs_f64() / old.median.as_secs_f64()
            )
        };
        ratio("caps -f fleet.json", file_new, file_old);
        ratio("caps (test API server)", server_new, server_old);
        if let (
            Some((new_rss, _)),
            Some((old_rss, _)),
            Some((new_server_rss, _)),
            Some((old_server_rss, _)),
        ) = (file_rss, file_old_rss, server_rss, server_old_rss)
        {
            println!(
                "  peak RSS from the file: new {new_rss:.0} MiB, old {old_rss:.0} MiB ({:.2}x); from the server: new {new_server_rss:.0} MiB, old {old_server_rss:.0} MiB ({:.2}x)",
                new_rss / old_rss,
                new_server_rss / old_server_rss
            );
        }
    }
    let target = Duration::from_millis(300);
    println!(
        "target <= 0.3 s for the whole fleet (median): file {}, server {}",
        if from_file.median <= target {
            "met"
        } else {
            "NOT met"
        },
        if from_server.median <= target {
            "met"
        } else {
            "NOT met"
        }
    );
}

/// One allocated claim per GPU of `items` (the fleet's slices): the liken render node and the
/// media device of the same PCI address in one pool, reserved for one pod.
fn claims_of(items: &[serde_json::Value]) -> Vec<serde_json::Value> {
    use std::collections::HashMap;
    let address = |device: &serde_json::Value| {
        device["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
            .as_str()
            .map(str::to_string)
    };
    // (pool, address) -> render node name.
    let mut render: HashMap<(String, String), String> = HashMap::new();
    for slice in items.iter().filter(|s| s["spec"]["driver"] == "liken.sh") {
        let pool = slice["spec"]["pool"]["name"].as_str().unwrap_or_default();
        for device in slice["spec"]["devices"].as_array().into_iter().flatten() {
            if let (Some(address), Some(name)) = (address(device), device["name"].as_str()) {
                render.insert((pool.to_string(), address), name.to_string());
            }
        }
    }
    let mut claims = Vec::new();
    for slice in items
        .iter()
        .filter(|s| s["spec"]["driver"] == "media.liken.sh")
    {
        let pool = slice["spec"]["pool"]["name"].as_str().unwrap_or_default();
        for device in slice["spec"]["devices"].as_array().into_iter().flatten() {
            let Some(address) = address(device) else {
                continue;
            };
            let Some(node) = render.get(&(pool.to_string(), address)) else {
                continue;
            };
            let name = format!("film-{}", claims.len());
            claims.push(serde_json::json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "media"},
                "spec": {"devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu-render"}},
                        {"name": "decodes", "exactly": {"deviceClassName": "decode-10bit"}}
                    ],
                    "constraints": [{"requests": ["gpu", "decodes"], "matchAttribute": "resource.kubernetes.io/pciBusID"}]
                }},
                "status": {
                    "allocation": {"devices": {"results": [
                        {"request": "gpu", "driver": "liken.sh", "pool": pool, "device": node},
                        {"request": "decodes", "driver": "media.liken.sh", "pool": pool, "device": device["name"]}
                    ]}},
                    "reservedFor": [{"resource": "pods", "name": name, "uid": format!("00000000-0000-4000-8000-{:012}", claims.len())}]
                }
            }));
        }
    }
    claims
}

fn kubectl_installed() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok()
}
