//! Listing a 40,000-device fleet through the test API server (tests/it/support/apiserver), which
//! `kubectl media caps` benchmarks will do: 313 ResourceSlices of 128 devices, each device with
//! every attribute of the capability catalogue.
//!
//! Baseline, measured in the same run: serialising the same stored objects to JSON in-process,
//! the least work any server answering the list must do. The figures show what the HTTP round
//! trip, paging and the server's bookkeeping add to that, so a later benchmark can tell the
//! server's cost from the client's. Run with `cargo bench --bench apiserver`.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use media_operator::catalogue::{Attribute, DRIVER, Kind};
use serde_json::{Value, json};
use support::apiserver::TestApiServer;

#[derive(serde::Deserialize)]
struct ListMeta {
    metadata: ListMetadata,
}

#[derive(serde::Deserialize)]
struct ListMetadata {
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

const DEVICES_PER_SLICE: usize = 128;
const FLEET_DEVICES: usize = 40_000;
/// Without `--bench` (as under `cargo test --all-targets`), a small smoke run.
const SMOKE_DEVICES: usize = 1_000;
const ROUNDS: usize = 7;
const PATH: &str = "/apis/resource.k8s.io/v1/resourceslices";

fn slice(node: usize) -> Value {
    let devices: Vec<Value> = (0..DEVICES_PER_SLICE)
        .map(|d| {
            let attributes: serde_json::Map<String, Value> = Attribute::all()
                .map(|a| {
                    let v = match a.kind() {
                        Kind::Bool => json!({"bool": d % 3 != 0}),
                        Kind::String => json!({"string": format!("value-{node}-{d}")}),
                    };
                    (a.name().to_string(), v)
                })
                .collect();
            json!({"name": format!("pci-0000-{d:02x}-00-0"), "attributes": attributes})
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("node-{node:05}-{DRIVER}")},
        "spec": {
            "driver": DRIVER,
            "nodeName": format!("node-{node:05}"),
            "pool": {"name": format!("node-{node:05}"), "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    })
}

/// The median of `rounds` runs of `f`, which returns the bytes it produced.
fn median(rounds: usize, mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let mut times = Vec::with_capacity(rounds);
    let mut bytes = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        bytes = f();
        times.push(t.elapsed());
    }
    times.sort();
    (times[rounds / 2], bytes)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (fleet, rounds) = if bench {
        (FLEET_DEVICES, ROUNDS)
    } else {
        (SMOKE_DEVICES, 1)
    };
    let server = TestApiServer::start();
    let slices = fleet.div_ceil(DEVICES_PER_SLICE);
    let load = Instant::now();
    for node in 0..slices {
        server.put(slice(node)).expect("store a slice");
    }
    let load = load.elapsed();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The client spawns its buffer task, so it is made inside the runtime.
    let _entered = rt.enter();
    let client = kube::Client::try_from(server.kube_config()).expect("kube client");

    let stored = server.list("resourceslices", None);
    let (baseline, baseline_bytes) = median(rounds, || {
        stored
            .iter()
            .map(|o| serde_json::to_vec(o).map_or(0, |v| v.len()))
            .sum()
    });

    let get = |path: String| {
        let client = client.clone();
        async move {
            let req = http::Request::get(path)
                .body(kube::client::Body::from(Vec::new()))
                .expect("request");
            let res = client.send(req).await.expect("list answered");
            assert_eq!(res.status(), 200);
            let body = res.into_body().collect().await.expect("body").to_bytes();
            // Only the list metadata is decoded: the items are skipped, not built, so the
            // figures stay about the server.
            let meta: ListMeta = serde_json::from_slice(&body).expect("a list");
            (body.len(), meta.metadata.continue_)
        }
    };
    let (whole, whole_bytes) = median(rounds, || rt.block_on(get(PATH.to_string())).0);
    let (paged, paged_bytes) = median(rounds, || {
        rt.block_on(async {
            let mut total = 0;
            let mut token: Option<String> = None;
            loop {
                let path = match &token {
                    Some(t) => format!("{PATH}?limit=50&continue={t}"),
                    None => format!("{PATH}?limit=50"),
                };
                let (n, next) = get(path).await;
                total += n;
                match next {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => break total,
                }
            }
        })
    });
    let (selected, _) = median(rounds, || {
        rt.block_on(get(format!(
            "{PATH}?fieldSelector=spec.nodeName%3Dnode-00100%2Cspec.driver%3D{DRIVER}"
        )))
        .0
    });

    let mb = |b: usize| b as f64 / 1e6;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let note = if bench {
        ""
    } else {
        " - smoke run; `cargo bench --bench apiserver` gives the figures"
    };
    println!(
        "test API server: list {fleet} devices in {slices} ResourceSlices (median of {rounds}){note}"
    );
    println!(
        "  load (create through the store)       {:>9.1} ms",
        ms(load)
    );
    println!(
        "  baseline: serialise in-process        {:>9.1} ms  {:>7.1} MB",
        ms(baseline),
        mb(baseline_bytes)
    );
    println!(
        "  GET whole list over HTTP              {:>9.1} ms  {:>7.1} MB  {:>5.2}x baseline",
        ms(whole),
        mb(whole_bytes),
        ms(whole) / ms(baseline)
    );
    println!(
        "  GET in pages of 50 slices             {:>9.1} ms  {:>7.1} MB  {:>5.2}x baseline",
        ms(paged),
        mb(paged_bytes),
        ms(paged) / ms(baseline)
    );
    println!(
        "  GET one node's slice by field selector {:>8.2} ms",
        ms(selected)
    );
}
