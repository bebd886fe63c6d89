//! How the stored slice compares with the wanted one: what is content (spec and controller),
//! which fields the server stored otherwise than sent, which may be left aside, and which
//! immutable fields make a slice not ours. Pure functions of two objects.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::text::one_line;

/// One step of a path into a slice's JSON: an object key, or every element of a list.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    Key(String),
    Each,
}

/// A field of the slice, with list positions generalised (`spec.devices[*].attributes[x]`), so
/// that what is learned from one device applies to every device, now and after a change.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FieldPath(pub Vec<Step>);

impl FieldPath {
    fn key(&self, i: usize) -> Option<&str> {
        match self.0.get(i) {
            Some(Step::Key(k)) => Some(k),
            _ => None,
        }
    }

    /// `allowMultipleAllocations` on the devices: the DRAConsumableCapacity gate's field.
    pub(crate) fn is_gate_field(&self) -> bool {
        self.0.len() == 4 && self.device_field() == Some("allowMultipleAllocations")
    }

    /// `taints` on the devices: the DRADeviceTaints gate's field.
    pub(crate) fn is_taints_field(&self) -> bool {
        self.0.len() == 4 && self.device_field() == Some("taints")
    }

    /// The field of a device this path is in (`attributes`, `allowMultipleAllocations`, ...).
    fn device_field(&self) -> Option<&str> {
        (self.key(0) == Some("spec")
            && self.key(1) == Some("devices")
            && self.0.get(2) == Some(&Step::Each))
        .then(|| self.key(3))
        .flatten()
    }

    /// Whether the agent can leave this field aside and still publish what matters: anything
    /// inside a device except its name. A device itself, the pool, the node, the driver and the
    /// owner are what the slice is; a server that changes those is fought (with backoff).
    pub(crate) fn can_be_left_aside(&self) -> bool {
        self.device_field().is_some_and(|field| field != "name")
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for step in &self.0 {
            match step {
                Step::Each => f.write_str("[*]")?,
                Step::Key(k) if k.contains(['.', '/']) || k.is_empty() => write!(f, "[{k}]")?,
                Step::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
            }
            first = false;
        }
        Ok(())
    }
}

/// How the server treated one field of what was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Treatment {
    Dropped,
    Added,
    Changed,
}

/// One field the server stored otherwise than it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub path: FieldPath,
    pub treatment: Treatment,
    /// What the server stored (for an added or changed field), compact JSON.
    pub stored: Option<String>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.treatment, &self.stored) {
            (Treatment::Dropped, _) => write!(f, "{} dropped", self.path),
            (Treatment::Added, Some(v)) => write!(f, "{} added ({})", self.path, one_line(v, 80)),
            (Treatment::Changed, Some(v)) => {
                write!(f, "{} changed (stored {})", self.path, one_line(v, 80))
            }
            (_, None) => write!(f, "{} changed", self.path),
        }
    }
}

/// What of a slice is content: its spec without the pool generation, and who its controller is
/// (the ownerReference with `controller: true`, by apiVersion, kind, name and uid: what garbage
/// collection acts on); empty lists, maps and nulls removed (a real API server omits what is
/// empty). Other owners' references, and how ours is flagged otherwise (`blockOwnerDeletion`, as
/// a policy may set it), are someone else's business, as labels and finalizers are.
fn content(slice: &ResourceSlice) -> Value {
    let mut spec = serde_json::to_value(&slice.spec).unwrap_or(Value::Null);
    if let Some(pool) = spec.get_mut("pool").and_then(Value::as_object_mut) {
        pool.remove("generation");
    }
    // The API server sets a taint's `timeAdded` when it is absent (k8s.io/kubernetes
    // pkg/apis/resource/v1 `SetDefaults_DeviceTaint`): its, not ours.
    let devices = spec.get_mut("devices").and_then(Value::as_array_mut);
    for device in devices.into_iter().flatten() {
        let taints = device.get_mut("taints").and_then(Value::as_array_mut);
        for taint in taints.into_iter().flatten() {
            if let Some(taint) = taint.as_object_mut() {
                taint.remove("timeAdded");
            }
        }
    }
    let controller = controller_of(&slice.metadata).map(|owner| {
        serde_json::json!({
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
        })
    });
    let mut value = serde_json::json!({ "spec": spec, "controller": controller });
    prune(&mut value);
    value
}

