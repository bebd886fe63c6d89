//! The install (`deploy/`): what `kubectl apply -k deploy/` creates, the least-privilege RBAC,
//! and the node-bound admission policy, whose CEL is evaluated here on admission requests shaped
//! as kube-apiserver builds them for a ValidatingAdmissionPolicy (`request` with the user's
//! info and `operation`, `object` null on DELETE, `oldObject` null on CREATE; k/k
//! staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("valid YAML"))
        .filter(|d: &Value| !d.is_null())
        .collect()
}

/// Every object the kustomization installs, read from the files it lists (in its order), so
/// tests that need no kubectl see the same set `kubectl kustomize` renders.
pub(crate) fn manifests() -> Vec<Value> {
    let kustomization = std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).unwrap();
    let kustomization: Value = serde_yaml::from_str(&kustomization).unwrap();
    kustomization["resources"]
        .as_array()
        .expect("the kustomization lists its resources")
        .iter()
        .flat_map(|file| {
            let path = deploy_dir().join(file.as_str().unwrap());
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            yaml_documents(&text)
        })
        .collect()
}

const NAMESPACED: &[&str] = &["ServiceAccount", "DaemonSet", "ResourceClaimTemplate"];

#[test]
#[cfg_attr(not(have_kubectl), ignore = "needs kubectl on PATH (kubectl 1.32)")]
fn kustomize_renders_the_install_without_the_liken_namespace() {
    let out = Command::new("kubectl")
        .args(["kustomize"])
        .arg(deploy_dir())
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = yaml_documents(&String::from_utf8(out.stdout).unwrap());

    let kinds: BTreeSet<&str> = rendered
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    let expected: BTreeSet<&str> = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "DeviceClass",
        "ResourceClaimTemplate",
        "DaemonSet",
    ]
    .into();
    assert_eq!(
        kinds, expected,
        "liken-system is liken's: no Namespace here"
    );
    for object in &rendered {
        let kind = object["kind"].as_str().unwrap();
        let namespace = &object["metadata"]["namespace"];
        if NAMESPACED.contains(&kind) {
            assert_eq!(namespace, "liken-system", "{kind}");
        } else {
            assert!(namespace.is_null(), "{kind} is cluster-scoped: {namespace}");
        }
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/part-of"], "media-operator",
            "{kind}"
        );
    }
    // kustomize renders what the files say, with labels added.
    assert_eq!(rendered.len(), manifests().len());
}

#[test]
fn the_agent_class_is_the_one_class_refuses_to_write() {
    let objects = manifests();
    let class = objects.iter().find(|o| o["kind"] == "DeviceClass").unwrap();
    assert_eq!(
        class["metadata"]["name"],
        media_operator::classes::AGENT_CLASS
    );
    let template = objects
        .iter()
        .find(|o| o["kind"] == "ResourceClaimTemplate")
        .unwrap();
    assert_eq!(
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
        media_operator::classes::AGENT_CLASS
    );
}

#[test]
fn rbac_grants_exactly_the_calls_the_agent_makes() {
    let objects = manifests();
    let role = objects.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    let rules: Vec<(String, String, BTreeSet<String>)> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| {
            let verbs: BTreeSet<String> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            let groups = rule["apiGroups"].as_array().unwrap().clone();
            let resources = rule["resources"].as_array().unwrap().clone();
            groups.into_iter().flat_map(move |g| {
                let verbs = verbs.clone();
                resources.clone().into_iter().map(move |r| {
                    (
                        g.as_str().unwrap().to_owned(),
                        r.as_str().unwrap().to_owned(),
                        verbs.clone(),
                    )
                })
            })
        })
        .collect();
    let verbs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        rules,
        [
            (
                "resource.k8s.io".to_owned(),
                "resourceslices".to_owned(),
                verbs(&["get", "list", "watch", "create", "update", "delete"])
            ),
            ("".to_owned(), "nodes".to_owned(), verbs(&["get"])),
        ]
    );
    // Every rule says which code needs it.
    let text = std::fs::read_to_string(deploy_dir().join("rbac.yaml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("- apiGroups:") {
            assert!(
                lines[i - 1].trim_start().starts_with('#'),
                "rbac.yaml line {}: a rule without a comment",
                i + 1
            );
        }
    }
}

