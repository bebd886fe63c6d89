//! Objects into the real control plane, as their owners would have written them, and readers
//! whose RBAC lacks a right (or an admin by token): what the client tests need of a cluster.
//!
//! `kubectl create` drops `status` and the server gives each object its own uid, so the objects
//! are created in order (nodes and pods first), the uids they were given are written into the
//! later objects' owner references and reservations, and the statuses are written through the
//! status subresource. A reference to an object the load does not hold is dropped: the garbage
//! collector would delete what it owns.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::controlplane::ControlPlane;

fn ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl VERB -f` on `objects` as one List, the stored objects it prints.
fn kubectl_list(cp: &ControlPlane, verb: &[&str], objects: &[Value]) -> Vec<Value> {
    if objects.is_empty() {
        return Vec::new();
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&file, list.to_string()).unwrap();
    let mut args: Vec<&str> = verb.to_vec();
    args.extend(["-o", "json", "-f", file.to_str().unwrap()]);
    // One JSON document per object (a List only when kubectl was given one to print).
    let out = ok(cp.kubectl(&args), &verb.join(" "));
    let mut stored = Vec::new();
    for document in serde_json::Deserializer::from_str(&out).into_iter::<Value>() {
        let document = document.unwrap();
        match document.get("items").and_then(Value::as_array) {
            Some(items) => stored.extend(items.iter().cloned()),
            None => stored.push(document),
        }
    }
    stored
}

/// Creates the namespaces `objects` live in (when missing), then `objects`: Nodes and Pods first,
/// then the rest with their references pointed at the uids the server gave, then the statuses.
pub fn create(cp: &ControlPlane, objects: &[Value]) {
    let mut namespaces: Vec<&str> = objects
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    for namespace in namespaces {
        namespace_ready(cp, namespace);
    }
    let clean = |object: &Value| {
        let mut object = object.clone();
        if let Some(meta) = object["metadata"].as_object_mut() {
            for field in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
                meta.remove(field);
            }
        }
        object
    };
    let first = |o: &Value| o["kind"] == "Node" || o["kind"] == "Pod";
    // Templates last: with one there, the real resourceclaim controller makes a claim of its own
    // for a new pod before the load's claim, owned by that pod, is stored (it adopts that one).
    let mut objects = objects.to_vec();
    objects.sort_by_key(|o| o["kind"] == "ResourceClaimTemplate");
    let objects = &objects[..];
    let mut uids = HashMap::new();
    let mut stored = Vec::new();
    let owners: Vec<Value> = objects.iter().filter(|o| first(o)).map(clean).collect();
    for object in kubectl_list(cp, &["create"], &owners) {
        if object["kind"] == "Node" {
            untaint(cp, objects, &object);
        }
        uids.insert(key(&object), object["metadata"]["uid"].clone());
        stored.push(object);
    }
    let rest: Vec<Value> = objects
        .iter()
        .filter(|o| !first(o))
        .map(|o| {
            let mut object = clean(o);
            point_at_stored(&mut object, &uids);
            object
        })
        .collect();
    stored.extend(kubectl_list(cp, &["create"], &rest));
    // The statuses, merged in through the status subresource (the controllers may have written
    // one already, so no resourceVersion is asked for).
    let wanted: HashMap<(String, String, String), Value> = objects
        .iter()
        .chain(&rest)
        .filter(|o| o.get("status").is_some_and(|s| !s.is_null()))
        .map(|o| (key(o), o["status"].clone()))
        .collect();
    for object in stored {
        let Some(status) = wanted.get(&key(&object)) else {
            continue;
        };
        let (kind, namespace, name) = key(&object);
        let patch = json!({ "status": status }).to_string();
        let mut args = vec![
            "patch",
            &kind,
            &name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ];
        if !namespace.is_empty() {
            args.extend(["-n", &namespace]);
        }
        ok(cp.kubectl(&args), "patch the status");
    }
    forget_complaints(cp);
}

/// Deletes the real resourceclaim controller's complaints that a pod's template is missing,
/// made while the load had not stored it yet: not the loaded objects' own events. Its event
/// recorder writes a moment after the fact, so until none has come for a while.
fn forget_complaints(cp: &ControlPlane) {
    let selector = "--field-selector=reason=FailedResourceClaimCreation";
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(1) {
        assert!(
            Instant::now() < deadline,
            "the controller keeps complaining"
        );
        let listed = ok(
            cp.kubectl(&["get", "events", "-A", selector, "-o", "name"]),
            "list the controller's events",
        );
        if !listed.trim().is_empty() {
            ok(
                cp.kubectl(&["delete", "events", "-A", selector]),
                "delete the controller's events",
            );
            quiet_since = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Points the owner references and reservations of `object` at the uids the server gave
/// (`uids` by kind, namespace and name), dropping those that name no stored object.
fn point_at_stored(object: &mut Value, uids: &HashMap<(String, String, String), Value>) {
    // References name objects of the referrer's namespace (none for cluster-scoped ones).
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    for pointer in ["/metadata/ownerReferences", "/status/reservedFor"] {
        let Some(list) = object.pointer_mut(pointer).and_then(Value::as_array_mut) else {
            continue;
        };
        list.retain_mut(|reference| {
            // reservedFor names a resource (`pods`), ownerReferences a kind.
            let kind = match (reference["kind"].as_str(), reference["resource"].as_str()) {
                (Some(kind), _) => kind,
                (None, Some("pods")) => "Pod",
                _ => return false,
            };
            let name = reference["name"].as_str().unwrap_or("");
            match uids.get(&(kind.to_string(), namespace.clone(), name.to_string())) {
                Some(uid) => {
                    reference["uid"] = uid.clone();
                    true
                }
                None => false,
            }
        });
    }
}

/// Gives a created Node the taints it was loaded with: admission (TaintNodesByCondition) adds
/// `node.kubernetes.io/not-ready`, which the node lifecycle controller would take off once the
/// kubelet reports Ready; neither runs here.
fn untaint(cp: &ControlPlane, objects: &[Value], node: &Value) {
    let name = node["metadata"]["name"].as_str().unwrap();
    let loaded = objects
        .iter()
        .find(|o| o["kind"] == "Node" && o["metadata"]["name"] == name)
        .expect("a created node was loaded");
    let taints = loaded["spec"]
        .get("taints")
        .cloned()
        .unwrap_or_else(|| json!([]));
    let patch = json!({"spec": {"taints": taints}}).to_string();
    ok(
        cp.kubectl(&["patch", "node", name, "--type=merge", "-p", &patch]),
        "set the node's taints",
    );
}

/// Creates `namespace` if missing and waits for its `default` service account, which the
/// serviceaccount controller makes a moment later and without which no pod is admitted.
pub fn namespace_ready(cp: &ControlPlane, namespace: &str) {
    let out = cp.kubectl(&["create", "namespace", namespace]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("AlreadyExists"),
        "create namespace {namespace}: {stderr}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cp
        .kubectl(&["get", "serviceaccount", "default", "-n", namespace])
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "no default service account in {namespace}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn key(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    (
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

/// Every object of the YAML files, Lists flattened.
pub fn from_files(files: &[impl AsRef<Path>]) -> Vec<Value> {
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).unwrap();
            match value.get("items").and_then(Value::as_array) {
                Some(items) => out.extend(items.iter().cloned()),
                None if !value.is_null() => out.push(value),
                None => {}
            }
        }
    }
    out
}

/// A kubeconfig at `dir/NAME.kubeconfig` for a service account `NAME` (in `readers`) that may
/// list `cluster_wide` everywhere and `in_namespace` (namespace, resources) there only.
/// Resources are `plural.group` (`pods`, `resourceslices.resource.k8s.io`).
pub fn reader(
    cp: &ControlPlane,
    dir: &Path,
    name: &str,
    cluster_wide: &[&str],
    in_namespace: &[(&str, &[&str])],
) -> PathBuf {
    let rule = |resources: &[&str]| -> Vec<Value> {
        resources
            .iter()
            .map(|r| {
                let (plural, group) = r.split_once('.').unwrap_or((r, ""));
                json!({"apiGroups": [group], "resources": [plural], "verbs": ["get", "list"]})
            })
            .collect()
    };
    let subject = json!([{"kind": "ServiceAccount", "name": name, "namespace": "readers"}]);
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": "readers"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": format!("reader-{name}")}, "rules": rule(cluster_wide)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": format!("reader-{name}")},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("reader-{name}")},
               "subjects": subject}),
    ];
    for (namespace, resources) in in_namespace {
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": format!("reader-{name}"), "namespace": namespace},
            "rules": rule(resources)}),
        );
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("reader-{name}"), "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("reader-{name}")},
            "subjects": subject}));
    }
    let mut namespaces = vec!["readers"];
    namespaces.extend(in_namespace.iter().map(|(ns, _)| *ns));
    for namespace in namespaces {
        namespace_ready(cp, namespace);
    }
    kubectl_list(cp, &["apply"], &objects);
    let token = ok(
        cp.kubectl(&["create", "token", name, "-n", "readers", "--duration=1h"]),
        "create token",
    );
    let path = dir.join(format!("{name}.kubeconfig"));
    cp.token_kubeconfig(token.trim(), &path);
    path
}

/// A kubeconfig in `dir` for service account `readers/NAME` bound to cluster-admin: the admin
/// as a bearer token, for clients of the fault proxy (the admin's client certificate would end
/// at the proxy's TLS).
pub fn admin(cp: &ControlPlane, dir: &Path, name: &str) -> PathBuf {
    namespace_ready(cp, "readers");
    kubectl_list(
        cp,
        &["apply"],
        &[
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": "readers"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": format!("admin-{name}")},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "cluster-admin"},
                   "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "readers"}]}),
        ],
    );
    let token = ok(
        cp.kubectl(&["create", "token", name, "-n", "readers", "--duration=1h"]),
        "create token",
    );
    let path = dir.join(format!("{name}.kubeconfig"));
    cp.token_kubeconfig(token.trim(), &path);
    path
}