/// The object's controller reference, if it has one (at most one may say `controller: true`).
fn controller_of(metadata: &ObjectMeta) -> Option<&OwnerReference> {
    metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
}

/// The metadata to update `stored` with: the stored object's own, as read-modify-write keeps it
/// (labels, annotations, finalizers, other owners' references, and the resourceVersion that
/// makes the write conditional), with `wanted`'s controller reference in place of a different
/// controller's, or added. A reference to the same controller stays as stored.
pub(crate) fn updated_metadata(stored: &ObjectMeta, wanted: &ObjectMeta) -> ObjectMeta {
    let mut metadata = stored.clone();
    let Some(ours) = controller_of(wanted) else {
        return metadata;
    };
    let same = |owner: &OwnerReference| {
        (&owner.api_version, &owner.kind, &owner.name, &owner.uid)
            == (&ours.api_version, &ours.kind, &ours.name, &ours.uid)
    };
    let owners = metadata.owner_references.get_or_insert_with(Vec::new);
    match owners.iter().position(|o| o.controller == Some(true)) {
        Some(i) if same(&owners[i]) => {}
        Some(i) => owners[i] = ours.clone(),
        None => owners.insert(0, ours.clone()),
    }
    metadata
}

/// Gives the taints of `wanted` the `timeAdded` the server stored for the same taint (key, value
/// and effect) on the same device, so that an update keeps when a GPU was first tainted rather
/// than the server stamping it anew.
pub(crate) fn keep_taint_times(stored: &ResourceSlice, wanted: &mut ResourceSlice) {
    let stored_devices = stored.spec.devices.as_deref().unwrap_or_default();
    for device in wanted.spec.devices.iter_mut().flatten() {
        let Some(before) = stored_devices.iter().find(|d| d.name == device.name) else {
            continue;
        };
        for taint in device.taints.iter_mut().flatten() {
            taint.time_added = before
                .taints
                .iter()
                .flatten()
                .find(|t| {
                    (&t.key, &t.value, &t.effect) == (&taint.key, &taint.value, &taint.effect)
                })
                .and_then(|t| t.time_added.clone());
        }
    }
}

/// Removes nulls, empty lists and empty maps, depth first.
fn prune(value: &mut Value) -> bool {
    match value {
        Value::Null => false,
        Value::Array(items) => {
            items.iter_mut().for_each(|v| {
                prune(v);
            });
            !items.is_empty()
        }
        Value::Object(map) => {
            map.retain(|_, v| prune(v));
            !map.is_empty()
        }
        _ => true,
    }
}

/// The fields the server stored otherwise than `sent`, in path order.
pub(crate) fn stored_changes(sent: &ResourceSlice, stored: &ResourceSlice) -> Vec<Change> {
    let mut changes = Vec::new();
    diff(
        &content(sent),
        &content(stored),
        &mut Vec::new(),
        &mut changes,
    );
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes.dedup_by(|a, b| a.path == b.path);
    changes
}

fn diff(sent: &Value, stored: &Value, at: &mut Vec<Step>, out: &mut Vec<Change>) {
    let compact = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                at.push(Step::Key(key.clone()));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(x, y, at, out),
                    (Some(_), None) => out.push(Change {
                        path: FieldPath(at.clone()),
                        treatment: Treatment::Dropped,
                        stored: None,
                    }),
                    (None, Some(y)) => out.push(Change {
                        path: FieldPath(at.clone()),
                        treatment: Treatment::Added,
                        stored: Some(compact(y)),
                    }),
                    (None, None) => {}
                }
                at.pop();
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            at.push(Step::Each);
            for (x, y) in a.iter().zip(b) {
                diff(x, y, at, out);
            }
            at.pop();
        }
        (a, b) if a != b => out.push(Change {
            path: FieldPath(at.clone()),
            treatment: Treatment::Changed,
            stored: Some(compact(b)),
        }),
        _ => {}
    }
}

