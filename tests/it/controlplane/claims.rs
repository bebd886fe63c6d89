//! Who holds which GPU, against claims the real scheduler allocated: on the product flow's control
//! plane (product.rs), two pods claim through the document's `decode-10bit` template and share
//! `mtl-1`; `caps --claims` must list both claims with their pods and requests on that GPU, and
//! the counts of `caps -o json` must be what the API server's own claims say. A user whose role
//! may list slices but not claims gets a warning and unknown counts, never an error.
//!
//! Other tests of the flow create pods of their own at the same time, so counts are compared on a
//! quiet moment: the claims read before and after `caps` must be the same.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::ok;
use super::product::{
    KUBECTL_MEDIA, PODS, Placed, QUALIFIES, apply, claim_of, create_pod, flow, get, placed,
};
use crate::support::controlplane::{ControlPlane, Release};
use media_operator::catalogue;

/// `kubectl media caps ARGS` with `kubeconfig`, in an empty environment.
fn caps(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(KUBECTL_MEDIA)
        .arg("caps")
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

/// Every claim's allocation results, as (namespace/claim, driver, pool, device).
pub(super) fn allocated(cp: &ControlPlane) -> BTreeSet<(String, String, String, String)> {
    let claims = get(cp, &["resourceclaims", "-A"]);
    let mut out = BTreeSet::new();
    for claim in claims["items"].as_array().unwrap() {
        let name = format!(
            "{}/{}",
            claim["metadata"]["namespace"].as_str().unwrap(),
            claim["metadata"]["name"].as_str().unwrap()
        );
        for r in claim["status"]["allocation"]["devices"]["results"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            out.insert((name.clone(), s("driver"), s("pool"), s("device")));
        }
    }
    out
}

/// (node, PCI address) of every device of `driver`, by (pool, device).
fn addresses(cp: &ControlPlane, driver: &str) -> BTreeMap<(String, String), String> {
    let slices = get(cp, &["resourceslices"]);
    let mut out = BTreeMap::new();
    for slice in slices["items"].as_array().unwrap() {
        if slice["spec"]["driver"] != driver {
            continue;
        }
        let pool = slice["spec"]["pool"]["name"].as_str().unwrap().to_string();
        for device in slice["spec"]["devices"].as_array().into_iter().flatten() {
            if let Some(address) = device["attributes"][catalogue::PCI_BUS_ID]["string"].as_str() {
                out.insert(
                    (pool.clone(), device["name"].as_str().unwrap().to_string()),
                    address.to_string(),
                );
            }
        }
    }
    out
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn caps_shows_the_claims_the_scheduler_allocated_and_the_pods_that_hold_them() {
    let cp = flow(Release::V1_34);
    let pods = ["claims-film-a", "claims-film-b"];
    let mut claims = Vec::new();
    for pod in pods {
        create_pod(cp, pod, "decode-10bit", None);
    }
    for pod in pods {
        assert_eq!(placed(cp, pod), Placed::On(QUALIFIES.to_string()), "{pod}");
        let claim = claim_of(cp, pod);
        claims.push(claim["metadata"]["name"].as_str().unwrap().to_string());
    }

    // Both claims on the GPU the scheduler chose, with their pods and requests.
    let listed = ok(caps(cp.kubeconfig(), &["--claims", "--node", QUALIFIES]));
    for (pod, claim) in pods.iter().zip(&claims) {
        // The GPU's name has spaces: the row is read by its cells' text, not by word position.
        let row = listed
            .lines()
            .find(|l| l.contains(&format!(" {PODS}/{pod} ")))
            .unwrap_or_else(|| panic!("{pod} not in:\n{listed}"));
        assert!(row.starts_with(&format!("{QUALIFIES} ")), "{row}");
        assert!(
            row.contains(&format!(" {claim} ")) && row.ends_with(" gpu,decodes  render,media"),
            "{row}"
        );
    }

    // The counts are the API server's: per GPU, the claims whose results name its render node
    // or its media device, computed here from kubectl's own listing.
    let render = addresses(cp, media_operator::render_drivers::LIKEN.name);
    let media = addresses(cp, catalogue::DRIVER);
    let mut compared = false;
    for _ in 0..20 {
        let before = allocated(cp);
        let records: Value =
            serde_json::from_str(&ok(caps(cp.kubeconfig(), &["-o", "json", "--claims"]))).unwrap();
        if allocated(cp) != before {
            continue;
        }
        for record in records.as_array().unwrap() {
            let node = record["node"].as_str().unwrap();
            let address = record["attributes"][catalogue::PCI_BUS_ID].as_str();
            let holding = |devices: &BTreeMap<(String, String), String>, driver: &str| {
                before
                    .iter()
                    .filter(|(_, d, pool, device)| {
                        d == driver
                            && pool == node
                            && devices
                                .get(&(pool.clone(), device.clone()))
                                .map(String::as_str)
                                == address
                    })
                    .map(|(claim, ..)| claim.clone())
                    .collect::<BTreeSet<_>>()
                    .len()
            };
            assert_eq!(
                record["claims"]["renderNode"],
                json!(holding(&render, media_operator::render_drivers::LIKEN.name)),
                "{node}: {record}"
            );
            assert_eq!(
                record["claims"]["mediaDevice"],
                json!(holding(&media, catalogue::DRIVER)),
                "{node}: {record}"
            );
            if node == QUALIFIES {
                let holders: Vec<&str> = record["claims"]["holders"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h["claim"].as_str().unwrap())
                    .collect();
                for claim in &claims {
                    assert!(holders.contains(&claim.as_str()), "{claim}: {record}");
                }
            }
        }
        compared = true;
        break;
    }
    assert!(compared, "the claims never stood still for one caps run");
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_role_that_may_not_list_claims_gets_a_warning_not_an_error() {
    let cp = flow(Release::V1_34);
    // A reader of slices only, by a service account's token.
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "slices-reader"},
        "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]}]
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "slices-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "slices-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "slices-reader", "namespace": PODS}]
    });
    apply(
        cp,
        &json!({"apiVersion": "v1", "kind": "List", "items": [role, binding]}).to_string(),
    );
    let token = cp.token(PODS, "slices-reader", "slices-reader", QUALIFIES);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("reader.kubeconfig");
    cp.token_kubeconfig(&token, &kubeconfig);

    for args in [
        &["-o", "json"][..],
        &["--summary"],
        &["-o", "wide"],
        &["--claims"],
    ] {
        let out = caps(&kubeconfig, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(
                "warning: the claims that hold each GPU are left out: forbidden: cannot list \
                 resourceclaims.resource.k8s.io at the cluster scope: "
            ) && stderr.trim_end().ends_with(
                "(hint: ask for a role that allows 'list' on resourceclaims.resource.k8s.io)"
            ),
            "{args:?}: {stderr}"
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        match args[0] {
            "-o" if args[1] == "json" => {
                let records: Value = serde_json::from_str(&stdout).unwrap();
                assert!(!records.as_array().unwrap().is_empty());
                assert!(
                    records
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|r| r["claims"].is_null())
                );
            }
            "-o" => assert!(stdout.lines().nth(1).unwrap().contains(" ?  "), "{stdout}"),
            "--summary" => assert!(!stdout.contains("HELD"), "{stdout}"),
            _ => assert!(stdout.is_empty(), "{stdout}"),
        }
    }
}
