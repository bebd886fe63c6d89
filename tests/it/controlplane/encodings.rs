//! ResourceSlices read as protobuf (kubectl's `Accept`, what `caps` and `why` ask for) and as
//! JSON give the same fleet, field for field, from the real API server: every attribute type,
//! capacities, taints, per-device node selection and counters; and `caps` says the same of
//! them and of an allocated claim (read as protobuf too) either way, and from saved objects. The gates that keep those fields
//! (alpha in 1.34) are on, else the server would drop them before either encoding saw them.
//! `KUBECTL_MEDIA_LIST_ENCODING` (`json` or `protobuf`) makes the plugin ask for one only.

use std::process::{Command, Output};
use std::sync::OnceLock;

use media_operator::fleet::cluster::{Cluster, Connection, ListEncoding};
use media_operator::fleet::objects::{Objects, QualifiedName, ResourceSlice, Value};
use media_operator::kubeconfig::Source;
use ustr::Ustr;

use super::ok;
use super::product::KUBECTL_MEDIA;
use crate::support::controlplane::{self, ControlPlane};

const GATES: &str = "DRADeviceTaints=true,DRAPartitionableDevices=true,DRAConsumableCapacity=true";

/// One GPU in full (both drivers), and a slice whose devices each say where they are and
/// consume a shared counter.
const SLICES: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: enc-a-media}
spec:
  driver: media.liken.sh
  nodeName: enc-a
  pool: {name: enc-a, generation: 2, resourceSliceCount: 1}
  devices:
  - name: pci-0000-03-00-0
    allowMultipleAllocations: true
    attributes:
      resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
      vaDriver: {string: iHD}
      decodeHEVCMain10: {bool: true}
      scale10bit: {bool: false}
      decodeSessions: {int: 16}
      driverVersion: {version: 24.1.0}
      gpu.example.com/model: {string: "Arc A380"}
    capacity:
      sessions: {value: "16"}
      gpu.example.com/memory: {value: 6Gi}
    taints:
    - {key: liken.sh/draining, value: "true", effect: NoSchedule, timeAdded: "2026-01-02T03:04:05Z"}
    - {key: liken.sh/unhealthy, effect: NoExecute}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: enc-a-liken}
spec:
  driver: liken.sh
  nodeName: enc-a
  pool: {name: enc-a, generation: 1, resourceSliceCount: 1}
  devices:
  - name: render-d128
    attributes:
      resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: enc-shared-media}
spec:
  driver: media.liken.sh
  perDeviceNodeSelection: true
  pool: {name: enc-shared, generation: 1, resourceSliceCount: 1}
  sharedCounters:
  - name: engines
    counters:
      video: {value: "4"}
  devices:
  - name: by-name
    nodeName: enc-b
    attributes:
      resource.kubernetes.io/pciBusID: {string: "0000:04:00.0"}
      vaDriver: {string: radeonsi}
      decodeAV1Main: {bool: true}
    consumesCounters:
    - counterSet: engines
      counters:
        video: {value: "1"}
  - name: by-selector
    nodeSelector:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [enc-c, enc-d]}
        matchFields:
        - {key: metadata.name, operator: In, values: [enc-c]}
    attributes:
      resource.kubernetes.io/pciBusID: {string: "0000:05:00.0"}
      vaDriver: {string: radeonsi}
      decodeAV1Main: {bool: false}
  - name: anywhere
    allNodes: true
    attributes:
      resource.kubernetes.io/pciBusID: {string: "0000:06:00.0"}
      vaDriver: {string: radeonsi}
"#;

/// A claim on enc-a's GPU, allocated as the scheduler writes it (through the status
/// subresource). Reserved for a Job, not a pod: the ResourceClaim controller takes out a pod
/// that does not exist, and then the allocation.
const CLAIM: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: film, namespace: default}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu-render}}
    - {name: decodes, exactly: {deviceClassName: decode-10bit}}
"#;

const ALLOCATION: &str = r#"{"status": {
  "allocation": {"devices": {"results": [
    {"request": "gpu", "driver": "liken.sh", "pool": "enc-a", "device": "render-d128"},
    {"request": "decodes", "driver": "media.liken.sh", "pool": "enc-a", "device": "pci-0000-03-00-0"}
  ]}},
  "reservedFor": [{"apiGroup": "batch", "resource": "jobs", "name": "film", "uid": "00000000-0000-4000-8000-000000000001"}]
}}"#;

/// A control plane of this file's own: the gates are the API server's, for every client.
fn server() -> &'static ControlPlane {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    CP.get_or_init(|| {
        // DRADeviceTaints' scheduler waits for its DeviceTaintRules, served in v1alpha3.
        let cp = controlplane::shared_with(
            "encodings",
            &[
                "--feature-gates",
                GATES,
                "--runtime-config",
                "resource.k8s.io/v1alpha3=true",
            ],
        )?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let file = dir.path().join("slices.yaml");
        std::fs::write(&file, SLICES).map_err(|e| e.to_string())?;
        ok(cp.kubectl(&["create", "-f", file.to_str().unwrap()]));
        std::fs::write(&file, CLAIM).map_err(|e| e.to_string())?;
        ok(cp.kubectl(&["create", "-f", file.to_str().unwrap()]));
        ok(cp.kubectl(&[
            "patch",
            "resourceclaim",
            "film",
            "--subresource=status",
            "--type=merge",
            "-p",
            ALLOCATION,
        ]));
        Ok(cp)
    })
    .as_ref()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Every slice, sorted by name, as the library reads them in `encoding`.
