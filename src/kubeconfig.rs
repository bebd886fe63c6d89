//! Finding the API server, the one way both programs do it, as kubectl does: `--kubeconfig`, else
//! `KUBECONFIG`'s files merged, else `~/.kube/config`, else the pod's service account; `--context`
//! picks a context, and the result carries its namespace.
//!
//! The rules are client-go's (`tools/clientcmd/loader.go`), which kube-rs's loader does not all
//! follow (it fails on a missing file of the list); docs/user-guide.md states them. Each program
//! adds its own hint, so [`KubeconfigError`] states only what went wrong.

mod exec;
mod read;

use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;

pub use exec::{ExecError, ExecOptions, MAX_STDOUT, STDERR_TAIL, Stderr};
pub use read::{MAX_KUBECONFIG, MAX_NAMED_FILE, NamedFileError, ReadFault};

/// Why no API server could be found.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The merged kubeconfig cannot be used (no current context, bad URL...).
    // A cause may quote a value of the file (kube-rs's do), of any length.
    #[error("load kubeconfig: {}", crate::text::elide(.cause, MAX_SHOWN_CAUSE))]
    Invalid { cause: String },
    /// The context `--context` or `current-context` names is not one of the kubeconfig's
    /// (client-go: "context was not found for specified context").
    #[error(
        "load kubeconfig: {named} {name:?} {is_not} {files}, which has {contexts}",
        name = crate::text::elide(.name, MAX_SHOWN),
        named = if *.by_flag { "the context" } else { "current-context" },
        is_not = if *.by_flag { "is not in" } else { "names no context of" },
        contexts = listed(.known)
    )]
    NoSuchContext {
        name: String,
        /// `--context` named it (else the kubeconfig's `current-context`).
        by_flag: bool,
        /// The file or files read, as a message names them.
        files: String,
        /// The kubeconfig's contexts, sorted as `kubectl config get-contexts` sorts them.
        known: Vec<String>,
    },
    /// One file cannot be read or parsed.
    #[error("load kubeconfig {path}: {cause}")]
    File {
        path: String,
        cause: String,
        /// Where the path came from, for the hint.
        origin: Origin,
        /// What is wrong with it, for the hint.
        fault: FileFault,
    },
    /// Nothing to read at all.
    #[error("no kubeconfig: {looked}, and this is not a pod in a cluster")]
    Missing { looked: String },
    /// A file the context's cluster or user names cannot be used.
    #[error("load kubeconfig: {0}")]
    NamedFile(#[from] NamedFileError),
    /// The context's user's exec plugin gave no credential.
    #[error("{0}")]
    Exec(#[from] ExecError),
}

/// Where a kubeconfig file's path came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--kubeconfig`.
    Flag,
    /// The `KUBECONFIG` list.
    Env,
    /// `~/.kube/config`.
    Home,
}

/// What is wrong with one kubeconfig file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFault {
    /// It does not exist (only `--kubeconfig`'s must).
    NotThere,
    /// It is a directory.
    Directory,
    /// It cannot be read, or is not a kubeconfig.
    Unusable,
}

/// How many contexts a message lists before it counts the rest.
const CONTEXTS_LISTED: usize = 5;

/// How many of `KUBECONFIG`'s files a message names before it counts the rest.
const PATHS_LISTED: usize = 3;

/// The most of a name or path from the kubeconfig a message repeats (a `current-context` of a
/// megabyte is cut in its middle).
const MAX_SHOWN: usize = 200;

/// The most of a cause from kube-rs an error quotes.
const MAX_SHOWN_CAUSE: usize = 400;

