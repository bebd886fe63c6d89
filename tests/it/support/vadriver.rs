//! The test VA driver of `tests/vadriver/`, built once per run, and fake nodes it serves: the real
//! libva and the real probe without a GPU. A fake node is a temp dir with plain-file render nodes,
//! a sysfs tree of PCI identities and kernel drivers, a pci.ids, a driver directory where every
//! name libva 2.17 maps a kernel driver to is our driver, and a scenario per render node;
//! [`FakeNode::env`] gives a process the libdrm shim and the directories. Nothing of this ships.

use media_operator::node::sysfs::PciIdentity;
use media_operator::node::va::report::{Report, SurfaceFormats};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The built libraries.
pub struct Built {
    /// `mediatest`, exporting `__vaDriverInit_1_0`.
    pub driver: PathBuf,
    /// The same driver without its init symbol.
    pub no_init: PathBuf,
    /// The libdrm shim for `LD_PRELOAD`.
    pub shim: PathBuf,
}

/// Builds the driver, the symbol-less driver and the shim with `rustc` (they have no
/// dependencies, so no second dependency build), once per process, and again only when a source
/// changed since the last build. The three builds run at once: on a fresh target directory every
/// libva test waits for them.
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vadriver");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vadriver");
        std::fs::create_dir_all(&out).expect("create the VA driver's build directory");
        let driver = rustc(&src.join("driver.rs"), &out.join("mediatest.so"), &[]);
        let no_init = rustc(
            &src.join("driver.rs"),
            &out.join("mediatest-no-init.so"),
            &["no_init_symbol"],
        );
        let shim = rustc(&src.join("drm_shim.rs"), &out.join("drm-shim.so"), &[]);
        Built {
            driver: driver.wait(),
            no_init: no_init.wait(),
            shim: shim.wait(),
        }
    })
}

/// A library being built (or already up to date): `wait` gives its path once it is in place.
struct Build {
    source: PathBuf,
    output: PathBuf,
    /// The running `rustc` and the temporary file it writes; `None` when up to date.
    running: Option<(std::process::Child, PathBuf)>,
}