fn read(cp: &ControlPlane, encoding: ListEncoding) -> Vec<ResourceSlice> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let connection = Connection {
            source: Source {
                kubeconfig: Some(cp.kubeconfig().to_path_buf()),
                ..Source::default()
            },
            ..Connection::default()
        };
        let mut cluster = Cluster::connect(&connection).await.unwrap();
        cluster.list_encoding(encoding);
        let mut objects = Objects::default();
        cluster
            .list(
                &media_operator::fleet::cluster::ListRequest {
                    kind: media_operator::fleet::objects::Kind::ResourceSlice,
                    namespaces: &media_operator::fleet::cluster::Namespaces::All,
                    label_selector: None,
                    field_selector: None,
                },
                &mut objects,
            )
            .await
            .unwrap();
        assert!(objects.notes.is_empty(), "{:?}", objects.notes);
        let mut slices = objects.slices;
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        slices
    })
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn slices_read_as_protobuf_are_the_slices_read_as_json() {
    let cp = server();
    let protobuf = read(cp, ListEncoding::Protobuf);
    let json = read(cp, ListEncoding::Json);
    assert_eq!(protobuf, json);
    assert_eq!(read(cp, ListEncoding::Negotiated), protobuf);

    // Not equal by being empty: the fields are there, as written.
    let names: Vec<&str> = protobuf.iter().map(|s| s.metadata.name.as_str()).collect();
    assert_eq!(names, ["enc-a-liken", "enc-a-media", "enc-shared-media"]);
    let gpu = &protobuf[1].spec.devices[0];
    let attribute = |name: &str| gpu.attributes.get_named(name).copied();
    assert_eq!(
        attribute("media.liken.sh/decodeHEVCMain10"),
        Some(Value::Bool(true))
    );
    assert_eq!(
        attribute("media.liken.sh/decodeSessions"),
        Some(Value::Int(16))
    );
    assert_eq!(
        attribute("media.liken.sh/driverVersion"),
        Some(Value::Version(Ustr::from("24.1.0")))
    );
    assert_eq!(
        attribute("gpu.example.com/model"),
        Some(Value::String(Ustr::from("Arc A380")))
    );
    assert_eq!(gpu.allow_multiple_allocations, Some(true));
    assert_eq!(
        gpu.capacity(QualifiedName::new("gpu.example.com", "memory"))
            .map(|q| q.as_str()),
        Some("6Gi")
    );
    assert_eq!(
        gpu.capacity(QualifiedName::new("media.liken.sh", "sessions"))
            .map(|q| q.as_str()),
        Some("16")
    );
    let taints = gpu.taints();
    assert_eq!(taints.len(), 2, "{taints:?}");
    assert_eq!(
        taints[0].time_added.as_deref(),
        Some("2026-01-02T03:04:05Z")
    );
    assert_eq!(taints[0].value.map(|v| v.as_str()), Some("true"));
    assert_eq!(taints[1].value, None);
    // The server stamps a taint's time when none is given.
    assert!(taints[1].time_added.is_some(), "{taints:?}");
    let shared = &protobuf[2].spec;
    assert!(shared.per_device_node_selection);
    let placed = format!("{:?}", shared.devices);
    for said in [
        "enc-b",
        "enc-c",
        "enc-d",
        "metadata.name",
        "all_nodes: Some(true)",
    ] {
        assert!(placed.contains(said), "{said} not in {placed}");
    }
}

#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn caps_prints_the_same_from_protobuf_json_and_saved_objects() {
    let cp = server();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("saved.yaml");
    std::fs::write(
        &file,
        ok(cp.kubectl(&["get", "resourceslices,resourceclaims", "-A", "-o", "yaml"])),
    )
    .unwrap();
    let caps = |args: &[&str], encoding: Option<&str>| -> Output {
        let mut command = Command::new(KUBECTL_MEDIA);
        command
            .arg("caps")
            .args(args)
            .env_clear()
            .env("HOME", dir.path())
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200")
            .env("KUBECONFIG", cp.kubeconfig());
        if let Some(encoding) = encoding {
            command.env("KUBECTL_MEDIA_LIST_ENCODING", encoding);
        }
        command.output().unwrap()
    };
    let outputs = [
        &[][..],
        &["-o", "wide"],
        &["-o", "json"],
        &["--summary"],
        &["--claims"],
    ];
    for output in outputs {
        let negotiated = ok(caps(output, None));
        assert!(negotiated.contains("enc-a"), "{negotiated}");
        if output == ["--claims"] {
            let row = "enc-a  -    0000:03:00.0  -    film   gpu,decodes  render,media";
            assert!(negotiated.contains(row), "{negotiated}");
        }
        assert_eq!(ok(caps(output, Some("protobuf"))), negotiated, "{output:?}");
        assert_eq!(ok(caps(output, Some("json"))), negotiated, "{output:?}");
        let saved = [output, &["-f", file.to_str().unwrap()]].concat();
        assert_eq!(ok(caps(&saved, None)), negotiated, "{output:?}");
    }
    let wrong = caps(&[], Some("xml"));
    assert_eq!(wrong.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&wrong.stderr),
        "error: KUBECTL_MEDIA_LIST_ENCODING is \"xml\" (hint: json or protobuf, or unset for \
         kubectl's order)\n"
    );
}
