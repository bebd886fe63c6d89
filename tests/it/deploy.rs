//! The install (`deploy/`): what `kubectl apply -k deploy/` creates, the least-privilege RBAC,
//! the DaemonSet against the agent's own flags, the image (`deploy/Dockerfile`) against Debian
//! 13's package lists and the programs Cargo builds, the examples that are not installed, every
//! manifest against the Kubernetes 1.34 schema, and the node-bound admission policy, whose CEL is
//! evaluated here on admission requests shaped as kube-apiserver builds them for a
//! ValidatingAdmissionPolicy (`request` with the user's info and `operation`, `object` null on
//! DELETE, `oldObject` null on CREATE; k/k
//! staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// The objects of one YAML file under `deploy/`.
fn read_documents(relative: &str) -> Vec<Value> {
    let path = deploy_dir().join(relative);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    yaml_documents(&text)
}

/// The files the base kustomization (deploy/base, which deploy/ and every render-driver variant
/// install) lists, in its order, relative to deploy/.
fn installed_files() -> Vec<String> {
    let kustomization =
        std::fs::read_to_string(deploy_dir().join("base/kustomization.yaml")).unwrap();
    let kustomization: Value = serde_yaml::from_str(&kustomization).unwrap();
    kustomization["resources"]
        .as_array()
        .expect("the kustomization lists its resources")
        .iter()
        .map(|file| format!("base/{}", file.as_str().unwrap()))
        .collect()
}

/// Every object the kustomization installs, read from the files it lists (in its order), so
/// tests that need no kubectl see the same set `kubectl kustomize` renders.
pub(crate) fn manifests() -> Vec<Value> {
    installed_files()
        .iter()
        .flat_map(|file| read_documents(file))
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

fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "{}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_documents(&String::from_utf8(out.stdout).unwrap())
}

/// Each variant beside a vendor's driver installs what deploy/ does, with the media-render class
/// of that driver's whole GPUs as the render-driver table writes it, the agent told which driver
/// to compare with, and the liken-system namespace labelled for admin access; nothing else
/// differs.
#[test]
#[cfg_attr(not(have_kubectl), ignore = "needs kubectl on PATH (kubectl 1.32)")]
fn each_render_driver_variant_is_the_install_with_its_drivers_class() {
    use media_operator::render_drivers;
    let liken = kustomize(&deploy_dir());
    let variants: BTreeSet<&str> = render_drivers::ALL
        .iter()
        .filter(|d| d.name != render_drivers::LIKEN.name)
        .map(|d| d.key)
        .collect();
    assert_eq!(
        variants,
        VARIANTS.into_iter().collect(),
        "a variant per vendor driver"
    );
    for driver in render_drivers::ALL
        .iter()
        .filter(|d| variants.contains(d.key))
    {
        let rendered = kustomize(&deploy_dir().join("render-drivers").join(driver.key));
        let mut expected = liken.clone();
        for object in &mut expected {
            match object["kind"].as_str().unwrap() {
                "DeviceClass" if object["metadata"]["name"] == "media-render" => {
                    object["spec"]["selectors"][0]["cel"]["expression"] =
                        driver.whole_gpu_cel().into();
                }
                "DaemonSet" => {
                    let args = object["spec"]["template"]["spec"]["containers"][0]["args"]
                        .as_array_mut()
                        .unwrap();
                    args.push(format!("--render-driver={}", driver.name).into());
                }
                _ => {}
            }
        }
        let (namespaces, rest): (Vec<Value>, Vec<Value>) =
            rendered.into_iter().partition(|o| o["kind"] == "Namespace");
        assert_eq!(
            namespaces,
            [
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "liken-system",
                "labels": {"app.kubernetes.io/part-of": "media-operator",
                    "resource.kubernetes.io/admin-access": "true"}}})
            ],
            "{}",
            driver.key
        );
        let key = |o: &Value| (o["kind"].to_string(), o["metadata"]["name"].to_string());
        let mut rest = rest;
        rest.sort_by_key(key);
        expected.sort_by_key(key);
        assert_eq!(rest, expected, "{}", driver.key);
        // The agent accepts what the variant tells it.
        let daemonset = find(&rest, "DaemonSet");
        let config = daemonset_config(&daemonset["spec"]["template"]["spec"]["containers"][0]);
        assert_eq!(config.render_driver.name, driver.name);
    }
}

