//! `kubectl media` against a cluster: the real binary talking to the real control plane
//! (tests/it/support/controlplane.rs), through the fault proxy (tests/it/support/faultproxy.rs)
//! where a test needs an answer the real server does not give on cue, and kubectl applying what
//! `class` writes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::controlplane::{self, ControlPlane};
use crate::support::faultproxy::{Answer, Fault, FaultProxy};
use crate::support::objects;
use crate::{error_line, kubectl_media};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stdout(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The example fleet's nodes and slices (docs/examples), as the agents and liken would have
/// written them.
pub(crate) fn example_fleet() -> Vec<Value> {
    objects::from_files(&[
        root().join("docs/examples/why/nodes.yaml"),
        root().join("docs/examples/fleet.yaml"),
    ])
}

/// What a list of ResourceSlices asks for (`caps` always pages, so the query follows).
const SLICES: &str = "/resourceslices?";

/// The scenarios of docs/examples/why/ that [`fleet_cluster`] holds: they allocate nothing and
/// add no device, so each reads as it does alone.
pub(crate) const FLEET_SCENARIOS: [&str; 2] = ["no-gpu-qualifies", "class-typo"];

/// A control plane holding the example fleet, its agents' pods ([`crate::caps::fleet_pods`]),
/// the product document's classes and the pending pods of [`FLEET_SCENARIOS`], shared by the tests of this process that read them (they write
/// only in namespaces of their own). The fleet's devices allow multiple allocations: without
/// DRAConsumableCapacity 1.34 drops that field.
pub(crate) fn fleet_cluster() -> &'static ControlPlane {
    static FLEET: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    FLEET
        .get_or_init(|| {
            let cp = controlplane::shared_with(
                "fleet",
                &["--feature-gates", "DRAConsumableCapacity=true"],
            )?;
            let mut loaded = example_fleet();
            loaded.extend(crate::caps::fleet_pods());
            loaded.extend(crate::why::scenario_objects(&FLEET_SCENARIOS));
            objects::create(&cp, &loaded);
            Ok(cp)
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A fault proxy in front of `cp`, and the kubeconfig of an admin (by token) that goes through it.
pub(crate) fn proxied(cp: &ControlPlane) -> (FaultProxy, PathBuf) {
    let proxy = FaultProxy::start(cp);
    let kubeconfig = proxy.admin(cp);
    (proxy, kubeconfig)
}

/// The lists of `resource` among `answers`.
pub(crate) fn lists(answers: Vec<Answer>, resource: &str) -> Vec<Answer> {
    answers.into_iter().filter(|a| a.lists(resource)).collect()
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn caps_from_a_cluster_matches_caps_from_a_file() {
    // Through the proxy, which only forwards, to see what was asked.
    let (proxy, kubeconfig) = proxied(fleet_cluster());
    let fleet = root().join("docs/examples/fleet.yaml");
    // The agents' pods too, which name the failed probe's log in the notes.
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods.json");
    let list =
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crate::caps::fleet_pods()});
    std::fs::write(&pods, list.to_string()).unwrap();
    for format in ["json", "yaml", "wide"] {
        let from_cluster = stdout(kubectl_media(&["caps", "-o", format], &kubeconfig));
        let from_file = stdout(kubectl_media(
            &[
                "caps",
                "-o",
                format,
                "-f",
                fleet.to_str().unwrap(),
                "-f",
                pods.to_str().unwrap(),
            ],
            &kubeconfig,
        ));
        assert_eq!(from_cluster, from_file, "-o {format}");
    }
    // It only read.
    let asked = proxy.answers();
    assert!(
        !asked.is_empty() && asked.iter().all(|r| r.method == "GET"),
        "{asked:?}"
    );
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn caps_pages_through_large_fleets() {
    // 600 slices: a control plane of this test's own, since slices are cluster-wide.
    let cp = ControlPlane::start();
    let templates = crate::support::examples::example_nodes(&root()).unwrap();
    objects::create(
        &cp,
        &crate::support::examples::large_fleet(300, 2, &templates),
    );
    let (proxy, kubeconfig) = proxied(&cp);
    let mark = proxy.mark();
    let out = stdout(kubectl_media(&["caps", "-o", "json"], &kubeconfig));
    let records: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(records.as_array().unwrap().len(), 600);
    let lists = lists(proxy.answers_since(mark), "resourceslices");
    assert_eq!(lists.len(), 2, "600 slices in pages of 500: {lists:?}");
    assert!(lists[0].target.contains("limit=500"), "{lists:?}");
    assert!(lists[1].target.contains("continue="), "{lists:?}");
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn caps_waits_as_long_as_a_throttling_server_asks_as_kubectl_does() {
    let (proxy, kubeconfig) = proxied(fleet_cluster());
    let expected = stdout(kubectl_media(&["caps", "-o", "json"], &kubeconfig));
    // Priority and fairness turns the list away twice, asking for a second each time.
    let throttled = Fault::TooManyRequests {
        retry_after_seconds: 1,
    };
    let mark = proxy.mark();
    proxy.fail_next(2, throttled, Some("GET"), Some(SLICES));
    let out = stdout(kubectl_media(&["caps", "-o", "json"], &kubeconfig));
    assert_eq!(out, expected, "the same answer, only later");
    let lists = lists(proxy.answers_since(mark), "resourceslices");
    let throttled: Vec<bool> = lists.iter().map(|r| r.fault.is_some()).collect();
    assert_eq!(throttled, [true, true, false], "{lists:?}");
    for pair in lists.windows(2) {
        let waited = pair[1].at - pair[0].at;
        assert!(
            waited >= Duration::from_secs(1),
            "asked again after {waited:?}"
        );
    }

    // (An error answer without Retry-After is not sent again, as in client-go's checkWait:
    // caps_explains_what_the_cluster_refuses.) A throttling that outlasts --request-timeout
    // ends in the timeout.
    let throttled = Fault::TooManyRequests {
        retry_after_seconds: 1,
    };
    proxy.fail_next(20, throttled, Some("GET"), Some(SLICES));
    let line = error_line(kubectl_media(
        &["caps", "--request-timeout", "2s"],
        &kubeconfig,
    ));
    assert!(line.contains("2s"), "{line}");
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn caps_explains_what_the_cluster_refuses() {
    let cp = fleet_cluster();
    let dir = tempfile::tempdir().unwrap();

    // A role without slices: the real server's RBAC refuses.
    let reader = objects::reader(cp, dir.path(), "caps-no-slices", &["pods"], &[]);
    assert_eq!(
        error_line(kubectl_media(&["caps"], &reader)),
        "error: forbidden: cannot list resourceslices.resource.k8s.io at the cluster scope: \
         resourceslices.resource.k8s.io is forbidden: User \"system:serviceaccount:readers:caps-no-slices\" \
         cannot list resource \"resourceslices\" in API group \"resource.k8s.io\" at the cluster scope \
         (hint: ask for a role that allows 'list' on resourceslices.resource.k8s.io)"
    );

    // A token the server does not know.
    let stranger = dir.path().join("stranger.kubeconfig");
    cp.token_kubeconfig("not-a-token-of-this-cluster", &stranger);
    assert_eq!(
        error_line(kubectl_media(&["caps"], &stranger)),
        format!(
            "error: the Kubernetes API at {} refused our credentials (401 Unauthorized) (hint: log in \
             again, or check the user of the kubeconfig context)",
            cp.url.trim_end_matches('/')
        )
    );

    let (proxy, kubeconfig) = proxied(cp);
    let get = Some("GET");
    proxy.fail_next(1, Fault::internal(), get, Some(SLICES));
    let line = error_line(kubectl_media(&["caps"], &kubeconfig));
    assert!(
        line.starts_with("error: the Kubernetes API at https://127.0.0.1:"),
        "{line}"
    );
    assert!(
        line.ends_with("refused to list resourceslices.resource.k8s.io: Internal error occurred: injected fault (500 InternalError)"),
        "{line}"
    );

    // A load balancer's page in place of the API's answer: on one line, by its code.
    proxy.fail_next(1, Fault::GatewayPage { code: 503 }, get, Some(SLICES));
    let line = error_line(kubectl_media(&["caps"], &kubeconfig));
    assert!(
        line.ends_with(
            "refused to list resourceslices.resource.k8s.io: <html> <head><title>503 Service \
             Unavailable</title></head> <body> <center><h1>503 Service Unavailable</h1></center> \
             </body> </html> (503 ServiceUnavailable)"
        ),
        "{line}"
    );

    // A 404 where discovery lists resource.k8s.io/v1 is said as it came, with what was asked.
    proxy.fail_next(1, Fault::not_found(), get, Some(SLICES));
    let line = error_line(kubectl_media(&["caps"], &kubeconfig));
    assert_eq!(
        line,
        format!(
            "error: the Kubernetes API at {} answered 404 to GET /apis/resource.k8s.io/v1/resourceslices?limit=500, \
             though its discovery lists resource.k8s.io/v1: the server could not find the requested resource \
             (hint: check that the server of the kubeconfig context is the API server itself, not a proxy or a \
             path below it)",
            proxy.url
        )
    );

    proxy.fail_next(
        1,
        Fault::Delay(Duration::from_millis(1500)),
        get,
        Some(SLICES),
    );
    let line = error_line(kubectl_media(
        &["caps", "--request-timeout", "200ms"],
        &kubeconfig,
    ));
    assert!(
        line.contains("did not answer within 200ms (hint: raise --request-timeout"),
        "{line}"
    );

    proxy.stop();
    let line = error_line(kubectl_media(&["caps"], &kubeconfig));
    assert!(
        line.starts_with("error: cannot reach the Kubernetes API at https://127.0.0.1:"),
        "{line}"
    );
    assert!(line.contains("Connection refused"), "{line}");
}

/// `kubectl apply -f -` accepts what `class` writes (issue 2, item 6), with kubectl as the real
/// client and the real API server validating; ignored, with the install hint, where either is missing.
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn kubectl_applies_what_class_writes() {
    // The shared control plane: the fleet's holds the product document's classes already.
    let cp = controlplane::shared();
    let namespace = "class-apply";
    objects::namespace_ready(cp, namespace);
    let yaml = stdout(kubectl_media(
        &[
            "class",
            "decode-10bit",
            "--decode",
            "HEVCMain10",
            "--scale",
            "10bit",
            "--claim",
            "--with-render-class",
        ],
        cp.kubeconfig(),
    ));
    let selector = stdout(kubectl_media(
        &[
            "class",
            "--selector",
            "--decode",
            "VP9",
            "--scale",
            "8bit",
            "--with-base-class",
        ],
        cp.kubeconfig(),
    ));
    let home = tempfile::tempdir().unwrap();
    for input in [yaml, selector] {
        let mut child = Command::new("kubectl")
            .args(["apply", "-n", namespace, "-f", "-"])
            .env_clear()
            .env("HOME", home.path())
            .env("KUBECONFIG", cp.kubeconfig())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let names = |args: &[&str]| -> Vec<String> {
        let mut args = args.to_vec();
        args.extend(["-o", "jsonpath={.items[*].metadata.name}"]);
        stdout(cp.kubectl(&args))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    // Others' classes may be there too (the shared control plane has deploy/ installed).
    let classes = names(&["get", "deviceclasses"]);
    for class in ["decode-10bit", "gpu-render", "media-gpu"] {
        assert!(classes.iter().any(|c| c == class), "{class} in {classes:?}");
    }
    assert_eq!(
        names(&["get", "resourceclaimtemplates", "-n", namespace]),
        ["decode-10bit", "decode-vp9-scale-8bit"]
    );
}

// --- the reader, every kind ------------------------------------------------------------------------

use media_operator::fleet::cluster::{Cluster, Connection, ListRequest, Namespaces};
use media_operator::fleet::objects::{Kind, Objects, QualifiedName, Value as AttributeValue};
use media_operator::kubeconfig::Source;
use serde_json::json;

/// One object of every kind the reader routes, shaped as a cluster with a pending pod holds
/// them, plus a pod and an event in another namespace.
fn every_kind() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"gpu": "yes"}}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu-render"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == \"liken.sh\" && has(device.attributes[\"liken.sh\"].renderNode)"}}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "decode-10bit", "namespace": "media"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu-render"}}]}}}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "film-gpu-abcde", "namespace": "media"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu-render"}}]}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "film", "namespace": "media", "labels": {"app": "film"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "worker", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "decode-10bit"}]},
            "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "film-gpu-abcde"}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "default"},
            "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "x"}]}}),
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "film.1", "namespace": "media"},
            "involvedObject": {"kind": "Pod", "name": "film", "namespace": "media"}, "reason": "FailedScheduling",
            "message": "0/1 nodes are available: 1 cannot allocate all claims.", "type": "Warning"}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-liken.sh"},
            "spec": {"driver": "liken.sh", "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "card0", "attributes": {
                    "renderNode": {"string": "/dev/dri/renderD128"},
                    "resource.kubernetes.io/pciBusID": {"string": "0000:00:02.0"}},
                    "capacity": {"shares": {"value": "8"}}}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-media.liken.sh"},
            "spec": {"driver": "media.liken.sh", "nodeName": "n1", "pool": {"name": "n1", "generation": 2, "resourceSliceCount": 1},
                "devices": [{"name": "pci-0000-00-02-0", "allowMultipleAllocations": true, "attributes": {
                    "decodeHEVCMain10": {"bool": true},
                    "resource.kubernetes.io/pciBusID": {"string": "0000:00:02.0"}},
                    "taints": [{"key": "example.com/maintenance", "effect": "NoSchedule"}]}]}}),
    ]
}

