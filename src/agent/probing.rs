//! Probing every GPU of the node, each in a short-lived child (`__probe-gpu`) with a timeout, or
//! replaying recorded probes ([`ProbeSource::Recorded`], docs/report-format.md). The report is the
//! child's last stdout line and libva's messages stream on stderr, so a driver that prints or
//! crashes costs only its GPU. `LIBVA_DRIVER_NAME` would force one driver on every GPU, so children
//! never inherit it; `--va-driver` sets one per GPU with `vaSetDriverName`.

use crate::node::device::{Outcome, failure_text};
use crate::node::failure::{Failure, FailureKind};
use crate::node::sysfs::{DiscoveryError, PciIdentity, PciNames, RenderNode, Roots};
use crate::node::va::probe::{ProbeOptions, probe};
use crate::node::va::report::Report;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// The hidden subcommand the agent runs itself with to probe one GPU.
pub const CHILD_SUBCOMMAND: &str = "__probe-gpu";

/// The default time a probe may take before it is killed.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// The default number of probes running at once.
pub(crate) const DEFAULT_PARALLEL: usize = 4;

/// One GPU and how its probe ended: what the agent works from, and the recorded format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probed {
    pub render_node: PathBuf,
    pub pci: PciIdentity,
    /// The driver's report, when the probe process produced one (its `error` may be set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    /// The probe process's failure (crash, hang, garbage), word for word, when there is no report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// What kind of failure `failure` is (the taint's value); a record without it is a
    /// `probe-failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
}

impl Probed {
    /// Pairs a node with its outcome.
    pub fn new(node: RenderNode, outcome: Outcome) -> Probed {
        let (report, failure) = match outcome {
            Outcome::Report(r) => (Some(*r), None),
            Outcome::Failed(f) => (None, Some(f)),
        };
        Probed {
            render_node: node.path,
            pci: node.pci,
            report,
            failure_kind: failure.as_ref().map(|f| f.kind),
            failure: failure.map(|f| f.text),
        }
    }

    /// The render node and its PCI identity.
    pub fn node(&self) -> RenderNode {
        RenderNode {
            path: self.render_node.clone(),
            pci: self.pci.clone(),
        }
    }

    /// The outcome; a record with neither a report nor a failure is a failure saying so.
    pub fn outcome(&self) -> Outcome {
        match (&self.report, &self.failure) {
            (_, Some(failure)) => Outcome::Failed(Failure::new(
                self.failure_kind.unwrap_or(FailureKind::ProbeFailed),
                failure.clone(),
            )),
            (Some(report), None) => Outcome::Report(Box::new(report.clone())),
            (None, None) => failed(&self.node(), "left no report in the record", &[]),
        }
    }
}

/// The program a probe runs: our own executable and the hidden subcommand by default; tests put
/// stand-in scripts here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl ProbeCommand {
    /// `<this executable> __probe-gpu`.
    pub(crate) fn current_exe() -> std::io::Result<ProbeCommand> {
        Ok(ProbeCommand {
            program: std::env::current_exe()?,
            args: vec![CHILD_SUBCOMMAND.into()],
        })
    }
}

/// Which GPUs a VA driver override applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OverrideKey {
    /// One GPU, by PCI address (`0000:03:00.0`).
    Address(String),
    /// Every GPU of a PCI vendor (`8086`).
    Vendor(String),
}

/// A per-GPU VA driver override, `KEY=NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverOverride {
    pub key: OverrideKey,
    pub driver: String,
}

impl std::str::FromStr for DriverOverride {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let usage =
            "(valid: ADDRESS=NAME such as 0000:03:00.0=radeonsi, or VENDOR=NAME such as 8086=i965)";
        let (key, driver) = text
            .split_once('=')
            .ok_or_else(|| format!("VA driver override {text:?} has no '=' {usage}"))?;
        if driver.is_empty() || driver.contains(['/', '\0']) {
            return Err(format!(
                "VA driver override {text:?} names no valid driver {usage}"
            ));
        }
        let key = key.to_ascii_lowercase();
        let key = if key.len() == 4 && key.chars().all(|c| c.is_ascii_hexdigit()) {
            OverrideKey::Vendor(key)
        } else if key.contains(':') {
            OverrideKey::Address(key)
        } else {
            return Err(format!(
                "VA driver override {text:?}: {key:?} is neither a PCI address nor a vendor ID {usage}"
            ));
        };
        Ok(DriverOverride {
            key,
            driver: driver.to_string(),
        })
    }
}

/// The override for `pci`: one for its address wins over one for its vendor.
pub(crate) fn driver_for<'a>(
    overrides: &'a [DriverOverride],
    pci: &PciIdentity,
) -> Option<&'a str> {
    let find = |want: &dyn Fn(&OverrideKey) -> bool| {
        overrides
            .iter()
            .find(|o| want(&o.key))
            .map(|o| o.driver.as_str())
    };
    find(&|k| matches!(k, OverrideKey::Address(a) if *a == pci.address))
        .or_else(|| find(&|k| matches!(k, OverrideKey::Vendor(v) if *v == pci.vendor)))
}

/// How live probes run.
#[derive(Clone, Debug)]
pub struct Isolation {
    pub command: ProbeCommand,
    pub timeout: Duration,
    pub parallel: usize,
    pub overrides: Vec<DriverOverride>,
}

/// Where the GPUs and their outcomes come from.
#[derive(Clone, Debug)]
pub enum ProbeSource {
    /// Discover render nodes and probe each in a child process.
    Live {
        roots: Roots,
        /// pci.ids; `None` searches the usual places.
        pci_ids: Option<PathBuf>,
        /// Only this render node, when set.
        only: Option<PathBuf>,
        isolation: Isolation,
    },
    /// Read recorded outcomes: a JSON file (one record or an array), or a directory of them.
    Recorded(PathBuf),
}

