//! The object store: JSON objects per resource type, one global resourceVersion counter, the
//! retained event history that watches resume from, and the fan-out of events to open watches.
//! Every mutation (from HTTP or from a test's direct access) goes through here, under one lock,
//! so what a watch sees is exactly the sequence of stored states.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::resources::{RESOURCES, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::validation;

/// The kind of a stored change, as watch events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`
    Added,
    /// `MODIFIED`
    Modified,
    /// `DELETED`
    Deleted,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One retained change.
#[derive(Debug, Clone)]
struct Event {
    rv: u64,
    rt: usize,
    kind: EventType,
    object: Arc<Value>,
    /// The state before a modification, so a watch with selectors can turn a MODIFIED into
    /// ADDED or DELETED when the object enters or leaves its selection, as the watch cache does.
    old: Option<Arc<Value>>,
}

/// What a watch selects.
#[derive(Debug, Clone)]
pub struct WatchFilter {
    /// Index into [`RESOURCES`].
    pub rt: usize,
    /// Namespace, or all.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Whether the client asked for bookmarks.
    pub bookmarks: bool,
}

impl WatchFilter {
    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns)
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

struct Watcher {
    id: u64,
    filter: WatchFilter,
    tx: mpsc::UnboundedSender<Bytes>,
}

/// How a write names the client that made it (`metadata.managedFields`).
#[derive(Debug, Clone)]
pub struct Manager {
    /// `fieldManager`, or derived from the User-Agent as the real server does.
    pub name: String,
}

type Key = (String, String);

/// The store; see the module docs.
pub struct Store {
    rv: u64,
    uid_counter: u64,
    name_counter: u64,
    objects: Vec<BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Event>,
    history_limit: usize,
    /// Watches may resume from any resourceVersion ≥ floor.
    floor: u64,
    watchers: Vec<Watcher>,
    next_watcher: u64,
    /// When true, behave like a server with DRAConsumableCapacity off.
    pub drop_allow_multiple_allocations: bool,
    /// An attribute (name, value) set on every device of every ResourceSlice written that lacks
    /// it, as a MutatingAdmissionPolicy tagging devices would (see
    /// `TestApiServer::set_device_attribute_default`).
    pub device_attribute_default: Option<(String, Value)>,
    /// Whether `resource.k8s.io/v1` is served at all (a cluster older than 1.34 does not).
    pub resource_v1_served: bool,
    /// Whether `/version` says 1.37 (see `TestApiServer::set_kubernetes_1_37`).
    pub kubernetes_1_37: bool,
}

/// `rt`'s index in [`RESOURCES`].
pub fn rt_index(rt: &ResourceType) -> usize {
    RESOURCES
        .iter()
        .position(|r| r.group == rt.group && r.version == rt.version && r.plural == rt.plural)
        .expect("every ResourceType in use comes from RESOURCES")
}

/// Current time as the API server writes timestamps (RFC 3339, seconds, UTC).
pub fn now_timestamp() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let root = obj.as_object_mut().expect("just made an object");
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// The object without server-maintained metadata, to see whether an update changes anything.
fn comparable(obj: &Value) -> Value {
    let mut c = obj.clone();
    let meta = meta_mut(&mut c);
    for k in ["resourceVersion", "generation", "uid", "creationTimestamp"] {
        meta.remove(k);
    }
    // Upstream keeps an entry's old time when its fields did not change; ignore it here.
    if let Some(entries) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
        for e in entries {
            if let Some(e) = e.as_object_mut() {
                e.remove("time");
            }
        }
    }
    c
}

