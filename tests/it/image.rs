//! The agent's image, built from Debian's packages as deploy/Dockerfile says and run from its
//! entry point (support/image.rs: how, and why `docker build` itself cannot run here): the
//! binary's glibc against the image's, the versions docs/operations.md quotes, `--version` and
//! `probe` as the image's user, and the agent itself on the real control plane, on a node with
//! one GPU for each VA driver the image ships and no GPU behind any of them. Each real driver is
//! loaded by the image's libva and fails; the GPU is published with every capability false and
//! no vaDriver, and the log says libva's failure and the driver's own words at the default level.
//!
//! The render nodes are plain files and the sysfs tree a fake one (support/vadriver.rs), with
//! the tests' libdrm shim preloaded so that libva-drm takes each file for a render node of its
//! kernel driver (libva-facts §7); everything past that is the image's: libva, its driver
//! mapping, the drivers and their dependencies, pci.ids. Needs root and mmdebstrap
//! (`apt-get install mmdebstrap`); the tree is cached under ~/.cache/media-operator/image.

use crate::support::agent::AgentProcess;
use crate::support::image::{Image, Sandbox, built};
use crate::support::kube::{Kube, path};
use crate::support::vadriver::{FakeGpu, FakeNode};
use media_operator::catalogue::Capability;
use media_operator::node::sysfs::PciIdentity;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's libva looks for drivers, in the image.
const DRIVERS: &str = "/usr/lib/x86_64-linux-gnu/dri";

/// The shim's place in the sandbox: a test's mount, not part of the image.
const SHIM: &str = "/usr/local/lib/mediatest/drm-shim.so";

/// Docker's PATH for a Debian image (its config's `Env`).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One GPU of the node, and what its drivers do without it.
struct Gpu {
    address: &'static str,
    vendor: &'static str,
    product: &'static str,
    /// The PCI driver (sysfs), and the DRM driver's name where it differs (what libva maps).
    pci_driver: &'static str,
    drm_name: Option<&'static str>,
    /// The VA drivers libva tries, in order, each with a line it says itself on the way to
    /// failing (the drivers' words in these Debian 13 builds).
    tried: &'static [(&'static str, &'static str)],
}

/// A GPU for every VA driver of the image, by the DRM driver libva 2.22 maps to it
/// (va/drm/va_drm_utils.c: i915 → iHD then i965, amdgpu → radeonsi, radeon → r600 then
/// radeonsi, nvidia-drm → nvidia, any other name → itself), with real PCI identities so that
/// the image's pci.ids names them. d3d12 (Mesa's driver for WSL, whose GPU libva cannot map) is
/// chosen with `--va-driver`, as an operator would.
const GPUS: &[Gpu] = &[
    Gpu {
        address: "0000:00:02.0",
        vendor: "8086",
        product: "7d55",
        pci_driver: "i915",
        drm_name: None,
        tried: &[
            (
                "iHD",
                "DRM_IOCTL_VERSION failed: Inappropriate ioctl for device",
            ),
            (
                "i965",
                "DRM_IOCTL_I915_GEM_APERTURE failed: Inappropriate ioctl for device",
            ),
        ],
    },
    Gpu {
        address: "0000:03:00.0",
        vendor: "1002",
        product: "744c",
        pci_driver: "amdgpu",
        drm_name: None,
        tried: &[(
            "radeonsi",
            "MESA-LOADER: failed to retrieve device information",
        )],
    },
    Gpu {
        address: "0000:04:00.0",
        vendor: "1002",
        product: "6779",
        pci_driver: "radeon",
        drm_name: None,
        tried: &[
            ("r600", "kmsro: driver missing"),
            ("radeonsi", "kmsro: driver missing"),
        ],
    },
    Gpu {
        address: "0000:05:00.0",
        vendor: "10de",
        product: "2684",
        pci_driver: "nvidia",
        drm_name: Some("nvidia-drm"),
        tried: &[("nvidia", "Cannot load libcuda.so.1")],
    },
    Gpu {
        address: "0000:06:00.0",
        vendor: "10de",
        product: "1c82",
        pci_driver: "nouveau",
        drm_name: None,
        tried: &[(
            "nouveau",
            "MESA-LOADER: failed to retrieve device information",
        )],
    },
    Gpu {
        address: "0000:07:00.0",
        vendor: "1af4",
        product: "1050",
        pci_driver: "virtio-pci",
        drm_name: Some("virtio_gpu"),
        tried: &[(
            "virtio_gpu",
            "MESA-LOADER: failed to retrieve device information",
        )],
    },
    Gpu {
        address: "0000:08:00.0",
        vendor: "1414",
        product: "008e",
        pci_driver: "hv_pci",
        drm_name: None,
        tried: &[("d3d12", "kmsro: driver missing")],
    },
];