/// `3 contexts: a, b, c`, the first few of many and how many more, or `no contexts`.
fn listed(known: &[String]) -> String {
    match known.len() {
        0 => "no contexts".to_string(),
        n => {
            let shown: Vec<String> = known[..n.min(CONTEXTS_LISTED)]
                .iter()
                .map(|k| crate::text::elide(k, MAX_SHOWN).into_owned())
                .collect();
            let shown = shown.join(", ");
            let more = n.saturating_sub(CONTEXTS_LISTED);
            let noun = if n == 1 { "context" } else { "contexts" };
            if more > 0 {
                format!("{n} {noun}: {shown} and {more} more")
            } else {
                format!("{n} {noun}: {shown}")
            }
        }
    }
}

impl KubeconfigError {
    /// For [`KubeconfigError::NoSuchContext`]: the kubeconfig's context that was most likely
    /// meant (a prefix either way, or a few letters off), if one is.
    pub fn similar_context(&self) -> Option<&str> {
        let KubeconfigError::NoSuchContext { name, known, .. } = self else {
            return None;
        };
        let typed = name.to_ascii_lowercase();
        known
            .iter()
            // A distance is at least the difference in length: names more than three apart are
            // never close, and are not compared (a huge name against thousands would be slow).
            .filter(|k| {
                k.len().abs_diff(typed.len()) <= 3
                    || typed.starts_with(&k.to_ascii_lowercase())
                    || k.to_ascii_lowercase().starts_with(&typed)
            })
            .map(|k| {
                let lower = k.to_ascii_lowercase();
                let distance = if lower.starts_with(&typed) || typed.starts_with(&lower) {
                    0
                } else {
                    strsim::damerau_levenshtein(&typed, &lower)
                };
                (distance, k)
            })
            .filter(|(distance, k)| *distance <= (k.len() / 3).clamp(1, 3))
            .min_by_key(|(distance, _)| *distance)
            .map(|(_, k)| k.as_str())
    }
}

/// Where to look, as the command line says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