/// Everything but `metadata` and `status`: the part whose change bumps `generation`.
fn spec_part(obj: &Value) -> Value {
    let mut c = obj.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    c
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    for (k, v) in patch_map {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Leaf paths of an object as field ownership sees them: maps recurse, lists and scalars are
/// atomic (real SSA merges some lists by key; this server does not). Server-owned metadata and
/// `apiVersion`/`kind` are not owned by anyone.
fn leaf_paths(obj: &Value) -> BTreeSet<Vec<String>> {
    fn walk(v: &Value, path: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    if path.len() == 1
                        && path[0] == "metadata"
                        && !matches!(
                            k.as_str(),
                            "labels" | "annotations" | "ownerReferences" | "finalizers"
                        )
                    {
                        continue;
                    }
                    path.push(k.clone());
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ => {
                out.insert(path.clone());
            }
        }
    }
    let mut out = BTreeSet::new();
    if let Some(m) = obj.as_object() {
        for (k, child) in m {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            let mut path = vec![k.clone()];
            walk(child, &mut path, &mut out);
        }
    }
    out.retain(|p| !(p.len() == 1 && p[0] == "metadata"));
    out
}

fn fields_v1(paths: &BTreeSet<Vec<String>>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for k in p {
            let entry = cur
                .entry(format!("f:{k}"))
                .or_insert_with(|| Value::Object(Map::new()));
            cur = entry.as_object_mut().expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

fn paths_from_fields_v1(f: &Value) -> BTreeSet<Vec<String>> {
    fn walk(v: &Value, path: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, child) in m {
                    path.push(k.strip_prefix("f:").unwrap_or(k).to_string());
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ => {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(f, &mut Vec::new(), &mut out);
    out
}

/// Whether an ownership set covers `path`: it owns the path itself, a parent of it (an atomic
/// value), or something below it.
fn owns(owned: &BTreeSet<Vec<String>>, path: &[String]) -> bool {
    (1..=path.len()).any(|n| owned.contains(&path[..n]))
        || owned
            .range(path.to_vec()..)
            .next()
            .is_some_and(|o| o.starts_with(path))
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

/// Removes the value at `path`, and the maps left empty by that (Go's `omitempty` drops them).
fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        map.remove(first);
        return;
    }
    if let Some(child) = map.get_mut(first) {
        remove_at(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            map.remove(first);
        }
    }
}

fn format_path(path: &[String]) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// A page of a list.
pub struct ListPage {
    /// The store's resourceVersion when the first page was read.
    pub resource_version: u64,
    /// The matching objects, in (namespace, name) order.
    pub items: Vec<Arc<Value>>,
    /// Token for the next page, when there may be more.
    pub continue_token: Option<String>,
}

impl Store {
    /// An empty store keeping `history_limit` events for watches to resume from.
    pub fn new(history_limit: usize) -> Self {
        Store {
            rv: 1,
            uid_counter: 0,
            name_counter: 0,
            objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
            history: VecDeque::new(),
            history_limit,
            floor: 0,
            watchers: Vec::new(),
            next_watcher: 0,
            drop_allow_multiple_allocations: false,
            device_attribute_default: None,
            resource_v1_served: true,
            kubernetes_1_37: false,
        }
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch may resume from.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Changes how many events are retained, compacting at once if needed.
    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit;
        self.trim_history();
    }

    /// Forgets all history: watches from any earlier resourceVersion get 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }

    fn trim_history(&mut self) {
        while self.history.len() > self.history_limit {
            if let Some(e) = self.history.pop_front() {
                self.floor = e.rv;
            }
        }
    }

    /// Number of open watches.
    pub fn watch_count(&self) -> usize {
        self.watchers.len()
    }

    /// Ends every open watch (their streams finish, as when the server's watch times out).
    pub fn cut_watches(&mut self) -> usize {
        let n = self.watchers.len();
        self.watchers.clear();
        n
    }

    /// Ends one watch (timeoutSeconds elapsed).
    pub fn end_watch(&mut self, id: u64) {
        self.watchers.retain(|w| w.id != id);
    }

    /// Sends a BOOKMARK at the current resourceVersion to every watch that asked for them.
    pub fn send_bookmarks(&mut self) {
        let rv = self.rv;
        self.watchers.retain(|w| {
            !w.filter.bookmarks
                || w.tx
                    .send(bookmark_line(&RESOURCES[w.filter.rt], rv, false))
                    .is_ok()
        });
    }

    /// Reads one object.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        self.objects[rt_index(rt)]
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// Lists objects (namespace `None` = all namespaces), starting after a continue token.
    pub fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let map = &self.objects[rt_index(rt)];
        let (list_rv, start) = match continue_token {
            None => (self.rv, None),
            Some(tok) => {
                let bad = || ApiError::bad_request(format!("continue key is not valid: {tok}"));
                let (rv, rest) = tok.split_once('/').ok_or_else(bad)?;
                let (cns, cname) = rest.split_once('/').ok_or_else(bad)?;
                let rv: u64 = rv.parse().map_err(|_| bad())?;
                (rv, Some((cns.to_string(), cname.to_string())))
            }
        };
        let range: Box<dyn Iterator<Item = (&Key, &Arc<Value>)>> = match (&start, ns) {
            (Some(k), _) => Box::new(map.range((
                std::ops::Bound::Excluded(k.clone()),
                std::ops::Bound::Unbounded,
            ))),
            (None, Some(ns)) => Box::new(map.range((ns.to_string(), String::new())..)),
            (None, None) => Box::new(map.iter()),
        };
        let name_pin = fields.pinned("metadata.name");
        let mut items = Vec::new();
        let mut continue_token = None;
        let mut last: Option<&Key> = None;
        for (key, obj) in range {
            if let Some(ns) = ns
                && key.0 != ns
            {
                if key.0.as_str() > ns {
                    break;
                }
                continue;
            }
            if let Some(limit) = limit
                && items.len() >= limit
            {
                if let Some(last) = last {
                    continue_token = Some(format!("{list_rv}/{}/{}", last.0, last.1));
                }
                break;
            }
            if name_pin.is_some_and(|n| n != key.1) {
                continue;
            }
            if labels.matches(obj) && fields.matches(obj) {
                items.push(obj.clone());
                last = Some(key);
            }
        }
        Ok(ListPage {
            resource_version: list_rv,
            items,
            continue_token,
        })
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, rt: usize, kind: EventType, object: Arc<Value>, old: Option<Arc<Value>>) {
        let rv = self.rv;
        let event = Event {
            rv,
            rt,
            kind,
            object,
            old,
        };
        self.watchers.retain(|w| deliver(w, &event));
        self.history.push_back(event);
        self.trim_history();
    }

    /// Mutating admission, which runs before validation and storage: the configured device
    /// attribute is added where missing.
    fn mutate(&self, rt: &ResourceType, obj: &mut Value) {
        let Some((name, value)) = &self.device_attribute_default else {
            return;
        };
        if rt.plural != "resourceslices" {
            return;
        }
        for device in obj
            .pointer_mut("/spec/devices")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(device) = device.as_object_mut() {
                let attributes = device.entry("attributes").or_insert_with(|| json!({}));
                if let Some(attributes) = attributes.as_object_mut() {
                    attributes
                        .entry(name.clone())
                        .or_insert_with(|| value.clone());
                }
            }
        }
    }

    fn drop_disabled_fields(&self, rt: &ResourceType, obj: &mut Value, old: Option<&Value>) {
        self.mutate(rt, obj);
        if !self.drop_allow_multiple_allocations || rt.plural != "resourceslices" {
            return;
        }
        // Like dropDisabledFields upstream: a field already in use in the stored object stays.
        let in_use = old.is_some_and(|o| {
            o.pointer("/spec/devices")
                .and_then(Value::as_array)
                .is_some_and(|ds| {
                    ds.iter()
                        .any(|d| d.get("allowMultipleAllocations").is_some())
                })
        });
        if in_use {
            return;
        }
        if let Some(devices) = obj
            .pointer_mut("/spec/devices")
            .and_then(Value::as_array_mut)
        {
            for d in devices {
                if let Some(m) = d.as_object_mut() {
                    m.remove("allowMultipleAllocations");
                }
            }
        }
    }

    fn check_validity(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
        let errs = validation::validate(rt, obj, old);
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(rt, name_of(obj), &errs))
        }
    }

    /// Checks `apiVersion`/`kind` and the namespace of a body against the URL it was sent to,
    /// and fills in what the real server fills from the URL.
    fn normalise(rt: &ResourceType, ns: &str, obj: &mut Value) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        let api_version = rt.api_version();
        for (field, want) in [("apiVersion", api_version.as_str()), ("kind", rt.kind)] {
            match obj.get(field).and_then(Value::as_str) {
                None | Some("") => {
                    obj[field] = json!(want);
                }
                Some(got) if got != want => {
                    return Err(ApiError::bad_request(if field == "apiVersion" {
                        format!(
                            "the API version in the data ({got}) does not match the expected API version ({want})"
                        )
                    } else {
                        format!(
                            "the kind in the data ({got}) does not match the expected kind ({want})"
                        )
                    }));
                }
                Some(_) => {}
            }
        }
        let meta = meta_mut(obj);
        if rt.namespaced {
            match meta.get("namespace").and_then(Value::as_str) {
                None | Some("") => {
                    meta.insert("namespace".into(), json!(ns));
                }
                Some(got) if got != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                Some(_) => {}
            }
        } else {
            meta.remove("namespace");
        }
        Ok(())
    }

    fn managed_entry(
        rt: &ResourceType,
        manager: &str,
        operation: &str,
        paths: &BTreeSet<Vec<String>>,
    ) -> Value {
        json!({
            "manager": manager,
            "operation": operation,
            "apiVersion": rt.api_version(),
            "time": now_timestamp(),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(paths),
        })
    }

    /// `old`'s managedFields with `manager`'s entry for `operation` replaced (in place, so a
    /// repeated identical write leaves the list as it was) or added.
    fn entries_with(old: Option<&Value>, entry: Value) -> Value {
        let mut entries: Vec<Value> = old
            .and_then(|o| o.pointer("/metadata/managedFields"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        match entries
            .iter_mut()
            .find(|e| e["manager"] == entry["manager"] && e["operation"] == entry["operation"])
        {
            Some(slot) => *slot = entry,
            None => entries.push(entry),
        }
        Value::Array(entries)
    }

    /// The managedFields after an Update by `manager` that set `paths` (added to what it owned).
    fn update_entries(
        rt: &ResourceType,
        current: &Value,
        manager: &str,
        mut paths: BTreeSet<Vec<String>>,
    ) -> Value {
        if let Some(prev) = current
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .and_then(|es| {
                es.iter()
                    .find(|e| e["manager"] == manager && e["operation"] == "Update")
            })
        {
            if paths.is_empty() {
                return current["metadata"]["managedFields"].clone();
            }
            paths.extend(paths_from_fields_v1(&prev["fieldsV1"]));
        }
        if paths.is_empty() {
            return current
                .pointer("/metadata/managedFields")
                .cloned()
                .unwrap_or_else(|| json!([]));
        }
        Self::entries_with(
            Some(current),
            Self::managed_entry(rt, manager, "Update", &paths),
        )
    }

    /// Creates an object (POST).
    pub fn create(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        mut obj: Value,
        manager: &Manager,
    ) -> Result<Arc<Value>, ApiError> {
        Self::normalise(rt, ns, &mut obj)?;
        let owned = leaf_paths(&obj);
        self.create_with(
            rt,
            ns,
            obj,
            Self::managed_entry(rt, &manager.name, "Update", &owned),
        )
    }

    fn create_with(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        mut obj: Value,
        managed: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let idx = rt_index(rt);
        {
            let meta = meta_mut(&mut obj);
            let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty()
                && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
                && !prefix.is_empty()
            {
                self.name_counter += 1;
                let name = format!("{prefix}{}", generated_suffix(self.name_counter));
                meta.insert("name".into(), json!(name));
            }
            for k in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
                "managedFields",
                "deletionTimestamp",
            ] {
                meta.remove(k);
            }
        }
        self.drop_disabled_fields(rt, &mut obj, None);
        if rt.plural == "namespaces" && obj.pointer("/status/phase").is_none() {
            obj["status"] = json!({"phase": "Active"});
        }
        Self::check_validity(rt, &obj, None)?;
        let key = (
            if rt.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name_of(&obj).to_string(),
        );
        if self.objects[idx].contains_key(&key) {
            return Err(ApiError::already_exists(rt, &key.1));
        }
        self.uid_counter += 1;
        let rv = self.next_rv();
        let uid = format!("6d656469-612d-4f70-8000-{:012x}", self.uid_counter);
        let meta = meta_mut(&mut obj);
        meta.insert("managedFields".into(), json!([managed]));
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        meta.insert("creationTimestamp".into(), json!(now_timestamp()));
        if rt.has_generation {
            meta.insert("generation".into(), json!(1));
        }
        let obj = Arc::new(obj);
        self.objects[idx].insert(key, obj.clone());
        self.record(idx, EventType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object (PUT). A non-empty `metadata.resourceVersion` must match the stored one.
    pub fn update(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut obj: Value,
        manager: &Manager,
    ) -> Result<Arc<Value>, ApiError> {
        Self::normalise(rt, ns, &mut obj)?;
        let body_name = name_of(&obj).to_string();
        if body_name.is_empty() {
            meta_mut(&mut obj).insert("name".into(), json!(name));
        } else if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let current = self.get(rt, ns, name)?;
        if let Some(rv) = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && !rv.is_empty()
            && Some(rv)
                != current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
        {
            return Err(ApiError::conflict(rt, name));
        }
        let changed: BTreeSet<Vec<String>> = leaf_paths(&obj)
            .into_iter()
            .filter(|p| value_at(&obj, p) != value_at(&current, p))
            .collect();
        let entries = Self::update_entries(rt, &current, &manager.name, changed);
        self.replace(rt, ns, name, obj, &current, entries)
    }

    /// Stores `obj` in place of `current`, keeping server-owned metadata; a write that changes
    /// nothing is not stored (no new resourceVersion, no event), as upstream's GuaranteedUpdate.
    fn replace(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut obj: Value,
        current: &Arc<Value>,
        managed_fields: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let idx = rt_index(rt);
        self.drop_disabled_fields(rt, &mut obj, Some(current));
        {
            let cur_meta = current.get("metadata").cloned().unwrap_or_default();
            let meta = meta_mut(&mut obj);
            for k in ["uid", "creationTimestamp", "generation", "generateName"] {
                match cur_meta.get(k) {
                    Some(v) => meta.insert(k.into(), v.clone()),
                    None => meta.remove(k),
                };
            }
            meta.insert("name".into(), json!(name));
            meta.insert("managedFields".into(), managed_fields);
        }
        Self::check_validity(rt, &obj, Some(current))?;
        if comparable(&obj) == comparable(current) {
            return Ok(current.clone());
        }
        if rt.has_generation && spec_part(&obj) != spec_part(current) {
            let g = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut obj).insert("generation".into(), json!(g + 1));
        }
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let obj = Arc::new(obj);
        let key = (
            if rt.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        self.objects[idx].insert(key, obj.clone());
        self.record(idx, EventType::Modified, obj.clone(), Some(current.clone()));
        Ok(obj)
    }

    /// Applies an RFC 7386 merge patch (PATCH `application/merge-patch+json`).
    pub fn patch_merge(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        patch: &Value,
        manager: &Manager,
    ) -> Result<Arc<Value>, ApiError> {
        let current = self.get(rt, ns, name)?;
        let mut obj = (*current).clone();
        merge_patch(&mut obj, patch);
        if let Some(rv) = patch
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && Some(rv)
                != current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
        {
            return Err(ApiError::conflict(rt, name));
        }
        Self::normalise(rt, ns, &mut obj)?;
        if name_of(&obj) != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                name_of(&obj)
            )));
        }
        let changed = leaf_paths(patch)
            .into_iter()
            .filter(|p| value_at(patch, p).is_some_and(|v| !v.is_null()))
            .collect();
        let entries = Self::update_entries(rt, &current, &manager.name, changed);
        self.replace(rt, ns, name, obj, &current, entries)
    }

    /// Server-side apply (PATCH `application/apply-patch+yaml`); see the module docs for how far
    /// field ownership goes.
    pub fn apply(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut applied: Value,
        manager: &str,
        force: bool,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        Self::normalise(rt, ns, &mut applied)?;
        match name_of(&applied) {
            "" => {
                meta_mut(&mut applied).insert("name".into(), json!(name));
            }
            n if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let mine = leaf_paths(&applied);
        let idx = rt_index(rt);
        let key = (
            if rt.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        let Some(current) = self.objects[idx].get(&key).cloned() else {
            let entry = Self::managed_entry(rt, manager, "Apply", &mine);
            return self.create_with(rt, ns, applied, entry).map(|o| (o, true));
        };
        if let Some(rv) = applied
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && Some(rv)
                != current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
        {
            return Err(ApiError::conflict(rt, name));
        }
        let entries: Vec<Value> = current
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let my_previous: BTreeSet<Vec<String>> = entries
            .iter()
            .filter(|e| e["manager"] == manager && e["operation"] == "Apply")
            .flat_map(|e| paths_from_fields_v1(&e["fieldsV1"]))
            .collect();
        let others: Vec<(&Value, BTreeSet<Vec<String>>)> = entries
            .iter()
            .filter(|e| !(e["manager"] == manager && e["operation"] == "Apply"))
            .map(|e| (e, paths_from_fields_v1(&e["fieldsV1"])))
            .collect();

        // Conflicts: a field I set to a value that differs from the stored one and that another
        // manager owns. Only the changed fields are looked up, by prefix, so a re-apply of a
        // large object costs little.
        let changed: Vec<&Vec<String>> = mine
            .iter()
            .filter(|p| value_at(&applied, p) != value_at(&current, p))
            .collect();
        let mut conflicts: Vec<(String, Vec<String>)> = Vec::new();
        for (entry, owned) in &others {
            for p in &changed {
                if owns(owned, p) {
                    conflicts.push((describe_manager(entry), (*p).clone()));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(apply_conflict(&conflicts));
        }

        let mut obj = (*current).clone();
        // Fields I owned and no longer apply are removed, unless someone else owns them too.
        for p in my_previous.difference(&mine) {
            if !others.iter().any(|(_, owned)| owned.contains(p)) {
                remove_at(&mut obj, p);
            }
        }
        for p in &mine {
            if let Some(v) = value_at(&applied, p) {
                set_at(&mut obj, p, v.clone());
            }
        }
        // Forcing takes the conflicting fields away from their previous owners. Entries keep
        // their order so that an identical re-apply changes nothing.
        let mut new_entries: Vec<Value> = Vec::new();
        let mut placed = false;
        for entry in &entries {
            if entry["manager"] == manager && entry["operation"] == "Apply" {
                new_entries.push(Self::managed_entry(rt, manager, "Apply", &mine));
                placed = true;
                continue;
            }
            let mut entry = entry.clone();
            if force {
                let mut owned = paths_from_fields_v1(&entry["fieldsV1"]);
                owned.retain(|o| !changed.iter().any(|p| overlaps(o, p)));
                if owned.is_empty() {
                    continue;
                }
                entry["fieldsV1"] = fields_v1(&owned);
            }
            new_entries.push(entry);
        }
        if !placed {
            new_entries.push(Self::managed_entry(rt, manager, "Apply", &mine));
        }
        // Apply never takes `status` from the applied object on the main resource.
        match current.get("status") {
            Some(status) => obj["status"] = status.clone(),
            None => {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        self.replace(rt, ns, name, obj, &current, Value::Array(new_entries))
            .map(|o| (o, false))
    }

    /// Deletes an object; deleting a Node also deletes what names it as an owner, and deleting
    /// a Namespace deletes its contents (both at once, not by a later garbage collector).
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        precondition_rv: Option<&str>,
        precondition_uid: Option<&str>,
    ) -> Result<Arc<Value>, ApiError> {
        let idx = rt_index(rt);
        let key = (
            if rt.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        let current = self.get(rt, ns, name)?;
        let cur_rv = current
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let cur_uid = current
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(want) = precondition_uid
            && want != cur_uid
        {
            let mut e = ApiError::conflict(rt, name);
            e.body["message"] = json!(format!(
                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {want}, UID in object meta: {cur_uid}",
                rt.qualified_resource()
            ));
            return Err(e);
        }
        if let Some(want) = precondition_rv
            && want != cur_rv
        {
            let mut e = ApiError::conflict(rt, name);
            e.body["message"] = json!(format!(
                "Operation cannot be fulfilled on {} \"{name}\": the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({cur_rv}). The object might have been modified",
                rt.qualified_resource()
            ));
            return Err(e);
        }
        self.objects[idx].remove(&key);
        let rv = self.next_rv();
        let mut gone = (*current).clone();
        meta_mut(&mut gone).insert("resourceVersion".into(), json!(rv.to_string()));
        let gone = Arc::new(gone);
        self.record(idx, EventType::Deleted, gone.clone(), None);

        if rt.plural == "nodes" {
            self.collect_dependents(cur_uid);
        }
        if rt.plural == "namespaces" {
            for (i, r) in RESOURCES.iter().enumerate() {
                if !r.namespaced {
                    continue;
                }
                let names: Vec<String> = self.objects[i]
                    .keys()
                    .filter(|k| k.0 == name)
                    .map(|k| k.1.clone())
                    .collect();
                for n in names {
                    let _ = self.delete(r, name, &n, None, None);
                }
            }
        }
        Ok(gone)
    }

    fn collect_dependents(&mut self, owner_uid: &str) {
        let mut doomed = Vec::new();
        for (i, map) in self.objects.iter().enumerate() {
            for (key, obj) in map {
                let owned = obj
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner_uid));
                if owned {
                    doomed.push((i, key.clone()));
                }
            }
        }
        for (i, (ns, name)) in doomed {
            let _ = self.delete(&RESOURCES[i], &ns, &name, None, None);
        }
    }

    /// Opens a watch. Returns the receiver of newline-terminated JSON event lines, the watch's
    /// id, or the 410 error when `from` is older than the retained history.
    pub fn watch(
        &mut self,
        filter: WatchFilter,
        from: Option<u64>,
        send_initial_events: bool,
    ) -> Result<(u64, mpsc::UnboundedReceiver<Bytes>), ApiError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let rt = &RESOURCES[filter.rt];
        match from {
            Some(r) if !send_initial_events => {
                if r < self.floor {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {r} ({})",
                        self.floor
                    )));
                }
                for e in self
                    .history
                    .iter()
                    .filter(|e| e.rv > r && e.rt == filter.rt)
                {
                    if let Some(line) = event_line(&filter, e) {
                        let _ = tx.send(line);
                    }
                }
            }
            _ => {
                // No resourceVersion, "0", or sendInitialEvents: the current state as ADDED events.
                for obj in self.objects[filter.rt].values() {
                    if filter.matches(obj) {
                        let _ = tx.send(line_for("ADDED", obj));
                    }
                }
                if send_initial_events && filter.bookmarks {
                    let _ = tx.send(bookmark_line(rt, self.rv, true));
                }
            }
        }
        self.next_watcher += 1;
        let id = self.next_watcher;
        self.watchers.push(Watcher { id, filter, tx });
        Ok((id, rx))
    }
}