/// A control plane of its own holding [`every_kind`] (its slices and classes are cluster-wide),
/// with the fixture's pod claim owned by its pod, as the resourceclaim controller would have it.
/// Its gate keeps the fixture's shared device, which 1.34 drops by default. (Device taints stay
/// dropped: the DRADeviceTaints gate needs resource.k8s.io/v1alpha3, which this control plane
/// does not serve, and its scheduler then never syncs.)
fn kinds_cluster() -> &'static ControlPlane {
    static KINDS: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    KINDS
        .get_or_init(|| {
            let cp = controlplane::shared_with(
                "kinds",
                &["--feature-gates", "DRAConsumableCapacity=true"],
            )?;
            let mut kinds = every_kind();
            for object in &mut kinds {
                if object["metadata"]["name"] == "film-gpu-abcde" {
                    object["metadata"]["annotations"] =
                        json!({"resource.kubernetes.io/pod-claim-name": "gpu"});
                    object["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1",
                        "kind": "Pod", "name": "film", "uid": "", "controller": true,
                        "blockOwnerDeletion": true}]);
                }
            }
            objects::create(&cp, &kinds);
            Ok(cp)
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The kinds' control plane, through a kubeconfig whose context's namespace is `namespace`.
fn loaded(dir: &Path, namespace: &str) -> PathBuf {
    let cp = kinds_cluster();
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(cp.kubeconfig()).unwrap()).unwrap();
    for context in config["contexts"].as_sequence_mut().unwrap() {
        context["context"]["namespace"] = namespace.into();
    }
    let path = dir.join(format!("{namespace}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    path
}

/// The kinds the reader routes that Kubernetes 1.34 serves: all but DeviceTaintRule, which
/// resource.k8s.io/v1 has from 1.37 (`why` lists it only from such a server).
fn served() -> impl Iterator<Item = Kind> {
    Kind::ALL
        .into_iter()
        .filter(|k| *k != Kind::DeviceTaintRule)
}

/// What a test checks of a set of objects, kind by kind, by name.
fn names(objects: &Objects) -> Vec<(Kind, String)> {
    let meta = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| match (
        &m.namespace,
        &m.name,
    ) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.clone(),
        _ => String::new(),
    };
    let mut names: Vec<(Kind, String)> = Vec::new();
    names.extend(
        objects
            .slices
            .iter()
            .map(|s| (Kind::ResourceSlice, s.metadata.name.clone())),
    );
    names.extend(
        objects
            .classes
            .iter()
            .map(|o| (Kind::DeviceClass, meta(&o.metadata))),
    );
    names.extend(
        objects
            .claims
            .iter()
            .map(|o| (Kind::ResourceClaim, meta(&o.metadata))),
    );
    names.extend(
        objects
            .claim_templates
            .iter()
            .map(|o| (Kind::ResourceClaimTemplate, meta(&o.metadata))),
    );
    names.extend(objects.pods.iter().map(|o| (Kind::Pod, meta(&o.metadata))));
    names.extend(
        objects
            .nodes
            .iter()
            .map(|o| (Kind::Node, meta(&o.metadata))),
    );
    names.extend(
        objects
            .events
            .iter()
            .map(|o| (Kind::Event, meta(&o.metadata))),
    );
    names.sort();
    names
}

