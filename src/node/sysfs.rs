//! Discovery: the node's render nodes and the PCI identity of the GPU behind each.
//!
//! Render nodes are listed under a dev root (`/dev/dri`); each one's identity is read from the sys
//! root (`/sys/class/drm/renderDN/device`, a link to the PCI function), so tests point both roots at a fake tree
//! in a temp dir. GPUs are keyed by PCI address because renderD numbers are not stable. Names come
//! from the system's pci.ids through `pciid-parser` (it has no build script and reads a file we
//! name; its `online` feature, the only network access, stays off).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The places discovery reads; `/dev/dri` and `/sys` unless a test or an operator says otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    pub dev: PathBuf,
    pub sys: PathBuf,
}

/// Where pci.ids usually lives: the Debian `pci.ids` package, then hwdata.
pub(crate) const PCI_IDS_PATHS: [&str; 2] =
    ["/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"];

/// What sysfs and pci.ids say about the GPU behind a render node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciIdentity {
    /// `PCI_SLOT_NAME`, e.g. `0000:00:02.0`.
    pub address: String,
    /// PCI vendor ID, 4 lowercase hex digits (`8086`).
    pub vendor: String,
    /// PCI device ID, 4 lowercase hex digits (`7d55`).
    pub product: String,
    /// The kernel driver (`DRIVER` in uevent): i915, xe, amdgpu, nvidia...
    pub driver: String,
    /// The device's name in pci.ids, untrimmed; absent when there is no database or no entry
    /// (the published `name` then follows `device::name_value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_name: Option<String>,
}

/// One render node and its GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderNode {
    pub path: PathBuf,
    pub pci: PciIdentity,
}

/// What to check when the render nodes' directory cannot be listed. `probe` runs on a host as
/// often as in the agent's container, so neither is assumed.
fn dev_root_hint(error: &std::io::Error) -> &'static str {
    match error.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "run it as a user who may read the render nodes, e.g. one in the render or video group"
        }
        _ => {
            "no GPU kernel driver has made render nodes here (ls /sys/class/drm shows what is \
             loaded); in a container, /dev/dri must be mounted into it; --dev-root names another \
             directory"
        }
    }
}

/// Why discovery could not run at all (a single unusable node is skipped, not an error).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "list render nodes in {path}: {source} (hint: {})",
        dev_root_hint(source)
    )]
    DevRoot {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "read PCI ID database {path}: {message} (hint: install the pci.ids package, or point --pci-ids at the file)"
    )]
    PciIds { path: PathBuf, message: String },
}

/// The PCI ID database, or the knowledge that there is none.
pub(crate) struct PciNames {
    db: Option<pciid_parser::Database>,
}

impl PciNames {
    /// No database: every `pci_name` is absent.
    pub(crate) fn none() -> PciNames {
        PciNames { db: None }
    }

    /// Reads `path`, or with `None` the first of `PCI_IDS_PATHS` that exists. A path the operator
    /// named must be readable; a missing system database is only logged, since names are
    /// cosmetic and the capabilities do not depend on them.
    pub(crate) fn load(path: Option<&Path>) -> Result<PciNames, DiscoveryError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match PCI_IDS_PATHS.iter().map(Path::new).find(|p| p.exists()) {
                Some(p) => p.to_path_buf(),
                None => {
                    tracing::warn!(
                        "no PCI ID database at {} or {}; GPU names fall back to vendor:product",
                        PCI_IDS_PATHS[0],
                        PCI_IDS_PATHS[1]
                    );
                    return Ok(PciNames::none());
                }
            },
        };
        let db =
            pciid_parser::Database::read_from_file(&path).map_err(|e| DiscoveryError::PciIds {
                path: path.clone(),
                message: e.to_string(),
            })?;
        tracing::debug!("read PCI ID database {}", path.display());
        Ok(PciNames { db: Some(db) })
    }

    /// As `load`, but parsed once per process and again only when the file changes (its size,
    /// modification time or inode), since the agent discovers the GPUs again at every rescan and
    /// parsing pci.ids takes tens of milliseconds. The last database stays cached; asking for
    /// another path replaces it.
    pub(crate) fn load_cached(path: Option<&Path>) -> Result<Arc<PciNames>, DiscoveryError> {
        static CACHE: Mutex<Option<CachedNames>> = Mutex::new(None);
        let resolved = match path {
            Some(p) => Some(p.to_path_buf()),
            None => PCI_IDS_PATHS
                .iter()
                .map(Path::new)
                .find(|p| p.exists())
                .map(Path::to_path_buf),
        };
        let stamp = resolved.as_deref().and_then(FileStamp::of);
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cached_path, cached_stamp, names)) = cache.as_ref()
            && *cached_path == resolved
            && stamp.is_some()
            && Some(cached_stamp) == stamp.as_ref()
        {
            return Ok(Arc::clone(names));
        }
        let names = Arc::new(PciNames::load(resolved.as_deref().or(path))?);
        if let Some(stamp) = stamp {
            *cache = Some((resolved, stamp, Arc::clone(&names)));
        }
        Ok(names)
    }

    /// The device's name, when the database has the entry.
    pub(crate) fn device_name(&self, vendor: u16, product: u16) -> Option<String> {
        // Looked up in the parsed maps rather than with `find_device_name`, which formats IDs
        // without leading zeros and so misses products like 0412.
        self.db
            .as_ref()?
            .vendors
            .get(&vendor)?
            .devices
            .get(&product)
            .map(|d| d.name.clone())
    }
}