/// The override that picks d3d12 (the agent's `--va-driver VENDOR=NAME`).
const D3D12_OVERRIDE: &str = "1414=d3d12";

fn render(index: usize) -> u32 {
    128 + index as u32
}

/// The node of [`GPUS`], plain files and a fake sysfs tree.
fn fake_node() -> FakeNode {
    let gpus = GPUS
        .iter()
        .enumerate()
        .map(|(i, gpu)| FakeGpu {
            render: render(i),
            pci: PciIdentity {
                address: gpu.address.into(),
                vendor: gpu.vendor.into(),
                product: gpu.product.into(),
                driver: gpu.pci_driver.into(),
                pci_name: None,
            },
            scenario: String::new(),
        })
        .collect();
    let node = FakeNode::new(gpus);
    for (i, gpu) in GPUS.iter().enumerate() {
        if let Some(name) = gpu.drm_name {
            let class = node
                .sys_root()
                .join(format!("class/drm/renderD{}", render(i)));
            std::fs::write(class.join("mediatest-drm-name"), name).unwrap();
        }
    }
    node
}

/// A sandbox of the image with the fake node's render nodes at /dev/dri, its sysfs at /sys and
/// the shim, as the pod would see liken's render nodes and the host's /sys.
fn sandbox(node: &FakeNode) -> Sandbox {
    let mut sandbox = Sandbox::new(built());
    // Writable: the agent opens render nodes read-write, and these are files.
    sandbox.bind(&node.dev_root(), Path::new("/dev/dri"), true);
    sandbox.bind(&node.sys_root(), Path::new("/sys"), false);
    sandbox.bind(
        &crate::support::vadriver::built().shim,
        Path::new(SHIM),
        false,
    );
    sandbox
}

/// The environment of a process in the image: Docker's PATH, and the shim.
fn image_env(command: &mut Command) -> &mut Command {
    command
        .env_clear()
        .env("PATH", PATH)
        .env("NO_COLOR", "1")
        .env("LD_PRELOAD", SHIM)
        .env("MEDIA_TESTVA_SYS", "/sys")
        .stdin(Stdio::null())
}

/// Every `*_drv_video.so` the image has, by driver name.
fn image_drivers(image: &Image) -> BTreeSet<String> {
    let dir = image.root.join(DRIVERS.trim_start_matches('/'));
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix("_drv_video.so").map(str::to_owned)
        })
        .collect()
}

/// `readelf -V` of `file`, from its section `section` (`.gnu.version_r`, `.gnu.version_d`) on.
fn version_section(file: &Path, section: &str) -> String {
    let out = Command::new("readelf")
        .args(["-V", "--wide"])
        .arg(file)
        .output()
        .expect("run readelf (binutils)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = text
        .find(&format!("'{section}'"))
        .unwrap_or_else(|| panic!("{}: no {section}", file.display()));
    let part = &text[start..];
    part[..part[1..].find("section '").map_or(part.len(), |i| i + 1)].to_owned()
}

/// The symbol versions `binary` needs, by the library that must define them.
fn needed_versions(binary: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut needed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut file = None;
    for line in version_section(binary, ".gnu.version_r").lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "File:") {
            file = words.get(i + 1).map(|f| f.to_string());
        } else if let (Some(i), Some(file)) = (words.iter().position(|w| *w == "Name:"), &file) {
            needed
                .entry(file.clone())
                .or_default()
                .insert(words[i + 1].to_owned());
        }
    }
    needed
}

