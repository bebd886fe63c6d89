//! Tests of the test API server itself (tests/it/support/apiserver): each verb, error shape and
//! fault over real HTTP with the kube-rs client, and kubectl against it when kubectl is on PATH.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::apiserver::{Config, Fault, TestApiServer};
use http_body_util::BodyExt;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use media_operator::catalogue::{Attribute, Capability, Kind, PCI_BUS_ID};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);
const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";

// --- helpers ---------------------------------------------------------------------------------

struct Http {
    client: kube::Client,
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Value,
}

impl Http {
    fn new(server: &TestApiServer) -> Self {
        // kube-rs retries 429/503/504 by default; these tests must see each answer.
        let mut config = server.kube_config();
        config.default_retry = false;
        Http {
            client: kube::Client::try_from(config).expect("kube client"),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Answer {
        let mut req = http::Request::builder().method(method).uri(path);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let req = req.body(kube::client::Body::from(body)).expect("request");
        let res = self.client.send(req).await.expect("send");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None, Vec::new()).await
    }

    async fn post(&self, path: &str, obj: &Value) -> Answer {
        self.send(
            "POST",
            path,
            Some("application/json"),
            obj.to_string().into_bytes(),
        )
        .await
    }

    async fn put(&self, path: &str, obj: &Value) -> Answer {
        self.send(
            "PUT",
            path,
            Some("application/json"),
            obj.to_string().into_bytes(),
        )
        .await
    }

    async fn merge(&self, path: &str, patch: &Value) -> Answer {
        self.send(
            "PATCH",
            path,
            Some("application/merge-patch+json"),
            patch.to_string().into_bytes(),
        )
        .await
    }

    async fn apply(&self, path: &str, yaml: &str) -> Answer {
        self.send(
            "PATCH",
            path,
            Some("application/apply-patch+yaml"),
            yaml.as_bytes().to_vec(),
        )
        .await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.send("DELETE", path, None, Vec::new()).await
    }

    async fn watch(&self, path: &str) -> Watch {
        let req = http::Request::builder()
            .uri(path)
            .body(kube::client::Body::from(Vec::new()))
            .expect("request");
        let res = self.client.send(req).await.expect("send");
        assert_eq!(res.status(), 200, "watch {path}");
        Watch {
            body: res.into_body(),
            buf: Vec::new(),
        }
    }
}

/// Reads newline-delimited watch events from a streamed body.
struct Watch {
    body: kube::client::Body,
    buf: Vec<u8>,
}

impl Watch {
    /// The next event, or None when the stream ends. Fails the test after [`WAIT`].
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("event is JSON"));
            }
            let frame = tokio::time::timeout(WAIT, self.body.frame())
                .await
                .expect("watch event in time");
            match frame {
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                _ => return None,
            }
        }
    }

    /// The next event's type and object name.
    async fn next_summary(&mut self) -> Option<(String, String)> {
        self.next().await.map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
    }
}

/// A device with every attribute of the catalogue, as the agent publishes them.
fn device(name: &str) -> Value {
    let attributes: serde_json::Map<String, Value> = Attribute::all()
        .map(|a| {
            let value = match a.kind() {
                Kind::Bool => json!({"bool": true}),
                Kind::String => json!({"string": "Intel iHD driver for Intel(R) Gen Graphics"}),
            };
            (a.name().to_string(), value)
        })
        .collect();
    json!({"name": name, "attributes": attributes})
}

/// The name of a string-valued attribute of the catalogue.
fn string_attribute() -> &'static str {
    Attribute::all()
        .find(|a| a.kind() == Kind::String && !a.name().contains('/'))
        .expect("the catalogue has string attributes")
        .name()
}

fn slice(name: &str, node: &str, devices: usize) -> Value {
    let devices: Vec<Value> = (0..devices).map(|i| device(&format!("gpu{i}"))).collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "media.liken.sh",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    })
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("resourceVersion is a decimal string")
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

// --- discovery ------------------------------------------------------------------------------

#[tokio::test]
async fn discovery_documents_describe_the_served_resources() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let v = h.get("/version").await;
    assert_eq!(v.status, 200);
    assert_eq!(v.body["major"], "1");
    assert_eq!(
        v.body["gitVersion"], "v1.36.0",
        "DRAConsumableCapacity is on by default"
    );
    assert_eq!(h.get("/api").await.body["versions"], json!(["v1"]));
    let groups = h.get("/apis").await.body;
    assert_eq!(groups["kind"], "APIGroupList");
    assert_eq!(
        groups["groups"][0]["preferredVersion"]["groupVersion"],
        "resource.k8s.io/v1"
    );
    assert_eq!(
        h.get("/apis/resource.k8s.io").await.body["kind"],
        "APIGroup"
    );

    let rl = h.get("/apis/resource.k8s.io/v1").await.body;
    assert_eq!(rl["groupVersion"], "resource.k8s.io/v1");
    let find = |list: &Value, name: &str| {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in discovery"))
    };
    let slices = find(&rl, "resourceslices");
    assert_eq!(slices["namespaced"], false);
    assert_eq!(slices["kind"], "ResourceSlice");
    assert_eq!(slices["singularName"], "resourceslice");
    assert!(
        slices["verbs"]
            .as_array()
            .unwrap()
            .contains(&json!("watch"))
    );
    assert_eq!(find(&rl, "resourceclaims")["namespaced"], true);
    assert_eq!(find(&rl, "resourceclaimtemplates")["namespaced"], true);
    assert_eq!(find(&rl, "deviceclasses")["namespaced"], false);

    let core = h.get("/api/v1").await.body;
    assert_eq!(find(&core, "pods")["shortNames"], json!(["po"]));
    assert_eq!(find(&core, "events")["namespaced"], true);
    assert_eq!(find(&core, "nodes")["namespaced"], false);
    assert_eq!(find(&core, "namespaces")["kind"], "Namespace");

    let missing = h.get("/apis/apps/v1/deployments").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body, "404 page not found\n");
    assert_eq!(missing.headers["content-type"], "text/plain; charset=utf-8");
}

// --- create, get, update, delete -------------------------------------------------------------

#[tokio::test]
async fn create_sets_server_metadata_and_refuses_duplicates() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let before = s.resource_version();
    let created = h.post(SLICES, &slice("a", "node-a", 1)).await;
    assert_eq!(created.status, 201);
    let meta = &created.body["metadata"];
    assert!(meta["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(rv(&created.body) > before);
    assert_eq!(meta["generation"], 1);
    assert!(
        meta["creationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_eq!(meta["managedFields"][0]["operation"], "Update");
    assert_eq!(created.headers["content-type"], "application/json");
    assert!(created.headers.contains_key("content-length"));

    let fetched = h.get(&format!("{SLICES}/a")).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body, created.body);

    let dup = h.post(SLICES, &slice("a", "node-a", 1)).await;
    assert_eq!(dup.status, 409);
    assert_eq!(
        dup.body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "resourceslices.resource.k8s.io \"a\" already exists",
            "reason": "AlreadyExists",
            "details": {"name": "a", "group": "resource.k8s.io", "kind": "resourceslices"},
            "code": 409,
        })
    );
}