/// A listing: the kind, where (`None`: the namespace in effect), the label and field selectors.
type Listing<'a> = (Kind, Option<Namespaces>, Option<&'a str>, Option<&'a str>);

fn list_with(
    kubeconfig: &Path,
    namespace: Option<&str>,
    requests: &[Listing<'_>],
) -> (Objects, String) {
    let connection = Connection {
        source: Source {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            context: None,
        },
        namespace: namespace.map(str::to_owned),
        request_timeout: Some(Duration::from_secs(10)),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let cluster = Cluster::connect(&connection).await.unwrap();
        let in_effect = Namespaces::One(cluster.namespace().to_string());
        let mut objects = Objects::default();
        for (kind, namespaces, labels, fields) in requests {
            cluster
                .list(
                    &ListRequest {
                        kind: *kind,
                        namespaces: namespaces.as_ref().unwrap_or(&in_effect),
                        label_selector: *labels,
                        field_selector: *fields,
                    },
                    &mut objects,
                )
                .await
                .unwrap();
        }
        (objects, cluster.namespace().to_string())
    })
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn one_lister_reads_every_kind_namespaced_or_not_with_selectors() {
    let dir = tempfile::tempdir().unwrap();
    let server = loaded(dir.path(), "media");
    let every: Vec<_> = served()
        .map(|k| (k, Some(Namespaces::All), None, None))
        .collect();
    let (objects, namespace) = list_with(&server, None, &every);
    // The context's namespace is the default, as kubectl has it.
    assert_eq!(namespace, "media");
    assert!(objects.notes.is_empty(), "{:?}", objects.notes);
    // The control plane may record events of its own (default/kubernetes.*, about its
    // service): only the test's, in media, count.
    let all: Vec<_> = names(&objects)
        .into_iter()
        .filter(|(kind, name)| *kind != Kind::Event || name.starts_with("media/"))
        .collect();
    assert_eq!(all.len(), 9, "{all:?}");
    assert!(
        all.contains(&(Kind::Pod, "default/other".into())),
        "{all:?}"
    );

    // liken's unqualified renderNode is liken.sh's, typed; capacities survive, and the
    // device's taint is dropped by 1.34 with DRADeviceTaints off, as the real server does.
    let liken = objects
        .slices
        .iter()
        .find(|s| s.spec.driver == "liken.sh")
        .unwrap();
    let card = &liken.spec.devices[0];
    assert_eq!(
        card.attributes
            .get(QualifiedName::new("liken.sh", "renderNode")),
        Some(&AttributeValue::String("/dev/dri/renderD128".into()))
    );
    assert_eq!(
        card.capacity(QualifiedName::new("liken.sh", "shares"))
            .unwrap(),
        "8"
    );
    let media = objects
        .slices
        .iter()
        .find(|s| s.spec.driver == "media.liken.sh")
        .unwrap();
    assert_eq!(media.spec.pool.generation, 2);
    assert_eq!(media.spec.devices[0].allow_multiple_allocations, Some(true));
    assert!(media.spec.devices[0].taints().is_empty());
    assert_eq!(
        objects
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("film"))
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .resource_claims
            .as_ref()
            .unwrap()[0]
            .resource_claim_template_name
            .as_deref(),
        Some("decode-10bit")
    );

    // In the namespace in effect (the context's), in another (-n), by label and by field.
    let (objects, _) = list_with(&server, None, &[(Kind::Pod, None, None, None)]);
    assert_eq!(names(&objects), [(Kind::Pod, "media/film".to_string())]);
    let (objects, namespace) =
        list_with(&server, Some("default"), &[(Kind::Pod, None, None, None)]);
    assert_eq!(namespace, "default");
    assert_eq!(names(&objects), [(Kind::Pod, "default/other".to_string())]);
    let (objects, _) = list_with(
        &server,
        None,
        &[
            (
                Kind::Pod,
                Some(Namespaces::All),
                Some("app in (film, x)"),
                None,
            ),
            (
                Kind::ResourceSlice,
                None,
                None,
                Some("spec.driver=liken.sh"),
            ),
            (
                Kind::Event,
                Some(Namespaces::All),
                None,
                Some("involvedObject.name=film,reason=FailedScheduling"),
            ),
            (Kind::Node, None, Some("gpu=yes"), None),
        ],
    );
    assert_eq!(
        names(&objects),
        [
            (Kind::ResourceSlice, "n1-liken.sh".to_string()),
            (Kind::Pod, "media/film".to_string()),
            (Kind::Node, "n1".to_string()),
            (Kind::Event, "media/film.1".to_string()),
        ]
    );
}

