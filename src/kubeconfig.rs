//! Finding the API server, the one way both programs do it, as kubectl does: the `--kubeconfig`
//! file, else `KUBECONFIG`, else `~/.kube/config`, else the pod's service account; `--context`
//! picks a context of that file. The result carries the namespace in effect for the context
//! (`contexts[].context.namespace`, the service account's namespace in a pod, else `default`).
//!
//! Each program adds its own hint to a failure (the agent runs in a pod, the plugin beside a
//! kubectl), so [`KubeconfigError`] states only what went wrong.

use std::path::{Path, PathBuf};

/// Why no API server could be found.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The kubeconfig exists but cannot be read or used (unparseable, no such context...).
    #[error("load kubeconfig: {cause}")]
    Invalid { cause: String },
    /// Nothing to read at all.
    #[error(
        "no kubeconfig: KUBECONFIG is not set, ~/.kube/config does not exist, and this is not a pod in a cluster"
    )]
    Missing,
}

/// Where to look, as the command line says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

/// Loads the configuration `source` names. Nothing is sent to the server.
pub(crate) async fn load(source: &Source) -> Result<kube::Config, KubeconfigError> {
    let options = kube::config::KubeConfigOptions {
        context: source.context.clone(),
        ..Default::default()
    };
    match (&source.kubeconfig, &source.context) {
        (Some(path), _) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(invalid)?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(invalid)
        }
        // As kubectl: KUBECONFIG, else ~/.kube/config, else the pod's service account.
        (None, None) => kube::Config::infer().await.map_err(|e| {
            if no_kubeconfig() {
                KubeconfigError::Missing
            } else {
                invalid(e)
            }
        }),
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(invalid),
    }
}

/// Whether there is no kubeconfig to read at all (then the in-cluster attempt's failure is not
/// what the user needs to hear).
fn no_kubeconfig() -> bool {
    std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty())
        && std::env::var_os("HOME")
            .is_none_or(|home| !Path::new(&home).join(".kube/config").exists())
}

fn invalid(e: impl std::error::Error) -> KubeconfigError {
    KubeconfigError::Invalid { cause: chain(&e) }
}

/// The error and its sources, joined, without repeating what an outer message already says.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\n\
        contexts:\n- name: x\n  context: {cluster: c, user: u, namespace: media}\n- name: y\n  context: {cluster: c, user: u}\n\
        current-context: x\nusers:\n- name: u\n  user: {}\n";

    #[tokio::test]
    async fn the_contexts_namespace_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let source = |context: Option<&str>| Source {
            kubeconfig: Some(path.clone()),
            context: context.map(str::to_owned),
        };
        assert_eq!(
            load(&source(None)).await.unwrap().default_namespace,
            "media"
        );
        assert_eq!(
            load(&source(Some("y"))).await.unwrap().default_namespace,
            "default"
        );
        let err = load(&source(Some("nope"))).await.unwrap_err();
        assert!(err.to_string().starts_with("load kubeconfig: "), "{err}");
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