#[tokio::test]
async fn generate_name_makes_distinct_names() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let mut obj = slice("", "n", 0);
    obj["metadata"] = json!({"generateName": "n-media.liken.sh-"});
    let a = h.post(SLICES, &obj).await.body;
    let b = h.post(SLICES, &obj).await.body;
    let (a, b) = (
        a["metadata"]["name"].as_str().unwrap().to_string(),
        b["metadata"]["name"].as_str().unwrap().to_string(),
    );
    assert!(
        a.starts_with("n-media.liken.sh-") && a.len() == "n-media.liken.sh-".len() + 5,
        "{a}"
    );
    assert_ne!(a, b);
}

#[tokio::test]
async fn get_and_delete_of_missing_objects_are_not_found() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let got = h.get(&format!("{SLICES}/nope")).await;
    assert_eq!(got.status, 404);
    assert_eq!(
        got.body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "resourceslices.resource.k8s.io \"nope\" not found",
            "reason": "NotFound",
            "details": {"name": "nope", "group": "resource.k8s.io", "kind": "resourceslices"},
            "code": 404,
        })
    );
    let pod = h.delete("/api/v1/namespaces/default/pods/p").await;
    assert_eq!(pod.status, 404);
    assert_eq!(pod.body["message"], "pods \"p\" not found");
    assert_eq!(pod.body["details"], json!({"name": "p", "kind": "pods"}));
}

#[tokio::test]
async fn update_checks_resource_version_and_bumps_generation_on_spec_changes() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let created = h.post(SLICES, &slice("a", "node-a", 1)).await.body;

    let mut labelled = created.clone();
    labelled["metadata"]["labels"] = json!({"x": "y"});
    let updated = h.put(&format!("{SLICES}/a"), &labelled).await;
    assert_eq!(updated.status, 200);
    assert!(rv(&updated.body) > rv(&created));
    assert_eq!(
        updated.body["metadata"]["generation"], 1,
        "labels are not spec"
    );

    // The stale version is refused with upstream's wording.
    let stale = h.put(&format!("{SLICES}/a"), &created).await;
    assert_eq!(stale.status, 409);
    assert_eq!(stale.body["reason"], "Conflict");
    assert_eq!(
        stale.body["message"],
        "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(stale.body["details"]["name"], "a");

    let mut respec = updated.body.clone();
    respec["spec"]["devices"] = json!([device("gpu0"), device("gpu1")]);
    let respecced = h.put(&format!("{SLICES}/a"), &respec).await.body;
    assert_eq!(respecced["metadata"]["generation"], 2);
    assert_eq!(respecced["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        respecced["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );

    // Writing the same object again stores nothing: same version, no event.
    let mark = s.resource_version();
    let same = h.put(&format!("{SLICES}/a"), &respecced).await;
    assert_eq!(same.status, 200);
    assert_eq!(rv(&same.body), rv(&respecced));
    assert_eq!(s.resource_version(), mark);

    let missing = h
        .put(&format!("{SLICES}/b"), &slice("b", "node-b", 0))
        .await;
    assert_eq!(missing.status, 404);
    let wrong_name = h
        .put(&format!("{SLICES}/a"), &slice("b", "node-a", 0))
        .await;
    assert_eq!(wrong_name.status, 400);
}

#[tokio::test]
async fn delete_answers_like_upstream_and_honours_preconditions() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let created = h.post(SLICES, &slice("a", "node-a", 0)).await.body;
    let bad = h
        .send(
            "DELETE",
            &format!("{SLICES}/a"),
            Some("application/json"),
            json!({"preconditions": {"resourceVersion": "1"}})
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(bad.status, 409);
    assert!(
        bad.body["message"]
            .as_str()
            .unwrap()
            .contains("Precondition")
            || bad.body["message"]
                .as_str()
                .unwrap()
                .contains("precondition")
    );

    let gone = h.delete(&format!("{SLICES}/a")).await;
    assert_eq!(gone.status, 200);
    assert_eq!(gone.body["status"], "Success");
    assert_eq!(gone.body["details"]["uid"], created["metadata"]["uid"]);
    assert!(s.get("resourceslices", "", "a").is_none());

    h.post(
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}),
    )
    .await;
    let pod = h.delete("/api/v1/namespaces/default/pods/p").await;
    assert_eq!(pod.status, 200);
    assert_eq!(pod.body["kind"], "Pod", "pods answer with the object");
}

#[tokio::test]
async fn delete_collection_and_namespace_deletion_remove_what_they_select() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    for (name, tier) in [("a", "gold"), ("b", "silver"), ("c", "gold")] {
        let mut obj = slice(name, "n", 0);
        obj["metadata"]["labels"] = json!({"tier": tier});
        s.put(obj).unwrap();
    }
    let gone = h
        .delete(&format!("{SLICES}?labelSelector=tier%3Dgold"))
        .await;
    assert_eq!(gone.status, 200);
    assert_eq!(gone.body["kind"], "ResourceSliceList");
    assert_eq!(names(&gone.body), ["a", "c"]);
    assert_eq!(names(&h.get(SLICES).await.body), ["b"]);

    s.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "media"}}))
        .unwrap();
    s.put(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "media"}}),
    )
    .unwrap();
    s.put(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}})).unwrap();
    assert_eq!(
        h.get("/api/v1/namespaces/media").await.body["status"]["phase"],
        "Active"
    );
    assert_eq!(h.delete("/api/v1/namespaces/media").await.status, 200);
    assert!(s.get("pods", "media", "p").is_none());
    assert!(s.get("pods", "default", "p").is_some());
}

// --- list -------------------------------------------------------------------------------------