/// Why no GPU could be probed at all.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(
        "no PCI render node {path} (found: {found}) (hint: `ls /dev/dri` lists the render nodes)"
    )]
    NoSuchNode { path: PathBuf, found: String },
    #[error("read recorded probes {path}: {source}")]
    ReadRecord {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "recorded probes {path}: it is {what}, not a file (hint: give a file `media-capabilities \
         probe -o json` wrote, or a directory of them)"
    )]
    NotAFile { path: PathBuf, what: &'static str },
    #[error(
        "recorded probes {path}: {size} bytes, over the {max} MiB a file of recorded probes may \
         hold (hint: a recorded probe is a few KiB; give one node's records)",
        max = RECORD_FILE_MAX_BYTES >> 20
    )]
    TooBig { path: PathBuf, size: u64 },
    #[error(
        "recorded probes {path}: {what}, not a recorded probe or a list of them (hint: \
         `media-capabilities probe -o json > FILE` on a GPU node records one; the format is in \
         docs/report-format.md)"
    )]
    NotRecords { path: PathBuf, what: String },
    #[error(
        "parse recorded probes {path}: {cause} (hint: the format is in docs/report-format.md)",
        cause = shown(&.source.to_string())
    )]
    ParseRecord {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "parse recorded probes {path} as YAML: {cause} (hint: the format is in \
         docs/report-format.md)",
        cause = shown(&.source.to_string())
    )]
    ParseYaml {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    /// Every record file of a directory was unreadable: publishing "no GPUs" from it would be
    /// a guess.
    #[error("no readable recorded probes in {path}: {files}{first}", files = if *.count == 1 {
        "its one file is unreadable: ".to_string()
    } else {
        format!("its {} files are unreadable, the first: ", .count)
    })]
    NoneReadable {
        path: PathBuf,
        count: usize,
        #[source]
        first: Box<ProbeError>,
    },
    #[error(
        "recorded probes {first} and {second} both describe PCI address {address} (hint: each GPU \
         must be recorded once; remove one of them)"
    )]
    DuplicateAddress {
        address: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "recorded probe {path}: PCI address {address} is not dddd:bb:dd.f (hint: write it as the \
         kernel does, e.g. 0000:03:00.0; the device name is made from it)",
        address = shown(&format!("{address:?}"))
    )]
    BadAddress { path: PathBuf, address: String },
    #[error(
        "{path} holds no recorded probes, but its subdirectories do ({example}, ...): each is one \
         node's (hint: give one node's directory, e.g. {path}/{example})"
    )]
    NodeDirectories { path: PathBuf, example: String },
    #[error("probe task failed: {0}")]
    Blocking(String),
}

impl ProbeSource {
    /// Every GPU with its outcome, sorted by PCI address. File reads, the sysfs walk and parsing
    /// pci.ids run on the blocking pool, never on the async runtime's threads.
    pub async fn probe(&self) -> Result<Vec<Probed>, ProbeError> {
        match self {
            ProbeSource::Recorded(path) => {
                let path = path.clone();
                blocking(move || read_records(&path)).await
            }
            ProbeSource::Live {
                roots,
                pci_ids,
                only,
                isolation,
            } => {
                let (roots, pci_ids) = (roots.clone(), pci_ids.clone());
                let mut nodes = blocking(move || {
                    let names = PciNames::load_cached(pci_ids.as_deref())?;
                    Ok::<_, ProbeError>(crate::node::sysfs::discover(&roots, &names)?)
                })
                .await?;
                if let Some(only) = only {
                    let found = nodes
                        .iter()
                        .map(|n| n.path.display().to_string())
                        .collect::<Vec<_>>();
                    nodes.retain(|n| &n.path == only);
                    if nodes.is_empty() {
                        return Err(ProbeError::NoSuchNode {
                            path: only.clone(),
                            found: if found.is_empty() {
                                "none".into()
                            } else {
                                found.join(", ")
                            },
                        });
                    }
                }
                Ok(probe_all(nodes, isolation).await)
            }
        }
    }
}

/// A parser's message or a value from a record as an error shows it: a huge value (a megabyte
/// where an address belongs) is cut in its middle, never repeated whole.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    crate::text::elide(text, 400)
}

/// Runs `work` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ProbeError> + Send + 'static,
) -> Result<T, ProbeError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ProbeError::Blocking(e.to_string()))?
}

/// The hint every message about a recorded probe ends with.
const FORMAT_HINT: &str = "(hint: the format is in docs/report-format.md)";

/// The most a file of recorded probes may hold. A recorded probe is a few KiB (a report line
/// from a probe child may be 4 MiB at most); the bound keeps `/dev/zero` and its kind out.
pub const RECORD_FILE_MAX_BYTES: u64 = 16 << 20;