impl Build {
    fn wait(self) -> PathBuf {
        let Some((child, tmp)) = self.running else {
            return self.output;
        };
        let done = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("build {}: {e}", self.source.display()));
        assert!(
            done.status.success(),
            "build {}: {}",
            self.source.display(),
            String::from_utf8_lossy(&done.stderr)
        );
        std::fs::rename(&tmp, &self.output).expect("move the built library into place");
        self.output
    }
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Starts `rustc` on `source` unless `output` is newer than it.
fn rustc(source: &Path, output: &Path, cfgs: &[&str]) -> Build {
    let mut build = Build {
        source: source.to_path_buf(),
        output: output.to_path_buf(),
        running: None,
    };
    if let (Some(built), Some(src)) = (modified(output), modified(source))
        && built >= src
    {
        return build;
    }
    // Built under a temporary name and renamed: another test process may load the library at
    // any moment. Two builds of one source (the driver with and without its init symbol) write
    // different outputs, so the output's name keeps their temporary files apart.
    let tmp = output.with_extension(format!("tmp{}", std::process::id()));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut command = std::process::Command::new(&rustc);
    command
        .args(["--edition", "2024", "--crate-type", "cdylib"])
        .args([
            "-C",
            "panic=abort",
            "-C",
            "opt-level=1",
            "--crate-name",
            "mediatest",
        ])
        .arg(source)
        .arg("-o")
        .arg(&tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for cfg in cfgs {
        command.args(["--cfg", cfg]);
    }
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", Path::new(&rustc).display()));
    build.running = Some((child, tmp));
    build
}

/// `(0x1)` / `(-1)` at the end of a `VaError` text: the status.
fn status_of(error: &str) -> i32 {
    let code = error
        .rsplit_once('(')
        .and_then(|(_, c)| c.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no status in {error:?}"));
    match code.strip_prefix("0x") {
        Some(hex) => i32::from_str_radix(hex, 16).expect("hex status"),
        None => code.parse().expect("status"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The scenario that makes the driver state what `report` recorded (tests/vadriver/driver.rs,
/// `Scenario::parse`, has the format).
pub fn scenario_from_report(report: &Report) -> String {
    let mut s = String::new();
    if let Some(error) = &report.error {
        let (call, _) = error.split_once(" failed: ").expect("a VaError text");
        assert_eq!(
            call, "vaInitialize",
            "only init failures are replayed: {error}"
        );
        writeln!(s, "init {}", status_of(error)).unwrap();
        return s;
    }
    if let Some(vendor) = &report.vendor {
        writeln!(s, "vendor {}", hex(vendor.as_bytes())).unwrap();
    }
    let mut profiles: Vec<i32> = Vec::new();
    for config in &report.configs {
        if !profiles.contains(&config.profile.0) {
            profiles.push(config.profile.0);
        }
    }
    // A profile listed whose entrypoints query failed (probe.rs: "<profile>: <error>").
    for warning in &report.warnings {
        if let Some((profile, error)) = warning.split_once(": vaQueryConfigEntrypoints failed") {
            let p = media_operator::node::va::report::Profile::from_name(profile)
                .expect("a named profile")
                .0;
            profiles.push(p);
            writeln!(s, "entrypoints-error {p} {}", status_of(error)).unwrap();
        }
    }
    for p in &profiles {
        writeln!(s, "profile {p}").unwrap();
    }
    for config in &report.configs {
        let (p, e) = (config.profile, config.entrypoint);
        let rt_error = report
            .warnings
            .iter()
            .find_map(|w| w.strip_prefix(&format!("{p}/{e}: ")));
        match (config.rt_format, rt_error) {
            (Some(rt), _) => writeln!(s, "config {} {} rt {:#x}", p.0, e.0, rt.raw()),
            (None, Some(error)) => {
                writeln!(s, "config {} {} rt-error {}", p.0, e.0, status_of(error))
            }
            (None, None) => writeln!(s, "config {} {}", p.0, e.0),
        }
        .unwrap();
    }
    for surfaces in [&report.video_proc, &report.av1_surfaces]
        .into_iter()
        .flatten()
    {
        surfaces_line(&mut s, surfaces);
    }
    s
}

fn surfaces_line(s: &mut String, surfaces: &SurfaceFormats) {
    let (p, e) = (surfaces.profile.0, surfaces.entrypoint.0);
    match &surfaces.error {
        Some(error) => {
            let (call, _) = error.split_once(" failed: ").expect("a VaError text");
            writeln!(s, "surfaces-error {p} {e} {call} {}", status_of(error)).unwrap();
        }
        None => {
            let formats: Vec<String> = surfaces
                .formats
                .iter()
                .map(|f| format!("{:#x}", f.0))
                .collect();
            writeln!(s, "surfaces {p} {e} {}", formats.join(" ")).unwrap();
        }
    }
}

/// One GPU of a fake node.
#[derive(Clone, Debug)]
pub struct FakeGpu {
    /// N of `renderDN`.
    pub render: u32,
    pub pci: PciIdentity,
    /// The driver's scenario (see `scenario_from_report`).
    pub scenario: String,
}

/// Kernel drivers whose VA driver file exists but has no init symbol, or no file at all.
pub const KERNEL_NO_INIT: &str = "mediatest_noinit";
pub const KERNEL_NO_FILE: &str = "mediatest_missing";

/// Every name libva 2.17 maps a kernel driver to (va_drm_utils.c), plus our own.
const VA_DRIVER_NAMES: &[&str] = &[
    "iHD",
    "i965",
    "radeonsi",
    "r600",
    "nvidia",
    "pvr",
    "mediatest",
];

/// A node's worth of GPUs on disk.
pub struct FakeNode {
    pub dir: tempfile::TempDir,
    pub gpus: Vec<FakeGpu>,
}

impl FakeNode {
    pub fn new(gpus: Vec<FakeGpu>) -> FakeNode {
        let built = built();
        let dir = tempfile::tempdir().expect("temp dir for a fake node");
        let node = FakeNode { dir, gpus };
        for d in ["dev/dri", "scenarios", "dri"] {
            std::fs::create_dir_all(node.path(d)).unwrap();
        }
        for name in VA_DRIVER_NAMES {
            std::os::unix::fs::symlink(
                &built.driver,
                node.drivers().join(format!("{name}_drv_video.so")),
            )
            .unwrap();
        }
        std::os::unix::fs::symlink(
            &built.no_init,
            node.drivers()
                .join(format!("{KERNEL_NO_INIT}_drv_video.so")),
        )
        .unwrap();
        let mut names =
            std::collections::BTreeMap::<String, std::collections::BTreeMap<String, String>>::new();
        for gpu in &node.gpus {
            let render = format!("renderD{}", gpu.render);
            std::fs::write(node.dev_root().join(&render), "").unwrap();
            let device = node
                .sys_root()
                .join("class/drm")
                .join(&render)
                .join("device");
            std::fs::create_dir_all(&device).unwrap();
            std::fs::write(device.join("vendor"), format!("0x{}\n", gpu.pci.vendor)).unwrap();
            std::fs::write(device.join("device"), format!("0x{}\n", gpu.pci.product)).unwrap();
            std::fs::write(
                device.join("uevent"),
                format!(
                    "DRIVER={}\nPCI_SLOT_NAME={}\n",
                    gpu.pci.driver, gpu.pci.address
                ),
            )
            .unwrap();
            std::fs::write(
                node.scenarios().join(format!("{render}.scenario")),
                &gpu.scenario,
            )
            .unwrap();
            if let Some(name) = &gpu.pci.pci_name {
                let before = names
                    .entry(gpu.pci.vendor.clone())
                    .or_default()
                    .insert(gpu.pci.product.clone(), name.clone());
                assert!(
                    before.is_none_or(|b| b == *name),
                    "two names for {}:{}",
                    gpu.pci.vendor,
                    gpu.pci.product
                );
            }
        }
        // pci.ids: each vendor once, its devices below it.
        let mut pci_ids = String::new();
        for (vendor, devices) in &names {
            writeln!(pci_ids, "{vendor}  Vendor {vendor}").unwrap();
            for (product, name) in devices {
                writeln!(pci_ids, "\t{product}  {name}").unwrap();
            }
        }
        std::fs::write(node.pci_ids(), pci_ids).unwrap();
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    pub fn dev_root(&self) -> PathBuf {
        self.path("dev/dri")
    }
    pub fn sys_root(&self) -> PathBuf {
        self.path("sys")
    }
    pub fn pci_ids(&self) -> PathBuf {
        self.path("pci.ids")
    }
    pub fn drivers(&self) -> PathBuf {
        self.path("dri")
    }
    pub fn scenarios(&self) -> PathBuf {
        self.path("scenarios")
    }
    /// The render node of GPU `render`.
    pub fn render_node(&self, render: u32) -> PathBuf {
        self.dev_root().join(format!("renderD{render}"))
    }

    /// The discovery flags of `probe` and the agent for this node.
    pub fn args(&self) -> Vec<OsString> {
        vec![
            "--dev-root".into(),
            self.dev_root().into(),
            "--sys-root".into(),
            self.sys_root().into(),
            "--pci-ids".into(),
            self.pci_ids().into(),
        ]
    }

    /// The environment a process needs to probe this node through the real libva.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("LD_PRELOAD", built().shim.clone().into()),
            ("LIBVA_DRIVERS_PATH", self.drivers().into()),
            ("MEDIA_TESTVA_SCENARIOS", self.scenarios().into()),
            ("MEDIA_TESTVA_SYS", self.sys_root().into()),
        ]
    }
}