/// The symbol versions the shared library `lib` defines.
fn defined_versions(lib: &Path) -> BTreeSet<String> {
    version_section(lib, ".gnu.version_d")
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let i = words.iter().position(|w| *w == "Name:")?;
            words.get(i + 1).map(|w| w.to_string())
        })
        .collect()
}

/// A Debian version's upstream part, as docs/operations.md quotes it: no epoch, no Debian
/// revision, no repack suffix (`+ds1`), no `0.0~` of a date-versioned package.
fn upstream(version: &str) -> &str {
    let version = version.split_once(':').map_or(version, |(_, v)| v);
    let version = version.rsplit_once('-').map_or(version, |(v, _)| v);
    let version = version.split('+').next().unwrap();
    version.rsplit('~').next().unwrap()
}

/// docs/operations.md's table of the image's drivers: (package, version) for every package named
/// in a row.
fn documented_versions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let section = text
        .split("## The drivers in the image")
        .nth(1)
        .expect("docs/operations.md has \"The drivers in the image\"");
    let mut versions = Vec::new();
    for row in section.lines().take_while(|l| !l.starts_with("## ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells.len() < 3 || !cells[1].starts_with('`') {
            continue;
        }
        for package in cells[1].split('`').skip(1).step_by(2) {
            versions.push((package.to_owned(), cells[2].to_owned()));
        }
    }
    versions
}

#[test]
#[cfg_attr(
    not(have_image_tools),
    ignore = "needs root and mmdebstrap (apt-get install mmdebstrap) to build the image's tree"
)]
fn the_images_packages_glibc_and_entry_point_are_what_the_docs_say() {
    let image = built();
    // The binary's glibc needs (and libgcc_s's) are met by the image's libraries.
    let needed = needed_versions(&image.binary);
    assert!(needed.contains_key("libc.so.6"), "{needed:?}");
    for (lib, versions) in &needed {
        let path = image.root.join("usr/lib/x86_64-linux-gnu").join(lib);
        let defined = defined_versions(&path);
        let missing: Vec<_> = versions.difference(&defined).collect();
        assert!(missing.is_empty(), "the image's {lib} lacks {missing:?}");
    }
    let libc = defined_versions(&image.root.join("usr/lib/x86_64-linux-gnu/libc.so.6"));
    assert!(
        libc.contains("GLIBC_2.41"),
        "the image's glibc is 2.41: {libc:?}"
    );

    // The versions docs/operations.md quotes are the image's, of the Debian release it names.
    let documented = documented_versions();
    assert!(documented.len() >= 7, "{documented:?}");
    for (package, version) in &documented {
        let installed = image
            .version(package)
            .unwrap_or_else(|| panic!("{package} (docs/operations.md) is not in the image"));
        assert_eq!(
            upstream(installed),
            version,
            "{package}: the image has {installed}, docs/operations.md says {version}"
        );
    }
    let release = std::fs::read_to_string(image.root.join("etc/debian_version")).unwrap();
    let operations =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .unwrap();
    assert!(
        operations.contains(&format!("those of Debian {}", release.trim())),
        "docs/operations.md quotes another point release than the image's {}",
        release.trim()
    );
    // Every package the Dockerfile installs is in, from the one list the Dockerfile states.
    let install = crate::support::dockerfile::install_run().args;
    for package in crate::support::dockerfile::installed_packages(&install) {
        assert!(image.version(&package).is_some(), "{package} not installed");
    }

    // The entry point, as the image's user, says this version.
    let sandbox = Sandbox::new(image);
    let out = image_env(&mut sandbox.entrypoint())
        .arg("--version")
        .output()
        .expect("run the entry point");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("media-capabilities {}\n", env!("CARGO_PKG_VERSION"))
    );

    let figures: Vec<String> = documented
        .iter()
        .map(|(p, _)| format!("{p} {}", image.version(p).unwrap()))
        .collect();
    eprintln!(
        "image: {:.1} MiB ({} packages, Debian {}); binary {:.1} MiB; {}; built in {:.0?} \
         (binary) and {:.0?} (tree, zero when cached)",
        image.size() as f64 / (1 << 20) as f64,
        image.packages.len(),
        release.trim(),
        std::fs::metadata(&image.binary).unwrap().len() as f64 / (1 << 20) as f64,
        figures.join(", "),
        image.binary_build,
        image.root_build,
    );
}

