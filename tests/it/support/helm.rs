//! The real helm, built from its Go module at the version tests/helm/go.mod pins (as the control
//! plane is from tests/controlplane), once per change of that module into
//! `target/tmp/helm/KEY/`, under a file lock; and helm run on the chart in deploy/ with a
//! scrubbed environment of its own (its cache, config and registry files in a temp dir).

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

/// The module's directory.
pub fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helm")
}

/// The chart: deploy/ itself (Chart.yaml beside the manifests it renders).
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The helm version go.mod pins (`helm.sh/helm/v4 vX.Y.Z`).
pub fn version() -> String {
    let go_mod = fs::read_to_string(module_dir().join("go.mod")).expect("read tests/helm/go.mod");
    go_mod
        .lines()
        .find_map(|line| {
            let mut words = line.split_whitespace().skip_while(|w| *w == "require");
            (words.next() == Some("helm.sh/helm/v4")).then(|| words.next())?
        })
        .expect("tests/helm/go.mod requires helm.sh/helm/v4")
        .to_owned()
}

/// The built helm, building it first if its module changed (panics with the reason).
pub fn binary() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(build)
        .as_deref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// SHA-256 of go.mod, go.sum and the Go version: the build's cache key.
fn source_key(go: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(go.as_bytes());
    for name in ["go.mod", "go.sum"] {
        ctx.update(&fs::read(module_dir().join(name)).expect("read tests/helm"));
    }
    ctx.finish().as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn build() -> Result<PathBuf, String> {
    let go = crate::support::controlplane::go_version()?;
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm");
    let out_dir = cache.join(source_key(&go));
    let binary = out_dir.join("helm");
    fs::create_dir_all(&out_dir).map_err(|e| format!("create {}: {e}", out_dir.display()))?;
    let lock = File::create(cache.join("build.lock")).map_err(|e| format!("build lock: {e}"))?;
    lock.lock().map_err(|e| format!("build lock: {e}"))?;
    if binary.is_file() {
        return Ok(binary);
    }
    let version = version();
    let _ = writeln!(
        std::io::stderr(),
        "building helm {version} ({go}) into {}",
        out_dir.display()
    );
    let started = Instant::now();
    let partial = out_dir.join("helm.partial");
    // helm's own Makefile stamps its version this way; its default Kubernetes version comes
    // from the client-go module the build records.
    let ldflags = format!("-s -w -X helm.sh/helm/v4/internal/version.version={version}");
    let out = Command::new("go")
        .args(["build", "-mod=readonly", "-buildvcs=false", "-o"])
        .arg(&partial)
        .args(["-ldflags", &ldflags, "helm.sh/helm/v4/cmd/helm"])
        .current_dir(module_dir())
        .output()
        .map_err(|e| format!("build helm: run go: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "build helm {version}: go build: {} (hint: cd tests/helm && go build \
             helm.sh/helm/v4/cmd/helm shows everything)",
            crate::support::controlplane::build_error(&out.stderr)
        ));
    }
    fs::rename(&partial, &binary).map_err(|e| format!("move {}: {e}", partial.display()))?;
    for entry in fs::read_dir(&cache).into_iter().flatten().flatten() {
        if entry.path().is_dir() && entry.path() != out_dir {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "built helm {version} in {:.0?}",
        started.elapsed()
    );
    Ok(binary)
}

/// helm with `args`, in an environment of its own: no user config, cache or registry login,
/// and `kubeconfig` (if any) as the only cluster.
pub fn helm(args: &[&str], kubeconfig: Option<&Path>) -> Output {
    let home = tempfile::tempdir().expect("a home for helm");
    let mut command = Command::new(binary());
    command
        .env_clear()
        .env("HOME", home.path())
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env("NO_COLOR", "1")
        .args(args);
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    command.output().expect("run helm")
}
