//! What the agent may do, on a control plane of its own: the shipped ClusterRole grants each call
//! the agent makes (without one rule, the agent says so in one line naming the verb and the
//! resource), and the admission policy denies its token another driver's slice and a token
//! not bound to a node any write. On each release, with its default gates.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use super::product::{AGENT_BIN, reports};
use super::{AGENT, NAMESPACE, install, ok, slice};
use crate::support::agent::{AgentProcess, FAST};
use crate::support::controlplane::{self, ControlPlane, Release};
use media_operator::catalogue;

/// How long the agent may take to meet the refusal and log it.
const REFUSAL_LOGGED: Duration = Duration::from_secs(30);

/// A control plane of these tests, with deploy/ installed: they change the ClusterRole and
/// add nodes, which the tests on the other instances must not see.
fn cluster(release: Release) -> &'static ControlPlane {
    static CLUSTER: [OnceLock<Result<ControlPlane, String>>; 2] = [const { OnceLock::new() }; 2];
    CLUSTER[release as usize]
        .get_or_init(|| {
            let name = format!("access-{}", release.name());
            let cp = controlplane::shared_with_on(release, &name, &[])?;
            install(&cp);
            Ok(cp)
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

super::on_each_release!(
    without_a_rule_of_the_cluster_role_the_agent_logs_the_403_in_one_line,
    an_agent_token_is_denied_another_drivers_slice_and_an_unbound_token_any_write,
);

/// The shipped ClusterRole, as JSON.
fn shipped_role() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|d: &Value| d["kind"] == "ClusterRole")
        .expect("the ClusterRole")
}

fn apply_json(cp: &ControlPlane, object: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("object.json");
    std::fs::write(&file, object.to_string()).unwrap();
    ok(cp.kubectl(&["apply", "-f", file.to_str().unwrap()]));
}