/// Loads the configuration `source` names, its context's files read and its exec plugin run
/// as `exec` says. Nothing is sent to the server.
pub(crate) async fn load(
    source: &Source,
    exec: ExecOptions,
) -> Result<kube::Config, KubeconfigError> {
    let Some((mut merged, flag)) = chosen(source)? else {
        return kube::Config::incluster().map_err(|_| KubeconfigError::Missing {
            looked: source_files(source).looked(),
        });
    };
    credentials(&mut merged, flag.as_deref(), exec).await?;
    let options = kube::config::KubeConfigOptions {
        context: flag,
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(merged, &options)
        .await
        .map_err(|e| KubeconfigError::Invalid {
            cause: one_line(&chain(&e)),
        })
}

/// The namespace of the context `source` chooses (`None`: the context names none), reading
/// only the kubeconfig: no file it names, no plugin, as kubectl reads it for `-f`. With no
/// kubeconfig at all, the pod's own (in a cluster), else `None`.
pub(crate) fn context_namespace(source: &Source) -> Result<Option<String>, KubeconfigError> {
    let Some((merged, flag)) = chosen(source)? else {
        return Ok(kube::Config::incluster()
            .ok()
            .map(|config| config.default_namespace));
    };
    let name = flag.or(merged.current_context);
    Ok(merged
        .contexts
        .into_iter()
        .find(|c| Some(&c.name) == name.as_ref())
        .and_then(|c| c.context?.namespace)
        .filter(|n| !n.is_empty()))
}

/// The files `source` names, with the environment's `KUBECONFIG` and `HOME`.
fn source_files(source: &Source) -> Files {
    let kubeconfig = std::env::var_os("KUBECONFIG");
    let home = std::env::var_os("HOME").map(PathBuf::from);
    files(source, kubeconfig.as_deref(), home.as_deref())
}

/// The merged kubeconfig and the context `--context` chose (`None`: the current one), checked
/// to be one of its contexts; `None` when there is no kubeconfig file.
fn chosen(source: &Source) -> Result<Option<(Kubeconfig, Option<String>)>, KubeconfigError> {
    let files = source_files(source);
    let Some(merged) = read_merged(&files)? else {
        return Ok(None);
    };
    // As kubectl, `--context ""` is no choice: the current context.
    let flag = source.context.clone().filter(|c| !c.is_empty());
    if let Some((name, by_flag)) = flag
        .clone()
        .map(|c| (c, true))
        .or_else(|| merged.current_context.clone().map(|c| (c, false)))
        && !merged.contexts.iter().any(|c| c.name == name)
    {
        let mut known: Vec<String> = merged.contexts.iter().map(|c| c.name.clone()).collect();
        known.sort();
        return Err(KubeconfigError::NoSuchContext {
            name,
            by_flag,
            files: files.described(),
            known,
        });
    }
    Ok(Some((merged, flag)))
}

/// The context's cluster and user made ready for kube-rs: the files they name read within
/// bounds and inlined, and the user's exec plugin run here (see [`exec`]), its credential put
/// in its place. Other clusters and users are left unread, as kubectl leaves them.
async fn credentials(
    merged: &mut Kubeconfig,
    flag: Option<&str>,
    options: ExecOptions,
) -> Result<(), KubeconfigError> {
    let name = flag.or(merged.current_context.as_deref());
    let Some(context) = merged
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == name)
        .and_then(|c| c.context.clone())
    else {
        return Ok(());
    };
    let cluster = merged
        .clusters
        .iter_mut()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_mut());
    let user = context.user.as_deref().and_then(|user| {
        merged
            .auth_infos
            .iter_mut()
            .find(|u| u.name == user)
            .and_then(|u| u.auth_info.as_mut())
    });
    read::inline_named_files(cluster, user)?;
    let cluster = merged
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref());
    let info = cluster.map(exec_cluster);
    let Some(user) = context.user.as_deref().and_then(|user| {
        merged
            .auth_infos
            .iter_mut()
            .find(|u| u.name == user)
            .and_then(|u| u.auth_info.as_mut())
    }) else {
        return Ok(());
    };
    // kube-rs's order: a password, a token or a token file comes before the plugin.
    let before = user.username.is_some() || user.token.is_some() || user.token_file.is_some();
    let Some(plugin) = user.exec.take().filter(|_| !before) else {
        return Ok(());
    };
    match exec::credential(&plugin, info, options).await? {
        exec::Credential::Token(token) => user.token = Some(token.into()),
        exec::Credential::Certificate { certificate, key } => {
            use base64::Engine as _;
            let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
            user.client_certificate_data = Some(encode(&certificate));
            user.client_key_data = Some(encode(&key).into());
        }
    }
    Ok(())
}

/// `spec.cluster` of `KUBERNETES_EXEC_INFO` (client.authentication.k8s.io `Cluster`).
fn exec_cluster(cluster: &kube::config::Cluster) -> serde_json::Value {
    let mut value = serde_json::json!({ "server": cluster.server });
    let fields = [
        ("tls-server-name", cluster.tls_server_name.clone()),
        (
            "certificate-authority-data",
            cluster.certificate_authority_data.clone(),
        ),
        ("proxy-url", cluster.proxy_url.clone()),
    ];
    for (field, given) in fields {
        if let Some(given) = given {
            value[field] = given.into();
        }
    }
    if let Some(skip) = cluster.insecure_skip_tls_verify {
        value["insecure-skip-tls-verify"] = skip.into();
    }
    value
}

/// The files to read, in order of precedence.
#[derive(Debug, PartialEq, Eq)]
enum Files {
    /// `--kubeconfig`: this one only, and it must exist.
    Explicit(PathBuf),
    /// From `KUBECONFIG`: those that exist, merged.
    Listed(Vec<PathBuf>),
    /// `KUBECONFIG` lists nothing: `~/.kube/config`, if it exists (`None`: no home).
    Home(Option<PathBuf>),
}

impl Files {
    /// The files read, as a message names them.
    fn described(&self) -> String {
        match self {
            Files::Explicit(path) | Files::Home(Some(path)) => path.display().to_string(),
            Files::Listed(paths) if paths.len() == 1 => paths[0].display().to_string(),
            Files::Listed(_) => "the files KUBECONFIG lists".to_string(),
            Files::Home(None) => "the kubeconfig".to_string(),
        }
    }