/// The reader reads what kubectl 1.32 writes: `kubectl get <every kind> -A -o yaml|json` (one
/// List whose items carry their kind), and the kinds one by one as multi-document YAML; each
/// gives what the lister gives.
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_reader_reads_kubectls_output_of_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let server = loaded(dir.path(), "default");
    let every: Vec<_> = served()
        .map(|k| (k, Some(Namespaces::All), None, None))
        .collect();
    let (mut listed, _) = list_with(&server, None, &every);
    // kubectl hides managedFields (`--show-managed-fields` is off by default).
    let hide_managed_fields = |objects: &mut Objects| {
        for pod in &mut objects.pods {
            pod.metadata.managed_fields = None;
        }
        for event in &mut objects.events {
            event.metadata.managed_fields = None;
        }
    };
    hide_managed_fields(&mut listed);
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .arg("--kubeconfig")
            .arg(&server)
            .args(args)
            .output()
            .expect("run kubectl (hint: install kubectl 1.32)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let all =
        "pods,resourceclaims,resourceclaimtemplates,deviceclasses,resourceslices,nodes,events";
    let mut documents = Vec::new();
    for kind in served() {
        documents.push(kubectl(&["get", kind.plural(), "-A", "-o", "yaml"]));
    }
    for (name, text) in [
        ("all.yaml", kubectl(&["get", all, "-A", "-o", "yaml"])),
        ("all.json", kubectl(&["get", all, "-A", "-o", "json"])),
        ("kinds.yaml", documents.join("---\n")),
    ] {
        let mut read = Objects::default();
        media_operator::fleet::files::add_text(&mut read, &text, name).unwrap();
        hide_managed_fields(&mut read);
        assert!(read.notes.is_empty(), "{name}: {:?}", read.notes);
        assert_eq!(names(&read), names(&listed), "{name}");
        assert_eq!(read.slices, listed.slices, "{name}");
        assert_eq!(read.pods, listed.pods, "{name}");
        assert_eq!(read.events, listed.events, "{name}");
        let liken = read
            .slices
            .iter()
            .find(|s| s.spec.driver == "liken.sh")
            .unwrap();
        assert_eq!(
            liken.spec.devices[0]
                .attributes
                .get_named("liken.sh/renderNode")
                .and_then(|v| v.as_str()),
            Some("/dev/dri/renderD128"),
            "{name}"
        );
    }
}