#[tokio::test]
async fn list_filters_by_labels_and_fields() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    for (name, node, tier) in [("a", "n1", "gold"), ("b", "n2", "silver"), ("c", "n1", "")] {
        let mut obj = slice(name, node, 0);
        if !tier.is_empty() {
            obj["metadata"]["labels"] = json!({"tier": tier});
        }
        s.put(obj).unwrap();
    }
    let mut other_driver = slice("d", "n1", 0);
    other_driver["spec"]["driver"] = json!("gpu.example.com");
    s.put(other_driver).unwrap();

    let q = |query: &str| format!("{SLICES}?{query}");
    let list = |query: String| {
        let h = &h;
        async move { names(&h.get(&query).await.body) }
    };
    assert_eq!(list(q("labelSelector=tier%3Dgold")).await, ["a"]);
    assert_eq!(list(q("labelSelector=tier%3D%3Dgold")).await, ["a"]);
    assert_eq!(
        list(q("labelSelector=tier%21%3Dgold")).await,
        ["b", "c", "d"]
    );
    assert_eq!(
        list(q("labelSelector=tier+in+%28gold%2Csilver%29")).await,
        ["a", "b"]
    );
    assert_eq!(
        list(q("labelSelector=tier+notin+%28gold%29")).await,
        ["b", "c", "d"]
    );
    assert_eq!(list(q("labelSelector=tier")).await, ["a", "b"]);
    assert_eq!(list(q("labelSelector=%21tier")).await, ["c", "d"]);
    assert_eq!(
        list(q("fieldSelector=spec.nodeName%3Dn1")).await,
        ["a", "c", "d"]
    );
    assert_eq!(
        list(q(
            "fieldSelector=spec.nodeName%3Dn1%2Cspec.driver%3Dmedia.liken.sh"
        ))
        .await,
        ["a", "c"]
    );
    assert_eq!(list(q("fieldSelector=metadata.name%3Db")).await, ["b"]);
    assert_eq!(
        list(q("fieldSelector=spec.driver%21%3Dmedia.liken.sh")).await,
        ["d"]
    );

    let unsupported = h.get(&q("fieldSelector=spec.pool.name%3Dx")).await;
    assert_eq!(unsupported.status, 400);
    assert_eq!(unsupported.body["reason"], "BadRequest");
    assert_eq!(
        unsupported.body["message"],
        "field label not supported: spec.pool.name"
    );

    let listed = h.get(SLICES).await.body;
    assert_eq!(listed["kind"], "ResourceSliceList");
    assert_eq!(listed["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(rv(&listed), s.resource_version());
}

#[tokio::test]
async fn pods_and_events_have_their_field_selectors() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    for (name, node, ns) in [
        ("p1", "n1", "default"),
        ("p2", "n2", "default"),
        ("p3", "n1", "other"),
    ] {
        s.put(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {"nodeName": node}}))
            .unwrap();
    }
    s.put(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p1", "uid": "u1"}, "reason": "FailedScheduling"}))
        .unwrap();
    s.put(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p2", "uid": "u2"}, "reason": "Scheduled"}))
        .unwrap();
    let pods = |q: &str| format!("/api/v1/{q}");
    assert_eq!(
        names(
            &h.get(&pods("pods?fieldSelector=spec.nodeName%3Dn1"))
                .await
                .body
        ),
        ["p1", "p3"]
    );
    assert_eq!(
        names(
            &h.get(&pods(
                "namespaces/default/pods?fieldSelector=spec.nodeName%3Dn1"
            ))
            .await
            .body
        ),
        ["p1"]
    );
    let ev = "/api/v1/namespaces/default/events?fieldSelector=";
    assert_eq!(
        names(&h.get(&format!("{ev}involvedObject.name%3Dp2")).await.body),
        ["e2"]
    );
    assert_eq!(
        names(&h.get(&format!("{ev}involvedObject.uid%3Du1")).await.body),
        ["e1"]
    );
}

#[tokio::test]
async fn list_pages_with_limit_and_continue() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    for i in 0..25 {
        s.put(slice(&format!("s{i:02}"), &format!("n{i}"), 0))
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let mut path = format!("{SLICES}?limit=10");
        if !token.is_empty() {
            path.push_str(&format!("&continue={token}"));
        }
        let page = h.get(&path).await.body;
        pages += 1;
        seen.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => break,
        }
    }
    let want: Vec<String> = (0..25).map(|i| format!("s{i:02}")).collect();
    assert_eq!(seen, want);
    assert_eq!(pages, 3);

    // kube-rs pages through the same way (its ObjectList keeps the token).
    let api: Api<ResourceSlice> = Api::all(kube::Client::try_from(s.kube_config()).unwrap());
    let first = api.list(&ListParams::default().limit(20)).await.unwrap();
    assert_eq!(first.items.len(), 20);
    let rest = api
        .list(
            &ListParams::default()
                .limit(20)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 5);
}

// --- patches -----------------------------------------------------------------------------------

#[tokio::test]
async fn merge_patch_sets_and_removes_fields() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let mut obj = slice("a", "n", 1);
    obj["metadata"]["labels"] = json!({"keep": "1", "drop": "1"});
    h.post(SLICES, &obj).await;
    let patched = h
        .merge(
            &format!("{SLICES}/a"),
            &json!({"metadata": {"labels": {"drop": null, "new": "2"}}, "spec": {"pool": {"generation": 2}}}),
        )
        .await;
    assert_eq!(patched.status, 200);
    assert_eq!(
        patched.body["metadata"]["labels"],
        json!({"keep": "1", "new": "2"})
    );
    assert_eq!(patched.body["spec"]["pool"]["generation"], 2);
    assert_eq!(patched.body["spec"]["pool"]["name"], "n");
    assert_eq!(patched.body["metadata"]["generation"], 2);

    let strategic = h
        .send(
            "PATCH",
            &format!("{SLICES}/a"),
            Some("application/strategic-merge-patch+json"),
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(strategic.status, 415);
    assert_eq!(strategic.body["reason"], "UnsupportedMediaType");
}

