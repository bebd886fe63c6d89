//! The Helm chart (deploy/Chart.yaml, values.yaml, values.schema.json, templates/), driven by
//! the real helm built from its module (support/helm.rs): `helm lint`; each render driver's
//! render against `kubectl kustomize` of its variant, object by object (the chart renders
//! kustomize's own files, so they are one definition); each value where a user looks for it; the
//! schema's refusals; the Kubernetes version check; and `helm install`, `upgrade` and `uninstall`
//! on the real control plane, beside an agent's slice that belongs to its Node, not to the
//! release.

use crate::support::agent::{AgentProcess, FAST, write_fleet};
use crate::support::controlplane::ControlPlane;
use crate::support::helm::{chart_dir, helm};
use crate::support::kube::{Kube, path};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Output;
use std::time::{Duration, Instant};

/// The namespace deploy/ names, liken's.
const NAMESPACE: &str = "liken-system";

/// The release name the docs use.
const RELEASE: &str = "media-capabilities";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("valid YAML"))
        .filter(|d: &Value| !d.is_null())
        .collect()
}

/// Objects by (kind, namespace, name).
fn by_key(objects: Vec<Value>) -> BTreeMap<(String, String, String), Value> {
    let mut keyed = BTreeMap::new();
    for object in objects {
        let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
        let key = (
            text(&object["kind"]),
            text(&object["metadata"]["namespace"]),
            text(&object["metadata"]["name"]),
        );
        assert!(keyed.insert(key.clone(), object).is_none(), "{key:?} twice");
    }
    keyed
}

/// `helm template` of the chart in liken-system with `args`: its objects, or its failure.
fn render(args: &[&str]) -> Result<Vec<Value>, String> {
    let chart = chart_dir();
    let mut all = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        NAMESPACE,
    ];
    all.extend(args);
    let out = helm(&all, None);
    if out.status.success() {
        Ok(documents(&String::from_utf8(out.stdout).unwrap()))
    } else {
        Err(stderr(&out))
    }
}

fn kind<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn agent_container(objects: &[Value]) -> &Value {
    let ds = kind(objects, "DaemonSet");
    ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "agent")
        .expect("the agent container")
}

#[test]
fn the_charts_versions_are_cargos() {
    let chart: Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("read deploy/Chart.yaml"),
    )
    .unwrap();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

/// The chart's render drivers: liken (deploy/ itself) and each variant of deploy/render-drivers/
/// (a directory whose kustomization is a Kustomization, not a Component).
fn render_drivers() -> Vec<(String, std::path::PathBuf)> {
    let mut drivers = vec![("liken".to_owned(), chart_dir())];
    let mut variants: Vec<_> = std::fs::read_dir(chart_dir().join("render-drivers"))
        .expect("read deploy/render-drivers")
        .map(|e| e.unwrap().path())
        .filter(|dir| {
            std::fs::read_to_string(dir.join("kustomization.yaml"))
                .is_ok_and(|k| k.lines().any(|l| l == "kind: Kustomization"))
        })
        .map(|dir| (dir.file_name().unwrap().to_string_lossy().into_owned(), dir))
        .collect();
    variants.sort();
    drivers.extend(variants);
    drivers
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer"
)]
fn helm_lints_the_chart_and_renders_each_variant_as_kubectl_kustomize_does() {
    let chart = chart_dir();
    let lint = ok(helm(
        &["lint", "--strict", chart.to_str().unwrap(), "-n", NAMESPACE],
        None,
    ));
    assert!(
        lint.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{lint}"
    );
    let drivers = render_drivers();
    assert!(drivers.len() >= 4, "{drivers:?}");
    for (driver, dir) in drivers {
        let set = format!("renderDriver={driver}");
        let helm_objects = by_key(render(&["--set", &set]).unwrap_or_else(|e| panic!("{e}")));
        let out = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(&dir)
            .env("HOME", std::env::temp_dir())
            .output()
            .expect("run kubectl kustomize");
        let mut kustomized = by_key(documents(&ok(out)));
        // The one object the chart leaves out: a variant's Namespace, where Helm keeps its
        // release record, so it must exist before the install (templates/install.yaml).
        kustomized.retain(|(kind, ..), _| kind != "Namespace");
        assert_eq!(
            helm_objects.keys().collect::<Vec<_>>(),
            kustomized.keys().collect::<Vec<_>>(),
            "{driver}: the same objects"
        );
        for (key, object) in &kustomized {
            assert_eq!(
                &helm_objects[key], object,
                "{driver} {key:?}: helm, then kustomize"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer (helm is built from its module)"
)]
fn a_render_driver_the_chart_does_not_have_is_refused_with_the_ones_it_has() {
    let error = render(&["--set", "renderDriver=matrox"]).expect_err("no such variant");
    let known: Vec<String> = render_drivers().into_iter().map(|(d, _)| d).collect();
    assert!(
        error.contains(&format!(
            "renderDriver \"matrox\" is not a render driver of the chart (valid: {})",
            known.join(", ")
        )),
        "{error}"
    );
    // The namespace component is no variant.
    assert!(render(&["--set", "renderDriver=namespace"]).is_err());
    let intel = render(&["--set", "renderDriver=intel"]).unwrap();
    let args = &agent_container(&intel)["args"];
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!("--render-driver=gpu.intel.com")),
        "{args}"
    );
}