/// The last database read: which file (`None`: the first of `PCI_IDS_PATHS`), which version.
type CachedNames = (Option<PathBuf>, FileStamp, Arc<PciNames>);

/// What identifies one version of a file without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: meta.ino(),
        })
    }
}

/// Every PCI render node under `roots.dev`, sorted by PCI address. Nodes without a PCI identity
/// (vgem, platform GPUs) and nodes whose identity cannot be read are skipped with a log line.
pub(crate) fn discover(roots: &Roots, names: &PciNames) -> Result<Vec<RenderNode>, DiscoveryError> {
    let entries = std::fs::read_dir(&roots.dev).map_err(|source| DiscoveryError::DevRoot {
        path: roots.dev.clone(),
        source,
    })?;
    let mut nodes: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("renderD"))
        .collect();
    nodes.sort();
    let mut found: Vec<RenderNode> = Vec::new();
    for node in nodes {
        let path = roots.dev.join(&node);
        let device = roots.sys.join("class/drm").join(&node).join("device");
        match identity(&device, names) {
            Ok(pci) => {
                if let Some(first) = found.iter().find(|n| n.pci.address == pci.address) {
                    tracing::warn!(
                        "skipping {}: same PCI address {} as {}",
                        path.display(),
                        pci.address,
                        first.path.display()
                    );
                    continue;
                }
                found.push(RenderNode { path, pci });
            }
            Err(Skip::NotPci(why)) => {
                tracing::info!("skipping {}: not a PCI device ({why})", path.display());
            }
            Err(Skip::Unreadable(why)) => {
                tracing::warn!("skipping {}: {why}", path.display());
            }
        }
    }
    found.sort_by(|a, b| a.pci.address.cmp(&b.pci.address));
    Ok(found)
}

enum Skip {
    NotPci(String),
    Unreadable(String),
}

fn identity(device: &Path, names: &PciNames) -> Result<PciIdentity, Skip> {
    let uevent_path = device.join("uevent");
    let uevent = std::fs::read_to_string(&uevent_path)
        .map_err(|e| Skip::NotPci(format!("{}: {e}", uevent_path.display())))?;
    let field = |key: &str| {
        uevent
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::trim)
            .map(str::to_string)
    };
    let address = field("PCI_SLOT_NAME")
        .ok_or_else(|| Skip::NotPci(format!("no PCI_SLOT_NAME in {}", uevent_path.display())))?;
    if !valid_address(&address) {
        return Err(Skip::Unreadable(format!(
            "PCI_SLOT_NAME {address:?} in {} is not dddd:bb:dd.f",
            uevent_path.display()
        )));
    }
    // The kernel writes lowercase; any other form would never pair with a render driver's
    // pciBusID, which upstream's helper writes in lowercase.
    let address = address.to_ascii_lowercase();
    let driver = field("DRIVER")
        .ok_or_else(|| Skip::Unreadable(format!("no DRIVER in {}", uevent_path.display())))?;
    let vendor = hex_id(&device.join("vendor"))?;
    let product = hex_id(&device.join("device"))?;
    Ok(PciIdentity {
        pci_name: names.device_name(vendor, product),
        address,
        vendor: format!("{vendor:04x}"),
        product: format!("{product:04x}"),
        driver,
    })
}