#[tokio::test]
async fn server_side_apply_creates_replaces_and_detects_conflicts() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let path = format!("{SLICES}/a?fieldManager=agent");
    let yaml = |devices: &str| {
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: a\n  labels: {{owner: agent}}\nspec:\n  driver: media.liken.sh\n  nodeName: n\n  pool: {{name: n, generation: 1, resourceSliceCount: 1}}\n  devices: {devices}\n"
        )
    };
    let created = h.apply(&path, &yaml("[{name: gpu0}]")).await;
    assert_eq!(created.status, 201);
    let mf = &created.body["metadata"]["managedFields"][0];
    assert_eq!(mf["manager"], "agent");
    assert_eq!(mf["operation"], "Apply");
    assert_eq!(mf["fieldsV1"]["f:spec"]["f:driver"], json!({}));

    // The same configuration again writes nothing.
    let again = h.apply(&path, &yaml("[{name: gpu0}]")).await;
    assert_eq!(again.status, 200);
    assert_eq!(rv(&again.body), rv(&created.body));

    // JSON is YAML: a changed configuration replaces this manager's fields (the label goes).
    let json_body = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "a"},
        "spec": {"driver": "media.liken.sh", "nodeName": "n", "pool": {"name": "n", "generation": 2, "resourceSliceCount": 1},
        "devices": [{"name": "gpu0"}, {"name": "gpu1"}]}});
    let changed = h.apply(&path, &json_body.to_string()).await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(changed.body["spec"]["devices"].as_array().unwrap().len(), 2);
    assert!(changed.body["metadata"].get("labels").is_none());
    assert_eq!(changed.body["metadata"]["generation"], 2);

    // Another manager changing an owned field conflicts, in upstream's shape.
    let other = format!("{SLICES}/a?fieldManager=intruder");
    let mut theirs = json_body.clone();
    theirs["spec"]["pool"]["generation"] = json!(9);
    let conflict = h.apply(&other, &theirs.to_string()).await;
    assert_eq!(conflict.status, 409);
    assert_eq!(conflict.body["reason"], "Conflict");
    assert_eq!(
        conflict.body["message"],
        "Apply failed with 1 conflict: conflict with \"agent\": .spec.pool.generation"
    );
    assert_eq!(
        conflict.body["details"]["causes"][0]["field"],
        ".spec.pool.generation"
    );
    assert_eq!(
        conflict.body["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );

    // Forcing takes the field over.
    let forced = h
        .apply(&format!("{other}&force=true"), &theirs.to_string())
        .await;
    assert_eq!(forced.status, 200, "{}", forced.body);
    assert_eq!(forced.body["spec"]["pool"]["generation"], 9);
    let managers: Vec<&str> = forced.body["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["agent", "intruder"]);

    // An object created by an Update (POST) belongs to its creator: changing its fields by
    // apply conflicts with it; applying the values it already has does not.
    let created_by_post = h
        .post(
            &format!("{SLICES}?fieldManager=creator"),
            &slice("b", "n", 0),
        )
        .await;
    assert_eq!(created_by_post.status, 201);
    let mut same = slice("b", "n", 0);
    let share = h
        .apply(&format!("{SLICES}/b?fieldManager=agent"), &same.to_string())
        .await;
    assert_eq!(share.status, 200, "{}", share.body);
    same["spec"]["pool"]["generation"] = json!(2);
    same["spec"]["devices"] = json!([device("gpu0")]);
    let clash = h
        .apply(&format!("{SLICES}/b?fieldManager=agent"), &same.to_string())
        .await;
    assert_eq!(clash.status, 409);
    assert_eq!(
        clash.body["message"],
        "Apply failed with 2 conflicts: conflicts with \"creator\" using resource.k8s.io/v1:\n- .spec.devices\n- .spec.pool.generation"
    );

    let no_manager = h.apply(&format!("{SLICES}/a"), &yaml("[]")).await;
    assert_eq!(no_manager.status, 422);
    assert_eq!(
        no_manager.body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
}

#[tokio::test]
async fn kube_rs_typed_clients_work_against_it() {
    let s = TestApiServer::start();
    let client = kube::Client::try_from(s.kube_config()).unwrap();
    let api: Api<ResourceSlice> = Api::all(client);
    let obj: ResourceSlice = serde_json::from_value(slice("n1-media.liken.sh", "n1", 2)).unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let mine = api
        .list(&ListParams::default().fields("spec.nodeName=n1,spec.driver=media.liken.sh"))
        .await
        .unwrap();
    assert_eq!(mine.items.len(), 1);
    let applied = api
        .patch(
            "n1-media.liken.sh",
            &PatchParams::apply("media-capabilities").force(),
            &Patch::Apply(
                serde_json::from_value::<ResourceSlice>(slice("n1-media.liken.sh", "n1", 3))
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.spec.devices.map(|d| d.len()), Some(3));
    let err = api.get("missing").await.unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 404);
            assert_eq!(status.reason, "NotFound");
        }
        other => panic!("expected an API error, got {other}"),
    }
}

// --- watch --------------------------------------------------------------------------------------

#[tokio::test]
async fn watch_streams_changes_from_a_resource_version() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let start = s.resource_version();
    let mut w = h
        .watch(&format!(
            "{SLICES}?watch=true&resourceVersion={start}&allowWatchBookmarks=true"
        ))
        .await;
    s.put(slice("a", "n", 0)).unwrap();
    s.patch(
        "resourceslices",
        "",
        "a",
        &json!({"metadata": {"labels": {"x": "1"}}}),
    )
    .unwrap();
    s.delete("resourceslices", "", "a").unwrap();
    assert_eq!(w.next_summary().await, Some(("ADDED".into(), "a".into())));
    assert_eq!(
        w.next_summary().await,
        Some(("MODIFIED".into(), "a".into()))
    );
    let deleted = w.next().await.unwrap();
    assert_eq!(deleted["type"], "DELETED");
    assert_eq!(rv(&deleted["object"]), s.resource_version());

    s.send_bookmarks();
    let bookmark = w.next().await.unwrap();
    assert_eq!(
        bookmark,
        json!({"type": "BOOKMARK", "object": {"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1",
            "metadata": {"resourceVersion": s.resource_version().to_string()}}})
    );

    // A watch opened later from the same version replays the retained history.
    let mut replay = h
        .watch(&format!("{SLICES}?watch=1&resourceVersion={start}"))
        .await;
    assert_eq!(
        replay.next_summary().await,
        Some(("ADDED".into(), "a".into()))
    );
    assert_eq!(
        replay.next_summary().await,
        Some(("MODIFIED".into(), "a".into()))
    );
    assert_eq!(
        replay.next_summary().await,
        Some(("DELETED".into(), "a".into()))
    );
}

#[test]
fn watch_streams_newline_delimited_json_in_chunks() {
    use std::io::{BufRead, BufReader, Write};
    let s = TestApiServer::start();
    s.put(slice("a", "n", 0)).unwrap();
    let mut conn = std::net::TcpStream::connect(s.addr()).unwrap();
    write!(
        conn,
        "GET {SLICES}?watch=true HTTP/1.1\r\nHost: test\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(conn);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        head.push(line.trim_end().to_ascii_lowercase());
    }
    assert_eq!(head[0], "http/1.1 200 ok");
    assert!(
        head.contains(&"transfer-encoding: chunked".to_string()),
        "{head:?}"
    );
    assert!(
        head.contains(&"content-type: application/json".to_string()),
        "{head:?}"
    );
    let mut size = String::new();
    reader.read_line(&mut size).unwrap();
    let mut chunk = String::new();
    reader.read_line(&mut chunk).unwrap();
    assert_eq!(usize::from_str_radix(size.trim(), 16).unwrap(), chunk.len());
    let event: Value = serde_json::from_str(&chunk).unwrap();
    assert_eq!(event["type"], "ADDED");
    assert!(chunk.ends_with('\n'));
}

#[tokio::test]
async fn watch_without_version_starts_with_the_current_state() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    s.put(slice("a", "n1", 0)).unwrap();
    s.put(slice("b", "n2", 0)).unwrap();
    let mut w = h
        .watch(&format!(
            "{SLICES}?watch=true&fieldSelector=spec.nodeName%3Dn2"
        ))
        .await;
    assert_eq!(w.next_summary().await, Some(("ADDED".into(), "b".into())));
    s.put(slice("c", "n2", 0)).unwrap();
    assert_eq!(w.next_summary().await, Some(("ADDED".into(), "c".into())));

    let mut initial = h
        .watch(&format!("{SLICES}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"))
        .await;
    for name in ["a", "b", "c"] {
        assert_eq!(
            initial.next_summary().await,
            Some(("ADDED".into(), name.into()))
        );
    }
    let end = initial.next().await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}