/// The policy's CEL, evaluated as kube-apiserver does: match conditions (all must hold, else
/// the policy does not apply), variables in order (each may use the ones before), validations in
/// order, the first false one denying with its message; an expression that fails to evaluate
/// denies too (`failurePolicy: Fail`).
struct Policy {
    spec: Value,
}

#[derive(Debug, PartialEq)]
enum Verdict {
    NotApplicable,
    Allowed,
    Denied(String),
}

impl Policy {
    fn load() -> Self {
        let objects = manifests();
        let policy = objects
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .expect("a ValidatingAdmissionPolicy in deploy/");
        let binding = objects
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
            .expect("its binding");
        assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        Policy {
            spec: policy["spec"].clone(),
        }
    }

    fn matches(&self, operation: &str) -> bool {
        self.spec["matchConstraints"]["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| {
                rule["apiGroups"] == json!(["resource.k8s.io"])
                    && rule["resources"] == json!(["resourceslices"])
                    && rule["operations"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|o| o == operation)
            })
    }

    fn admit(&self, request: Value, object: Value, old_object: Value) -> Verdict {
        let operation = request["operation"].as_str().unwrap().to_owned();
        if !self.matches(&operation) {
            return Verdict::NotApplicable;
        }
        let mut variables = serde_json::Map::new();
        let eval = |expression: &str, variables: &serde_json::Map<String, Value>| {
            let program = cel::Program::compile(expression)
                .unwrap_or_else(|e| panic!("the policy's CEL does not compile: {expression}: {e}"));
            let mut context = cel::Context::default();
            for (name, value) in [
                ("request", &request),
                ("object", &object),
                ("oldObject", &old_object),
            ] {
                context.add_variable_from_value(name, cel::to_value(value).unwrap());
            }
            context.add_variable_from_value(
                "variables",
                cel::to_value(Value::Object(variables.clone())).unwrap(),
            );
            program.execute(&context)
        };
        for condition in self.spec["matchConditions"].as_array().unwrap() {
            match eval(condition["expression"].as_str().unwrap(), &variables) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => return Verdict::NotApplicable,
                other => return Verdict::Denied(format!("match condition: {other:?}")),
            }
        }
        for variable in self.spec["variables"].as_array().unwrap() {
            let value = match eval(variable["expression"].as_str().unwrap(), &variables) {
                Ok(value) => value.json().expect("a JSON-shaped variable"),
                Err(e) => return Verdict::Denied(format!("variable: {e}")),
            };
            variables.insert(variable["name"].as_str().unwrap().to_owned(), value);
        }
        for validation in self.spec["validations"].as_array().unwrap() {
            match eval(validation["expression"].as_str().unwrap(), &variables) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => {
                    assert_eq!(validation["reason"], "Forbidden");
                    let message = match validation["messageExpression"].as_str() {
                        Some(expression) => match eval(expression, &variables) {
                            Ok(cel::Value::String(s)) => s.to_string(),
                            other => panic!("messageExpression {expression}: {other:?}"),
                        },
                        None => validation["message"].as_str().unwrap().to_owned(),
                    };
                    return Verdict::Denied(message);
                }
                other => return Verdict::Denied(format!("expression error: {other:?}")),
            }
        }
        Verdict::Allowed
    }
}

const AGENT: &str = "system:serviceaccount:liken-system:media-capabilities";

/// The user info of a pod-bound service account token, as the API server's authenticator fills
/// it in (k/k pkg/serviceaccount/claims.go: node name and uid under these extra keys).
fn agent_on(node: Option<&str>) -> Value {
    let mut user = json!({
        "username": AGENT,
        "uid": "4c1b3a7e-0000-4000-8000-000000000001",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:liken-system", "system:authenticated"],
        "extra": {
            "authentication.kubernetes.io/pod-name": ["media-capabilities-x7k2p"],
            "authentication.kubernetes.io/pod-uid": ["0b7f6f0e-0000-4000-8000-000000000002"],
        },
    });
    if let Some(node) = node {
        user["extra"]["authentication.kubernetes.io/node-name"] = json!([node]);
        user["extra"]["authentication.kubernetes.io/node-uid"] =
            json!(["5d1c2b3a-0000-4000-8000-000000000003"]);
    }
    user
}