/// Reads a sysfs ID file (`0x8086`).
fn hex_id(path: &Path) -> Result<u16, Skip> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Skip::Unreadable(format!("{}: {e}", path.display())))?;
    let digits = text.trim();
    digits
        .strip_prefix("0x")
        .and_then(|hex| u16::from_str_radix(hex, 16).ok())
        .ok_or_else(|| {
            Skip::Unreadable(format!(
                "{} holds {digits:?}, not a 16-bit hex ID",
                path.display()
            ))
        })
}

/// `dddd:bb:dd.f` in hex: the only shape the kernel gives, and what keeps device names valid.
pub(crate) fn valid_address(address: &str) -> bool {
    let parts: Vec<&str> = address.split([':', '.']).collect();
    parts.len() == 4
        && parts
            .iter()
            .zip([4, 2, 2, 1])
            .all(|(p, len)| p.len() == len && p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fake /dev/dri + /sys with the kernel's layout (`/sys/class/drm/renderDN/device` -> the PCI
    /// function, with `vendor`, `device` and `uevent`).
    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Tree {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir_all(dir.path().join("dev/dri")).unwrap();
            Tree { dir }
        }

        fn roots(&self) -> Roots {
            Roots {
                dev: self.dir.path().join("dev/dri"),
                sys: self.dir.path().join("sys"),
            }
        }

        fn node(&self, name: &str) -> PathBuf {
            let path = self.dir.path().join("dev/dri").join(name);
            fs::write(&path, "").unwrap();
            let device = self
                .dir
                .path()
                .join("sys/class/drm")
                .join(name)
                .join("device");
            fs::create_dir_all(&device).unwrap();
            device
        }

        fn pci(&self, name: &str, address: &str, vendor: &str, product: &str, driver: &str) {
            let device = self.node(name);
            fs::write(device.join("vendor"), format!("{vendor}\n")).unwrap();
            fs::write(device.join("device"), format!("{product}\n")).unwrap();
            fs::write(
                device.join("uevent"),
                format!("DRIVER={driver}\nPCI_CLASS=30000\nPCI_SLOT_NAME={address}\n"),
            )
            .unwrap();
        }
    }

    const PCI_IDS: &str = "# test database\n8086  Intel Corporation\n\t0412  Xeon E3-1200 v3 Processor Integrated Graphics Controller\n\t7d55  Meteor Lake-P [Intel Arc Graphics]\n\t\t1028 0c11  Some laptop\n1002  Advanced Micro Devices, Inc. [AMD/ATI]\n\t744c  Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]\n";

    fn names(tree: &Tree) -> PciNames {
        let path = tree.dir.path().join("pci.ids");
        fs::write(&path, PCI_IDS).unwrap();
        PciNames::load(Some(&path)).unwrap()
    }

    #[test]
    fn finds_pci_render_nodes_sorted_by_address_with_names() {
        let tree = Tree::new();
        tree.pci("renderD128", "0000:03:00.0", "0x1002", "0x744c", "amdgpu");
        tree.pci("renderD129", "0000:00:02.0", "0x8086", "0x7D55", "i915");
        tree.pci("renderD130", "0000:00:03.0", "0x8086", "0x0412", "i915");
        // A card node and a control file are not render nodes.
        fs::write(tree.dir.path().join("dev/dri/card0"), "").unwrap();
        let found = discover(&tree.roots(), &names(&tree)).unwrap();
        let summary: Vec<_> = found
            .iter()
            .map(|n| {
                (
                    n.path.file_name().unwrap().to_str().unwrap(),
                    n.pci.address.as_str(),
                    n.pci.vendor.as_str(),
                    n.pci.product.as_str(),
                    n.pci.driver.as_str(),
                    n.pci.pci_name.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "renderD129",
                    "0000:00:02.0",
                    "8086",
                    "7d55",
                    "i915",
                    Some("Meteor Lake-P [Intel Arc Graphics]")
                ),
                (
                    "renderD130",
                    "0000:00:03.0",
                    "8086",
                    "0412",
                    "i915",
                    Some("Xeon E3-1200 v3 Processor Integrated Graphics Controller")
                ),
                (
                    "renderD128",
                    "0000:03:00.0",
                    "1002",
                    "744c",
                    "amdgpu",
                    Some("Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]")
                ),
            ]
        );
    }

    #[test]
    fn non_pci_and_broken_nodes_are_skipped() {
        let tree = Tree::new();
        // vgem: a platform device, uevent without PCI_SLOT_NAME.
        let vgem = tree.node("renderD128");
        fs::write(vgem.join("uevent"), "DRIVER=vgem\n").unwrap();
        // No sysfs entry at all.
        fs::write(tree.dir.path().join("dev/dri/renderD131"), "").unwrap();
        // A PCI node whose vendor file is garbage.
        tree.pci("renderD129", "0000:00:02.0", "intel", "0x7d55", "i915");
        tree.pci("renderD130", "0000:03:00.0", "0x1002", "0x744c", "amdgpu");
        let found = discover(&tree.roots(), &PciNames::none()).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pci.address, "0000:03:00.0");
        assert_eq!(found[0].pci.pci_name, None);
    }

    #[test]
    fn a_missing_dev_root_is_an_error_with_a_hint() {
        let tree = Tree::new();
        let roots = Roots {
            dev: tree.dir.path().join("nope"),
            sys: tree.dir.path().join("sys"),
        };
        let err = discover(&roots, &PciNames::none()).unwrap_err().to_string();
        assert!(err.starts_with("list render nodes in "), "{err}");
        assert!(
            err.ends_with(
                "(hint: no GPU kernel driver has made render nodes here (ls /sys/class/drm shows \
                 what is loaded); in a container, /dev/dri must be mounted into it; --dev-root \
                 names another directory)"
            ),
            "{err}"
        );
        // A directory that is there but may not be read is a question of rights, not mounts.
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(super::dev_root_hint(&denied).contains("render or video group"));
    }

    #[test]
    fn a_named_pci_ids_file_must_exist() {
        let err = PciNames::load(Some(Path::new("/nonexistent/pci.ids")))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.starts_with("read PCI ID database /nonexistent/pci.ids: "),
            "{err}"
        );
    }

    #[test]
    fn an_address_in_capitals_is_read_in_the_canonical_form() {
        let tree = Tree::new();
        tree.pci("renderD128", "0000:0A:00.0", "0x1002", "0x744c", "amdgpu");
        let found = discover(&tree.roots(), &names(&tree)).unwrap();
        assert_eq!(found[0].pci.address, "0000:0a:00.0");
    }

    #[test]
    fn addresses_are_checked() {
        assert!(valid_address("0000:00:02.0"));
        assert!(valid_address("0001:c3:1f.7"));
        assert!(!valid_address("00:02.0"));
        assert!(!valid_address("0000:00:02.0/x"));
        assert!(!valid_address("0000:0g:02.0"));
    }

    #[test]
    fn pci_ids_is_parsed_once_and_again_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pci.ids");
        std::fs::write(&file, "8086  Intel Corporation\n\t9a49  TigerLake-LP GT2\n").unwrap();
        let first = PciNames::load_cached(Some(&file)).unwrap();
        let again = PciNames::load_cached(Some(&file)).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same file is not parsed twice"
        );
        assert_eq!(
            again.device_name(0x8086, 0x9a49).as_deref(),
            Some("TigerLake-LP GT2")
        );
        // A new version (an update of the pci.ids package replaces the file).
        let new = dir.path().join("pci.ids.new");
        std::fs::write(
            &new,
            "8086  Intel Corporation\n\t9a49  TigerLake-LP GT2 [Iris Xe]\n",
        )
        .unwrap();
        std::fs::rename(&new, &file).unwrap();
        let changed = PciNames::load_cached(Some(&file)).unwrap();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(
            changed.device_name(0x8086, 0x9a49).as_deref(),
            Some("TigerLake-LP GT2 [Iris Xe]")
        );
    }
}