// --- kubectl's connection habits ---------------------------------------------------------------

/// A listener that accepts TCP connections and never says a word (a TLS port behind a broken
/// load balancer, a server stuck before its handshake).
fn silent_listener() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    addr
}

fn https_kubeconfig(dir: &Path, addr: std::net::SocketAddr) -> PathBuf {
    kubeconfig_for(
        dir,
        &format!("{{server: 'https://{addr}', insecure-skip-tls-verify: true}}"),
    )
}

/// A kubeconfig whose only context's cluster is `cluster` (a YAML flow map).
fn kubeconfig_for(dir: &Path, cluster: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {cluster}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    path
}

/// A plain HTTP server on loopback that answers every request with `response` (the bytes of a
/// whole HTTP/1.1 response, `Connection: close`) and closes.
fn canned_server(response: &'static str) -> std::net::SocketAddr {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            // The request's head: the client sends no body with a GET.
            let mut head = Vec::new();
            let mut byte = [0u8];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = stream.write_all(response.as_bytes());
        }
    });
    addr
}

fn http_kubeconfig(dir: &Path, addr: std::net::SocketAddr) -> PathBuf {
    kubeconfig_for(dir, &format!("{{server: 'http://{addr}'}}"))
}

/// What is not kube-apiserver's own answer reads as kube-rs reads it: a proxy's plain-text error
/// is said with its words and code, and a body sent in chunks, without `Content-Length` (as Go's
/// net/http sends a large list), is read whole.
#[test]
fn a_proxys_plain_error_and_a_chunked_list_are_read_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = canned_server(
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 23\r\n\
         Connection: close\r\n\r\nupstream connect error\n",
    );
    let line = error_line(kubectl_media(
        &["caps"],
        &http_kubeconfig(dir.path(), proxy),
    ));
    assert_eq!(
        line,
        format!(
            "error: the Kubernetes API at http://{proxy} refused to list \
             resourceslices.resource.k8s.io: upstream connect error (502 BadGateway)"
        )
    );

    let list = r#"{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","metadata":{"resourceVersion":"7"},"items":[{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"n1-media"},"spec":{"driver":"media.liken.sh","nodeName":"n1","pool":{"name":"n1","generation":1,"resourceSliceCount":1},"devices":[{"name":"gpu-0","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:03:00.0"},"vaDriver":{"string":"Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()"}}}]}}]}"#;
    let (head, tail) = list.split_at(list.len() / 2);
    let chunked: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
             Connection: close\r\n\r\n{:x}\r\n{head}\r\n{:x}\r\n{tail}\r\n0\r\n\r\n",
            head.len(),
            tail.len()
        )
        .into_boxed_str(),
    );
    let server = canned_server(chunked);
    let out = kubectl_media(
        &["caps", "-o", "json"],
        &http_kubeconfig(dir.path(), server),
    );
    let records: Value = serde_json::from_str(&stdout(out)).unwrap();
    assert_eq!(records.as_array().unwrap().len(), 1, "{records}");
    assert_eq!(records[0]["node"], "n1");
    assert_eq!(
        records[0]["attributes"]["resource.kubernetes.io/pciBusID"],
        "0000:03:00.0"
    );
    assert_eq!(records[0]["device"], "gpu-0");
}