    fn origin(&self) -> Origin {
        match self {
            Files::Explicit(_) => Origin::Flag,
            Files::Listed(_) => Origin::Env,
            Files::Home(_) => Origin::Home,
        }
    }

    /// Where we looked, for the message when nothing was there.
    fn looked(&self) -> String {
        match self {
            Files::Explicit(path) => format!("{} does not exist", path.display()),
            Files::Listed(paths) if paths.is_empty() => "KUBECONFIG lists no file".to_string(),
            Files::Listed(paths) => {
                let shown: Vec<String> = paths
                    .iter()
                    .take(PATHS_LISTED)
                    .map(|p| crate::text::elide(&p.display().to_string(), MAX_SHOWN).into_owned())
                    .collect();
                match paths.len().saturating_sub(PATHS_LISTED) {
                    0 => format!(
                        "none of the files KUBECONFIG lists exists ({})",
                        shown.join(", ")
                    ),
                    more => format!(
                        "none of the {} files KUBECONFIG lists exists ({} and {more} more)",
                        paths.len(),
                        shown.join(", ")
                    ),
                }
            }
            Files::Home(_) => "KUBECONFIG is not set, ~/.kube/config does not exist".to_string(),
        }
    }
}

/// client-go's precedence (`NewDefaultClientConfigLoadingRules`, `Load`).
fn files(source: &Source, kubeconfig: Option<&std::ffi::OsStr>, home: Option<&Path>) -> Files {
    if let Some(path) = &source.kubeconfig {
        return Files::Explicit(path.clone());
    }
    // As Go's `filepath.SplitList(os.Getenv("KUBECONFIG"))`: unset and empty are both "no
    // list"; otherwise the entries, empty ones dropped when read, duplicates read once.
    match kubeconfig.filter(|v| !v.is_empty()) {
        Some(list) => {
            // A set: tens of thousands of paths, each looked up once.
            let mut seen = std::collections::HashSet::new();
            let paths = std::env::split_paths(list)
                .filter(|p| !p.as_os_str().is_empty() && seen.insert(p.clone()))
                .collect();
            Files::Listed(paths)
        }
        None => Files::Home(home.map(|h| h.join(".kube/config"))),
    }
}

/// Reads and merges the files; `None` when none of them exists.
fn read_merged(files: &Files) -> Result<Option<Kubeconfig>, KubeconfigError> {
    let (paths, must_exist): (&[PathBuf], bool) = match files {
        Files::Explicit(path) => (std::slice::from_ref(path), true),
        Files::Listed(paths) => (paths, false),
        Files::Home(Some(path)) => (std::slice::from_ref(path), false),
        Files::Home(None) => (&[], false),
    };
    let mut merged: Option<Kubeconfig> = None;
    for path in paths {
        let file_error = |fault: FileFault, cause: String| KubeconfigError::File {
            path: path.display().to_string(),
            cause,
            origin: files.origin(),
            fault,
        };
        if !path.exists() {
            if must_exist {
                return Err(file_error(FileFault::NotThere, "no such file".to_string()));
            }
            continue;
        }
        // client-go reads a directory and fails ("read DIR: is a directory"); kube-rs says it
        // with the path quoted twice. A directory is no kubeconfig, whichever list names it.
        if path.is_dir() {
            return Err(file_error(
                FileFault::Directory,
                "it is a directory, not a kubeconfig file".to_string(),
            ));
        }
        let config = read::kubeconfig(path).map_err(|e| match e {
            read::FileError::Read(fault) => file_error(FileFault::Unusable, fault.to_string()),
            read::FileError::Parse(cause) => file_error(FileFault::Unusable, cause),
        })?;
        if let Some(name) = repeated_name(&config) {
            return Err(file_error(FileFault::Unusable, name));
        }
        merged = Some(match merged {
            None => normalised(config),
            Some(first) => merge(first, config),
        });
    }
    Ok(merged)
}

