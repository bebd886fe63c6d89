//! Against the real control plane (tests/controlplane: kube-apiserver, kube-scheduler and the
//! controllers of a release, with RBAC, ServiceAccount tokens and admission): the release it
//! reports, the shipped install, and the node-bound admission policy enforced by the real API
//! server. `cargo test --test it controlplane` runs these; the first run builds the control
//! plane (minutes; Go's build cache keeps later builds short).
//!
//! The tests that [`on_each_release!`] lists run on 1.34 and on 1.37 with each release's
//! default gates, as `on_1_34::NAME` and `on_1_37::NAME`, one control plane per release.

use std::path::Path;
use std::process::Output;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::controlplane::{self, ControlPlane, Release};
use media_operator::catalogue::DRIVER;

/// Makes a test of each `fn NAME(release: Release)` named for each release: `on_1_34::NAME`
/// and `on_1_37::NAME` in the module that invokes it.
macro_rules! on_each_release {
    ($($test:ident),+ $(,)?) => {
        $crate::controlplane::on_each_release!(@release on_1_34, V1_34, $($test),+);
        $crate::controlplane::on_each_release!(@release on_1_37, V1_37, $($test),+);
    };
    (@release $module:ident, $release:ident, $($test:ident),+) => {
        mod $module {
            $(
                #[test]
                #[cfg_attr(
                    not(all(have_go, have_kubectl)),
                    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
                )]
                fn $test() {
                    super::$test($crate::support::controlplane::Release::$release)
                }
            )+
        }
    };
}
pub(crate) use on_each_release;

on_each_release!(
    version_is_the_pinned_release,
    the_install_applies_and_its_policy_type_checks_without_warnings,
    a_node_bound_agent_token_writes_its_own_nodes_slice_and_no_other,
);

mod access;
mod agent_claim;
mod claims;
mod encodings;
mod product;
mod random;
mod render_drivers;
mod taints;

/// The namespace liken creates before the install (deploy/kustomization.yaml).
pub(crate) const NAMESPACE: &str = "liken-system";

/// The label a namespace needs before its claims may ask for admin access (DRAAdminAccess).
pub(crate) const ADMIN_ACCESS_LABEL: &str = "resource.kubernetes.io/admin-access=true";

/// The agent's service account, which the policy constrains.
pub(crate) const AGENT: &str = "media-capabilities";

/// How long the API server may take to type-check a new policy (its controller runs every second).
const POLICY_CHECKED: Duration = Duration::from_secs(60);

pub(crate) fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The shared control plane of `release` with deploy/ installed (once per test process).
pub(crate) fn installed(release: Release) -> &'static ControlPlane {
    static INSTALLED: [OnceLock<()>; 2] = [const { OnceLock::new() }; 2];
    let cp = controlplane::shared_on(release);
    INSTALLED[release as usize].get_or_init(|| install(cp));
    cp
}

/// Applies deploy/ as shipped, after creating the namespace it expects to exist (labelled for
/// the agent's admin-access claim, as docs/operations.md says), and waits until the API server
/// enforces its admission policy.
fn install(cp: &ControlPlane) {
    ok(cp.kubectl(&["create", "namespace", NAMESPACE]));
    ok(cp.kubectl(&["label", "namespace", NAMESPACE, ADMIN_ACCESS_LABEL]));
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    ok(cp.kubectl(&["apply", "-k", deploy.to_str().unwrap()]));
    // The admission plugin learns of a new policy and binding through informers, a moment
    // after they are stored: until then the agent's writes pass unchecked. A server-side dry
    // run as the agent (impersonated, so without a node claim) goes through admission.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slice.json");
    std::fs::write(
        &file,
        slice("policy-probe", DRIVER, "policy-probe").to_string(),
    )
    .unwrap();
    let agent = format!("--as=system:serviceaccount:{NAMESPACE}:{AGENT}");
    let probe = [
        "create",
        "--dry-run=server",
        &agent,
        "-f",
        file.to_str().unwrap(),
    ];
    let deadline = Instant::now() + POLICY_CHECKED;
    loop {
        let out = cp.kubectl(&probe);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && stderr.contains("media-capabilities-node-bound") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the policy is not enforced: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn version_is_the_pinned_release(release: Release) {
    let cp = controlplane::shared_on(release);
    let version: Value = serde_json::from_str(&ok(cp.kubectl(&["version", "-o", "json"]))).unwrap();
    let server = &version["serverVersion"];
    let release = release.version();
    assert_eq!(server["gitVersion"], release.as_str(), "{version}");
    let mut parts = release.trim_start_matches('v').split('.');
    assert_eq!(server["major"], parts.next().unwrap(), "{version}");
    assert_eq!(server["minor"], parts.next().unwrap(), "{version}");
}

/// Every program of the harness builds for every release and answers a start without flags
/// with its one `error` line. .ci/run runs this first, so that the builds' minutes show on
/// their own and the tests after it find the programs built.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_harness_builds_for_every_release() {
    for release in Release::ALL {
        for (program, error) in [
            (&controlplane::CONTROL_PLANE, "error --dir is required"),
            (&controlplane::KUBELET, "error --kubeconfig, --node"),
        ] {
            let binary = controlplane::built(program, release).unwrap_or_else(|e| panic!("{e}"));
            let out = std::process::Command::new(binary).output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.code() == Some(1) && stdout.starts_with(error),
                "{} for {}: {:?} {stdout}",
                program.name,
                release.name(),
                out.status
            );
        }
    }
}

