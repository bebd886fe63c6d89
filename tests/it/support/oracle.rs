//! The oracle of `why`: the scheduler's own DRA allocator and CEL (k8s.io/dynamic-resource-allocation,
//! one build per Kubernetes release, from tests/oracle/), built with Go once per test run and
//! again only when its sources change, and driven through its batch protocol: one JSON line per
//! case in, one answer line out, so thousands of cases run in one process per release.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// The releases the oracle is built for: each has its own allocator Features (1.35 merged
/// DeviceBinding and DeviceStatus, 1.36 added ListTypeAttributes, 1.37 more) and its own
/// default gates, so none can stand for another.
pub const RELEASES: [&str; 4] = ["1.34", "1.35", "1.36", "1.37"];

/// How to get a Go new enough, for the messages of ignored tests and failed builds.
pub const INSTALL_GO: &str = "install Go 1.26 or newer (curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz), put /usr/local/go/bin on PATH, then touch build.rs";

/// Why the oracle cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error(
        "build the Kubernetes {release} allocator oracle: {detail} (hint: {INSTALL_GO}; the oracle's sources are tests/oracle/)"
    )]
    Build { release: String, detail: String },
    #[error("run the Kubernetes {release} allocator oracle {path}: {source}")]
    Spawn {
        release: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the Kubernetes {release} allocator oracle: {detail}")]
    Protocol { release: String, detail: String },
}

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle")
}

/// The binary for `release` (`1.34`), built if its sources changed since the last build. Tests
/// of one process share a build; the lock keeps two tests from building the same release.
pub fn binary(release: &str) -> Result<PathBuf, OracleError> {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(release) {
        return Ok(path.clone());
    }
    let path = build(release)?;
    built.insert(release.to_owned(), path.clone());
    Ok(path)
}

fn build(release: &str) -> Result<PathBuf, OracleError> {
    let fail = |detail: String| OracleError::Build {
        release: release.to_owned(),
        detail,
    };
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("oracle");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| fail(format!("create {}: {e}", out_dir.display())))?;
    let binary = out_dir.join(format!("oracle-{release}"));
    let stamp_path = out_dir.join(format!("oracle-{release}.stamp"));
    let stamp = stamp(release).map_err(|e| fail(format!("read tests/oracle: {e}")))?;
    if binary.is_file() && std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp) {
        return Ok(binary);
    }
    let tag = format!("oracle{}", release.replace('.', ""));
    // 1.37 is go.mod itself (the module's newest release); the others are alternate module files.
    let modfile = if release == RELEASES[RELEASES.len() - 1] {
        "go.mod".to_owned()
    } else {
        format!("go.{release}.mod")
    };
    // Straight to stderr, past the test harness's capture: a person waiting should see why.
    let _ = writeln!(
        std::io::stderr(),
        "building the Kubernetes {release} allocator oracle with Go (tests/oracle); the first build may take minutes"
    );
    let output = Command::new("go")
        .args(["build", "-modfile", &modfile, "-tags", &tag, "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(sources())
        // The pinned go.sum is the truth; a newer toolchain is never fetched.
        .env("GOFLAGS", "-mod=readonly -buildvcs=false")
        .env("GOTOOLCHAIN", "local")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(format!("run go: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        return Err(fail(format!(
            "go build failed ({}): {first}",
            output.status
        )));
    }
    std::fs::write(&stamp_path, stamp)
        .map_err(|e| fail(format!("write {}: {e}", stamp_path.display())))?;
    Ok(binary)
}

/// What the build of `release` depends on: every file of tests/oracle/ (its Go files, module
/// files and sums), by name and content, and the Go version.
fn stamp(release: &str) -> std::io::Result<String> {
    use std::hash::{Hash, Hasher};
    let mut names: Vec<PathBuf> = std::fs::read_dir(sources())?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    names.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for name in names {
        name.file_name().hash(&mut hasher);
        std::fs::read(&name)?.hash(&mut hasher);
    }
    let go = Command::new("go")
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local")
        .output()?;
    go.stdout.hash(&mut hasher);
    Ok(format!("{release} {:016x}\n", hasher.finish()))
}