/// An empty `current-context` is "not set" (Go's zero value), so a later file's counts.
fn normalised(mut config: Kubeconfig) -> Kubeconfig {
    if config.current_context.as_deref() == Some("") {
        config.current_context = None;
    }
    config
}

/// client-go's merge of `next` under `first`: the first file to set a map key wins, whole; the
/// first non-empty `current-context` wins. Files do not have to agree on `kind` and
/// `apiVersion` (client-go does not look), so they are not compared.
fn merge(first: Kubeconfig, next: Kubeconfig) -> Kubeconfig {
    let mut next = normalised(next);
    next.kind = None;
    next.api_version = None;
    let mut merged = first;
    append_new(&mut merged.clusters, next.clusters, |c| &c.name);
    append_new(&mut merged.auth_infos, next.auth_infos, |u| &u.name);
    append_new(&mut merged.contexts, next.contexts, |c| &c.name);
    merged.current_context = merged.current_context.or(next.current_context);
    merged.preferences = merged.preferences.or(next.preferences);
    merged.extensions = merged.extensions.or(next.extensions);
    merged
}

/// Appends the entries of `next` whose names `kept` lacks. By name in a set, not a scan per
/// entry: files of tens of thousands of clusters merge in linear time.
fn append_new<T>(kept: &mut Vec<T>, next: Vec<T>, name: impl Fn(&T) -> &String) {
    let mut names: std::collections::HashSet<String> =
        kept.iter().map(|k| name(k).clone()).collect();
    for entry in next {
        if names.insert(name(&entry).clone()) {
            kept.push(entry);
        }
    }
}

/// A cluster, user or context named twice in one file, as client-go's conversion refuses it.
fn repeated_name(config: &Kubeconfig) -> Option<String> {
    fn first_repeat<'a>(names: impl Iterator<Item = &'a String>) -> Option<&'a String> {
        let mut seen = std::collections::HashSet::new();
        names.into_iter().find(|n| !seen.insert(*n))
    }
    let lists = [
        (
            "cluster",
            first_repeat(config.clusters.iter().map(|c| &c.name)),
        ),
        (
            "user",
            first_repeat(config.auth_infos.iter().map(|u| &u.name)),
        ),
        (
            "context",
            first_repeat(config.contexts.iter().map(|c| &c.name)),
        ),
    ];
    lists.into_iter().find_map(|(what, name)| {
        name.map(|n| format!("duplicate {what} name {n:?} (hint: each {what} needs its own name)"))
    })
}