/// The agent's claim takes no render node from any workload: admin access, every render node,
/// tolerating the render driver's own taints.
#[test]
fn the_agents_claim_asks_for_admin_access_to_every_render_node() {
    let objects = manifests();
    let template = find(&objects, "ResourceClaimTemplate");
    let request = &template["spec"]["spec"]["devices"]["requests"][0]["exactly"];
    assert_eq!(request["adminAccess"], true);
    assert_eq!(request["allocationMode"], "All");
    assert_eq!(request["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(
        find(&objects, "DeviceClass")["spec"]["selectors"][0]["cel"]["expression"],
        media_operator::render_drivers::LIKEN.whole_gpu_cel()
    );
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
            (
                "resource.k8s.io".to_owned(),
                "resourceclaims".to_owned(),
                verbs(&["get"])
            ),
        ]
    );
    // Every rule says which code needs it.
    let text = std::fs::read_to_string(deploy_dir().join("base/rbac.yaml")).unwrap();
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

// --- the DaemonSet against the agent ------------------------------------------------------------

/// The agent's configuration for the DaemonSet's arguments, parsed and validated with the agent's
/// own command-line definition (as the container's entry point will).
pub(crate) fn daemonset_config(container: &Value) -> media_operator::agent::config::AgentConfig {
    use clap::Parser;
    use media_operator::agent::cli::Cli;
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("the agent's args")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let cli = Cli::try_parse_from(
        ["media-capabilities", "--node-name=n1"]
            .into_iter()
            .map(String::from)
            .chain(args),
    )
    .unwrap_or_else(|e| panic!("the DaemonSet's args: {e}"));
    assert!(cli.command.is_none(), "the DaemonSet runs the agent");
    cli.agent.validate().expect("the DaemonSet's args validate")
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/"))
}

#[test]
fn the_daemonset_runs_the_agent_with_flags_and_environment_it_accepts() {
    use clap::CommandFactory;
    let objects = manifests();
    let ds = find(&objects, "DaemonSet");
    assert_eq!(ds["metadata"]["name"], "media-capabilities");
    assert_eq!(ds["metadata"]["namespace"], "liken-system");
    let pod = &ds["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container");
    let container = &containers[0];
    let config = daemonset_config(container);
    assert_eq!(config.node_name, "n1");

    // Every variable is one the agent reads (a clap `env`) or its log filter; NODE_NAME comes
    // from the downward API.
    let root = media_operator::agent::cli::Cli::command();
    let accepted: BTreeSet<String> = root
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .chain(["RUST_LOG".to_owned()])
        .collect();
    assert!(accepted.contains("NODE_NAME"), "{accepted:?}");
    for var in container["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap();
        assert!(
            accepted.contains(name),
            "the DaemonSet sets {name}, which the agent does not read (it reads {accepted:?})"
        );
    }
    let node_name = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .expect("NODE_NAME");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    let rust_log = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "RUST_LOG")
        .and_then(|e| e["value"].as_str());
    media_operator::agent::run::log_filter(rust_log).expect("RUST_LOG is a filter the agent takes");

    // The probes are on the health endpoints, on the health port.
    let port = &container["ports"][0];
    assert_eq!(port["containerPort"], config.health_addr.port());
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], port["name"], "{probe}");
    }
}