#[tokio::test]
async fn watch_with_selectors_sees_objects_enter_and_leave() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    s.put(slice("a", "n", 0)).unwrap();
    let from = s.resource_version();
    let mut w = h
        .watch(&format!(
            "{SLICES}?watch=true&resourceVersion={from}&labelSelector=mine"
        ))
        .await;
    s.patch(
        "resourceslices",
        "",
        "a",
        &json!({"metadata": {"labels": {"mine": "yes"}}}),
    )
    .unwrap();
    s.patch(
        "resourceslices",
        "",
        "a",
        &json!({"metadata": {"labels": {"mine": null}}}),
    )
    .unwrap();
    assert_eq!(w.next_summary().await, Some(("ADDED".into(), "a".into())));
    assert_eq!(w.next_summary().await, Some(("DELETED".into(), "a".into())));
}

#[tokio::test]
async fn watch_from_a_compacted_version_gets_410_gone() {
    let s = TestApiServer::start_with(Config {
        history_limit: 2,
        ..Config::default()
    });
    let h = Http::new(&s);
    let start = s.resource_version();
    for i in 0..4 {
        s.put(slice(&format!("s{i}"), "n", 0)).unwrap();
    }
    let mut w = h
        .watch(&format!("{SLICES}?watch=true&resourceVersion={start}"))
        .await;
    let event = w.next().await.unwrap();
    assert_eq!(event["type"], "ERROR");
    let status = &event["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], "Expired");
    let floor = s.resource_version() - 2;
    assert_eq!(
        status["message"],
        format!("too old resource version: {start} ({floor})")
    );
    assert_eq!(w.next().await, None, "the stream ends after the error");

    // The last two events are still there.
    let mut ok = h
        .watch(&format!("{SLICES}?watch=true&resourceVersion={floor}"))
        .await;
    assert_eq!(ok.next_summary().await, Some(("ADDED".into(), "s2".into())));

    s.compact();
    let mut gone = h
        .watch(&format!("{SLICES}?watch=true&resourceVersion={floor}"))
        .await;
    assert_eq!(gone.next().await.unwrap()["object"]["code"], 410);
}

#[tokio::test]
async fn watch_ends_at_timeout_seconds_and_when_cut() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let started = Instant::now();
    let mut timed = h
        .watch(&format!("{SLICES}?watch=true&timeoutSeconds=1"))
        .await;
    assert_eq!(timed.next().await, None);
    assert!(started.elapsed() >= Duration::from_secs(1));

    let mut a = h.watch(&format!("{SLICES}?watch=true")).await;
    let mut b = h.watch("/api/v1/pods?watch=true").await;
    s.wait_until_async(WAIT, |s| s.watch_count() == 2)
        .await
        .unwrap();
    assert_eq!(s.cut_watches(), 2);
    assert_eq!(a.next().await, None);
    assert_eq!(b.next().await, None);
    s.wait_until_async(WAIT, |s| s.watch_count() == 0)
        .await
        .unwrap();
}

#[tokio::test]
async fn kube_rs_watcher_relists_after_410_gone() {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};

    let s = TestApiServer::start();
    s.put(slice("a", "n", 0)).unwrap();
    let mut config = s.kube_config();
    config.default_retry = false;
    let api: Api<ResourceSlice> = Api::all(kube::Client::try_from(config).unwrap());
    let mut stream =
        watcher::watcher(api, watcher::Config::default().fields("spec.nodeName=n")).boxed();
    async fn next(
        stream: &mut futures::stream::BoxStream<'_, watcher::Result<Event<ResourceSlice>>>,
    ) -> Event<ResourceSlice> {
        tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("watcher event in time")
            .expect("stream continues")
            .expect("no watcher error")
    }
    assert!(matches!(next(&mut stream).await, Event::Init));
    assert!(
        matches!(next(&mut stream).await, Event::InitApply(o) if o.metadata.name.as_deref() == Some("a"))
    );
    assert!(matches!(next(&mut stream).await, Event::InitDone));

    // (The stream is lazy: its watch request is made by the next poll, and then sees "b".)
    s.put(slice("b", "n", 0)).unwrap();
    assert!(
        matches!(next(&mut stream).await, Event::Apply(o) if o.metadata.name.as_deref() == Some("b"))
    );
    // While the client is not polling, its watch is cut and it misses a change that history
    // no longer holds: resuming from its version gets 410 Gone, which kube-rs reports and
    // answers by listing again.
    let mark = s.request_mark();
    assert_eq!(s.cut_watches(), 1);
    s.put(slice("c", "n", 0)).unwrap();
    s.compact();
    let gone = tokio::time::timeout(WAIT, stream.next())
        .await
        .unwrap()
        .unwrap();
    match gone {
        Err(watcher::Error::WatchError(status)) => assert_eq!(status.code, 410),
        other => panic!("expected a 410 watch error, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(next(&mut stream).await, Event::Init));
    assert!(matches!(next(&mut stream).await, Event::InitApply(_)));
    let log = s.requests_since(mark);
    assert_eq!(log[0].verb, "watch", "it first tries to resume");
    assert!(
        log.iter().any(|r| r.verb == "list"),
        "then relists: {log:?}"
    );
}

#[tokio::test]
async fn delete_where_wipes_a_nodes_slices_as_the_kubelet_does() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    s.put(slice("n1-a", "n1", 0)).unwrap();
    s.put(slice("n1-b", "n1", 0)).unwrap();
    s.put(slice("n2-a", "n2", 0)).unwrap();
    let from = s.resource_version();
    let mut w = h
        .watch(&format!(
            "{SLICES}?watch=true&resourceVersion={from}&fieldSelector=spec.nodeName%3Dn1"
        ))
        .await;
    let mark = s.request_mark();
    assert_eq!(
        s.delete_where("resourceslices", |o| o["spec"]["nodeName"] == "n1"),
        2
    );
    assert_eq!(
        w.next_summary().await,
        Some(("DELETED".into(), "n1-a".into()))
    );
    assert_eq!(
        w.next_summary().await,
        Some(("DELETED".into(), "n1-b".into()))
    );
    assert!(
        s.requests_since(mark).is_empty(),
        "direct access makes no requests"
    );
    assert_eq!(s.list("resourceslices", None).len(), 1);
}

// --- metadata and garbage collection -------------------------------------------------------------

#[tokio::test]
async fn deleting_a_node_collects_the_slices_it_owns() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let node = s
        .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))
        .unwrap();
    let mut owned = slice("n1-media.liken.sh", "n1", 0);
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": "n1",
        "uid": node["metadata"]["uid"], "controller": true}]);
    s.put(owned).unwrap();
    s.put(slice("n2-media.liken.sh", "n2", 0)).unwrap();
    let from = s.resource_version();
    let mut w = h
        .watch(&format!("{SLICES}?watch=true&resourceVersion={from}"))
        .await;
    assert_eq!(h.delete("/api/v1/nodes/n1").await.status, 200);
    assert_eq!(
        w.next_summary().await,
        Some(("DELETED".into(), "n1-media.liken.sh".into()))
    );
    assert!(s.get("resourceslices", "", "n2-media.liken.sh").is_some());
}