/// A running oracle in batch mode.
pub struct Oracle {
    release: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Oracle {
    /// Builds (if needed) and starts the oracle of `release`.
    pub fn start(release: &str) -> Result<Oracle, OracleError> {
        let path = binary(release)?;
        let mut child = Command::new(&path)
            .arg("-batch")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| OracleError::Spawn {
                release: release.to_owned(),
                path: path.clone(),
                source,
            })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Oracle {
            release: release.to_owned(),
            child,
            stdin,
            stdout,
        })
    }

    /// One case in, its answer out.
    pub fn ask(&mut self, case: &Value) -> Result<Value, OracleError> {
        let protocol = |detail: String| OracleError::Protocol {
            release: self.release.clone(),
            detail,
        };
        let mut line = serde_json::to_string(case).expect("a JSON value serialises");
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(|e| protocol(format!("send a case: {e}")))?;
        let mut answer = String::new();
        let n = self
            .stdout
            .read_line(&mut answer)
            .map_err(|e| protocol(format!("read an answer: {e}")))?;
        if n == 0 {
            return Err(protocol("exited without answering".to_owned()));
        }
        serde_json::from_str(&answer)
            .map_err(|e| protocol(format!("answer is not JSON: {e}: {answer}")))
    }

    /// A fleet case: `objects` as `why -f` reads them, the pod's claims allocated on every node.
    pub fn fleet(&mut self, objects: &[Value], pod: &str) -> Result<Verdicts, OracleError> {
        let answer = self.ask(&serde_json::json!({"id": 0, "objects": objects, "pod": pod}))?;
        if let Some(error) = answer["error"].as_str() {
            return Err(OracleError::Protocol {
                release: self.release.clone(),
                detail: format!("the case was refused: {error}"),
            });
        }
        Ok(Verdicts::from_answer(&answer))
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        // Closing stdin ends the batch loop; the wait reaps the process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the real allocator says on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Per claim (`namespace/name`), the devices as (`request`, `driver/pool/device`).
    Allocated(Vec<(String, Vec<(String, String)>)>),
    Unallocatable,
    Error(String),
}

/// A fleet answer: per node (in name order) its verdict, and the pod-wide reason when the
/// scheduler's PreFilter rules the pod out.
#[derive(Clone, Debug)]
pub struct Verdicts {
    pub nodes: Vec<(String, Verdict)>,
    pub unschedulable: Option<String>,
}

impl Verdicts {
    fn from_answer(answer: &Value) -> Verdicts {
        let nodes = answer["nodes"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|n| {
                let name = n["node"].as_str().unwrap_or_default().to_owned();
                let verdict = if let Some(e) = n["error"].as_str() {
                    Verdict::Error(e.to_owned())
                } else if n["unallocatable"] == true {
                    Verdict::Unallocatable
                } else {
                    Verdict::Allocated(
                        n["allocated"]
                            .as_array()
                            .map(Vec::as_slice)
                            .unwrap_or_default()
                            .iter()
                            .map(|c| {
                                let devices = c["devices"]
                                    .as_array()
                                    .map(Vec::as_slice)
                                    .unwrap_or_default()
                                    .iter()
                                    .map(|d| {
                                        (
                                            d["request"].as_str().unwrap_or_default().to_owned(),
                                            format!(
                                                "{}/{}/{}",
                                                d["driver"].as_str().unwrap_or_default(),
                                                d["pool"].as_str().unwrap_or_default(),
                                                d["device"].as_str().unwrap_or_default()
                                            ),
                                        )
                                    })
                                    .collect();
                                (c["claim"].as_str().unwrap_or_default().to_owned(), devices)
                            })
                            .collect(),
                    )
                };
                (name, verdict)
            })
            .collect();
        Verdicts {
            nodes,
            unschedulable: answer["unschedulable"].as_str().map(str::to_owned),
        }
    }

    /// The nodes where the allocator allocates.
    pub fn allocatable(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::Allocated(_)))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// The verdict on `node`.
    pub fn on(&self, node: &str) -> Option<&Verdict> {
        self.nodes.iter().find(|(n, _)| n == node).map(|(_, v)| v)
    }
}