#[test]
fn the_daemonset_mounts_only_the_kubelet_directories_the_agent_serves_in() {
    let objects = manifests();
    let pod = &find(&objects, "DaemonSet")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let config = daemonset_config(container);

    // Exactly two volumes, both hostPath, each mounted at its own host path, which is the
    // directory the agent puts a socket in: nothing else of /var/lib/kubelet (every pod's
    // secrets), no /dev (render nodes come through the claim), no /sys (the container's own,
    // read-only, serves).
    let volumes: BTreeMap<&str, &Value> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 2, "{mounts:#?}");
    assert_eq!(volumes.len(), 2, "{volumes:#?}");
    let mut mounted = BTreeMap::new();
    for mount in mounts {
        let volume = volumes[mount["name"].as_str().unwrap()];
        let host_path = &volume["hostPath"];
        assert_eq!(host_path["path"], mount["mountPath"], "{volume}");
        assert!(
            mount["readOnly"].is_null(),
            "the agent creates a socket there"
        );
        assert!(mount["subPath"].is_null() && mount["mountPropagation"].is_null());
        mounted.insert(
            PathBuf::from(mount["mountPath"].as_str().unwrap()),
            host_path["type"].as_str().unwrap().to_owned(),
        );
    }
    assert_eq!(
        mounted,
        BTreeMap::from([
            // The kubelet's: must exist (a kubelet with another --root-dir fails visibly).
            (config.kubelet.registry_dir.clone(), "Directory".to_owned()),
            // Ours: created at the first install.
            (
                config.kubelet.plugins_dir.clone(),
                "DirectoryOrCreate".to_owned()
            ),
        ])
    );
    assert_eq!(
        config.kubelet.registration_socket(),
        Path::new("/var/lib/kubelet/plugins_registry/media.liken.sh-reg.sock")
    );
    assert_eq!(
        config.kubelet.dra_socket(),
        Path::new("/var/lib/kubelet/plugins/media.liken.sh/dra.sock")
    );

    // GPUs and their identity come from what the container has of its own.
    let probing = match &config.source {
        media_operator::agent::probing::ProbeSource::Live { roots, .. } => roots,
        other => panic!("the DaemonSet probes live GPUs, not {other:?}"),
    };
    assert_eq!(probing.dev, Path::new("/dev/dri"));
    assert_eq!(probing.sys, Path::new("/sys"));
    // The render nodes come through the shipped media-render class, all of them, into this
    // container only.
    let template = find(&objects, "ResourceClaimTemplate");
    let request = &template["spec"]["spec"]["devices"]["requests"][0];
    assert_eq!(request["exactly"]["deviceClassName"], "media-render");
    assert_eq!(request["exactly"]["allocationMode"], "All");
    assert_eq!(
        pod["resourceClaims"][0]["resourceClaimTemplateName"],
        template["metadata"]["name"]
    );
    assert_eq!(
        container["resources"]["claims"][0]["name"],
        pod["resourceClaims"][0]["name"]
    );
}

#[test]
fn the_daemonset_runs_as_tightly_as_the_kubelet_directories_allow() {
    let objects = manifests();
    let ds = find(&objects, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(
        security,
        &json!({
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": false,
            "privileged": false,
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        })
    );
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(pod[field].is_null(), "{field}");
    }
    // The one exception (uid 0) is commented, in the file, right above it.
    let text = std::fs::read_to_string(deploy_dir().join("base/daemonset.yaml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == "runAsUser: 0")
        .unwrap();
    assert!(
        lines[at - 1].trim_start().starts_with('#') && text.contains("Exception: user 0"),
        "runAsUser: 0 needs its reason beside it"
    );

    // Resources: a memory request and a limit above it, no CPU limit (a throttled probe would
    // only time out).
    let resources = &container["resources"];
    let mib = |q: &Value| -> u64 {
        let q = q.as_str().unwrap();
        q.strip_suffix("Mi")
            .unwrap_or_else(|| panic!("{q}: in Mi"))
            .parse()
            .unwrap()
    };
    let request = mib(&resources["requests"]["memory"]);
    let limit = mib(&resources["limits"]["memory"]);
    assert!(request > 0 && limit > request, "{resources}");
    assert!(resources["limits"]["cpu"].is_null(), "{resources}");

    // A rolling update replaces one node's agent at a time, old pod first.
    let rolling = &ds["spec"]["updateStrategy"]["rollingUpdate"];
    assert_eq!(rolling["maxSurge"], 0);
    assert_eq!(rolling["maxUnavailable"], 1);
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        Duration::from_secs(grace) > media_operator::agent::run::SHUTDOWN_BOUND,
        "the agent's own shutdown bound fits in the grace period"
    );
}

#[test]
fn the_agents_rbac_is_bound_to_the_daemonsets_service_account() {
    let objects = manifests();
    let pod = &find(&objects, "DaemonSet")["spec"]["template"]["spec"];
    let account = find(&objects, "ServiceAccount");
    assert_eq!(account["metadata"]["name"], pod["serviceAccountName"]);
    let binding = find(&objects, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], pod["serviceAccountName"]);
    assert_eq!(binding["subjects"][0]["namespace"], "liken-system");
    assert_eq!(
        binding["roleRef"]["name"],
        find(&objects, "ClusterRole")["metadata"]["name"]
    );
    // The admission policy names the same account.
    let policy = find(&objects, "ValidatingAdmissionPolicy");
    let condition = policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        condition.contains(&format!(
            "system:serviceaccount:liken-system:{}",
            pod["serviceAccountName"].as_str().unwrap()
        )),
        "{condition}"
    );
}