// --- validation -------------------------------------------------------------------------------------

async fn invalid(h: &Http, obj: &Value) -> Value {
    let a = h.post(SLICES, obj).await;
    assert_eq!(a.status, 422, "{}", a.body);
    assert_eq!(a.body["reason"], "Invalid");
    assert_eq!(a.body["details"]["kind"], "ResourceSlice");
    assert_eq!(a.body["details"]["group"], "resource.k8s.io");
    a.body
}

#[tokio::test]
async fn resource_slice_limits_are_enforced_with_upstream_messages() {
    let s = TestApiServer::start();
    let h = Http::new(&s);

    let body = invalid(&h, &slice("a", "n", 129)).await;
    assert_eq!(
        body["message"],
        "ResourceSlice.resource.k8s.io \"a\" is invalid: spec.devices: Too many: 129: must have at most 128 items"
    );
    assert_eq!(
        body["details"]["causes"],
        json!([{"reason": "FieldValueTooMany", "message": "Too many: 129: must have at most 128 items", "field": "spec.devices"}])
    );
    assert_eq!(h.post(SLICES, &slice("a", "n", 128)).await.status, 201);

    let mut many = slice("b", "n", 1);
    let attrs: serde_json::Map<String, Value> = (0..33)
        .map(|i| (format!("attr{i}"), json!({"bool": true})))
        .collect();
    many["spec"]["devices"][0]["attributes"] = Value::Object(attrs);
    assert_eq!(
        invalid(&h, &many).await["message"],
        "ResourceSlice.resource.k8s.io \"b\" is invalid: spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must not exceed 32"
    );
    let mut split = slice("b", "n", 1);
    let attrs: serde_json::Map<String, Value> = (0..30)
        .map(|i| (format!("attr{i}"), json!({"bool": true})))
        .collect();
    split["spec"]["devices"][0]["attributes"] = Value::Object(attrs);
    split["spec"]["devices"][0]["capacity"] =
        json!({"a": {"value": "1"}, "b": {"value": "1"}, "c": {"value": "1"}});
    assert_eq!(
        invalid(&h, &split).await["details"]["causes"][0]["field"],
        "spec.devices[0]"
    );

    let attr = string_attribute();
    let mut long = slice("c", "n", 1);
    long["spec"]["devices"][0]["attributes"][attr] = json!({"string": "x".repeat(65)});
    assert_eq!(
        invalid(&h, &long).await["message"],
        format!(
            "ResourceSlice.resource.k8s.io \"c\" is invalid: spec.devices[0].attributes[{attr}].string: Too long: may not be more than 64 bytes"
        )
    );
    long["spec"]["devices"][0]["attributes"][attr] = json!({"string": "x".repeat(64)});
    assert_eq!(h.post(SLICES, &long).await.status, 201);

    let mut bad_names = slice("d", "n", 1);
    bad_names["spec"]["devices"][0]["name"] = json!("GPU_0");
    bad_names["spec"]["devices"][0]["attributes"] =
        json!({"1st": {"bool": true}, PCI_BUS_ID: {"string": "0000:00:02.0"}});
    let body = invalid(&h, &bad_names).await;
    let fields: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["spec.devices[0].name", "spec.devices[0].attributes[1st]"]
    );
    assert!(body["message"].as_str().unwrap().starts_with(
        "ResourceSlice.resource.k8s.io \"d\" is invalid: [spec.devices[0].name: Invalid value: \"GPU_0\": a lowercase RFC 1123 label must consist of"
    ));

    let mut dup = slice("e", "n", 2);
    dup["spec"]["devices"][1]["name"] = json!("gpu0");
    assert_eq!(
        invalid(&h, &dup).await["message"],
        "ResourceSlice.resource.k8s.io \"e\" is invalid: spec.devices[1]: Duplicate value: \"gpu0\""
    );

    let bad_meta = slice("Not_A_Name", "n", 0);
    assert_eq!(
        invalid(&h, &bad_meta).await["details"]["causes"][0]["field"],
        "metadata.name"
    );
}

#[tokio::test]
async fn resource_slice_node_selection_and_immutable_fields() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let mut none = slice("a", "n", 0);
    none["spec"].as_object_mut().unwrap().remove("nodeName");
    assert_eq!(
        invalid(&h, &none).await["message"],
        "ResourceSlice.resource.k8s.io \"a\" is invalid: spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    );
    let mut two = slice("a", "n", 0);
    two["spec"]["allNodes"] = json!(true);
    assert_eq!(
        invalid(&h, &two).await["message"],
        "ResourceSlice.resource.k8s.io \"a\" is invalid: spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set"
    );

    let created = h.post(SLICES, &slice("a", "n", 0)).await.body;
    let mut moved = created.clone();
    moved["spec"]["nodeName"] = json!("elsewhere");
    moved["spec"]["driver"] = json!("other.example.com");
    moved["spec"]["pool"]["name"] = json!("p2");
    let a = h.put(&format!("{SLICES}/a"), &moved).await;
    assert_eq!(a.status, 422);
    let fields: Vec<&str> = a.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.pool.name", "spec.driver", "spec.nodeName"]);
    assert_eq!(
        a.body["details"]["causes"][1]["message"],
        "Invalid value: \"other.example.com\": field is immutable"
    );
}

#[tokio::test]
async fn other_kinds_get_light_validation() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"},
        "spec": {"selectors": [{"cel": {"expression": ""}}]}});
    let a = h
        .post("/apis/resource.k8s.io/v1/deviceclasses", &class)
        .await;
    assert_eq!(a.status, 422);
    assert_eq!(
        a.body["message"],
        "DeviceClass.resource.k8s.io \"c\" is invalid: spec.selectors[0].cel.expression: Required value"
    );
    let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {}}]}}});
    let a = h
        .post(
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
            &claim,
        )
        .await;
    assert_eq!(a.status, 422);
    assert_eq!(
        a.body["details"]["causes"][0]["field"],
        "spec.devices.requests[0].exactly.deviceClassName"
    );
    let wrong_ns = h
        .post(
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
            &json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "x"}, "spec": {}}),
        )
        .await;
    assert_eq!(wrong_ns.status, 400);
}

#[tokio::test]
async fn owner_references_are_validated_as_apimachinery_does() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let owner = |kind: &str, name: &str, uid: &str, controller: bool| json!({"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": controller});
    let mut obj = slice("s1", "n1", 0);
    obj["metadata"]["ownerReferences"] = json!([owner("Node", "n1", "", true)]);
    let body = invalid(&h, &obj).await;
    assert_eq!(
        body["message"],
        "ResourceSlice.resource.k8s.io \"s1\" is invalid: metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty"
    );
    obj["metadata"]["ownerReferences"] = json!([
        owner("Node", "n1", "u1", true),
        owner("Node", "n2", "u2", true)
    ]);
    let body = invalid(&h, &obj).await;
    assert!(
        body["message"].as_str().unwrap().ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for Node/n1 and Node/n2"
        ),
        "{body}"
    );
    obj["metadata"]["ownerReferences"] = json!([
        owner("Node", "n1", "u1", true),
        owner("Snapshot", "x", "u3", false)
    ]);
    obj["metadata"]["ownerReferences"][1]["apiVersion"] = json!("backup.example.com/v1");
    assert_eq!(h.post(SLICES, &obj).await.status, 201);
}