/// The lines of `log` about GPU `index`'s render node.
fn lines_of(log: &[String], index: usize) -> Vec<&str> {
    let node = format!("/dev/dri/renderD{}", render(index));
    log.iter()
        .filter(|l| l.contains(&format!("{node} ")) || l.contains(&format!("({node})")))
        .map(String::as_str)
        .collect()
}

/// Checks, for GPU `index`, its published attributes and its failure (from `probe -o json` or
/// the slice) and the log at the default level: libva's failure for each driver tried, and
/// that driver's own line, each in a warn line of its own.
fn check_failed_gpu(index: usize, attributes: &Value, failure: &str, log: &[String]) {
    let gpu = &GPUS[index];
    for capability in Capability::ALL {
        assert_eq!(
            attributes[capability.attribute()],
            false,
            "{}: {attributes}",
            gpu.address
        );
    }
    assert!(attributes.get("vaDriver").is_none(), "{attributes}");
    let node = format!("/dev/dri/renderD{}", render(index));
    assert!(
        failure.starts_with(&format!(
            "probe of {node} ({}) failed: vaInitialize failed: ",
            gpu.address
        )),
        "{failure}"
    );
    let lines = lines_of(log, index);
    for (driver, said) in gpu.tried {
        let file = format!("{DRIVERS}/{driver}_drv_video.so");
        assert!(
            failure.contains(&format!("libva error: {file} init failed")),
            "{failure}"
        );
        let own = format!("probe of {node} ({}): {file} said: ", gpu.address);
        let line = lines
            .iter()
            .find(|l| l.contains(" WARN ") && l.contains(&own))
            .unwrap_or_else(|| panic!("no warn line {own:?} in {lines:#?}"));
        let words = &line[line.find(&own).unwrap() + own.len()..];
        assert!(
            words.split(" | ").any(|w| w == *said),
            "{driver}'s own words {said:?} not in {line}"
        );
    }
}