/// YAML parsers' messages can span lines (the first says what and where, the rest draw the
/// place with a caret); an error is one line, so only the first is kept.
fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default().trim_end();
    // serde_saphyr starts its first line with its own "error: ".
    first.replacen(": error: ", ": ", 1)
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

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn cluster<'a>(config: &'a Kubeconfig, name: &str) -> &'a kube::config::Cluster {
        let named = config.clusters.iter().find(|c| c.name == name).unwrap();
        named.cluster.as_ref().unwrap()
    }

    #[test]
    fn the_files_are_kubectls() {
        let source = |kubeconfig: Option<&str>| Source {
            kubeconfig: kubeconfig.map(PathBuf::from),
            context: None,
        };
        let home = Path::new("/home/u");
        // --kubeconfig alone, whatever KUBECONFIG says.
        assert_eq!(
            files(&source(Some("/k")), Some("/a:/b".as_ref()), Some(home)),
            Files::Explicit("/k".into())
        );
        // Split at ':', empty entries dropped, a repeated path read once, order kept.
        assert_eq!(
            files(&source(None), Some("/b::/a:/b:".as_ref()), Some(home)),
            Files::Listed(vec!["/b".into(), "/a".into()])
        );
        // Unset or empty: ~/.kube/config.
        for unset in [None, Some("".as_ref())] {
            assert_eq!(
                files(&source(None), unset, Some(home)),
                Files::Home(Some("/home/u/.kube/config".into()))
            );
        }
        // Only separators: a list of nothing, not the home file (Go's SplitList gives ["", ""]).
        assert_eq!(
            files(&source(None), Some(":".as_ref()), Some(home)),
            Files::Listed(vec![])
        );
    }

    const FIRST: &str = "apiVersion: v1\nkind: Config\ncurrent-context: ''\nclusters:\n\
        - name: shared\n  cluster: {server: 'https://first:6443', certificate-authority: ca.crt}\n\
        contexts:\n- name: one\n  context: {cluster: shared, user: u}\n\
        users:\n- name: u\n  user: {username: first}\n";
    const SECOND: &str = "apiVersion: v1\nkind: Config\ncurrent-context: two\nclusters:\n\
        - name: shared\n  cluster: {server: 'https://second:6443', tls-server-name: from-second}\n\
        - name: other\n  cluster: {server: 'https://other:6443'}\n\
        contexts:\n- name: two\n  context: {cluster: other, user: u, namespace: media}\n\
        - name: one\n  context: {cluster: other, user: nobody}\n\
        users:\n- name: u\n  user: {username: second}\n";

    #[test]
    fn the_first_file_to_name_an_entry_wins_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let first = write(dir.path(), "first", FIRST);
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let second = write(&sub, "second", SECOND);
        let merged = read_merged(&Files::Listed(vec![first, second]))
            .unwrap()
            .unwrap();
        // `shared` is the first file's, and nothing of the second's `shared` is mixed in.
        let shared = cluster(&merged, "shared");
        assert_eq!(shared.server.as_deref(), Some("https://first:6443"));
        assert_eq!(shared.tls_server_name, None);
        // A relative path resolves against the directory of the file that holds it.
        assert_eq!(
            shared.certificate_authority.as_deref(),
            Some(dir.path().join("ca.crt").to_str().unwrap())
        );
        // Names only the second file defines are there.
        assert_eq!(
            cluster(&merged, "other").server.as_deref(),
            Some("https://other:6443")
        );
        let context = |name: &str| {
            let c = merged.contexts.iter().find(|c| c.name == name).unwrap();
            c.context.clone().unwrap()
        };
        assert_eq!(context("one").cluster, "shared");
        assert_eq!(context("two").namespace.as_deref(), Some("media"));
        let user = merged.auth_infos.iter().find(|u| u.name == "u").unwrap();
        assert_eq!(
            user.auth_info.as_ref().unwrap().username.as_deref(),
            Some("first")
        );
        assert_eq!(merged.auth_infos.len(), 1);
        // The first file's current-context is empty: the second's counts.
        assert_eq!(merged.current_context.as_deref(), Some("two"));
    }

    #[test]
    fn the_first_current_context_wins_and_missing_files_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let second = write(dir.path(), "second", SECOND);
        let third = write(
            dir.path(),
            "third",
            &SECOND.replace("current-context: two", "current-context: one"),
        );
        let missing = dir.path().join("missing");
        let merged = read_merged(&Files::Listed(vec![missing.clone(), second, third]))
            .unwrap()
            .unwrap();
        assert_eq!(merged.current_context.as_deref(), Some("two"));
        // Nothing there at all: not an error here (the service account is tried next).
        assert!(
            read_merged(&Files::Listed(vec![missing.clone()]))
                .unwrap()
                .is_none()
        );
        assert!(
            read_merged(&Files::Home(Some(missing.clone())))
                .unwrap()
                .is_none()
        );
        // Except the one --kubeconfig names.
        let err = read_merged(&Files::Explicit(missing.clone())).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("load kubeconfig {}: no such file", missing.display())
        );
    }

    #[test]
    fn a_bad_file_is_one_line_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let good = write(dir.path(), "good", SECOND);
        let bad = write(
            dir.path(),
            "bad",
            "clusters:\n- name: [unclosed\n  cluster: {\n",
        );
        // A malformed file fails the merge even after good ones, as in client-go.
        let err = read_merged(&Files::Listed(vec![good, bad.clone()])).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("load kubeconfig {}: ", bad.display())),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
        let twice = write(
            dir.path(),
            "twice",
            &format!("{SECOND}- name: u\n  user: {{username: again}}\n"),
        );
        let err = read_merged(&Files::Explicit(twice.clone())).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "load kubeconfig {}: duplicate user name \"u\" (hint: each user needs its own name)",
                twice.display()
            )
        );
    }

    #[test]
    fn nothing_found_says_where_it_looked() {
        assert_eq!(
            Files::Listed(vec!["/a".into(), "/b".into()]).looked(),
            "none of the files KUBECONFIG lists exists (/a, /b)"
        );
        // Thousands: the first few and how many more, never kilobytes.
        let many: Vec<PathBuf> = (0..2000).map(|i| format!("/k/{i}").into()).collect();
        assert_eq!(
            Files::Listed(many).looked(),
            "none of the 2000 files KUBECONFIG lists exists (/k/0, /k/1, /k/2 and 1997 more)"
        );
        assert_eq!(
            Files::Home(None).looked(),
            "KUBECONFIG is not set, ~/.kube/config does not exist"
        );
    }

    const EXEC: ExecOptions = ExecOptions {
        timeout: None,
        stderr: Stderr::Tail,
    };

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
            load(&source(None), EXEC).await.unwrap().default_namespace,
            "media"
        );
        assert_eq!(
            load(&source(Some("y")), EXEC)
                .await
                .unwrap()
                .default_namespace,
            "default"
        );
        let err = load(&source(Some("nope")), EXEC).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "load kubeconfig: the context \"nope\" is not in {}, which has 2 contexts: x, y",
                path.display()
            )
        );
        // As kubectl: an empty --context is the current one.
        assert_eq!(
            load(&source(Some("")), EXEC)
                .await
                .unwrap()
                .default_namespace,
            "media"
        );
    }

    #[test]
    fn a_missing_context_lists_a_few_of_many_and_the_one_meant() {
        let error = |name: &str, known: &[&str]| KubeconfigError::NoSuchContext {
            name: name.into(),
            by_flag: true,
            files: "config".into(),
            known: known.iter().map(|k| k.to_string()).collect(),
        };
        let many: Vec<String> = (1..=12).map(|i| format!("cluster-{i:02}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            error("nosuch", &many).to_string(),
            "load kubeconfig: the context \"nosuch\" is not in config, which has 12 contexts: \
             cluster-01, cluster-02, cluster-03, cluster-04, cluster-05 and 7 more"
        );
        assert_eq!(
            error("x", &[]).to_string(),
            "load kubeconfig: the context \"x\" is not in config, which has no contexts"
        );
        assert_eq!(
            error("x", &["y"]).to_string(),
            "load kubeconfig: the context \"x\" is not in config, which has 1 context: y"
        );
        // The one meant: a few letters off, or a prefix either way; nothing when none is close.
        assert_eq!(
            error("prd", &["dev", "prod"]).similar_context(),
            Some("prod")
        );
        assert_eq!(
            error("Prod-EU", &["dev", "prod-eu-1"]).similar_context(),
            Some("prod-eu-1")
        );
        assert_eq!(error("staging", &["dev", "prod"]).similar_context(), None);
        assert_eq!(
            error("cluster-13", &many).similar_context(),
            Some("cluster-03")
        );
    }

    #[test]
    fn a_directory_is_no_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_merged(&Files::Explicit(dir.path().into())).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "load kubeconfig {}: it is a directory, not a kubeconfig file",
                dir.path().display()
            )
        );
        assert!(matches!(
            err,
            KubeconfigError::File {
                origin: Origin::Flag,
                fault: FileFault::Directory,
                ..
            }
        ));
    }
}