#[tokio::test]
async fn consumable_capacity_off_drops_allow_multiple_allocations() {
    let s = TestApiServer::start_with(Config {
        consumable_capacity: false,
        ..Config::default()
    });
    let h = Http::new(&s);
    assert_eq!(h.get("/version").await.body["minor"], "34");
    let mut obj = slice("a", "n", 1);
    obj["spec"]["devices"][0]["allowMultipleAllocations"] = json!(true);
    let created = h.post(SLICES, &obj).await;
    assert_eq!(created.status, 201);
    assert!(
        created.body["spec"]["devices"][0]
            .get("allowMultipleAllocations")
            .is_none()
    );
    let updated = h
        .put(&format!("{SLICES}/a"), &{
            let mut o = obj.clone();
            o["metadata"]["labels"] = json!({"x": "y"});
            o
        })
        .await;
    assert!(
        updated.body["spec"]["devices"][0]
            .get("allowMultipleAllocations")
            .is_none()
    );

    s.set_consumable_capacity(true);
    let kept = h.put(&format!("{SLICES}/a"), &obj).await;
    assert_eq!(
        kept.body["spec"]["devices"][0]["allowMultipleAllocations"],
        true
    );
}

// --- faults and the log ---------------------------------------------------------------------------

#[tokio::test]
async fn injected_faults_answer_with_statuses_and_retry_after() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    s.fail_next(1, Fault::InternalError);
    s.fail_next(1, Fault::ServiceUnavailable);
    s.fail_next(
        1,
        Fault::TooManyRequests {
            retry_after_seconds: 3,
        },
    );
    let a = h.get(SLICES).await;
    assert_eq!(
        (a.status, a.body["reason"].as_str()),
        (500, Some("InternalError"))
    );
    let b = h.get(SLICES).await;
    assert_eq!(
        (b.status, b.body["reason"].as_str()),
        (503, Some("ServiceUnavailable"))
    );
    // Priority and fairness's answer: plain text and the header.
    let c = h.get(SLICES).await;
    assert_eq!(c.status, 429);
    assert_eq!(c.headers["retry-after"], "3");
    assert_eq!(c.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(c.body, "Too many requests, please try again later.\n");
    assert_eq!(h.get(SLICES).await.status, 200, "faults are used up");

    // The authorizer names the object when the request does.
    s.fail_next(1, Fault::Forbidden);
    let named = h.get(&format!("{SLICES}/s1")).await;
    assert_eq!(named.status, 403);
    assert_eq!(
        named.body["message"],
        "resourceslices.resource.k8s.io \"s1\" is forbidden: User \"system:anonymous\" cannot get resource \"resourceslices\" in API group \"resource.k8s.io\" at the cluster scope"
    );
    assert_eq!(named.body["details"]["name"], "s1");

    s.fail_next_matching(
        2,
        Fault::ServiceUnavailable,
        Some("create"),
        Some("resourceslices"),
    );
    assert_eq!(h.get(SLICES).await.status, 200, "a list is not a create");
    assert_eq!(
        h.post("/api/v1/nodes", &json!({"metadata": {"name": "n"}}))
            .await
            .status,
        201
    );
    assert_eq!(h.post(SLICES, &slice("a", "n", 0)).await.status, 503);
    assert_eq!(h.post(SLICES, &slice("a", "n", 0)).await.status, 503);
    assert_eq!(h.post(SLICES, &slice("a", "n", 0)).await.status, 201);
    let statuses: Vec<u16> = s.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [500, 503, 429, 200, 403, 200, 201, 503, 503, 201]);
}

#[tokio::test]
async fn latency_delays_answers() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    s.set_latency(Duration::from_millis(200));
    let t = Instant::now();
    assert_eq!(h.get(SLICES).await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(200));
    s.set_latency(Duration::ZERO);
}

#[test]
fn stop_refuses_connections_and_restart_serves_the_same_objects_on_the_same_port() {
    let s = TestApiServer::start();
    s.put(slice("a", "n", 0)).unwrap();
    let addr = s.addr();
    s.stop();
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "nothing listens after stop"
    );
    s.restart();
    assert_eq!(s.addr(), addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let h = Http::new(&s);
        assert_eq!(names(&h.get(SLICES).await.body), ["a"]);
    });
}

#[tokio::test]
async fn stop_ends_open_watches() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    let mut w = h.watch(&format!("{SLICES}?watch=true")).await;
    s.wait_until_async(WAIT, |s| s.watch_count() == 1)
        .await
        .unwrap();
    s.stop();
    assert_eq!(w.next().await, None);
}

#[tokio::test]
async fn the_log_records_every_request() {
    let s = TestApiServer::start();
    let h = Http::new(&s);
    h.post(SLICES, &slice("a", "n", 0)).await;
    let mark = s.request_mark();
    h.get(&format!("{SLICES}?fieldSelector=spec.nodeName%3Dn"))
        .await;
    h.get(&format!("{SLICES}/a")).await;
    assert!(s.writes_since(mark).is_empty(), "reads are not writes");
    h.merge(
        &format!("{SLICES}/a"),
        &json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    let log = s.requests_since(mark);
    let summary: Vec<(&str, &str, u16)> = log
        .iter()
        .map(|r| (r.verb.as_str(), r.path.as_str(), r.status))
        .collect();
    assert_eq!(
        summary,
        [
            ("list", SLICES, 200),
            ("get", "/apis/resource.k8s.io/v1/resourceslices/a", 200),
            ("patch", "/apis/resource.k8s.io/v1/resourceslices/a", 200),
        ]
    );
    assert_eq!(
        log[0].query_param("fieldSelector").as_deref(),
        Some("spec.nodeName=n")
    );
    assert_eq!(
        log[2].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(s.writes_since(mark).len(), 1);
}

#[test]
fn waits_wake_on_changes_made_elsewhere() {
    let s = TestApiServer::start();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            s.put(slice("late", "n", 0)).unwrap();
        });
        s.wait_until(WAIT, |s| s.get("resourceslices", "", "late").is_some())
            .unwrap();
    });
    let err = s
        .wait_until(Duration::from_millis(50), |s| {
            s.get("resourceslices", "", "never").is_some()
        })
        .unwrap_err();
    assert!(err.to_string().contains("condition not met"));
}