/// kubectl's TLS handshake timeout (client-go: 10 s from the open TCP connection) bounds a server
/// that accepts and stays silent. The clock is tokio's paused one, which jumps to the next timer
/// whenever nothing else can happen, so the test checks the real default in milliseconds.
#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_tls_fails_after_kubectls_handshake_timeout() {
    use media_operator::fleet::cluster::TLS_HANDSHAKE_TIMEOUT;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = https_kubeconfig(dir.path(), silent_listener());
    let cluster = Cluster::connect(&Connection {
        source: Source {
            kubeconfig: Some(kubeconfig),
            context: None,
        },
        ..Default::default()
    })
    .await
    .unwrap();
    let started = tokio::time::Instant::now();
    let wall = std::time::Instant::now();
    let err = cluster
        .list(
            &ListRequest {
                kind: Kind::ResourceSlice,
                namespaces: &Namespaces::All,
                label_selector: None,
                field_selector: None,
            },
            &mut Objects::default(),
        )
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= TLS_HANDSHAKE_TIMEOUT && waited < TLS_HANDSHAKE_TIMEOUT + Duration::from_secs(1),
        "{waited:?}"
    );
    assert!(
        wall.elapsed() < Duration::from_secs(5),
        "{:?}",
        wall.elapsed()
    );
    let text = err.to_string();
    assert!(
        text.starts_with("cannot reach the Kubernetes API at https://127.0.0.1:"),
        "{text}"
    );
    assert!(
        text.contains(": TLS handshake timeout: the server accepted the connection but did not complete a TLS handshake within 10s (hint: "),
        "{text}"
    );
}

