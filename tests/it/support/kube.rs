//! A blocking client for tests on the real control plane: get, create, replace, merge-patch and
//! delete any object by its API path, as the cluster's admin (or whoever the kubeconfig names).
//! Many times faster than a kubectl process per call, which matters in loops that wait.

use std::path::Path;

use serde_json::Value;

/// The API path of a cluster-scoped `resource` (`resourceslices`, `nodes`...), and of `name`.
pub fn path(resource: &str, name: Option<&str>) -> String {
    let base = match resource {
        "nodes" => "/api/v1/nodes".to_string(),
        "resourceslices" | "deviceclasses" => format!("/apis/resource.k8s.io/v1/{resource}"),
        "validatingadmissionpolicies" | "validatingadmissionpolicybindings" => {
            format!("/apis/admissionregistration.k8s.io/v1/{resource}")
        }
        "flowschemas" | "prioritylevelconfigurations" => {
            format!("/apis/flowcontrol.apiserver.k8s.io/v1/{resource}")
        }
        other => panic!("no API path known for {other}"),
    };
    match name {
        Some(name) => format!("{base}/{name}"),
        None => base,
    }
}

/// A client with its own single-threaded runtime.
pub struct Kube {
    client: kube::Client,
    runtime: tokio::runtime::Runtime,
}

impl Kube {
    pub fn new(kubeconfig: &Path) -> Kube {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let client = runtime.block_on(async {
            let file =
                kube::config::Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .expect("a client configuration");
            kube::Client::try_from(config).expect("a client")
        });
        Kube { client, runtime }
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &Value)>,
    ) -> Result<Value, kube::Error> {
        let mut request = http::Request::builder().method(method).uri(path);
        let bytes = match body {
            Some((content_type, body)) => {
                request = request.header("content-type", content_type);
                serde_json::to_vec(body).unwrap()
            }
            None => Vec::new(),
        };
        let request = request.body(bytes).unwrap();
        let _guard = self.runtime.enter();
        self.runtime.block_on(self.client.request::<Value>(request))
    }

    /// The object at `path`, or None when the server answers 404.
    pub fn get(&self, path: &str) -> Option<Value> {
        match self.call("GET", path, None) {
            Ok(v) => Some(v),
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// The object or list at `path`, or the server's refusal.
    pub fn try_get(&self, path: &str) -> Result<Value, kube::Error> {
        self.call("GET", path, None)
    }

    /// Deletes the object at `path` with `options` (a DeleteOptions), or the server's refusal.
    pub fn delete_with(&self, path: &str, options: &Value) -> Result<Value, kube::Error> {
        self.call("DELETE", path, Some(("application/json", options)))
    }

    /// Creates `object` in the collection at `path`; returns what was stored.
    pub fn create(&self, path: &str, object: &Value) -> Result<Value, kube::Error> {
        self.call("POST", path, Some(("application/json", object)))
    }

    /// Replaces the object at `path` with `object` (its resourceVersion, if any, must be current).
    pub fn replace(&self, path: &str, object: &Value) -> Result<Value, kube::Error> {
        self.call("PUT", path, Some(("application/json", object)))
    }

    /// A JSON merge patch of the object at `path`.
    pub fn patch(&self, path: &str, patch: &Value) -> Result<Value, kube::Error> {
        self.call("PATCH", path, Some(("application/merge-patch+json", patch)))
    }

    /// Deletes the object at `path`; true if it existed.
    pub fn delete(&self, path: &str) -> bool {
        match self.call("DELETE", path, None) {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 => false,
            Err(e) => panic!("DELETE {path}: {e}"),
        }
    }

    /// Creates `object`, or replaces what has its name (for setup that may run twice).
    pub fn apply(&self, collection: &str, object: &Value) -> Value {
        let name = object["metadata"]["name"].as_str().expect("a name");
        let at = format!("{collection}/{name}");
        match self.get(&at) {
            Some(stored) => {
                let mut object = object.clone();
                object["metadata"]["resourceVersion"] =
                    stored["metadata"]["resourceVersion"].clone();
                self.replace(&at, &object)
            }
            None => self.create(collection, object),
        }
        .unwrap_or_else(|e| panic!("apply {at}: {e}"))
    }
}