/// The DaemonSet mounts the kubelet's directories themselves. Deleting one on the host leaves
/// the container's mount on the deleted directory, where no socket can reach the kubelet: the
/// agent must exit (so the kubelet restarts the container with the directory then at that path)
/// rather than retry forever. `/proc/<pid>/fd/N` of an open handle resolves as such a mount does.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_agent_exits_when_a_mounted_kubelet_directory_is_deleted() {
    use crate::support::agent::{AgentProcess, FAST, write_fleet};
    use crate::support::controlplane;
    use std::os::fd::AsRawFd;

    // The shared control plane, on a node of this test's own.
    let cp = controlplane::shared();
    let node = "deploy-mounted-dir";
    cp.node(node, &[]);
    let reports = tempfile::tempdir().unwrap();
    write_fleet(reports.path(), 1);
    for (flag, dir, socket, role) in [
        (
            "--kubelet-registry-dir",
            "plugins_registry",
            "media.liken.sh-reg.sock",
            "registration",
        ),
        (
            "--kubelet-plugins-dir",
            "plugins/media.liken.sh",
            "dra.sock",
            "DRA",
        ),
    ] {
        let host = tempfile::tempdir().unwrap();
        let on_host = host.path().join(dir);
        std::fs::create_dir_all(&on_host).unwrap();
        let handle = std::fs::File::open(&on_host).unwrap();
        let mounted = format!("/proc/{}/fd/{}", std::process::id(), handle.as_raw_fd());
        let args: Vec<&str> = FAST.iter().copied().chain([flag, &mounted]).collect();
        let mut agent = AgentProcess::start(
            env!("CARGO_BIN_EXE_media-capabilities"),
            node,
            reports.path(),
            cp.kubeconfig(),
            &args,
        );
        agent
            .log
            .wait_for("serving the kubelet plugin", Duration::from_secs(10));
        assert!(
            on_host.join(socket).exists(),
            "the {role} socket is where the host sees it"
        );

        // What a node cleanup does on the host.
        std::fs::remove_dir_all(&on_host).unwrap();
        let (status, _) = agent
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the agent exits ({role}): {:#?}", agent.log.lines()));
        assert_eq!(status.code(), Some(1), "{:#?}", agent.log.lines());
        let line = agent.log.wait_for("error: ", Duration::from_secs(5));
        assert!(
            line.starts_with(&format!(
                "error: the kubelet plugin failed: the directory {mounted} of the {role} socket was deleted"
            )),
            "{line}"
        );
        assert!(line.contains("(hint: "), "{line}");
        assert_eq!(
            agent.log.count(&format!("the {role} socket")),
            1,
            "no retry loop before exiting: {:#?}",
            agent.log.lines()
        );
    }
}

// --- the image ----------------------------------------------------------------------------------

/// `deploy/Dockerfile` as (instruction, arguments), in order (support/dockerfile.rs).
fn dockerfile() -> Vec<(String, String)> {
    crate::support::dockerfile::instructions()
        .into_iter()
        .map(|i| (i.keyword, i.args))
        .collect()
}

/// One package of the recorded Debian lists (tests/fixtures/debian-packages.txt).
#[derive(Debug)]
struct DebianPackage {
    fields: BTreeMap<String, String>,
}

fn debian_packages() -> Vec<DebianPackage> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/debian-packages.txt");
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n\n")
        .map(|block| {
            let fields: BTreeMap<String, String> = block
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once(": ").unwrap_or_else(|| panic!("field {l:?}"));
                    (k.to_owned(), v.to_owned())
                })
                .collect();
            DebianPackage { fields }
        })
        .filter(|p| !p.fields.is_empty())
        .collect()
}

impl DebianPackage {
    fn get(&self, field: &str) -> &str {
        self.fields
            .get(field)
            .unwrap_or_else(|| panic!("{:?} has no {field}", self.fields))
    }
}

fn from_images() -> Vec<String> {
    dockerfile()
        .into_iter()
        .filter(|(i, _)| i == "FROM")
        .map(|(_, args)| args)
        .collect()
}