/// Reads recorded outcomes from a file or every record file (`*.json`, `*.yaml`, `*.yml`) of a
/// directory.
///
/// A record that does not parse but still names its GPU (`render_node` and `pci`) becomes that
/// GPU's failure, so the node's other GPUs are still published; in a directory, a file that
/// cannot be read or names no GPU at all is logged and skipped for the same reason (a single
/// file named on the command line is an error, and so is a directory whose every file is).
/// Two records of one PCI address are refused: they would be two devices of one name, a slice
/// the API server rejects.
pub fn read_records(path: &Path) -> Result<Vec<Probed>, ProbeError> {
    let read_err = |source| ProbeError::ReadRecord {
        path: path.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    let is_dir = path.is_dir();
    if is_dir {
        let mut subdirectories = Vec::new();
        for entry in std::fs::read_dir(path).map_err(read_err)? {
            let file = entry.map_err(read_err)?.path();
            if file.is_dir() {
                subdirectories.push(file);
            } else if is_record_file(&file) {
                files.push(file);
            }
        }
        files.sort();
        subdirectories.sort();
        // A fleet's directory (one directory per node, as docs/examples/fleet/) is not one node:
        // reading it as none would say "no GPUs" of a directory full of them.
        if files.is_empty()
            && let Some(node) = subdirectories.iter().find(|d| {
                std::fs::read_dir(d)
                    .map(|entries| {
                        entries
                            .flatten()
                            .any(|e| !e.path().is_dir() && is_record_file(&e.path()))
                    })
                    .unwrap_or(false)
            })
        {
            return Err(ProbeError::NodeDirectories {
                path: path.to_path_buf(),
                example: node
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            });
        }
    } else {
        files.push(path.to_path_buf());
    }
    let mut records: Vec<(Probed, PathBuf)> = Vec::new();
    let mut skipped = Vec::new();
    for file in files {
        match read_record_file(&file).and_then(|text| parse_records(&file, &text)) {
            Ok(parsed) => records.extend(parsed.into_iter().map(|p| (p, file.clone()))),
            Err(e) if is_dir => skipped.push(e),
            Err(e) => return Err(e),
        }
    }
    if records.is_empty() && !skipped.is_empty() {
        let count = skipped.len();
        return Err(ProbeError::NoneReadable {
            path: path.to_path_buf(),
            count,
            first: Box::new(skipped.swap_remove(0)),
        });
    }
    log_skipped(skipped.iter().map(ToString::to_string).collect());
    // One form of the address, the one upstream's pciBusID helper writes: a recording (or a
    // hand-written report) in capitals would never pair with a render driver's device.
    for (probed, _) in &mut records {
        if let Some(canonical) = crate::render_drivers::canonical_pci_bus_id(&probed.pci.address) {
            probed.pci.address = canonical;
        }
    }
    // A malformed address would give a device name the API server refuses, and it refuses the
    // whole slice, every GPU of the node with it.
    if let Some((probed, path)) = records
        .iter()
        .find(|(p, _)| !crate::node::sysfs::valid_address(&p.pci.address))
    {
        return Err(ProbeError::BadAddress {
            path: path.clone(),
            address: probed.pci.address.clone(),
        });
    }
    records.sort_by(|a, b| a.0.pci.address.cmp(&b.0.pci.address));
    if let Some(pair) = records
        .windows(2)
        .find(|w| w[0].0.pci.address == w[1].0.pci.address)
    {
        return Err(ProbeError::DuplicateAddress {
            address: pair[0].0.pci.address.clone(),
            first: pair[0].1.clone(),
            second: pair[1].1.clone(),
        });
    }
    Ok(records.into_iter().map(|(p, _)| p).collect())
}

/// Whether a directory's entry is read as recorded probes, by its name: JSON (`probe -o json`)
/// or YAML (`probe -o yaml`). Special files of these names are read too, to be refused aloud.
pub(crate) fn is_record_file(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "json" || e == "yaml" || e == "yml")
}

/// The text of one file of recorded probes, refused unless it is a regular file of at most
/// [`RECORD_FILE_MAX_BYTES`]: a device, FIFO or socket could be endless or never answer.
pub(crate) fn read_record_file(file: &Path) -> Result<String, ProbeError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let read_err = |source| ProbeError::ReadRecord {
        path: file.to_path_buf(),
        source,
    };
    // O_NONBLOCK: opening a FIFO with no writer would wait forever; it changes nothing for a
    // regular file, and anything else is refused before it is read.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .map_err(read_err)?;
    let metadata = opened.metadata().map_err(read_err)?;
    let kind = metadata.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("a special file")
    };
    if let Some(what) = what {
        return Err(ProbeError::NotAFile {
            path: file.to_path_buf(),
            what,
        });
    }
    let too_big = |size| ProbeError::TooBig {
        path: file.to_path_buf(),
        size,
    };
    if metadata.len() > RECORD_FILE_MAX_BYTES {
        return Err(too_big(metadata.len()));
    }
    // The size can be wrong (procfs says 0) or grow while it is read: the read is bounded too.
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    opened
        .take(RECORD_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > RECORD_FILE_MAX_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| ProbeError::NotRecords {
        path: file.to_path_buf(),
        what: format!(
            "it is not UTF-8 text (byte {} is not)",
            e.utf8_error().valid_up_to()
        ),
    })
}

/// The records of one file: one object or an array of them, in JSON or YAML. Told apart by the
/// first character rather than by an untagged enum, whose error ("data did not match any
/// variant") would hide the precise one (an unknown profile name, a missing field).
fn parse_records(file: &Path, text: &str) -> Result<Vec<Probed>, ProbeError> {
    let parse_err = |source| ProbeError::ParseRecord {
        path: file.to_path_buf(),
        source,
    };
    match text.trim_start().as_bytes().first() {
        Some(b'[') => {
            let values: Vec<serde_json::Value> = serde_json::from_str(text).map_err(parse_err)?;
            records_of(file, values)
        }
        Some(b'{') => match serde_json::from_str::<Probed>(text) {
            Ok(probed) => Ok(vec![probed]),
            Err(error) => {
                let value: Option<serde_json::Value> = serde_json::from_str(text).ok();
                value
                    .and_then(|v| failed_record(file, &error.to_string(), &v))
                    .map(|probed| vec![probed])
                    .ok_or_else(|| parse_err(error))
            }
        },
        // `probe -o yaml` output (JSON, itself YAML, never comes here). Nesting past serde_yaml's
        // limit is refused before libyaml takes minutes over it.
        _ => {
            let yaml_err = |source| ProbeError::ParseYaml {
                path: file.to_path_buf(),
                source,
            };
            if let Some(at) = crate::text::flow_nesting_over(text.as_bytes(), YAML_MAX_DEPTH) {
                return Err(ProbeError::NotRecords {
                    path: file.to_path_buf(),
                    what: format!(
                        "it nests deeper than {YAML_MAX_DEPTH} levels at line {} column {}",
                        at.line, at.column
                    ),
                });
            }
            let value: serde_json::Value = serde_yaml::from_str(text).map_err(yaml_err)?;
            let what = match value {
                serde_json::Value::Array(values) => return records_of(file, values),
                serde_json::Value::Object(_) => {
                    return match serde_yaml::from_str::<Probed>(text) {
                        Ok(probed) => Ok(vec![probed]),
                        Err(error) => failed_record(file, &error.to_string(), &value)
                            .map(|probed| vec![probed])
                            .ok_or_else(|| yaml_err(error)),
                    };
                }
                serde_json::Value::Null if text.trim().is_empty() => "it is empty",
                serde_json::Value::Null => "it holds nothing but comments, `---` or null",
                serde_json::Value::Bool(_) => "it holds a boolean",
                serde_json::Value::Number(_) => "it holds a number",
                serde_json::Value::String(_) => "it holds plain text (a YAML string)",
            };
            Err(ProbeError::NotRecords {
                path: file.to_path_buf(),
                what: what.to_string(),
            })
        }
    }
}