/// The type-checking warnings the API server recorded in the status of policy `name`, once it
/// has checked the current generation.
fn type_check_warnings(cp: &ControlPlane, name: &str) -> Vec<Value> {
    // The ValidatingAdmissionPolicy status controller type-checks asynchronously and records
    // the generation it checked.
    let deadline = Instant::now() + POLICY_CHECKED;
    loop {
        let policy: Value = serde_json::from_str(&ok(cp.kubectl(&[
            "get",
            "validatingadmissionpolicy",
            name,
            "-o",
            "json",
        ])))
        .unwrap();
        if policy["status"]["observedGeneration"] == policy["metadata"]["generation"] {
            let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
            return warnings.as_array().cloned().unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "never type-checked: {policy}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The shipped policy renamed `name`, matching resource.k8s.io/v1 only (as shipped), and changed by `edit`;
/// applied without a binding, so it is checked, not enforced.
fn apply_v1_copy(cp: &ControlPlane, name: &str, edit: impl Fn(&mut Value)) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/admission-policy.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut policy: Value = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|d: &Value| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("the policy");
    policy["metadata"]["name"] = name.into();
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array_mut()
        .unwrap()
    {
        rule["apiVersions"] = serde_json::json!(["v1"]);
    }
    edit(&mut policy);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.json");
    std::fs::write(&file, policy.to_string()).unwrap();
    ok(cp.kubectl(&["apply", "-f", file.to_str().unwrap()]));
}

fn the_install_applies_and_its_policy_type_checks_without_warnings(release: Release) {
    let cp = installed(release);
    let shipped = type_check_warnings(cp, "media-capabilities-node-bound");
    assert!(shipped.is_empty(), "{shipped:?}");

    // The API server type-checks only against the versions a policy names (with "*" it checks
    // nothing and the empty status above would mean nothing): a misspelt field in a copy of
    // the shipped policy's validation is reported (the status controller reports none for variables).
    apply_v1_copy(cp, "typecheck-v1-misspelt", |policy| {
        let validations = policy["spec"]["validations"].as_array_mut().unwrap();
        validations
            .push(serde_json::json!({"expression": "object.spec.nodeNam == variables.node"}));
    });
    let misspelt = type_check_warnings(cp, "typecheck-v1-misspelt");
    assert!(
        misspelt.len() == 1
            && misspelt[0]["fieldRef"] == "spec.validations[3].expression"
            && misspelt[0]["warning"]
                .as_str()
                .unwrap()
                .contains("undefined field 'nodeNam'"),
        "{misspelt:?}"
    );
}

/// A ResourceSlice of `driver` on `node` with one device, as JSON for `kubectl create -f`.
fn slice(name: &str, driver: &str, node: &str) -> Value {
    serde_json::json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    })
}

fn create_as(kubeconfig: &Path, yaml: &str) -> Output {
    let file = kubeconfig.with_extension("slice.json");
    std::fs::write(&file, yaml).unwrap();
    controlplane::kubectl(kubeconfig, &["create", "-f", file.to_str().unwrap()])
}

fn a_node_bound_agent_token_writes_its_own_nodes_slice_and_no_other(release: Release) {
    let cp = installed(release);
    cp.node("bound-a", &[]);
    cp.node("bound-b", &[]);
    let token = cp.token(NAMESPACE, AGENT, "agent-bound-a", "bound-a");
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("agent.kubeconfig");
    cp.token_kubeconfig(&token, &kubeconfig);

    ok(create_as(
        &kubeconfig,
        &slice("bound-a-media", DRIVER, "bound-a").to_string(),
    ));

    let denied = create_as(
        &kubeconfig,
        &slice("bound-b-media", DRIVER, "bound-b").to_string(),
    );
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(!denied.status.success(), "created another node's slice");
    assert!(
        stderr.contains("media-capabilities-node-bound")
            && stderr.contains("media-capabilities on node bound-a may only write the slices of node bound-a, not those of node bound-b"),
        "{stderr}"
    );
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_port_in_use_fails_the_start_in_one_line() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let run = tempfile::tempdir().unwrap();
    let error = match ControlPlane::spawn(
        controlplane::binary(),
        run.path(),
        &["--port", &port.to_string()],
    ) {
        Ok(_) => panic!("started on a port in use"),
        Err(e) => e,
    };
    assert_eq!(
        error,
        format!(
            "start the control plane: kube-apiserver: listen on 127.0.0.1:{port}: listen tcp 127.0.0.1:{port}: \
             bind: address already in use (hint: pass --port 0 for a free port, or stop what holds it)"
        )
    );
    assert!(
        !run.path().join("state").exists(),
        "left its state directory behind"
    );
}

/// Polls `check` every 200 ms until it gives a value, for at most `within`.
pub(crate) fn poll<T>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: not within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