/// `--request-timeout` bounds the whole request, connection and handshake included, as Go's
/// `http.Client.Timeout` does for kubectl: the real binary gives up on the silent server at once.
#[test]
fn request_timeout_bounds_the_handshake_too() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = https_kubeconfig(dir.path(), silent_listener());
    let started = std::time::Instant::now();
    let line = error_line(kubectl_media(
        &["caps", "--request-timeout", "300ms"],
        &kubeconfig,
    ));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        line.starts_with("error: the Kubernetes API at https://127.0.0.1:")
            && line.contains("did not answer within 300ms (hint: raise --request-timeout"),
        "{line}"
    );
}

/// `KUBECONFIG` lists are merged as client-go merges them (src/kubeconfig.rs has a test of each
/// rule on the files alone); here the real binary reaches the real server through a merge (the
/// proxy's admin kubeconfig, whose cluster is `controlplane`; the proxy only forwards).
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn kubeconfig_lists_merge_as_kubectl_merges_them() {
    let (_proxy, server) = proxied(fleet_cluster());
    let dir = tempfile::tempdir().unwrap();
    // The first file sets current-context and a context over the server's cluster, which only
    // the server's file (third) defines; the second does not exist and is skipped.
    let first = dir.path().join("first");
    std::fs::write(
        &first,
        "apiVersion: v1\nkind: Config\ncurrent-context: via-first\ncontexts:\n\
         - name: via-first\n  context: {cluster: controlplane, user: admin}\n",
    )
    .unwrap();
    let missing = dir.path().join("missing");
    let list = std::env::join_paths([&first, &missing, &server]).unwrap();
    let home = tempfile::tempdir().unwrap();
    let run = |kubeconfig: &std::ffi::OsStr| {
        Command::new(env!("CARGO_BIN_EXE_kubectl-media"))
            .args(["caps", "-o", "json"])
            .env_clear()
            .env("HOME", home.path())
            .env("NO_COLOR", "1")
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap()
    };
    let gpus: Value = serde_json::from_str(&stdout(run(&list))).unwrap();
    assert_eq!(gpus.as_array().unwrap().len(), 9, "{gpus}");

    // The first file to define a cluster name wins it whole: a dead server for `controlplane`
    // in front hides the live one behind it.
    let dead = dir.path().join("dead");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: controlplane\n  cluster: {server: 'http://127.0.0.1:9'}\n",
    )
    .unwrap();
    let list = std::env::join_paths([&dead, &server]).unwrap();
    let line = error_line(run(&list));
    assert!(
        line.starts_with("error: cannot reach the Kubernetes API at http://127.0.0.1:9: "),
        "{line}"
    );
}

