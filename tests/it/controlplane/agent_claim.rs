//! The agent never takes a GPU from a workload: its pod's claim (deploy/base/claim-template.yaml,
//! made by the real ResourceClaim controller from the DaemonSet's own pod template, allocated by
//! the real kube-scheduler) holds every render node of its node with admin access, and a
//! workload's claim is allocated the same render node beside it, on 1.34 with its default gates,
//! where the API server drops `allowMultipleAllocations` and a plain `All` claim would hold every
//! render node exclusively. With DRAAdminAccess turned off, the server drops `adminAccess` too:
//! the shipped admission policy then refuses the agent's claim instead of letting it take the GPUs.

use serde_json::{Value, json};

use super::product::{
    LACKS, Placed, QUALIFIES, claim_of, create_pod, flow_without_the_gate, get, placed, results,
    wait,
};
use super::{ADMIN_ACCESS_LABEL, NAMESPACE, ok};
use crate::support::controlplane::{self, ControlPlane, Release};
use media_operator::render_drivers::LIKEN;

/// A pod of the agent's DaemonSet on `node`, as the DaemonSet controller makes it: the
/// template's spec, kept to the node by a required node affinity on its name.
fn agent_pod(cp: &ControlPlane, node: &str) -> String {
    let daemonset = get(cp, &["daemonset", "-n", NAMESPACE, "media-capabilities"]);
    let template = &daemonset["spec"]["template"];
    // Not media-capabilities-<node>: the pod that the agent process's token is bound to.
    let name = format!("media-capabilities-ds-{node}");
    let mut spec = template["spec"].clone();
    spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}
        ]}]
    }}});
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": template["metadata"]["labels"]},
        "spec": spec,
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pod.json");
    std::fs::write(&file, pod.to_string()).unwrap();
    // Applied, not created: a shared control plane may keep the pod of an earlier run.
    ok(cp.kubectl(&["apply", "-f", file.to_str().unwrap()]));
    name
}

/// The agent pod's claim once allocated.
fn agent_claim(cp: &ControlPlane, pod: &str) -> Value {
    wait(&format!("the claim of {pod} is allocated"), || {
        let p = get(cp, &["pod", "-n", NAMESPACE, pod]);
        let name = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"].as_str()?;
        let claim = get(cp, &["resourceclaim", "-n", NAMESPACE, name]);
        claim["status"]["allocation"].is_object().then_some(claim)
    })
    .unwrap_or_else(|e| panic!("{e}; log: {}", cp.log_tail()))
}

/// The render nodes liken publishes on `node`, by device name.
fn render_nodes(cp: &ControlPlane, node: &str) -> Vec<String> {
    let slice = get(cp, &["resourceslice", &format!("{node}-{}", LIKEN.name)]);
    let mut names: Vec<String> = slice["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn on_1_34_default_gates_a_workload_is_allocated_the_render_node_the_agent_holds() {
    let cp = flow_without_the_gate();
    let pod = agent_pod(cp, LACKS);
    let claim = agent_claim(cp, &pod);
    // Every render node of the node, each with admin access.
    let held: Vec<&Value> = claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let mut devices: Vec<String> = held
        .iter()
        .map(|r| r["device"].as_str().unwrap().to_string())
        .collect();
    devices.sort();
    assert_eq!(devices, render_nodes(cp, LACKS), "{claim:#}");
    assert!(
        held.iter()
            .all(|r| r["adminAccess"] == true && r["driver"] == LIKEN.name),
        "{claim:#}"
    );
    assert_eq!(
        placed_agent(cp, &pod),
        LACKS,
        "the agent's pod is bound to its node"
    );

    // A workload's claim on any render node, on the same node: allocated the one the agent
    // holds (the node has one GPU; mtl-1's is the other gate-off test's), though the server keeps no allowMultipleAllocations.
    create_pod(cp, "beside-the-agent", "only-gpu-render", Some(LACKS));
    assert_eq!(
        placed(cp, "beside-the-agent"),
        Placed::On(LACKS.to_string())
    );
    let workload = claim_of(cp, "beside-the-agent");
    let got = results(&workload);
    assert_eq!(got.len(), 1, "{workload:#}");
    assert!(devices.contains(&got[0].3), "{got:?} not among {devices:?}");
    assert!(workload["status"]["allocation"]["devices"]["results"][0]["adminAccess"].is_null());
}

/// The node the scheduler bound the agent's pod to.
fn placed_agent(cp: &ControlPlane, pod: &str) -> String {
    wait(&format!("{pod} is bound"), || {
        get(cp, &["pod", "-n", NAMESPACE, pod])["spec"]["nodeName"]
            .as_str()
            .map(str::to_string)
    })
    .unwrap()
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn with_admin_access_off_the_agents_claim_is_refused_not_allocated() {
    let cp = controlplane::shared_with_on(
        Release::V1_34,
        "admin-access-off",
        &["--feature-gates", "DRAAdminAccess=false"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let cp = &cp;
    ok(cp.kubectl(&["create", "namespace", NAMESPACE]));
    ok(cp.kubectl(&["label", "namespace", NAMESPACE, ADMIN_ACCESS_LABEL]));
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let deploy = deploy.to_str().unwrap();
    // The template first, before any policy exists, as a server without the policies would
    // take it: the server drops adminAccess from it.
    let template =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/claim-template.yaml");
    ok(cp.kubectl(&["apply", "-f", template.to_str().unwrap()]));
    let stored = get(
        cp,
        &[
            "resourceclaimtemplate",
            "-n",
            NAMESPACE,
            "media-capabilities-render",
        ],
    );
    assert!(
        stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"].is_null(),
        "the server kept adminAccess with the gate off: {stored}"
    );
    // The rest of the install; its template update passes or is refused, as the policy is
    // enforced yet or not.
    let _ = cp.kubectl(&["apply", "-k", deploy]);
    // Once the policy is enforced, applying again is refused, saying why.
    let refused = wait("the admin-access policy refuses the template", || {
        let out = cp.kubectl(&["apply", "-k", deploy]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (!out.status.success() && stderr.contains("DRAAdminAccess")).then_some(stderr)
    })
    .unwrap();
    assert!(refused.contains("no adminAccess"), "{refused}");

    // A pod of the agent gets no claim: the controller's create is refused, and the pod's event
    // says why. No render node is allocated to it.
    cp.node(QUALIFIES, &[]);
    let pod = agent_pod(cp, QUALIFIES);
    let event = wait("the claim controller reports the refused claim", || {
        let selector = format!("involvedObject.name={pod},reason=FailedResourceClaimCreation");
        let events = get(
            cp,
            &["events", "-n", NAMESPACE, "--field-selector", &selector],
        );
        events["items"].as_array()?.first()?["message"]
            .as_str()
            .map(str::to_string)
    })
    .unwrap();
    assert!(event.contains("lost adminAccess"), "{event}");
    let claims = get(cp, &["resourceclaims", "-n", NAMESPACE]);
    assert_eq!(claims["items"], json!([]), "{claims:#}");
}