#[tokio::test]
async fn a_40000_device_fleet_lists_in_pages() {
    // Devices without attributes keep this test fast in debug builds; the list benchmark
    // (benches/apiserver.rs) measures full-size devices.
    let s = TestApiServer::start();
    for i in 0..(40_000 / 128) + 1 {
        let mut obj = slice(
            &format!("node-{i:04}-media.liken.sh"),
            &format!("node-{i:04}"),
            0,
        );
        obj["spec"]["devices"] = (0..128)
            .map(|d| json!({"name": format!("gpu{d}")}))
            .collect();
        s.put(obj).unwrap();
    }
    let api: Api<ResourceSlice> = Api::all(kube::Client::try_from(s.kube_config()).unwrap());
    let mut devices = 0;
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        devices += page
            .items
            .iter()
            .map(|s| s.spec.devices.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    assert_eq!(devices, 313 * 128);
}

// --- kubectl ----------------------------------------------------------------------------------------

/// kubectl with a scrubbed environment. Tests that use it are ignored where build.rs found no
/// kubectl (and always run in CI), so a missing kubectl here is a failure, not a skip.
fn kubectl(s: &TestApiServer, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", s.kubeconfig().parent().unwrap())
        .arg("--kubeconfig")
        .arg(s.kubeconfig())
        .args(args)
        .output();
    match out {
        Ok(o) => (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) => panic!("run kubectl: {e} (hint: install kubectl 1.32)"),
    }
}

#[test]
#[cfg_attr(not(have_kubectl), ignore = "needs kubectl on PATH (kubectl 1.32)")]
fn kubectl_gets_slices_and_pods() {
    let s = TestApiServer::start();
    s.put(slice("n1-media.liken.sh", "n1", 1)).unwrap();
    s.put(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "ns"}, "spec": {"nodeName": "n1"},
        "status": {"phase": "Pending"}}))
        .unwrap();
    let (ok, out, err) = kubectl(&s, &["get", "resourceslices"]);
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "NODE", "DRIVER", "POOL", "AGE"]);
    assert_eq!(
        lines[1][..4],
        ["n1-media.liken.sh", "n1", "media.liken.sh", "n1"]
    );

    let (ok, out, err) = kubectl(
        &s,
        &["get", "resourceslice", "n1-media.liken.sh", "-o", "yaml"],
    );
    assert!(ok, "{err}");
    let back: Value = serde_yaml::from_str(&out).unwrap();
    let capability = Capability::ALL[0].attribute();
    assert_eq!(
        back["spec"]["devices"][0]["attributes"][capability]["bool"],
        true
    );

    let (ok, out, err) = kubectl(&s, &["get", "pods", "-n", "ns"]);
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).unwrap().starts_with("p1 "), "{out}");

    let (ok, _, err) = kubectl(&s, &["get", "resourceslice", "missing"]);
    assert!(!ok);
    assert!(
        err.contains(
            "Error from server (NotFound): resourceslices.resource.k8s.io \"missing\" not found"
        ),
        "{err}"
    );
}

#[test]
#[cfg_attr(not(have_kubectl), ignore = "needs kubectl on PATH (kubectl 1.32)")]
fn kubectl_applies_and_deletes_classes_and_templates() {
    let s = TestApiServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    let manifest = |expr: &str| {
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: decode-10bit\nspec:\n  selectors:\n  - cel:\n      expression: {expr}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: film\n  namespace: media\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly:\n          deviceClassName: decode-10bit\n"
        )
    };
    std::fs::write(&file, manifest("device.driver == 'media.liken.sh'")).unwrap();
    let path = file.to_str().unwrap();
    let (ok, out, err) = kubectl(&s, &["apply", "-f", path]);
    assert!(ok, "{err}");
    assert!(
        out.contains("deviceclass.resource.k8s.io/decode-10bit created"),
        "{out}"
    );
    assert!(
        out.contains("resourceclaimtemplate.resource.k8s.io/film created"),
        "{out}"
    );
    assert!(s.get("resourceclaimtemplates", "media", "film").is_some());

    std::fs::write(&file, manifest("device.driver == 'other'")).unwrap();
    let (ok, out, err) = kubectl(&s, &["apply", "-f", path]);
    assert!(ok, "{err}");
    assert!(
        out.contains("deviceclass.resource.k8s.io/decode-10bit configured"),
        "{out}"
    );
    assert!(
        out.contains("resourceclaimtemplate.resource.k8s.io/film unchanged"),
        "{out}"
    );
    let class = s.get("deviceclasses", "", "decode-10bit").unwrap();
    assert_eq!(
        class["spec"]["selectors"][0]["cel"]["expression"],
        "device.driver == 'other'"
    );
    assert_eq!(class["metadata"]["generation"], 2);

    let (ok, out, err) = kubectl(&s, &["delete", "-f", path]);
    assert!(ok, "{err}");
    assert!(
        out.contains("deviceclass.resource.k8s.io \"decode-10bit\" deleted"),
        "{out}"
    );
    assert!(s.get("deviceclasses", "", "decode-10bit").is_none());
    assert!(s.get("resourceclaimtemplates", "media", "film").is_none());
}

/// kubectl's `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` gets server-side Tables
/// with kube-apiserver's ResourceSlice columns (k/k pkg/printers/internalversion: Name, Node,
/// Driver, Pool, Age) and the rows' metadata, paged like a list, the same from the rows kept
/// per object version as from a first listing.
#[tokio::test]
async fn tables_for_kubectl_have_upstreams_columns_and_pages() {
    let server = TestApiServer::start();
    for i in 0..3 {
        server
            .put(slice(&format!("s{i}"), &format!("n{i}"), 1))
            .unwrap();
    }
    let h = Http::new(&server);
    let table = |path: String| {
        let h = &h;
        async move {
            let req = http::Request::get(path)
                .header(
                    "accept",
                    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
                )
                .body(kube::client::Body::from(Vec::new()))
                .unwrap();
            let res = h.client.send(req).await.unwrap();
            assert_eq!(res.status(), 200);
            let bytes = res.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        }
    };
    for round in 0..2 {
        let first = table(format!("{SLICES}?limit=2")).await;
        assert_eq!(first["kind"], "Table", "round {round}");
        assert_eq!(first["apiVersion"], "meta.k8s.io/v1");
        let columns: Vec<&str> = first["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, ["Name", "Node", "Driver", "Pool", "Age"]);
        let rows = first["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        let cells = rows[0]["cells"].as_array().unwrap();
        assert_eq!(
            cells[..4],
            [
                json!("s0"),
                json!("n0"),
                json!("media.liken.sh"),
                json!("n0")
            ]
        );
        let age = cells[4].as_str().unwrap();
        assert!(age.ends_with('s') || age.ends_with('m'), "{age}");
        assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(rows[0]["object"]["metadata"]["name"], "s0");
        let token = first["metadata"]["continue"].as_str().unwrap();
        let next = table(format!("{SLICES}?limit=2&continue={token}")).await;
        let rows = next["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["cells"][0], "s2");
        assert!(next["metadata"].get("continue").is_none());
    }
}