/// A values file setting every value of values.yaml to something other than the manifests'.
fn every_value() -> Value {
    json!({
        "image": {"repository": "registry.example.com/mirror/media-capabilities", "tag": "0.1.0-custom", "pullPolicy": "Always"},
        "nodeSelector": {"feature.node.kubernetes.io/pci-0300_8086.present": "true"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
        "priorityClassName": "media-agents",
        "logLevel": "debug",
        "probe": {"timeout": "30s", "parallel": 2, "rescanInterval": "1m",
                  "vaDrivers": {"8086": "i965", "0000:03:00.0": "radeonsi"}},
        "admissionPolicy": {"enabled": false},
        "adminAccessPolicy": {"enabled": true},
    })
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer (helm is built from its module)"
)]
fn each_value_lands_where_a_user_expects_it_and_nothing_else_moves() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.json");
    std::fs::write(&values, every_value().to_string()).unwrap();
    let defaults = render(&[]).unwrap_or_else(|e| panic!("{e}"));
    let set = render(&["-f", values.to_str().unwrap()]).unwrap_or_else(|e| panic!("{e}"));

    let container = agent_container(&set);
    assert_eq!(
        container["image"],
        "registry.example.com/mirror/media-capabilities:0.1.0-custom"
    );
    assert_eq!(container["imagePullPolicy"], "Always");
    let pod = &kind(&set, "DaemonSet")["spec"]["template"]["spec"];
    let wanted = every_value();
    for key in [
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
    ] {
        assert_eq!(pod[key], wanted[key], "{key}");
    }
    // Requests and limits replaced; the render claim, which is wiring, kept.
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "1Gi"},
               "claims": [{"name": "render"}]})
    );
    let rust_log: Vec<&Value> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "RUST_LOG")
        .collect();
    assert_eq!(rust_log, [&json!({"name": "RUST_LOG", "value": "debug"})]);
    // The probe settings are the agent's flags, and the agent accepts them.
    let config = crate::deploy::daemonset_config(container);
    assert_eq!(config.rescan_interval, Duration::from_secs(60));
    let media_operator::agent::probing::ProbeSource::Live { isolation, .. } = config.source else {
        panic!("the DaemonSet probes live")
    };
    assert_eq!(isolation.timeout, Duration::from_secs(30));
    assert_eq!(isolation.parallel, 2);
    assert_eq!(isolation.overrides.len(), 2);
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args.iter()
            .filter(|a| a.starts_with("--va-driver="))
            .copied()
            .collect::<Vec<_>>(),
        ["--va-driver=0000:03:00.0=radeonsi", "--va-driver=8086=i965"]
    );
    assert_eq!(
        args.iter()
            .filter(|a| a.starts_with("--rescan-interval"))
            .count(),
        1,
        "{args:?}"
    );

    // Without the node-bound policy, the install is the rest, unchanged but for the DaemonSet.
    let mut left = by_key(defaults);
    left.retain(|(_, _, name), _| name != "media-capabilities-node-bound");
    let set = by_key(set);
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        set.keys().collect::<Vec<_>>()
    );
    for (key, object) in &left {
        if key.0 != "DaemonSet" {
            assert_eq!(&set[key], object, "{key:?}");
        }
    }
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer (helm is built from its module)"
)]
fn the_admin_access_policies_go_with_their_value_and_nothing_else_does() {
    let defaults = by_key(render(&[]).unwrap());
    let without = by_key(render(&["--set", "adminAccessPolicy.enabled=false"]).unwrap());
    let gone: Vec<_> = defaults
        .keys()
        .filter(|k| !without.contains_key(*k))
        .collect();
    assert_eq!(gone.len(), 4, "{gone:?}");
    assert!(
        gone.iter().all(
            |(kind, _, name)| kind.starts_with("ValidatingAdmissionPolicy")
                && name.starts_with("media-capabilities-admin-access-")
        ),
        "{gone:?}"
    );
    for (key, object) in &without {
        assert_eq!(&defaults[key], object, "{key:?}");
    }
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer (helm is built from its module)"
)]
fn the_schema_refuses_a_wrong_value_naming_it_and_what_it_takes() {
    let cases: &[(&[&str], &str)] = &[
        (&["--set", "logLevel=loud"], "/logLevel"),
        (&["--set", "loglevel=debug"], "loglevel"),
        (&["--set", "probe.parallel=0"], "/probe/parallel"),
        (&["--set", "probe.timeout=soon"], "/probe/timeout"),
        (
            &["--set", "image.pullPolicy=Sometimes"],
            "/image/pullPolicy",
        ),
        (
            &["--set", "image.repository=Not A Repo"],
            "/image/repository",
        ),
        (&["--set", "tolerations=NoSchedule"], "/tolerations"),
        (&["--set", "probe.vaDrivers.intel=iHD"], "/probe/vaDrivers"),
        (
            &["--set", "admissionPolicy.enabled=maybe"],
            "/admissionPolicy/enabled",
        ),
        (
            &["--set", "resources.limits.memory=lots"],
            "/resources/limits/memory",
        ),
        (&["--set", "renderDriver=../base"], "/renderDriver"),
    ];
    for (args, path) in cases {
        let error = render(args).expect_err(&format!("{args:?} is refused"));
        assert!(
            error.contains("values don't meet the specifications of the schema"),
            "{args:?}: {error}"
        );
        assert!(error.contains(path), "{args:?} names {path}: {error}");
    }
    // What the message says for an enum: the values it takes.
    let error = render(&["--set", "logLevel=loud"]).unwrap_err();
    for level in ["error", "warn", "info", "debug"] {
        assert!(error.contains(level), "{error}");
    }
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer (helm is built from its module)"
)]
fn a_render_for_kubernetes_before_1_34_says_it_needs_resource_k8s_io_v1() {
    let error = render(&["--kube-version", "1.33.5"]).expect_err("1.33 is refused");
    assert!(
        error.contains(
            "media-capabilities needs Kubernetes 1.34 or newer, which serves resource.k8s.io/v1 \
             (ResourceSlices, DeviceClasses, ResourceClaimTemplates); this is v1.33.5"
        ),
        "{error}"
    );
    render(&["--kube-version", "1.34.0"]).unwrap_or_else(|e| panic!("{e}"));
    // Another namespace than liken's.
    let chart = chart_dir();
    let out = helm(
        &[
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            "default",
        ],
        None,
    );
    let error = stderr(&out);
    assert!(!out.status.success());
    assert!(
        error.contains(
            "the chart installs into liken-system, the namespace deploy/ names (liken's), not \
             default (hint: helm install -n liken-system)"
        ),
        "{error}"
    );
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer (helm and the control plane are built from their modules)"
)]
fn an_install_on_a_cluster_that_does_not_serve_resource_k8s_io_v1_says_so_and_creates_nothing() {
    // A 1.34 cluster whose operator turned DRA off (the gate is GA there, locked only from
    // 1.35) with its API version: the version passes the first check, discovery fails the
    // second. (With the gate on and the API off, 1.34's scheduler waits for DRA's informers
    // and never gets ready.)
    let cp = crate::support::controlplane::shared_with(
        "helm-no-resource-v1",
        &[
            "--feature-gates",
            "DynamicResourceAllocation=false",
            "--runtime-config",
            "resource.k8s.io/v1=false",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let kube = Kube::new(cp.kubeconfig());
    let chart = chart_dir();
    let out = helm(
        &[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            NAMESPACE,
            "--create-namespace",
        ],
        Some(cp.kubeconfig()),
    );
    let error = stderr(&out);
    assert!(!out.status.success(), "{error}");
    assert!(
        error.contains("media-capabilities needs resource.k8s.io/v1, which this cluster (v1.34.")
            && error.contains(
                ") does not serve (hint: Kubernetes 1.34 and newer serve it unless the API \
                 server's --runtime-config turns it off)"
            ),
        "{error}"
    );
    let keys: Vec<_> = by_key(render(&[]).unwrap()).into_keys().collect();
    assert!(on_server(&kube, &keys).is_empty());
    assert_eq!(release_secrets(&kube), 0);
}

/// The chart's objects on the server: kind/name to (uid, version) of each that exists.
fn on_server(kube: &Kube, keys: &[(String, String, String)]) -> BTreeMap<String, (String, String)> {
    let mut found = BTreeMap::new();
    for (kind, namespace, name) in keys {
        let api = match kind.as_str() {
            "ServiceAccount" => format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}"),
            "ClusterRole" | "ClusterRoleBinding" => format!(
                "/apis/rbac.authorization.k8s.io/v1/{}s/{name}",
                kind.to_lowercase()
            ),
            "ValidatingAdmissionPolicy" => {
                format!("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}")
            }
            "ValidatingAdmissionPolicyBinding" => format!(
                "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{name}"
            ),
            "DeviceClass" => format!("/apis/resource.k8s.io/v1/deviceclasses/{name}"),
            "ResourceClaimTemplate" => format!(
                "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/{name}"
            ),
            "DaemonSet" => format!("/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"),
            other => panic!("no API path for {other}"),
        };
        if let Some(object) = kube.get(&api) {
            // What a write of the object's content changes: the generation where the kind has
            // one (controllers writing status, as the policy's type checker does, leave it), else
            // the resourceVersion.
            let meta = &object["metadata"];
            let version = match &meta["generation"] {
                Value::Number(n) => format!("generation {n}"),
                _ => format!(
                    "resourceVersion {}",
                    meta["resourceVersion"].as_str().unwrap()
                ),
            };
            found.insert(
                format!("{kind}/{name}"),
                (meta["uid"].as_str().unwrap().to_owned(), version),
            );
        }
    }
    found
}

fn release_secrets(kube: &Kube) -> usize {
    kube.get(&format!(
        "/api/v1/namespaces/{NAMESPACE}/secrets?labelSelector=owner%3Dhelm"
    ))
    .map(|list| list["items"].as_array().map_or(0, Vec::len))
    .unwrap_or(0)
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer (helm and the control plane are built from their modules)"
)]
fn helm_installs_upgrades_and_uninstalls_leaving_the_agents_slices_to_their_nodes() {
    let cp = ControlPlane::start();
    let kube = Kube::new(cp.kubeconfig());
    ok(cp.kubectl(&["create", "namespace", NAMESPACE]));
    // As liken leaves it for the agent's admin-access claim (docs/operations.md, "Install").
    ok(cp.kubectl(&[
        "label",
        "namespace",
        NAMESPACE,
        "resource.kubernetes.io/admin-access=true",
    ]));
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    let keys: Vec<_> = by_key(render(&[]).unwrap()).into_keys().collect();
    let release = |verb: &str, args: &[&str]| {
        let mut all = vec![verb, RELEASE, chart, "-n", NAMESPACE];
        all.extend(args);
        helm(&all, Some(cp.kubeconfig()))
    };

    // A value the schema refuses: nothing is created, not even the release's record.
    let out = release("install", &["--set", "logLevel=loud"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("/logLevel"), "{}", stderr(&out));
    assert!(on_server(&kube, &keys).is_empty());
    assert_eq!(release_secrets(&kube), 0);

    // Install: every object of the render.
    ok(release("install", &[]));
    let installed = on_server(&kube, &keys);
    assert_eq!(installed.len(), keys.len(), "{installed:#?}");

    // An agent publishes its node's slice, owned by the Node; it ends and leaves the slice.
    let node = "helm-node";
    cp.node(node, &[]);
    let reports = tempfile::tempdir().unwrap();
    write_fleet(reports.path(), 1);
    let slice_path = path(
        "resourceslices",
        Some(&format!("{node}-{}", media_operator::catalogue::DRIVER)),
    );
    {
        let mut agent = AgentProcess::start(
            env!("CARGO_BIN_EXE_media-capabilities"),
            node,
            reports.path(),
            cp.kubeconfig(),
            FAST,
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while kube.get(&slice_path).is_none() {
            assert!(Instant::now() < deadline, "{:#?}", agent.log.lines());
            std::thread::sleep(Duration::from_millis(50));
        }
        agent.terminate();
        agent
            .wait_exit(Duration::from_secs(10))
            .expect("the agent ends");
    }
    let slice = kube
        .get(&slice_path)
        .expect("the slice stays after SIGTERM");
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Node");

    // Upgrade with one value changed: the DaemonSet changes in place, nothing else is touched.
    ok(release("upgrade", &["--set", "logLevel=debug"]));
    let upgraded = on_server(&kube, &keys);
    for (object, (uid, version)) in &installed {
        let (new_uid, new_version) = &upgraded[object];
        assert_eq!(uid, new_uid, "{object} is the same object");
        if object.starts_with("DaemonSet/") {
            assert_ne!(version, new_version, "{object} changed");
        } else {
            assert_eq!(version, new_version, "{object} untouched");
        }
    }
    let ds = kube
        .get(&format!(
            "/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/media-capabilities"
        ))
        .unwrap();
    let env = &ds["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!({"name": "RUST_LOG", "value": "debug"})),
        "{env}"
    );

    // Uninstall: every object of the release goes; the namespace (liken's) and the agent's
    // slice (its Node's) stay, and the slice goes with its Node.
    ok(helm(
        &["uninstall", RELEASE, "-n", NAMESPACE, "--wait"],
        Some(cp.kubeconfig()),
    ));
    assert_eq!(on_server(&kube, &keys), BTreeMap::new());
    assert_eq!(release_secrets(&kube), 0);
    assert!(
        kube.get(&format!("/api/v1/namespaces/{NAMESPACE}"))
            .is_some()
    );
    assert!(kube.get(&slice_path).is_some(), "the slice is its Node's");
    assert!(kube.delete(&path("nodes", Some(node))));
    let deadline = Instant::now() + Duration::from_secs(30);
    while kube.get(&slice_path).is_some() {
        assert!(
            Instant::now() < deadline,
            "the garbage collector removes the slice of a deleted Node"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
