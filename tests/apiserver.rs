//! Tests of the test API server itself (tests/support/apiserver): every verb, error shape and
//! fault, over real HTTP, and with kubectl when it is installed.

mod support;

use support::apiserver::TestApiServer;

#[test]
fn starts() {
    let s = TestApiServer::start();
    assert!(s.base_url().starts_with("http://127.0.0.1:"));
}

#[test]
#[ignore = "exploration"]
fn explore_kubectl() {
    let s = TestApiServer::start();
    s.put(serde_json::json!({"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}})).unwrap();
    s.put(serde_json::json!({"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"n1-media.liken.sh"},
        "spec":{"driver":"media.liken.sh","nodeName":"n1","pool":{"name":"n1","generation":1,"resourceSliceCount":1},
        "devices":[{"name":"gpu0","attributes":{"decodeH264":{"bool":true}}}]}})).unwrap();
    s.put(serde_json::json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"default"},"spec":{"containers":[{"name":"c","image":"x"}]}})).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("dc.yaml");
    std::fs::write(&f, "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: decode\nspec:\n  selectors:\n  - cel:\n      expression: device.driver == 'media.liken.sh'\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: t\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly:\n          deviceClassName: decode\n").unwrap();
    let f2 = dir.path().join("dc2.yaml");
    std::fs::write(&f2, "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: decode\n  labels: {a: b}\nspec:\n  selectors:\n  - cel:\n      expression: device.driver == 'x'\n").unwrap();
    let args: Vec<Vec<&str>> = vec![
        vec!["get", "resourceslices"],
        vec!["get", "resourceslice", "n1-media.liken.sh", "-o", "yaml"],
        vec!["get", "pods", "-n", "default"],
        vec!["get", "pods", "-A", "-o", "wide"],
        vec!["apply", "-f", f.to_str().unwrap()],
        vec!["apply", "-f", f2.to_str().unwrap()],
        vec!["get", "deviceclass", "decode", "-o", "yaml"],
        vec!["delete", "-f", f.to_str().unwrap()],
        vec!["delete", "resourceslice", "n1-media.liken.sh"],
        vec!["get", "resourceslices"],
        vec!["get", "nodes"],
    ];
    for a in args {
        let out = std::process::Command::new("kubectl").arg("--kubeconfig").arg(s.kubeconfig()).args(&a).output().unwrap();
        println!("$ kubectl {}\n{}\n{}status {:?}", a.join(" "), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr), out.status);
    }
    for r in s.requests() { println!("{} {} {}?{} {} {:?}", r.verb, r.method, r.path, r.query, r.status, r.content_type); }
}