#[test]
fn the_image_installs_packages_that_debian_13_has() {
    let install = crate::support::dockerfile::install_run().args;
    let packages = crate::support::dockerfile::installed_packages(&install);
    let packages: Vec<&str> = packages.iter().map(String::as_str).collect();
    assert!(packages.len() >= 7, "{packages:?}");
    // The components the image enables: main, plus what the sed line adds.
    let components: BTreeSet<&str> = install
        .split("Components: main")
        .nth(2)
        .map(|added| {
            added
                .split('/')
                .next()
                .unwrap()
                .split_whitespace()
                .chain(["main"])
                .collect()
        })
        .unwrap_or_else(|| ["main"].into());
    let lists = debian_packages();
    for package in &packages {
        let found = lists
            .iter()
            .find(|p| p.get("Package") == *package && p.get("X-Suite") == "trixie")
            .unwrap_or_else(|| panic!("{package} is not in Debian 13 (trixie)'s lists"));
        let component = found.get("X-Component");
        assert!(
            components.contains(component),
            "{package} is in trixie's {component}, which the image does not enable ({components:?})"
        );
    }
    // The builds that state every capability the hardware has: iHD and i965 with their
    // pre-built GPU kernels (non-free), not the free builds without encoders.
    for wanted in ["intel-media-va-driver-non-free", "i965-va-driver-shaders"] {
        assert!(packages.contains(&wanted), "{packages:?}");
    }
    for free in ["intel-media-va-driver", "i965-va-driver"] {
        assert!(!packages.contains(&free), "{free}: {packages:?}");
    }
    for runtime in [
        "libva2",
        "libva-drm2",
        "mesa-va-drivers",
        "nvidia-vaapi-driver",
        "pci.ids",
    ] {
        assert!(packages.contains(&runtime), "{runtime}: {packages:?}");
    }
    // The runtime is Debian 13.
    let runtime = from_images().last().cloned().unwrap();
    assert_eq!(runtime, "docker.io/library/debian:trixie-slim");
}

#[test]
fn the_image_builds_the_agent_on_the_runtimes_glibc_and_runs_it_as_the_daemonset_says() {
    let instructions = dockerfile();
    let froms = from_images();
    assert_eq!(froms.len(), 2, "multi-stage: {froms:?}");
    // Builder and runtime are the same Debian release, so the binary needs no newer glibc than
    // the runtime has.
    let (builder, stage) = froms[0].split_once(" AS ").expect("a named build stage");
    let builder_release = builder.rsplit('-').next().unwrap();
    let runtime_release = froms[1]
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("-slim");
    assert_eq!(builder_release, runtime_release, "{froms:?}");
    let glibc = debian_packages()
        .into_iter()
        .find(|p| p.get("Package") == "libc6" && p.get("X-Suite") == runtime_release)
        .expect("the runtime's glibc");
    assert!(glibc.get("Version").starts_with("2.41"), "{glibc:?}");
    // The builder's Rust is at least the crate's rust-version.
    let manifest: toml_like::Manifest = toml_like::read();
    let rust = builder
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches(&format!("-{builder_release}"));
    assert!(
        version(rust) >= version(&manifest.rust_version),
        "builder Rust {rust} < rust-version {}",
        manifest.rust_version
    );

    // It builds the agent, and copies the binary Cargo makes under the agent's name.
    let agent = "media-capabilities";
    assert!(
        manifest.bins.iter().any(|b| b == agent),
        "{:?}",
        manifest.bins
    );
    let build = instructions
        .iter()
        .find(|(i, a)| i == "RUN" && a.contains("cargo build"))
        .map(|(_, a)| a.as_str())
        .unwrap();
    assert!(
        build.contains("--profile dist")
            && build.contains("--locked")
            && build.contains(&format!("--bin {agent}")),
        "{build}"
    );
    let workdir = instructions
        .iter()
        .find(|(i, _)| i == "WORKDIR")
        .map(|(_, a)| a.as_str())
        .unwrap();
    let copy = instructions
        .iter()
        .find(|(i, a)| i == "COPY" && a.starts_with("--from="))
        .map(|(_, a)| a.as_str())
        .unwrap();
    let parts: Vec<&str> = copy.split_whitespace().collect();
    assert_eq!(parts[0], format!("--from={stage}"));
    assert_eq!(parts[1], format!("{workdir}/target/dist/{agent}"));
    let installed = parts[2];

    // The entry point is that binary, with no arguments of its own; together with the
    // DaemonSet's they parse (daemonset_config above) and run the agent.
    let entrypoint = instructions
        .iter()
        .find(|(i, _)| i == "ENTRYPOINT")
        .map(|(_, a)| serde_json::from_str::<Vec<String>>(a).expect("exec form"))
        .unwrap();
    assert_eq!(entrypoint, [installed]);
    let objects = manifests();
    let container = &find(&objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["command"].is_null(),
        "the image's entry point runs"
    );
    daemonset_config(container);
    assert_eq!(
        container["image"].as_str().unwrap().rsplit(':').next(),
        Some(env!("CARGO_PKG_VERSION")),
        "the DaemonSet runs this version's image"
    );

    // The user is the one the DaemonSet states.
    let user = instructions
        .iter()
        .find(|(i, _)| i == "USER")
        .map(|(_, a)| a.clone())
        .expect("USER");
    let security = &container["securityContext"];
    assert_eq!(
        user,
        format!("{}:{}", security["runAsUser"], security["runAsGroup"])
    );

    // The build context leaves out the build output.
    let ignore = std::fs::read_to_string(deploy_dir().join("Dockerfile.dockerignore")).unwrap();
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "{ignore}");
}