fn request(operation: &str, user: Value) -> Value {
    json!({
        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceSlice"},
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceslices"},
        "operation": operation,
        "userInfo": user,
    })
}

fn slice(driver: &str, node: Option<&str>) -> Value {
    let mut spec = json!({
        "driver": driver,
        "pool": {"name": node.unwrap_or("shared"), "generation": 1, "resourceSliceCount": 1},
        "devices": [],
    });
    match node {
        Some(node) => spec["nodeName"] = json!(node),
        None => spec["allNodes"] = json!(true),
    }
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{}-{driver}", node.unwrap_or("all"))},
        "spec": spec,
    })
}

#[test]
fn the_agent_writes_its_own_nodes_media_slices() {
    let policy = Policy::load();
    let own = slice("media.liken.sh", Some("gpu-1"));
    let me = || agent_on(Some("gpu-1"));
    assert_eq!(
        policy.admit(request("CREATE", me()), own.clone(), Value::Null),
        Verdict::Allowed
    );
    assert_eq!(
        policy.admit(request("UPDATE", me()), own.clone(), own.clone()),
        Verdict::Allowed
    );
    assert_eq!(
        policy.admit(request("DELETE", me()), Value::Null, own),
        Verdict::Allowed
    );
}

#[test]
fn the_agent_is_denied_other_nodes_other_drivers_shared_slices_and_tokens_without_a_node() {
    let policy = Policy::load();
    let me = || agent_on(Some("gpu-1"));
    let denied = |verdict: Verdict, words: &[&str]| match verdict {
        Verdict::Denied(message) => {
            for word in words {
                assert!(message.contains(word), "{message:?} should name {word:?}");
            }
        }
        other => panic!("expected a denial naming {words:?}, got {other:?}"),
    };

    let other_node = slice("media.liken.sh", Some("gpu-2"));
    denied(
        policy.admit(request("CREATE", me()), other_node.clone(), Value::Null),
        &["gpu-1", "gpu-2"],
    );
    denied(
        policy.admit(request("DELETE", me()), Value::Null, other_node.clone()),
        &["gpu-1", "gpu-2"],
    );
    // Moving a slice of another node onto its own (nodeName is immutable, but the policy does
    // not rely on that).
    denied(
        policy.admit(
            request("UPDATE", me()),
            slice("media.liken.sh", Some("gpu-1")),
            other_node,
        ),
        &["gpu-1"],
    );
    let liken = slice("liken.sh", Some("gpu-1"));
    denied(
        policy.admit(request("CREATE", me()), liken.clone(), Value::Null),
        &["liken.sh"],
    );
    denied(
        policy.admit(request("DELETE", me()), Value::Null, liken),
        &["liken.sh"],
    );
    denied(
        policy.admit(
            request("CREATE", me()),
            slice("media.liken.sh", None),
            Value::Null,
        ),
        &["without spec.nodeName"],
    );
    // A token with no node claim (not bound to a pod on a node), or with no extra at all.
    let own = slice("media.liken.sh", Some("gpu-1"));
    denied(
        policy.admit(request("CREATE", agent_on(None)), own.clone(), Value::Null),
        &["no node claim"],
    );
    let mut bare = agent_on(None);
    bare.as_object_mut().unwrap().remove("extra");
    denied(
        policy.admit(request("CREATE", bare), own, Value::Null),
        &["no node claim"],
    );
}

#[test]
fn the_policy_leaves_everyone_else_alone() {
    let policy = Policy::load();
    // The kubelet deletes every slice of its node at start and a driver's slices after its
    // plugin goes away; liken's own agent writes liken.sh slices.
    let kubelet = json!({"username": "system:node:gpu-1", "groups": ["system:nodes", "system:authenticated"]});
    assert_eq!(
        policy.admit(
            request("DELETE", kubelet),
            Value::Null,
            slice("media.liken.sh", Some("gpu-1"))
        ),
        Verdict::NotApplicable
    );
    let liken = json!({"username": "system:serviceaccount:liken-system:liken", "extra": {}});
    assert_eq!(
        policy.admit(
            request("CREATE", liken),
            slice("liken.sh", Some("gpu-2")),
            Value::Null
        ),
        Verdict::NotApplicable
    );
}