/// serde_yaml's recursion limit, as serde_json's.
const YAML_MAX_DEPTH: usize = 128;

/// The records of a list, each named by its index in its errors.
fn records_of(file: &Path, values: Vec<serde_json::Value>) -> Result<Vec<Probed>, ProbeError> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            let error = match Probed::deserialize(&value) {
                Ok(probed) => return Ok(probed),
                Err(e) => format!("record {i}: {e}"),
            };
            failed_record(file, &error, &value).ok_or_else(|| ProbeError::ParseRecord {
                path: file.to_path_buf(),
                source: serde::de::Error::custom(error),
            })
        })
        .collect()
}

/// A record whose content does not parse, as its GPU's failure, if it names the GPU.
fn failed_record(file: &Path, error: &str, value: &serde_json::Value) -> Option<Probed> {
    let render_node = PathBuf::deserialize(value.get("render_node")?).ok()?;
    let pci = PciIdentity::deserialize(value.get("pci")?).ok()?;
    let failure = failure_text(
        &RenderNode {
            path: render_node.clone(),
            pci: pci.clone(),
        },
        &format!(
            "has an unreadable recorded probe: parse {}: {} {FORMAT_HINT}",
            file.display(),
            shown(error)
        ),
        &[],
    );
    tracing::error!("{failure}");
    Some(Probed {
        render_node,
        pci,
        report: None,
        failure: Some(failure),
        failure_kind: None,
    })
}

/// Probes every node in its own child, at most `isolation.parallel` at once; results in the
/// nodes' order.
pub async fn probe_all(nodes: Vec<RenderNode>, isolation: &Isolation) -> Vec<Probed> {
    // Said once per process: the environment does not change, and the agent probes again
    // whenever render nodes come and go.
    static WARNED: std::sync::Once = std::sync::Once::new();
    if std::env::var_os("LIBVA_DRIVER_NAME").is_some() {
        WARNED.call_once(|| {
            tracing::warn!(
                "ignoring LIBVA_DRIVER_NAME: it would force one VA driver onto every GPU \
             (hint: use --va-driver ADDRESS=NAME or VENDOR=NAME for one GPU or vendor)"
            )
        });
    }
    let permits = Arc::new(tokio::sync::Semaphore::new(isolation.parallel.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, node) in nodes.iter().cloned().enumerate() {
        let permits = Arc::clone(&permits);
        let isolation = isolation.clone();
        tasks.spawn(async move {
            // The semaphore is never closed, so acquiring cannot fail; hold the permit while the
            // child runs.
            let _permit = permits.acquire_owned().await;
            let outcome = probe_in_child(&node, &isolation).await;
            (index, outcome)
        });
    }
    let mut outcomes: Vec<Option<Outcome>> = vec![None; nodes.len()];
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, outcome)) => outcomes[index] = Some(outcome),
            Err(e) => tracing::error!("a probe task failed: {e}"),
        }
    }
    nodes
        .into_iter()
        .zip(outcomes)
        .map(|(node, outcome)| {
            let outcome =
                outcome.unwrap_or_else(|| failed(&node, "was lost: its task panicked", &[]));
            Probed::new(node, outcome)
        })
        .collect()
}

fn seconds(elapsed: Duration) -> String {
    format!("{:.1}s", elapsed.as_secs_f64())
}

/// What a probe child may make its parent hold: the report line (real ones are a few KiB), and
/// of everything else it says, the first and last lines, each cut to a length. A driver that
/// prints without end costs the agent these bounds, never more.
pub(crate) const REPORT_MAX_BYTES: usize = 4 << 20;
/// Lines kept from the start and from the end of what a child says (stderr, and stdout before
/// the report); the ones in between are counted.
pub(crate) const SAID_HEAD_LINES: usize = 16;
pub(crate) const SAID_TAIL_LINES: usize = 16;
/// Longer lines are cut (on a character boundary) and marked.
pub(crate) const SAID_LINE_MAX_BYTES: usize = 512;

/// The first and last lines a child said, with a count of the lines dropped in between.
#[derive(Debug, Default)]
struct Said {
    head: Vec<String>,
    tail: std::collections::VecDeque<String>,
    dropped: u64,
}

impl Said {
    fn push(&mut self, line: String) {
        if self.head.len() < SAID_HEAD_LINES {
            self.head.push(line);
            return;
        }
        if self.tail.len() == SAID_TAIL_LINES {
            self.tail.pop_front();
            self.dropped += 1;
        }
        self.tail.push_back(line);
    }

    fn lines(&self) -> Vec<String> {
        let mut lines = self.head.clone();
        if self.dropped > 0 {
            lines.push(format!("… {} lines dropped …", self.dropped));
        }
        lines.extend(self.tail.iter().cloned());
        lines
    }
}

/// One line of bytes as text: invalid UTF-8 replaced (so one bad byte loses nothing after it),
/// cut to `SAID_LINE_MAX_BYTES`, with how much was cut.
fn said_line(bytes: &[u8], cut: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_suffix('\r').unwrap_or(&text);
    if text.len() <= SAID_LINE_MAX_BYTES && cut == 0 {
        return text.to_string();
    }
    let mut end = text.len().min(SAID_LINE_MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = cut + text.len() - end;
    format!("{}… ({cut} bytes cut)", &text[..end])
}

/// Reads `reader` to its end as lines, holding at most `max_line` bytes of any one line (the rest
/// of a longer line is counted, not kept) and calling `line(bytes, bytes_cut)` for each.
async fn read_lines<R: tokio::io::AsyncRead + Unpin>(
    mut reader: R,
    max_line: usize,
    mut line: impl FnMut(&[u8], usize),
) {
    let mut chunk = vec![0u8; 16 << 10];
    let mut current: Vec<u8> = Vec::new();
    let mut cut = 0usize;
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (part, newline) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], Some(i)),
                None => (rest, None),
            };
            let room = max_line.saturating_sub(current.len());
            current.extend_from_slice(&part[..part.len().min(room)]);
            cut += part.len().saturating_sub(room);
            match newline {
                Some(i) => {
                    line(&current, cut);
                    current.clear();
                    cut = 0;
                    rest = &rest[i + 1..];
                }
                None => rest = &[],
            }
        }
    }
    if !current.is_empty() || cut > 0 {
        line(&current, cut);
    }
}