fn set_at(obj: &mut Value, path: &[String], v: Value) {
    let mut cur = obj;
    for k in path {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .expect("just made an object")
            .entry(k.clone())
            .or_insert(Value::Null);
    }
    *cur = v;
}

/// `"manager"` for an Apply entry, `"manager" using <apiVersion>` for an Update one, as
/// apimachinery's conflict message prints managers (their identifiers never carry the time).
fn describe_manager(entry: &Value) -> String {
    let m = entry["manager"].as_str().unwrap_or("");
    if entry["operation"] == "Update" {
        let api = entry["apiVersion"].as_str().unwrap_or("");
        format!("{m:?} using {api}")
    } else {
        format!("{m:?}")
    }
}

fn apply_conflict(conflicts: &[(String, Vec<String>)]) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": format_path(p)}))
        .collect();
    let message = if let [(m, p)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {m}: {}",
            format_path(p)
        )
    } else {
        let mut by_manager: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (m, p) in conflicts {
            by_manager.entry(m).or_default().push(format_path(p));
        }
        let mut lines = Vec::new();
        for (m, paths) in by_manager {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(paths.into_iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApiError::apply_conflict(message, causes)
}

/// The 5-character suffix of a generated name, from the alphabet upstream uses (no vowels, no
/// look-alikes); deterministic so tests can predict it if they must.
fn generated_suffix(n: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn line_for(kind: &str, obj: &Value) -> Bytes {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        object: &'a Value,
    }
    let mut buf = serde_json::to_vec(&Line { kind, object: obj }).unwrap_or_default();
    buf.push(b'\n');
    Bytes::from(buf)
}

/// An `ERROR` event carrying a Status (e.g. 410 Gone).
pub fn error_line(err: &ApiError) -> Bytes {
    line_for("ERROR", &err.body)
}

/// A `BOOKMARK` event: only kind, apiVersion and metadata.resourceVersion (plus the
/// initial-events-end annotation after a streamed initial list).
pub fn bookmark_line(rt: &ResourceType, rv: u64, initial_events_end: bool) -> Bytes {
    let mut obj = json!({
        "kind": rt.kind,
        "apiVersion": rt.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
    });
    if initial_events_end {
        obj["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line_for("BOOKMARK", &obj)
}

fn event_line(filter: &WatchFilter, e: &Event) -> Option<Bytes> {
    let now = filter.matches(&e.object);
    let kind = match (e.kind, &e.old) {
        (EventType::Modified, Some(old)) => match (filter.matches(old), now) {
            (true, true) => "MODIFIED",
            (false, true) => "ADDED",
            (true, false) => "DELETED",
            (false, false) => return None,
        },
        (kind, _) if now => kind.as_str(),
        _ => return None,
    };
    Some(line_for(kind, &e.object))
}

/// Sends an event to one watcher; false when the watcher is gone.
fn deliver(w: &Watcher, e: &Event) -> bool {
    if w.filter.rt != e.rt {
        return true;
    }
    match event_line(&w.filter, e) {
        Some(line) => w.tx.send(line).is_ok(),
        None => !w.tx.is_closed(),
    }
}