fn version(text: &str) -> Vec<u64> {
    text.split('.').map(|p| p.parse().unwrap()).collect()
}

/// The two facts of Cargo.toml these tests need, read line by line (no TOML parser in the tree
/// for this alone): `rust-version` and the `[[bin]]` names.
mod toml_like {
    pub(super) struct Manifest {
        pub(super) rust_version: String,
        pub(super) bins: Vec<String>,
    }

    pub(super) fn read() -> Manifest {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
        let value = |line: &str, key: &str| {
            line.strip_prefix(key)
                .map(|rest| rest.trim_start())
                .and_then(|rest| rest.strip_prefix('='))
                .map(|rest| rest.trim().trim_matches('"').to_owned())
        };
        let mut rust_version = None;
        let mut bins = Vec::new();
        let mut section = String::new();
        for line in text.lines() {
            if line.starts_with('[') {
                section = line.to_owned();
            } else if section == "[package]" {
                rust_version = rust_version.or_else(|| value(line, "rust-version"));
            } else if section == "[[bin]]"
                && let Some(name) = value(line, "name")
            {
                bins.push(name);
            }
        }
        Manifest {
            rust_version: rust_version.expect("rust-version in Cargo.toml"),
            bins,
        }
    }
}

// --- the examples -------------------------------------------------------------------------------

/// The render-driver variants, `deploy/render-drivers/<key>`, and the objects they add.
const VARIANTS: [&str; 3] = ["intel", "nvidia", "amd"];
const VARIANT_OBJECTS: [&str; 4] = [
    "render-drivers/namespace/namespace.yaml",
    "render-drivers/intel/deviceclass.yaml",
    "render-drivers/nvidia/deviceclass.yaml",
    "render-drivers/amd/deviceclass.yaml",
];

const EXAMPLES: [&str; 3] = [
    "examples/classes.yaml",
    "examples/claim-templates.yaml",
    "examples/pod.yaml",
];

#[test]
fn the_product_documents_objects_come_as_examples_that_are_not_installed() {
    let examples: Vec<Value> = EXAMPLES.iter().flat_map(|f| read_documents(f)).collect();
    let installed = manifests();
    let kustomization = std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).unwrap();
    assert!(!kustomization.contains("examples"), "{kustomization}");
    for example in &examples {
        let key = (&example["kind"], &example["metadata"]["name"]);
        assert!(
            !installed
                .iter()
                .any(|o| (&o["kind"], &o["metadata"]["name"]) == key),
            "{key:?} is installed by the kustomization"
        );
    }
    let named = |kind: &str, name: &str| {
        examples
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no example {kind} {name}"))
            .clone()
    };
    // The product document's objects, as the tests of `class` keep them (tests/fixtures/spec).
    let spec = |file: &str| -> Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/spec")
            .join(file);
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    assert_eq!(
        named("DeviceClass", "decode-10bit"),
        spec("decode-10bit-class.yaml")
    );
    assert_eq!(
        named("DeviceClass", "gpu-render"),
        spec("gpu-render-class.yaml")
    );
    assert_eq!(
        named("ResourceClaimTemplate", "decode-10bit"),
        spec("decode-10bit-template.yaml")
    );
    let vp9 = named("ResourceClaimTemplate", "vp9-8bit");
    assert_eq!(
        vp9["spec"]["spec"]["devices"]["requests"][1],
        spec("vp9-8bit-request.yaml")[0]
    );
    let media_gpu = named("DeviceClass", "media-gpu");
    assert_eq!(
        media_gpu["spec"]["selectors"][0]["cel"]["expression"],
        "device.driver == \"media.liken.sh\""
    );
    // The pod claims through the decode-10bit template, into its container.
    let pod = named("Pod", "decode-10bit-worker");
    assert_eq!(
        pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
        "decode-10bit"
    );
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["claims"][0]["name"],
        pod["spec"]["resourceClaims"][0]["name"]
    );
    // Every selector compiles as CEL.
    for object in &examples {
        for expression in cel_expressions(object) {
            cel::Program::compile(&expression).unwrap_or_else(|e| panic!("{expression}: {e}"));
        }
    }
}