/// What the child printed on stdout: its last non-empty line (the report), and the lines before
/// it, which the driver said.
#[derive(Default)]
struct Stdout {
    said: Said,
    last: Option<(Vec<u8>, usize)>,
}

/// The probe children this process started and tokio waits for (by pid); [`reap_orphans`] leaves
/// them alone. Spawning holds the lock until the pid is in, so the reaper never sees one of ours
/// unlisted.
static OWN_CHILDREN: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Takes a probe child off [`OWN_CHILDREN`] when its probe ends (by then tokio has waited for
/// it; a probe abandoned mid-way leaves a killed child that tokio's orphan queue or the reaper
/// collects, either is fine).
struct OwnChild(i32);

impl Drop for OwnChild {
    fn drop(&mut self) {
        OWN_CHILDREN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.0);
    }
}

/// Reaps, for as long as the runtime runs, every process that ends up a child of this one without
/// being a probe child it started: helpers a driver moved out of the probe's process group (their
/// own session), which the group kill cannot reach and which are re-parented here when their
/// parent dies (this process is a subreaper, or PID 1 in its container). Woken by SIGCHLD; each
/// wake-up scans `/proc` (a container's is small) on the blocking pool.
pub async fn reap_orphans() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut children = match signal(SignalKind::child()) {
        Ok(children) => children,
        Err(e) => {
            tracing::warn!(
                "cannot watch for ended child processes (orphans of probes may linger): {e}"
            );
            return;
        }
    };
    while children.recv().await.is_some() {
        let _ = tokio::task::spawn_blocking(reap_orphans_now).await;
    }
}