#[test]
#[cfg_attr(
    not(have_image_tools),
    ignore = "needs root and mmdebstrap (apt-get install mmdebstrap) to build the image's tree"
)]
fn probe_in_the_image_loads_each_of_its_va_drivers_and_says_why_each_fails() {
    let image = built();
    let tried: BTreeSet<String> = GPUS
        .iter()
        .flat_map(|g| g.tried.iter().map(|(d, _)| d.to_string()))
        .collect();
    assert_eq!(
        tried,
        image_drivers(image),
        "a GPU of this test for each VA driver of the image"
    );
    let node = fake_node();
    let sandbox = sandbox(&node);
    let out = image_env(&mut sandbox.entrypoint())
        .args(["probe", "-o", "json", "--va-driver", D3D12_OVERRIDE])
        .output()
        .expect("run probe in the image");
    let log: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(out.status.success(), "{log:#?}");
    let gpus: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe printed no JSON ({e}): {log:#?}"));
    assert_eq!(gpus.len(), GPUS.len(), "{log:#?}");
    for (index, gpu) in gpus.iter().enumerate() {
        assert_eq!(gpu["pci"]["address"], GPUS[index].address);
        let failure = gpu["failure"].as_str().expect("a failure");
        check_failed_gpu(index, &gpu["attributes"], failure, &log);
    }
    // The image's pci.ids names them.
    assert_eq!(
        gpus[0]["attributes"]["name"],
        "Meteor Lake-P [Intel Arc Graphics]"
    );
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

#[test]
#[cfg_attr(
    not(all(have_image_tools, have_go)),
    ignore = "needs root and mmdebstrap (apt-get install mmdebstrap) to build the image's tree, \
              and Go 1.26 or newer for the control plane"
)]
fn the_agent_in_the_image_publishes_each_gpu_its_driver_cannot_serve() {
    let image = built();
    let cp = crate::support::controlplane::shared();
    let node_name = "image-agent";
    cp.node(node_name, &[]);
    let node = fake_node();
    let mut sandbox = sandbox(&node);
    let env = [
        ("PATH", PATH.into()),
        ("LD_PRELOAD", SHIM.into()),
        ("MEDIA_TESTVA_SYS", "/sys".into()),
    ];
    let started = Instant::now();
    let mut agent = AgentProcess::start_in(
        node_name,
        &[],
        &env,
        cp.kubeconfig(),
        &["--va-driver", D3D12_OVERRIDE],
        |paths| {
            let [registry, plugins, kubeconfig] = paths else {
                panic!("the agent's paths: {paths:?}")
            };
            for dir in [registry, plugins] {
                std::fs::create_dir_all(dir).unwrap();
                sandbox.bind_same(dir, true);
            }
            sandbox.bind_same(kubeconfig, false);
            let mut command = sandbox.entrypoint();
            image_env(&mut command);
            command
        },
    );
    let kube = Kube::new(cp.kubeconfig());
    let slice_path = path(
        "resourceslices",
        Some(&format!(
            "{node_name}-{}",
            media_operator::catalogue::DRIVER
        )),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let slice = loop {
        if let Some(slice) = kube.get(&slice_path)
            && slice["spec"]["devices"].as_array().map(Vec::len) == Some(GPUS.len())
        {
            break slice;
        }
        assert!(
            Instant::now() < deadline,
            "no slice of {} devices; log: {:#?}",
            GPUS.len(),
            agent.log.lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let published = started.elapsed();
    let devices = slice["spec"]["devices"].as_array().unwrap();
    let log = agent.log.lines();
    for (index, gpu) in GPUS.iter().enumerate() {
        let name = format!("pci-{}", gpu.address.replace([':', '.'], "-"));
        let device = devices
            .iter()
            .find(|d| d["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no device {name} in {slice:#}"));
        // The slice's attributes are typed values ({"bool": false}); as probe prints them.
        let attributes: serde_json::Map<String, Value> = device["attributes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let value = v.as_object().and_then(|o| o.values().next()).cloned();
                (k.clone(), value.unwrap_or(Value::Null))
            })
            .collect();
        let line = log
            .iter()
            .find(|l| l.contains(" ERROR ") && l.contains(&format!("probe: {name} (")))
            .unwrap_or_else(|| panic!("no error line for {name}: {log:#?}"));
        let failure = &line[line.find("; probe of ").expect("the failure") + 2..];
        check_failed_gpu(index, &Value::Object(attributes), failure, &log);
    }
    // As the DaemonSet runs it: no capability at all, whatever uid 0 would have.
    let pid = agent.pid();
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(status_field(pid, set), "0000000000000000", "{set}");
    }
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    let rss = status_field(pid, "VmRSS");
    let hwm = status_field(pid, "VmHWM");
    // STOPSIGNAL: the agent ends on it, promptly and cleanly.
    assert_eq!(image.plan.runtime.stop_signal, "SIGTERM");
    agent.terminate();
    let (status, took) = agent
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("the agent ends on SIGTERM: {:#?}", agent.log.lines()));
    assert!(status.success(), "{status}: {:#?}", agent.log.lines());
    eprintln!(
        "agent in the image: slice of {} GPUs published {:.2?} after start; RSS {rss} \
         (peak {hwm}); exited {took:.2?} after SIGTERM",
        GPUS.len(),
        published
    );
}