/// Removes `path` from `value` wherever it matches.
fn strip(value: &mut Value, path: &[Step]) {
    match (path, value) {
        ([Step::Key(k)], Value::Object(map)) => {
            map.remove(k);
        }
        ([Step::Key(k), rest @ ..], Value::Object(map)) => {
            if let Some(v) = map.get_mut(k) {
                strip(v, rest);
            }
        }
        ([Step::Each, rest @ ..], Value::Array(items)) if !rest.is_empty() => {
            for item in items {
                strip(item, rest);
            }
        }
        _ => {}
    }
}

/// Whether the stored slice says what we want, ignoring the pool generation, metadata other
/// than the controller reference, and the fields in `left_aside` (learned from the server's answers).
pub(crate) fn same_content(
    stored: &ResourceSlice,
    wanted: &ResourceSlice,
    left_aside: &[FieldPath],
) -> bool {
    let (mut a, mut b) = (content(stored), content(wanted));
    for path in left_aside {
        strip(&mut a, &path.0);
        strip(&mut b, &path.0);
    }
    prune(&mut a);
    prune(&mut b);
    a == b
}

/// The immutable field in which the stored slice of our driver differs from ours, if any: such
/// a slice was not made by this agent and cannot be updated into its slice (kube-apiserver
/// refuses to change `spec.pool.name` and `spec.nodeName` on update, and `spec.driver`, which
/// the caller checks first: another driver's slice is never deleted).
pub(crate) fn not_ours(stored: &ResourceSlice, wanted: &ResourceSlice) -> Option<String> {
    let show = |v: Option<&str>| v.map_or_else(|| "unset".to_string(), |v| format!("{v:?}"));
    let fields = [
        (
            "spec.pool.name",
            Some(stored.spec.pool.name.as_str()),
            Some(wanted.spec.pool.name.as_str()),
        ),
        (
            "spec.nodeName",
            stored.spec.node_name.as_deref(),
            wanted.spec.node_name.as_deref(),
        ),
    ];
    fields
        .into_iter()
        .find(|(_, a, b)| a != b)
        .map(|(field, a, b)| format!("its {field} is {}, not {}", show(a), show(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::publisher::fixtures::{gpu, node};
    use crate::node::slice::{NodeRef, desired};
    use k8s_openapi::api::resource::v1::DeviceAttribute;

    #[test]
    fn generation_and_metadata_are_not_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = desired(&node(), &[gpu("pci-0000-00-02-0")], 7);
        stored.metadata.resource_version = Some("42".into());
        stored.metadata.labels = Some([("team".to_string(), "x".to_string())].into());
        assert!(same_content(&stored, &wanted, &[]));
    }

    #[test]
    fn devices_and_owner_are_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let other_gpu = desired(&node(), &[gpu("pci-0000-03-00-0")], 1);
        assert!(!same_content(&other_gpu, &wanted, &[]));
        let other_owner = desired(
            &NodeRef {
                name: "n1".into(),
                uid: "u2".into(),
            },
            &[gpu("pci-0000-00-02-0")],
            1,
        );
        assert!(!same_content(&other_owner, &wanted, &[]));
        let mut edited = wanted.clone();
        edited.spec.devices.as_mut().unwrap()[0]
            .attributes
            .as_mut()
            .unwrap()
            .insert("decodeVP9".into(), Default::default());
        assert!(!same_content(&edited, &wanted, &[]));
    }

    /// Another owner's reference, as a backup tool might add one.
    fn backup_owner() -> OwnerReference {
        OwnerReference {
            api_version: "backup.example.com/v1".into(),
            kind: "Snapshot".into(),
            name: "nightly".into(),
            uid: "s1".into(),
            controller: None,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_the_controller_is_owner_content() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = wanted.clone();
        let owners = stored.metadata.owner_references.as_mut().unwrap();
        // A policy flags our reference; a backup tool adds its own, and a finalizer.
        owners[0].block_owner_deletion = Some(true);
        owners.push(backup_owner());
        stored.metadata.finalizers = Some(vec!["backup.example.com/keep".into()]);
        assert!(same_content(&stored, &wanted, &[]));
        // No controller at all is a difference.
        stored.metadata.owner_references.as_mut().unwrap().remove(0);
        assert!(!same_content(&stored, &wanted, &[]));
    }

    #[test]
    fn an_update_keeps_the_stored_metadata_and_puts_our_controller_in() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let theirs = backup_owner();
        let mut stored = wanted.metadata.clone();
        stored.resource_version = Some("42".into());
        stored.finalizers = Some(vec!["backup.example.com/keep".into()]);
        stored.labels = Some([("team".to_string(), "x".to_string())].into());
        stored.owner_references.as_mut().unwrap()[0].block_owner_deletion = Some(true);
        stored
            .owner_references
            .as_mut()
            .unwrap()
            .push(theirs.clone());
        assert_eq!(
            updated_metadata(&stored, &wanted.metadata),
            stored,
            "all kept"
        );

        // A stale controller (a Node of the same name, re-registered) is replaced in place.
        let mut stale = stored.clone();
        stale.owner_references.as_mut().unwrap()[0].uid = "old".into();
        let updated = updated_metadata(&stale, &wanted.metadata);
        let owners = updated.owner_references.as_deref().unwrap();
        assert_eq!(owners.len(), 2);
        assert_eq!(
            (owners[0].uid.as_str(), owners[0].controller),
            ("u1", Some(true))
        );
        assert_eq!(owners[1], theirs);
        assert_eq!(updated.finalizers, stored.finalizers);
        assert_eq!(updated.resource_version.as_deref(), Some("42"));

        // None at all: ours is added first.
        let mut none = stored.clone();
        none.owner_references = Some(vec![theirs.clone()]);
        let owners = updated_metadata(&none, &wanted.metadata)
            .owner_references
            .unwrap();
        assert_eq!(owners.len(), 2);
        assert_eq!(owners[0].uid, "u1");
    }

    #[test]
    fn an_empty_list_and_no_list_are_the_same() {
        let wanted = desired(&node(), &[], 1);
        let mut stored = wanted.clone();
        stored.spec.devices = None;
        assert!(same_content(&stored, &wanted, &[]));
    }

    #[test]
    fn a_dropped_field_is_seen_and_then_left_aside() {
        let sent = desired(
            &node(),
            &[gpu("pci-0000-00-02-0"), gpu("pci-0000-03-00-0")],
            1,
        );
        let mut stored = sent.clone();
        for device in stored.spec.devices.as_mut().unwrap() {
            device.allow_multiple_allocations = None;
        }
        let changes = stored_changes(&sent, &stored);
        assert_eq!(changes.len(), 1, "one path for every device: {changes:?}");
        let change = &changes[0];
        assert_eq!(change.treatment, Treatment::Dropped);
        assert_eq!(
            change.path.to_string(),
            "spec.devices[*].allowMultipleAllocations"
        );
        assert!(change.path.is_gate_field() && change.path.can_be_left_aside());
        assert!(stored_changes(&sent, &sent).is_empty());
        assert!(!same_content(&stored, &sent, &[]));
        assert!(same_content(
            &stored,
            &sent,
            std::slice::from_ref(&change.path)
        ));
    }

    fn tainted(name: &str) -> crate::node::device::GpuDevice {
        use crate::node::failure::{Failure, FailureKind};
        crate::node::device::GpuDevice {
            failure: Some(Failure::new(FailureKind::QueryFailed, "failed")),
            ..gpu(name)
        }
        .tainted(&crate::node::taint::TaintPolicy::default())
    }

    fn time(rfc3339: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        serde_json::from_value(serde_json::json!(rfc3339)).unwrap()
    }

    #[test]
    fn dropped_taints_are_the_gate_s_and_the_time_the_server_adds_is_not_content() {
        let sent = desired(
            &node(),
            &[tainted("pci-0000-00-02-0"), gpu("pci-0000-03-00-0")],
            1,
        );
        // Gate off: the API server drops every device's taints.
        let mut dropped = sent.clone();
        for device in dropped.spec.devices.as_mut().unwrap() {
            device.taints = None;
        }
        let changes = stored_changes(&sent, &dropped);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].path.to_string(), "spec.devices[*].taints");
        assert!(changes[0].path.is_taints_field() && changes[0].path.can_be_left_aside());
        assert!(!changes[0].path.is_gate_field());
        // Gate on: it stamps timeAdded, which is no difference.
        let mut stamped = sent.clone();
        stamped.spec.devices.as_mut().unwrap()[0]
            .taints
            .as_mut()
            .unwrap()[0]
            .time_added = Some(time("2026-11-02T09:00:00Z"));
        assert!(stored_changes(&sent, &stamped).is_empty());
        assert!(same_content(&stamped, &sent, &[]));
        // An update keeps the stored time of the same taint, and only of the same taint.
        let mut wanted = sent.clone();
        keep_taint_times(&stamped, &mut wanted);
        assert_eq!(wanted, stamped);
        let mut other = desired(&node(), &[tainted("pci-0000-00-02-0")], 1);
        other.spec.devices.as_mut().unwrap()[0]
            .taints
            .as_mut()
            .unwrap()[0]
            .effect = "NoExecute".into();
        keep_taint_times(&stamped, &mut other);
        assert_eq!(
            other.spec.devices.as_ref().unwrap()[0]
                .taints
                .as_ref()
                .unwrap()[0]
                .time_added,
            None
        );
    }

    #[test]
    fn an_added_or_changed_field_is_named_with_what_was_stored() {
        let sent = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut stored = sent.clone();
        let attributes = stored.spec.devices.as_mut().unwrap()[0]
            .attributes
            .as_mut()
            .unwrap();
        attributes.insert(
            "example.com/zone".into(),
            DeviceAttribute {
                string: Some("a".into()),
                ..Default::default()
            },
        );
        attributes.insert(
            "decodeVP9".into(),
            DeviceAttribute {
                bool: Some(false),
                ..Default::default()
            },
        );
        let changes: Vec<String> = stored_changes(&sent, &stored)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            changes,
            [
                "spec.devices[*].attributes.decodeVP9.bool changed (stored false)",
                "spec.devices[*].attributes[example.com/zone] added ({\"string\":\"a\"})",
            ]
        );
        let paths: Vec<FieldPath> = stored_changes(&sent, &stored)
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert!(same_content(&stored, &sent, &paths));
    }

    #[test]
    fn what_makes_the_slice_is_never_left_aside() {
        let sent = desired(
            &node(),
            &[gpu("pci-0000-00-02-0"), gpu("pci-0000-03-00-0")],
            1,
        );
        let mut fewer = sent.clone();
        fewer.spec.devices.as_mut().unwrap().pop();
        let mut renamed = sent.clone();
        renamed.spec.devices.as_mut().unwrap()[0].name = "other".into();
        let mut orphan = sent.clone();
        orphan.metadata.owner_references = None;
        for stored in [fewer, renamed, orphan] {
            let changes = stored_changes(&sent, &stored);
            assert!(!changes.is_empty());
            assert!(
                changes.iter().all(|c| !c.path.can_be_left_aside()),
                "{changes:?}"
            );
        }
    }

    #[test]
    fn only_immutable_fields_make_a_slice_not_ours() {
        let wanted = desired(&node(), &[gpu("pci-0000-00-02-0")], 1);
        let mut other_pool = wanted.clone();
        other_pool.spec.pool.name = "x".into();
        assert_eq!(
            not_ours(&other_pool, &wanted).as_deref(),
            Some("its spec.pool.name is \"x\", not \"n1\"")
        );
        let mut selector = wanted.clone();
        selector.spec.node_name = None;
        selector.spec.all_nodes = Some(true);
        assert!(
            not_ours(&selector, &wanted)
                .unwrap()
                .contains("spec.nodeName is unset")
        );
        // Different content, owner or generation: ours, to be updated.
        let mut edited = desired(&node(), &[], 9);
        edited.metadata.owner_references = None;
        assert_eq!(not_ours(&edited, &wanted), None);
    }
}