/// One pass of [`reap_orphans`]: every zombie whose parent is this process and that is not one
/// of [`OWN_CHILDREN`] is waited for.
fn reap_orphans_now() {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let own = OWN_CHILDREN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`, where comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next()) else {
            continue;
        };
        if state == "Z" && ppid.parse::<u32>().ok() == Some(me) && !own.contains(&pid) {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        }
    }
}

/// Kills a probe child's whole process group when dropped: after the child exits (helpers the
/// driver left behind), at a timeout, and when the probe is abandoned (shutdown, Ctrl-C, a
/// dropped future). The group has the child as leader, and its id cannot be reused while any
/// member lives, so this reaches only the probe and what it started. Members re-parented to this
/// process (it is PID 1 in its container, or a subreaper: `become_subreaper`) are reaped here.
struct ProbeGroup(Option<nix::unistd::Pid>);

/// Reaps the members of group `pgid` that ended up as our children, without blocking; true when
/// none is left to wait for.
fn reap_group(pgid: nix::unistd::Pid) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    loop {
        match waitid(Id::PGid(pgid), WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => continue,
            // ECHILD: no child of ours is in the group (any more).
            Err(_) => return true,
        }
    }
}

impl ProbeGroup {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            // ESRCH (nobody left) is the usual answer after a clean exit.
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Kills the group and reaps it, waiting up to a second for SIGKILL to take effect.
    async fn end(mut self) {
        self.kill();
        let Some(pgid) = self.0.take() else { return };
        for _ in 0..100 {
            if reap_group(pgid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for ProbeGroup {
    fn drop(&mut self) {
        self.kill();
        let Some(pgid) = self.0.take() else { return };
        // Reaping needs the members to have died; a short-lived thread waits for them, so that an
        // abandoned probe leaves no zombie behind either.
        let _ = std::thread::Builder::new()
            .name("reap-probe".into())
            .spawn(move || {
                for _ in 0..100 {
                    if reap_group(pgid) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            });
    }
}

/// Makes this process the reaper of the processes its probe children leave behind
/// (`PR_SET_CHILD_SUBREAPER`), so that a killed probe's helpers come back to it to be reaped
/// even when it is not PID 1 (as PID 1 in its container, they come to it anyway). The agent and
/// `probe` call it once at start, and run [`reap_orphans`] for what leaves the probes' groups.
/// Never in a process that has children of its own to wait for (a test harness): the reaper
/// would take them.
pub fn become_subreaper() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!("cannot become a subreaper (helpers of killed probes may linger): {e}");
    }
}

/// Runs one probe child for `node` and turns whatever happens into an outcome.
pub async fn probe_in_child(node: &RenderNode, isolation: &Isolation) -> Outcome {
    let start = Instant::now();
    let program = &isolation.command.program;
    let mut command = tokio::process::Command::new(program);
    command
        .args(&isolation.command.args)
        .arg("--render-node")
        .arg(&node.path);
    if let Some(driver) = driver_for(&isolation.overrides, &node.pci) {
        command.arg("--va-driver").arg(driver);
    }
    command
        .env_remove("LIBVA_DRIVER_NAME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a hung probe is killed with anything it started.
        .process_group(0)
        .kill_on_drop(true);
    let (mut child, _own) = {
        let mut own = OWN_CHILDREN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match command.spawn() {
            Ok(child) => {
                let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
                own.insert(pid);
                (child, OwnChild(pid))
            }
            Err(e) => {
                let what = format!("could not start {}: {e}", program.display());
                return failed(node, &what, &[]);
            }
        }
    };
    // From here on the group dies with this function, however it ends.
    let group = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(|p| ProbeGroup(Some(nix::unistd::Pid::from_raw(p))));
    let stderr = Arc::new(Mutex::new(Said::default()));
    let stderr_task = child.stderr.take().map(|pipe| {
        let said = Arc::clone(&stderr);
        tokio::spawn(read_lines(pipe, SAID_LINE_MAX_BYTES, move |bytes, cut| {
            if let Ok(mut said) = said.lock() {
                said.push(said_line(bytes, cut));
            }
        }))
    });
    let stdout = Arc::new(Mutex::new(Stdout::default()));
    let stdout_task = child.stdout.take().map(|pipe| {
        let out = Arc::clone(&stdout);
        tokio::spawn(read_lines(pipe, REPORT_MAX_BYTES, move |bytes, cut| {
            if bytes.iter().all(u8::is_ascii_whitespace) && cut == 0 {
                return;
            }
            if let Ok(mut out) = out.lock() {
                if let Some((previous, previous_cut)) = out.last.take() {
                    out.said.push(said_line(&previous, previous_cut));
                }
                out.last = Some((bytes.to_vec(), cut));
            }
        }))
    });
    // Both pipes reach EOF once the child and everything holding them have exited or been
    // killed; a helper that left the group could hold them longer, hence the bound.
    let drained = async {
        let pipes = async {
            if let Some(task) = stderr_task {
                let _ = task.await;
            }
            if let Some(task) = stdout_task {
                let _ = task.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), pipes).await;
    };
    let status = tokio::time::timeout(isolation.timeout, child.wait()).await;
    // Whatever is still running in the group (a hung probe, helpers a driver left behind) ends
    // now; what it wrote stays in the pipes and is read to the end below.
    if let Some(group) = &group {
        group.kill();
    }
    if status.is_err() {
        let _ = child.kill().await;
    }
    drained.await;
    if let Some(group) = group {
        group.end().await;
    }
    let elapsed = seconds(start.elapsed());
    let mut said = stderr.lock().map(|s| s.lines()).unwrap_or_default();
    let (stdout_said, last) = match stdout.lock() {
        Ok(mut out) => (out.said.lines(), out.last.take()),
        Err(_) => (Vec::new(), None),
    };
    // Anything the driver printed to stdout before the report is also something it said.
    said.extend(stdout_said);
    let status = match status {
        Err(_) => {
            let what = format!(
                "timed out after {} and was killed with its process group",
                seconds(isolation.timeout)
            );
            // The one failure that says the driver stopped answering.
            let text = failure_text(node, &what, &said);
            return Outcome::Failed(Failure::new(FailureKind::NotAnswering, text));
        }
        Ok(Err(e)) => {
            let what = format!("could not be waited for after {elapsed}: {e}");
            return failed(node, &what, &said);
        }
        Ok(Ok(status)) => status,
    };
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(signal)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {signal}"));
        if let Some((bytes, cut)) = &last {
            said.push(said_line(bytes, *cut));
        }
        let what = format!("killed by {name} after {elapsed}");
        return failed(node, &what, &said);
    }
    if !status.success() {
        if let Some((bytes, cut)) = &last {
            said.push(said_line(bytes, *cut));
        }
        let code = status
            .code()
            .map_or_else(|| "unknown".to_string(), |c| c.to_string());
        let what = format!("exited with status {code} after {elapsed}");
        return failed(node, &what, &said);
    }
    let Some((last, cut)) = last else {
        let what = format!("printed no report after {elapsed}");
        return failed(node, &what, &said);
    };
    if cut > 0 {
        said.push(said_line(&last, cut));
        let what = format!(
            "printed a report longer than {} MiB after {elapsed}",
            REPORT_MAX_BYTES >> 20
        );
        return failed(node, &what, &said);
    }
    match serde_json::from_slice::<Report>(&last) {
        Ok(report) => {
            log_said(node, &report, &said);
            Outcome::Report(Box::new(report))
        }
        Err(e) => {
            said.push(said_line(&last, 0));
            let what = format!("printed an unreadable report after {elapsed} ({e})");
            failed(node, &what, &said)
        }
    }
}

/// Logs what a probe child said beside its report. When the query failed, the driver's own
/// lines are the reason an operator needs (iHD: `DRM_IOCTL_VERSION failed: ...`, nvidia:
/// `Cannot load libcuda.so.1`), so they are logged at warn, escaped, one line per driver file
/// libva was opening when they were said, without libva's messages (the failure quotes those);
/// after a probe that worked, everything stays at debug.
fn log_said(node: &RenderNode, report: &Report, said: &[String]) {
    if report.error.is_none() {
        for line in said {
            tracing::debug!("probe of {}: {line}", node.path.display());
        }
        return;
    }
    let libva: BTreeSet<String> = report.said().into_iter().collect();
    // (the driver file being opened, what was said meanwhile); `said` is bounded, so is this.
    let mut groups: Vec<(Option<&str>, Vec<std::borrow::Cow<'_, str>>)> = Vec::new();
    let mut opening = None;
    for line in said {
        if libva.contains(line) {
            opening = line.strip_prefix("libva info: Trying to open ").or(opening);
            continue;
        }
        match groups.last_mut() {
            Some((driver, lines)) if *driver == opening => {
                lines.push(crate::text::terminal_safe(line))
            }
            _ => groups.push((opening, vec![crate::text::terminal_safe(line)])),
        }
    }
    for (driver, lines) in groups {
        tracing::warn!(
            "probe of {} ({}): {} said: {}",
            node.path.display(),
            node.pci.address,
            driver.map_or_else(|| "the probe".into(), crate::text::terminal_safe),
            lines.join(" | ")
        );
    }
}

/// A probe process that failed otherwise than by not answering: crashed, exited, printed no
/// readable report, or could not be started.
fn failed(node: &RenderNode, what: &str, said: &[String]) -> Outcome {
    Outcome::Failed(Failure::new(
        FailureKind::ProbeFailed,
        failure_text(node, what, said),
    ))
}

/// What the child is asked to do.
#[derive(Clone, Debug, Default)]
pub struct ChildRequest {
    pub render_node: PathBuf,
    pub options: ProbeOptions,
    /// Print this recorded report instead of asking libva (benchmarks and tests of the plumbing).
    pub replay: Option<PathBuf>,
}

/// Why the child could not print a report at all.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("read report to replay {path}: {message}")]
    Replay { path: PathBuf, message: String },
    #[error("write report: {0}")]
    Write(#[from] std::io::Error),
}

/// The child's whole job: probe one node (or replay a report) and print the report as one JSON
/// line. A libva failure is part of the report, not an error of the child.
pub fn run_child(request: &ChildRequest, out: &mut dyn Write) -> Result<(), ChildError> {
    let report = match &request.replay {
        Some(path) => {
            let replay_err = |message: String| ChildError::Replay {
                path: path.clone(),
                message,
            };
            let text = read_record_file(path).map_err(|e| replay_err(e.to_string()))?;
            serde_json::from_str::<Report>(&text).map_err(|e| replay_err(e.to_string()))?
        }
        None => {
            let options = ProbeOptions {
                echo_messages: true,
                ..request.options.clone()
            };
            probe(&request.render_node, &options)
        }
    };
    let line = serde_json::to_string(&report).map_err(std::io::Error::other)?;
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Logs each skipped file's error at ERROR the first time a probe meets it, and at DEBUG while
/// later probes (every re-probe period) meet it unchanged: one bad file beside the good ones is
/// one error line, not one a period. A file that changes, or goes and comes back, is told again.
fn log_skipped(errors: Vec<String>) {
    static LAST: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for e in &errors {
        if last.contains(e) {
            tracing::debug!("skipping a file, reading the others (as at the last probe): {e}");
        } else {
            tracing::error!("skipping a file, reading the others: {e}");
        }
    }
    *last = errors;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pci(address: &str, vendor: &str) -> PciIdentity {
        PciIdentity {
            address: address.into(),
            vendor: vendor.into(),
            product: "0000".into(),
            driver: "x".into(),
            pci_name: None,
        }
    }

    #[test]
    fn overrides_parse_and_the_address_wins_over_the_vendor() {
        let overrides: Vec<DriverOverride> = ["8086=i965", "0000:00:02.0=iHD"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(
            driver_for(&overrides, &pci("0000:00:02.0", "8086")),
            Some("iHD")
        );
        assert_eq!(
            driver_for(&overrides, &pci("0000:00:03.0", "8086")),
            Some("i965")
        );
        assert_eq!(driver_for(&overrides, &pci("0000:03:00.0", "1002")), None);
        for bad in ["radeonsi", "amd=radeonsi", "8086=", "8086=../x"] {
            let err = bad.parse::<DriverOverride>().unwrap_err();
            assert!(err.contains("(valid: ADDRESS=NAME"), "{err}");
        }
    }

    const GOOD: &str = r#"{"render_node": "/dev/dri/renderD128",
        "pci": {"address": "0000:00:02.0", "vendor": "8086", "product": "9a49", "driver": "i915"},
        "report": {"configs": [{"profile": "VAProfileH264High", "entrypoint": "VAEntrypointVLD"}]}}"#;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn an_unknown_profile_name_is_its_own_message_and_fails_only_that_gpu() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.json", GOOD);
        let bad = GOOD
            .replace("renderD128", "renderD129")
            .replace("0000:00:02.0", "0000:03:00.0")
            .replace("VAProfileH264High", "VAProfileH264Hihg");
        let bad_file = write(dir.path(), "b.json", &bad);
        let records = read_records(dir.path()).unwrap();
        assert_eq!(records.len(), 2);
        assert!(records[0].report.is_some() && records[0].failure.is_none());
        let failure = records[1].failure.as_deref().unwrap();
        assert!(
            failure.starts_with(&format!(
                "probe of /dev/dri/renderD129 (0000:03:00.0) has an unreadable recorded probe: \
                 parse {}: unknown VAProfile name \"VAProfileH264Hihg\" (hint: write values this \
                 build does not name as numbers)",
                bad_file.display()
            )),
            "{failure}"
        );
        assert!(!failure.contains("did not match any variant"), "{failure}");
        // In an array, the record is named by its index.
        let array = write(
            dir.path(),
            "array.json.txt",
            &format!("[{GOOD}, {}]", bad.replace("0000:03", "0000:04")),
        );
        let records = read_records(&array).unwrap();
        assert!(
            records[1]
                .failure
                .as_deref()
                .unwrap()
                .contains(": record 1: unknown VAProfile name")
        );
    }

    #[test]
    fn a_file_naming_no_gpu_is_skipped_in_a_directory_and_an_error_alone() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.json", GOOD);
        let broken = write(dir.path(), "b.json", "{\"render_node\": ");
        let records = read_records(dir.path()).unwrap();
        assert_eq!(records.len(), 1, "the good GPU is still there");
        let err = read_records(&broken).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("parse recorded probes {}: EOF", broken.display())),
            "{err}"
        );
        assert!(
            err.ends_with("(hint: the format is in docs/report-format.md)"),
            "{err}"
        );
    }

    #[test]
    fn two_records_of_one_pci_address_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.json", GOOD);
        let b = write(
            dir.path(),
            "b.json",
            &GOOD.replace("renderD128", "renderD129"),
        );
        let err = read_records(dir.path()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "recorded probes {} and {} both describe PCI address 0000:00:02.0 (hint: each GPU \
                 must be recorded once; remove one of them)",
                a.display(),
                b.display()
            )
        );
    }

    #[test]
    fn a_record_in_capitals_is_published_in_the_canonical_form() {
        let dir = tempfile::tempdir().unwrap();
        let upper = GOOD.replace("0000:00:02.0", "0000:0A:1F.0");
        assert_ne!(upper, GOOD, "the record names an address");
        let file = write(dir.path(), "a.json", &upper);
        let records = read_records(&file).unwrap();
        assert_eq!(records[0].pci.address, "0000:0a:1f.0");
        let device = crate::node::device::describe(&records[0].node(), &records[0].outcome());
        assert_eq!(device.name, "pci-0000-0a-1f-0");
        assert_eq!(
            device.attributes.get(crate::catalogue::PCI_BUS_ID),
            Some(&crate::node::device::AttrValue::String(
                "0000:0a:1f.0".into()
            ))
        );
    }

    #[test]
    fn a_record_whose_address_would_make_an_invalid_device_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bad = write(
            dir.path(),
            "a.json",
            &GOOD.replace("0000:00:02.0", "0000:00:02.0 "),
        );
        let err = read_records(&bad).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "recorded probe {}: PCI address \"0000:00:02.0 \" is not dddd:bb:dd.f (hint: write \
                 it as the kernel does, e.g. 0000:03:00.0; the device name is made from it)",
                bad.display()
            )
        );
    }

    /// Texts that hold no record, made from their parts: every one is one error naming the
    /// file, in a directory is that file's problem, and never reaches a parser twice.
    fn not_records() -> Vec<String> {
        let mut texts = Vec::new();
        for space in ["", " ", "\n", "\t\n  \n", "\r\n"] {
            for body in [
                "",
                "null",
                "~",
                "Null",
                "3",
                "-1.5e300",
                "0x1f",
                "true",
                "no",
                "\"x\"",
                "'x'",
                "foo",
                "foo bar",
                "# only a comment",
                "---",
                "--- # c",
                "...",
                "--- null",
                "---\n---",
                "--- 3\n--- 4",
                "|\n  text",
                "!!str 3",
                "&a x",
            ] {
                texts.push(format!("{space}{body}{space}"));
            }
        }
        texts
    }

    #[test]
    fn text_that_is_no_record_is_one_error_and_in_a_directory_that_file_s_problem() {
        let dir = tempfile::tempdir().unwrap();
        let good = tempfile::tempdir().unwrap();
        write(good.path(), "a.json", GOOD);
        for (i, text) in not_records().iter().enumerate() {
            for name in ["r.json", "r.yaml"] {
                let file = write(dir.path(), name, text);
                let err = read_records(&file).unwrap_err();
                let message = err.to_string();
                assert!(
                    matches!(
                        err,
                        ProbeError::NotRecords { .. } | ProbeError::ParseYaml { .. }
                    ),
                    "{text:?}: {message}"
                );
                assert!(!message.contains('\n'), "{text:?}: {message}");
                assert!(
                    message.contains(&file.display().to_string()) && message.ends_with(')'),
                    "{text:?}: {message}"
                );
                std::fs::remove_file(&file).unwrap();
                // Beside a good record, only this file is lost.
                let other = write(good.path(), &format!("b{i}-{name}"), text);
                assert_eq!(read_records(good.path()).unwrap().len(), 1, "{text:?}");
                std::fs::remove_file(other).unwrap();
            }
        }
        // Alone in a directory: an error, not a node without GPUs.
        let alone = tempfile::tempdir().unwrap();
        write(alone.path(), "a.json", "");
        write(alone.path(), "b.yaml", "null");
        let err = read_records(alone.path()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "no readable recorded probes in {dir}: its 2 files are unreadable, the first: \
                 recorded probes {dir}/a.json: it is empty, not a recorded probe or a list of \
                 them (hint: `media-capabilities probe -o json > FILE` on a GPU node records \
                 one; the format is in docs/report-format.md)",
                dir = alone.path().display()
            )
        );
    }

    /// Runs `read_records` on a thread, failing the test if it does not return in time (a
    /// FIFO's open waits for a writer; `/dev/zero` never ends).
    fn read_bounded(path: &Path) -> Result<Vec<Probed>, ProbeError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || tx.send(read_records(&path)));
        rx.recv_timeout(Duration::from_secs(20))
            .expect("read_records returns")
    }

    #[test]
    fn devices_fifos_and_files_over_the_bound_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for (path, what) in [
            (Path::new("/dev/zero"), "a character device"),
            (Path::new("/dev/urandom"), "a character device"),
            (Path::new("/dev/null"), "a character device"),
            (fifo.as_path(), "a FIFO"),
        ] {
            let err = read_bounded(path).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "recorded probes {}: it is {what}, not a file (hint: give a file \
                     `media-capabilities probe -o json` wrote, or a directory of them)",
                    path.display()
                )
            );
        }
        // Sparse: the size alone refuses it.
        let big = dir.path().join("big.json");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(RECORD_FILE_MAX_BYTES + 1)
            .unwrap();
        let err = read_bounded(&big).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "recorded probes {}: 16777217 bytes, over the 16 MiB",
                big.display()
            )),
            "{err}"
        );
        // In a directory, links to them and the FIFO are skipped beside a good record.
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.json")).unwrap();
        write(dir.path(), "good.json", GOOD);
        assert_eq!(read_bounded(dir.path()).unwrap().len(), 1);
        // Bytes that are not text.
        let binary = dir.path().join("bin");
        std::fs::write(&binary, b"{\xff\xfe}").unwrap();
        let err = read_bounded(&binary).unwrap_err().to_string();
        assert!(
            err.contains("it is not UTF-8 text (byte 1 is not)"),
            "{err}"
        );
    }

    #[test]
    fn nesting_past_the_limit_is_refused_quickly_in_every_shape() {
        let dir = tempfile::tempdir().unwrap();
        let depth = 200_000;
        let shapes = [
            ("json array", "[".repeat(depth)),
            (
                "json object",
                format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)),
            ),
            ("yaml flow", format!("render_node: {}", "[".repeat(depth))),
            ("yaml flow map", format!("a: {}", "{a: ".repeat(depth))),
            ("yaml block sequence", "- ".repeat(depth)),
            (
                "yaml block mapping",
                (0..2000)
                    .map(|i| format!("{}a:\n", " ".repeat(i)))
                    .collect(),
            ),
            // Aliases of aliases: 9^9 strings if expanded.
            ("yaml aliases", {
                let mut text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n".to_string();
                for i in 1..9 {
                    let p = format!("*a{}", i - 1);
                    text += &format!("a{i}: &a{i} [{}]\n", vec![p; 9].join(", "));
                }
                text
            }),
        ];
        for (shape, text) in shapes {
            let file = write(dir.path(), "deep.yaml", &text);
            let start = Instant::now();
            let err = read_bounded(&file).unwrap_err().to_string();
            // serde_json skips an unknown field's value without recursing, so the deep object
            // is refused for what it lacks.
            assert!(
                err.contains("recursion limit exceeded")
                    || err.contains("repetition limit exceeded")
                    || err.contains("deeper than 128")
                    || err.contains("missing field `render_node`"),
                "{shape}: {err}"
            );
            // A hang guard, not a timing: expanded, these shapes take minutes and gigabytes.
            assert!(start.elapsed() < Duration::from_secs(60), "{shape}");
        }
    }
}