fn cel_expressions(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("cel", Value::Object(cel)) => {
                        found.push(cel["expression"].as_str().unwrap().to_owned())
                    }
                    _ => found.extend(cel_expressions(v)),
                }
            }
        }
        Value::Array(items) => found.extend(items.iter().flat_map(cel_expressions)),
        _ => {}
    }
    found
}

// --- the Kubernetes 1.34 schema -----------------------------------------------------------------

/// Checks `object` against the Kubernetes 1.34 API types (k8s-openapi, generated from the 1.34
/// OpenAPI schema): it must deserialise into the type its apiVersion and kind name (so every
/// required field is there with its type), and serialise back to exactly itself, which fails
/// for any field the type does not have (k8s-openapi's types skip unknown fields when reading,
/// so a misspelled field is exactly one that does not come back). Chosen over the PyPI
/// `kubernetes-validate`: k8s-openapi is already built for the crate, so the check needs no
/// Python, no download in CI and no second copy of the schema.
fn check_schema(object: &Value) -> Result<(), String> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admission, apps::v1 as apps, core::v1 as core,
        rbac::v1 as rbac, resource::v1 as resource,
    };
    fn round_trip<T>(object: &Value) -> Result<Value, String>
    where
        T: serde::de::DeserializeOwned + serde::Serialize,
    {
        let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
        Ok(serde_json::to_value(typed).unwrap())
    }
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let back = match (api_version, kind) {
        ("v1", "Namespace") => round_trip::<core::Namespace>(object),
        ("v1", "ServiceAccount") => round_trip::<core::ServiceAccount>(object),
        ("v1", "Pod") => round_trip::<core::Pod>(object),
        ("apps/v1", "DaemonSet") => round_trip::<apps::DaemonSet>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<rbac::ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<rbac::ClusterRoleBinding>(object)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            round_trip::<admission::ValidatingAdmissionPolicy>(object)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            round_trip::<admission::ValidatingAdmissionPolicyBinding>(object)
        }
        ("resource.k8s.io/v1", "DeviceClass") => round_trip::<resource::DeviceClass>(object),
        ("resource.k8s.io/v1", "ResourceClaimTemplate") => {
            round_trip::<resource::ResourceClaimTemplate>(object)
        }
        ("resource.k8s.io/v1", "ResourceClaim") => round_trip::<resource::ResourceClaim>(object),
        ("resource.k8s.io/v1", "ResourceSlice") => round_trip::<resource::ResourceSlice>(object),
        ("v1", "Node") => round_trip::<core::Node>(object),
        ("v1", "Event") => round_trip::<core::Event>(object),
        _ => Err(format!(
            "no Kubernetes 1.34 type for apiVersion {api_version:?} kind {kind:?} here (add it to check_schema)"
        )),
    }?;
    let mut differences = Vec::new();
    diff(object, &back, String::new(), &mut differences);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(differences.join("; "))
    }
}

/// Where `original` has what `back` lacks or holds differently, as paths.
fn diff(original: &Value, back: &Value, path: String, out: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => diff(value, other, here, out),
                    None => out.push(format!("unknown field {}", &here[1..])),
                }
            }
            // k8s-openapi reads a missing required field as its default and writes it back;
            // optional fields it never writes when absent.
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!(
                    "missing required field {}",
                    &format!("{path}.{key}")[1..]
                ));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(x, y, format!("{path}[{i}]"), out);
            }
        }
        _ if original == back => {}
        _ => out.push(format!(
            "{}: {original} reads back as {back}",
            path.trim_start_matches('.')
        )),
    }
}