#[test]
fn a_missing_or_malformed_kubeconfig_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let list = std::env::join_paths([&a, &b]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-media"))
        .arg("caps")
        .env_clear()
        .env("HOME", dir.path())
        .env("KUBECONFIG", &list)
        .output()
        .unwrap();
    assert_eq!(
        error_line(out),
        format!(
            "error: no kubeconfig: none of the files KUBECONFIG lists exists ({}, {}), and this is not a pod \
             in a cluster (hint: pass --kubeconfig or set KUBECONFIG, or read objects from a file with -f)",
            a.display(),
            b.display()
        )
    );

    let line = error_line(kubectl_media(
        &["caps", "--kubeconfig", a.to_str().unwrap()],
        &b,
    ));
    assert_eq!(
        line,
        format!(
            "error: load kubeconfig {}: no such file (hint: check the path given to --kubeconfig, or \
             leave --kubeconfig out for KUBECONFIG and ~/.kube/config)",
            a.display()
        )
    );
    // A directory, named once, and a hint that does not ask for the flag that was given.
    let line = error_line(kubectl_media(
        &["caps", "--kubeconfig", dir.path().to_str().unwrap()],
        &b,
    ));
    assert_eq!(
        line,
        format!(
            "error: load kubeconfig {}: it is a directory, not a kubeconfig file (hint: \
             --kubeconfig takes the kubeconfig file itself, such as ~/.kube/config)",
            dir.path().display()
        )
    );

    for text in [
        "clusters:\n- name: [unclosed\n",
        "apiVersion: v1\nclusters: 3\n",
        "\u{0}\u{1}binary",
    ] {
        std::fs::write(&a, text).unwrap();
        let line = error_line(kubectl_media(&["caps"], &a));
        assert!(
            line.starts_with(&format!("error: load kubeconfig {}: ", a.display()))
                && line.ends_with(
                    "(hint: fix that file or take it out of KUBECONFIG, or read objects from a file with -f)"
                ),
            "{text:?}: {line}"
        );
    }
}

/// A context that is not in the kubeconfig is said to be missing (not "failed to load current
/// context"), with the contexts there are, and the one that was meant when one is close.
#[test]
fn a_context_not_in_the_kubeconfig_lists_those_that_are() {
    let dir = tempfile::tempdir().unwrap();
    let contexts: String = ["prod", "dev", "kind-kind"]
        .iter()
        .map(|c| format!("- name: {c}\n  context: {{cluster: c, user: u}}\n"))
        .collect();
    let path = dir.path().join("config");
    let write = |current: &str| {
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:9'}}\n\
                 contexts:\n{contexts}current-context: {current}\nusers:\n- name: u\n  user: {{}}\n"
            ),
        )
        .unwrap();
    };
    write("dev");
    let shown = path.display();
    assert_eq!(
        error_line(kubectl_media(&["caps", "--context", "nosuch"], &path)),
        format!(
            "error: load kubeconfig: the context \"nosuch\" is not in {shown}, which has 3 contexts: \
             dev, kind-kind, prod (hint: give --context one of them ('kubectl config get-contexts' \
             lists them all))"
        )
    );
    assert_eq!(
        error_line(kubectl_media(&["why", "p", "--context", "prd"], &path)),
        format!(
            "error: load kubeconfig: the context \"prd\" is not in {shown}, which has 3 contexts: \
             dev, kind-kind, prod (hint: a similar context exists: 'prod')"
        )
    );
    // The kubeconfig's own current-context, gone from its contexts.
    write("old");
    assert_eq!(
        error_line(kubectl_media(&["caps"], &path)),
        format!(
            "error: load kubeconfig: current-context \"old\" names no context of {shown}, which \
             has 3 contexts: dev, kind-kind, prod (hint: choose one with --context, or set one \
             with 'kubectl config use-context NAME')"
        )
    );
    // --context names one that is there: the current one does not matter.
    let line = error_line(kubectl_media(&["caps", "--context", "dev"], &path));
    assert!(
        line.starts_with("error: cannot reach the Kubernetes API at http://127.0.0.1:9"),
        "{line}"
    );
}
