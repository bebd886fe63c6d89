//! The resource types the test server serves, with what discovery, routing, field selectors and
//! the `Table` printer need to know about each.

use serde_json::{Value, json};

/// One served resource type.
#[derive(Debug)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// Version within the group.
    pub version: &'static str,
    /// Plural resource name used in paths.
    pub plural: &'static str,
    /// Singular name (discovery).
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names (discovery, for kubectl).
    pub short_names: &'static [&'static str],
    /// Field labels accepted by `fieldSelector`, beyond `metadata.name` (and `metadata.namespace`).
    pub field_labels: &'static [&'static str],
    /// Whether the object has a `spec` whose changes bump `metadata.generation`.
    pub has_generation: bool,
    /// Extra `Table` columns: (header, dotted JSON path).
    pub columns: &'static [(&'static str, &'static str)],
}

/// Every resource the server serves, in discovery order.
pub static RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceslices",
        singular: "resourceslice",
        kind: "ResourceSlice",
        namespaced: false,
        short_names: &[],
        field_labels: &["spec.nodeName", "spec.driver"],
        has_generation: true,
        columns: &[
            ("Node", "spec.nodeName"),
            ("Driver", "spec.driver"),
            ("Pool", "spec.pool.name"),
        ],
    },
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "deviceclasses",
        singular: "deviceclass",
        kind: "DeviceClass",
        namespaced: false,
        short_names: &[],
        field_labels: &[],
        has_generation: true,
        columns: &[],
    },
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceclaims",
        singular: "resourceclaim",
        kind: "ResourceClaim",
        namespaced: true,
        short_names: &[],
        field_labels: &[],
        has_generation: true,
        columns: &[],
    },
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "resourceclaimtemplates",
        singular: "resourceclaimtemplate",
        kind: "ResourceClaimTemplate",
        namespaced: true,
        short_names: &[],
        field_labels: &[],
        has_generation: true,
        columns: &[],
    },
    // As 1.37 serves it (resource.k8s.io/v1; 1.35 and 1.36 serve older versions): the
    // server's `/version` stays 1.36, so `why` lists none unless the version says 1.37.
    ResourceType {
        group: "resource.k8s.io",
        version: "v1",
        plural: "devicetaintrules",
        singular: "devicetaintrule",
        kind: "DeviceTaintRule",
        namespaced: false,
        short_names: &[],
        field_labels: &[],
        has_generation: true,
        columns: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        // k8s.io/kubernetes pkg/registry/core/pod/strategy.go ToSelectableFields, less
        // spec.hostNetwork (the real server reads an absent one as "false").
        field_labels: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        has_generation: true,
        columns: &[("Status", "status.phase"), ("Node", "spec.nodeName")],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        // pkg/registry/core/event/strategy.go ToSelectableFields, less `source` (which the
        // real server reads from source.component).
        field_labels: &[
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
        ],
        has_generation: false,
        columns: &[
            ("Type", "type"),
            ("Reason", "reason"),
            ("Message", "message"),
        ],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        field_labels: &[],
        has_generation: false,
        columns: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        field_labels: &[],
        has_generation: false,
        columns: &[("Status", "status.phase")],
    },
];

impl ResourceType {
    /// `apiVersion` of its objects (`v1` or `group/version`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `resourceslices.resource.k8s.io`, or `pods` for the core group (as in NotFound messages).
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `ResourceSlice.resource.k8s.io`, or `Pod` for the core group (as in Invalid messages).
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether `label` may be used in a field selector for this resource.
    pub fn supports_field(&self, label: &str) -> bool {
        label == "metadata.name"
            || (self.namespaced && label == "metadata.namespace")
            || self.field_labels.contains(&label)
    }

    /// The discovery entry (`APIResource`).
    pub fn discovery(&self) -> Value {
        let mut r = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        });
        if !self.short_names.is_empty() {
            r["shortNames"] = json!(self.short_names);
        }
        r
    }
}

/// Finds a resource by group, version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Finds a resource by its objects' `apiVersion` and `kind`.
pub fn find_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

/// Reads a dotted path (`spec.pool.name`) from an object; field selectors treat absence as "".
pub fn field_value<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(obj, |v, k| v.get(k))
}

/// A field's value as a field selector compares it: strings as is, others as JSON, absent as "".
pub fn field_string(obj: &Value, dotted: &str) -> String {
    match field_value(obj, dotted) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}