#[test]
fn every_manifest_and_example_is_valid_against_the_kubernetes_1_34_schema() {
    let mut files: Vec<String> = installed_files();
    files.extend(EXAMPLES.iter().map(|f| f.to_string()));
    files.extend(VARIANT_OBJECTS.iter().map(|f| f.to_string()));
    // Every YAML file under deploy/ is one of them (the kustomizations, the chart's Chart.yaml
    // and values.yaml, and krew's template are not Kubernetes objects).
    let mut on_disk = Vec::new();
    let mut dirs = vec![
        deploy_dir(),
        deploy_dir().join("base"),
        deploy_dir().join("examples"),
        deploy_dir().join("render-drivers/namespace"),
    ];
    dirs.extend(
        VARIANTS
            .iter()
            .map(|v| deploy_dir().join("render-drivers").join(v)),
    );
    for dir in dirs {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml")
                && path.file_name().is_some_and(|n| {
                    !["kustomization.yaml", "Chart.yaml", "values.yaml"]
                        .contains(&n.to_str().unwrap())
                })
            {
                on_disk.push(
                    path.strip_prefix(deploy_dir())
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    on_disk.sort();
    let mut checked = files.clone();
    checked.sort();
    assert_eq!(
        checked, on_disk,
        "a manifest that is neither installed nor an example"
    );

    let mut count = 0;
    for file in &files {
        for object in read_documents(file) {
            if let Err(e) = check_schema(&object) {
                panic!(
                    "{file}: {} {}: {e}",
                    object["kind"], object["metadata"]["name"]
                );
            }
            count += 1;
        }
    }
    assert!(count >= 13, "{count} objects");
}

/// The example fleet and the pending-pod scenarios `why` explains are objects a 1.34 API server
/// would take (Lists flattened).
#[test]
fn the_example_objects_are_valid_kubernetes_objects() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("docs/examples/fleet.yaml")];
    let why = root.join("docs/examples/why");
    let mut scenarios: Vec<_> = std::fs::read_dir(&why)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 5, "{scenarios:?}");
    files.extend(scenarios);
    let mut count = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).unwrap();
            let items = match value.get("items").and_then(Value::as_array) {
                Some(items) => items.clone(),
                None if value.is_null() => Vec::new(),
                None => vec![value],
            };
            for object in items {
                if let Err(e) = check_schema(&object) {
                    panic!(
                        "{}: {} {}: {e}",
                        file.display(),
                        object["kind"],
                        object["metadata"]["name"]
                    );
                }
                count += 1;
            }
        }
    }
    assert!(count >= 50, "{count} objects");
}

#[test]
fn the_schema_check_refuses_misspelled_fields_wrong_types_and_unknown_kinds() {
    let objects = manifests();
    let ds = find(&objects, "DaemonSet").clone();
    assert_eq!(check_schema(&ds), Ok(()));

    let mut misspelled = ds.clone();
    misspelled["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesytem"] =
        json!(true);
    assert_eq!(
        check_schema(&misspelled),
        Err(
            "unknown field spec.template.spec.containers[0].securityContext.readOnlyRootFilesytem"
                .to_owned()
        )
    );

    let mut misplaced = ds.clone();
    misplaced["spec"]["template"]["spec"]["volumeMounts"] = json!([]);
    assert_eq!(
        check_schema(&misplaced),
        Err("unknown field spec.template.spec.volumeMounts".to_owned())
    );

    let mut wrong_type = ds.clone();
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!("thirty");
    let err = check_schema(&wrong_type).unwrap_err();
    assert!(err.contains("invalid type: string \"thirty\""), "{err}");

    let mut missing = ds.clone();
    missing["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    assert_eq!(
        check_schema(&missing),
        Err("missing required field spec.template.spec.containers[0].name".to_owned())
    );

    let mut old_api = find(&objects, "DeviceClass").clone();
    old_api["apiVersion"] = json!("resource.k8s.io/v1alpha1");
    let err = check_schema(&old_api).unwrap_err();
    assert!(err.starts_with("no Kubernetes 1.34 type for"), "{err}");
}