/// Whether the agent's service account may `verb` `resource`, as the authorizer sees it now.
fn agent_can(cp: &ControlPlane, verb: &str, resource: &str) -> bool {
    let who = format!("--as=system:serviceaccount:{NAMESPACE}:{AGENT}");
    let out = cp.kubectl(&["auth", "can-i", verb, resource, &who]);
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// A kubeconfig in `dir` with a token of the agent bound to a pod on `node`.
fn agent_kubeconfig(cp: &ControlPlane, node: &str, dir: &Path) -> std::path::PathBuf {
    let token = cp.token(NAMESPACE, AGENT, &format!("{AGENT}-{node}"), node);
    let kubeconfig = dir.join(format!("{node}.kubeconfig"));
    cp.token_kubeconfig(&token, &kubeconfig);
    kubeconfig
}

fn without_a_rule_of_the_cluster_role_the_agent_logs_the_403_in_one_line(release: Release) {
    let cp = cluster(release);
    let home = tempfile::tempdir().unwrap();
    // The calls of a first publish (the Node for its uid, the watch's list and watch, the
    // create); an update of its own slice that differs; the delete of a stray one; the read by
    // name after its create met another driver's slice of its name (outside its watch).
    let own = catalogue::DRIVER;
    for (verb, resource, stored) in [
        ("get", "nodes", None),
        ("list", "resourceslices", None),
        ("watch", "resourceslices", None),
        ("create", "resourceslices", None),
        ("update", "resourceslices", Some((own, own))),
        ("delete", "resourceslices", Some(("stray", own))),
        (
            "get",
            "resourceslices",
            Some((own, media_operator::render_drivers::LIKEN.name)),
        ),
    ] {
        let mut role = shipped_role();
        let rules = role["rules"].as_array_mut().unwrap();
        for rule in rules.iter_mut() {
            if rule["resources"][0] == resource {
                let verbs = rule["verbs"].as_array_mut().unwrap();
                verbs.retain(|v| v != verb);
            }
        }
        // A rule without verbs is invalid: the nodes rule, with only `get`, goes whole.
        rules.retain(|rule| !rule["verbs"].as_array().unwrap().is_empty());
        apply_json(cp, &role);
        super::product::wait(&format!("RBAC stops granting {verb} {resource}"), || {
            (!agent_can(cp, verb, resource)).then_some(())
        })
        .unwrap();

        let node = format!("rbac-{verb}-{resource}");
        cp.node(&node, &[]);
        if let Some((suffix, driver)) = stored {
            apply_json(cp, &slice(&format!("{node}-{suffix}"), driver, &node));
        }
        let kubeconfig = agent_kubeconfig(cp, &node, home.path());
        // Any node's reports do: the refusal comes before the slice's content matters.
        let agent = AgentProcess::start(AGENT_BIN, &node, &reports("mtl-1"), &kubeconfig, FAST);
        let line = agent.log.wait_for("403 Forbidden", REFUSAL_LOGGED);
        let says = format!("cannot {verb} resource \"{resource}\"");
        assert!(line.contains(&says), "{says:?} not in {line:?}");
        // Once per operation refused (listing liken's slices and following its own are two
        // for `list`), never again while it retries: no refusal is logged twice.
        let refusals: Vec<String> = agent
            .log
            .lines()
            .into_iter()
            .filter(|l| l.contains(&says))
            .map(|l| {
                l.split_once("  ")
                    .map_or(l.clone(), |(_, rest)| rest.to_owned())
            })
            .collect();
        let distinct: std::collections::BTreeSet<&String> = refusals.iter().collect();
        assert_eq!(distinct.len(), refusals.len(), "{refusals:#?}");
        drop(agent);

        apply_json(cp, &shipped_role());
        super::product::wait(&format!("RBAC grants {verb} {resource} again"), || {
            agent_can(cp, verb, resource).then_some(())
        })
        .unwrap();
    }
}

/// `kubectl create -f` of `object` with `kubeconfig`: its error line.
fn create_refused(kubeconfig: &Path, object: &Value) -> String {
    let file = kubeconfig.with_extension("object.json");
    std::fs::write(&file, object.to_string()).unwrap();
    let out = controlplane::kubectl(kubeconfig, &["create", "-f", file.to_str().unwrap()]);
    assert!(!out.status.success(), "created {object}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn an_agent_token_is_denied_another_drivers_slice_and_an_unbound_token_any_write(release: Release) {
    let cp = cluster(release);
    let home = tempfile::tempdir().unwrap();
    let node = "bound-node";
    cp.node(node, &[]);

    let bound = agent_kubeconfig(cp, node, home.path());
    let other = slice(
        "bound-node-not-ours",
        media_operator::render_drivers::LIKEN.name,
        node,
    );
    let refused = create_refused(&bound, &other);
    assert!(
        refused.contains("media-capabilities-node-bound")
            && refused
                .contains("media-capabilities may only write media.liken.sh slices, not liken.sh"),
        "{refused}"
    );

    // A token of the same account that no pod binds (what `kubectl create token` gives).
    let token = ok(cp.kubectl(&["create", "token", AGENT, "-n", NAMESPACE]));
    let unbound = home.path().join("unbound.kubeconfig");
    cp.token_kubeconfig(token.trim(), &unbound);
    let ours = slice("bound-node-unbound", catalogue::DRIVER, node);
    let refused = create_refused(&unbound, &ours);
    assert!(
        refused.contains("media-capabilities-node-bound")
            && refused.contains("the media-capabilities token has no node claim"),
        "{refused}"
    );
    let file = home.path().join("delete.kubeconfig");
    cp.token_kubeconfig(token.trim(), &file);
    let name = format!("{node}-{}", catalogue::DRIVER);
    apply_json(cp, &slice(&name, catalogue::DRIVER, node));
    let out = controlplane::kubectl(&file, &["delete", "resourceslice", &name]);
    let refused = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && refused.contains("the media-capabilities token has no node claim"),
        "{refused}"
    );
}
