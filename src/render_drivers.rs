//! The DRA drivers whose devices are the GPUs' render nodes, as data: liken (the product
//! document's, and the default) and the vendors' GPU drivers, which publish the same
//! `resource.kubernetes.io/pciBusID` our media devices carry. One table, read by the agent (whose
//! devices to compare with its own GPUs), `class` (the render class and template it writes),
//! `caps` and `why` (which devices are whole GPUs, which are sub-devices of one), the docs and
//! the completions, as the capability catalogue is for attributes.
//!
//! Each driver's facts come from its own source at the version in [`RenderDriver::pinned`]
//! (docs/render-drivers/ cites the files); `tests/fixtures/render-drivers/` holds slices shaped
//! exactly as each publishes them there.
//!
//! The agent reaches every driver's render nodes the same way: a claim with `adminAccess: true`
//! and `allocationMode: All` on [`RenderDriver::whole_gpu_cel`] (class `media-render`). The
//! scheduler counts admin access as taking nothing, and each driver's kubelet plugin prepares
//! such a claim like any other, skipping its in-use checks (docs/render-drivers/README.md).

use std::fmt;

/// One term of the CEL that tells a driver's devices apart, over an attribute of the driver's
/// own domain. Written with `.?` where the attribute may be missing: a plain lookup of a key a
/// device lacks is a CEL runtime error that aborts the scheduling attempt (dra-facts §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    /// The device has the attribute (`has(device.attributes["D"].a)`).
    Has(&'static str),
    /// The attribute is this string (`device.attributes["D"].?a.orValue("") == "v"`).
    Is(&'static str, &'static str),
    /// The attribute is one of these strings (`... .?a.orValue("") in ["v", "w"]`).
    OneOf(&'static str, &'static [&'static str]),
}

impl Term {
    /// The term as CEL over `driver`'s domain.
    pub fn cel(self, driver: &str) -> String {
        match self {
            Term::Has(a) => format!("has(device.attributes[\"{driver}\"].{a})"),
            Term::Is(a, v) => {
                format!("device.attributes[\"{driver}\"].?{a}.orValue(\"\") == \"{v}\"")
            }
            Term::OneOf(a, values) => {
                let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
                format!(
                    "device.attributes[\"{driver}\"].?{a}.orValue(\"\") in [{}]",
                    quoted.join(", ")
                )
            }
        }
    }

    /// Whether a device holds the term, given how to read its string attributes of the driver's
    /// domain (`None`: absent; `Some(None)`: present, not a string). The same decision as
    /// [`Term::cel`], which tests/it checks against the scheduler's CEL on every fixture.
    pub fn holds<'a>(self, attribute: impl Fn(&str) -> Option<Option<&'a str>>) -> bool {
        match self {
            Term::Has(a) => attribute(a).is_some(),
            Term::Is(a, v) => attribute(a).flatten() == Some(v),
            Term::OneOf(a, values) => attribute(a).flatten().is_some_and(|v| values.contains(&v)),
        }
    }
}

/// What one device of a render driver is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// A whole GPU with a render node: what a media device is paired with.
    Gpu,
    /// A MIG instance of a GPU: carries its parent's PCI address.
    Mig,
    /// A partition of a GPU (AMD's compute/memory partitions): its parent's address.
    Partition,
    /// An SR-IOV virtual function: an address of its own.
    VirtualFunction,
    /// A GPU bound to vfio-pci for a VM: no render node on the host.
    Vfio,
    /// None of the above, as far as the table knows.
    Other,
}

impl DeviceKind {
    /// The word used in tables, notes and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Mig => "mig",
            DeviceKind::Partition => "partition",
            DeviceKind::VirtualFunction => "vf",
            DeviceKind::Vfio => "vfio",
            DeviceKind::Other => "other",
        }
    }

    /// What a sentence calls a device of this kind.
    pub fn described(self) -> &'static str {
        match self {
            DeviceKind::Gpu => "a whole GPU",
            DeviceKind::Mig => "a MIG device (a slice of a GPU, at its parent's address)",
            DeviceKind::Partition => "a partition of a GPU (at its parent's address)",
            DeviceKind::VirtualFunction => "an SR-IOV virtual function",
            DeviceKind::Vfio => "a GPU bound to vfio-pci (no render node on the host)",
            DeviceKind::Other => "not a whole GPU with a render node",
        }
    }
}

impl serde::Serialize for DeviceKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A driver that publishes GPUs' render nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenderDriver {
    /// The DRA driver name, also the domain of its unqualified attributes.
    pub name: &'static str,
    /// The project, as its users know it.
    pub project: &'static str,
    /// Short name: the install variant (`deploy/render-drivers/<key>`) and docs page.
    pub key: &'static str,
    /// The oldest release that publishes `resource.kubernetes.io/pciBusID`; before it a claim's
    /// constraint can never pair its devices with ours.
    pub since: &'static str,
    /// The attribute it published the address as before [`RenderDriver::since`].
    pub before: Option<&'static str>,
    /// The release the tests' slices are shaped from.
    pub pinned: &'static str,
    /// Beside `device.driver == name`: the terms that select exactly its whole GPUs that have
    /// a render node (never a MIG device, a partition, a VF of another address or a GPU bound
    /// to vfio-pci).
    pub whole_gpu: &'static [Term],
    /// Sub-devices, by the first term a device holds; a device holding none is a whole GPU
    /// when it holds [`RenderDriver::whole_gpu`], else [`DeviceKind::Other`].
    pub kinds: &'static [(Term, DeviceKind)],
    /// The render class `kubectl media class` names and writes for it by default.
    pub render_class: &'static str,
    /// Why a GPU it publishes may have no render node in a container that claims it, where the
    /// driver has such a reason of its own.
    pub render_node_caveat: Option<&'static str>,
}

/// liken: the product document's render nodes, and the default everywhere.
pub const LIKEN: RenderDriver = RenderDriver {
    name: "liken.sh",
    project: "liken",
    key: "liken",
    since: "every release",
    before: None,
    pinned: "the product document",
    whole_gpu: &[Term::Has("renderNode")],
    kinds: &[],
    render_class: "gpu-render",
    render_node_caveat: None,
};

/// Intel's GPU driver (intel-resource-drivers-for-kubernetes, `cmd/kubelet-gpu-plugin`).
pub const INTEL: RenderDriver = RenderDriver {
    name: "gpu.intel.com",
    project: "Intel Resource Drivers for Kubernetes (GPU)",
    key: "intel",
    // gpu-v0.10.0 publishes pciBusID, but no `type`, and its `driver` is the default driver,
    // not the one bound: its VFs and vfio-bound GPUs cannot be told from whole GPUs.
    since: "gpu-v0.11.0",
    before: Some("pciAddress"),
    pinned: "gpu-v0.11.0",
    // `type == "gpu"` alone keeps a GPU bound to vfio-pci (`driver` is the one bound now), and
    // an admin-access claim on it would have the plugin rebind it away from its VM.
    whole_gpu: &[
        Term::Is("type", "gpu"),
        Term::OneOf("driver", &["i915", "xe"]),
    ],
    kinds: &[
        (
            Term::OneOf("driver", &["vfio-pci", "xe-vfio-pci"]),
            DeviceKind::Vfio,
        ),
        (Term::Is("type", "vf"), DeviceKind::VirtualFunction),
    ],
    render_class: "intel-gpu-render",
    render_node_caveat: None,
};

/// NVIDIA's GPU driver (dra-driver-nvidia-gpu, `cmd/gpu-kubelet-plugin`).
pub const NVIDIA: RenderDriver = RenderDriver {
    name: "gpu.nvidia.com",
    project: "NVIDIA DRA Driver for GPUs",
    key: "nvidia",
    since: "v25.12.0",
    before: Some("pcieBusID"),
    // The project renumbered its releases after v25.12.0.
    pinned: "v0.4.1",
    whole_gpu: &[Term::Is("type", "gpu")],
    kinds: &[
        (Term::Is("type", "mig"), DeviceKind::Mig),
        (Term::Is("type", "vfio"), DeviceKind::Vfio),
    ],
    render_class: "nvidia-gpu-render",
    // The plugin's CDI spec injects the GPU's DRM nodes only when the host has them.
    render_node_caveat: Some(
        "a GPU's render node exists only where the host loads nvidia-drm (modeset=1)",
    ),
};

/// AMD's GPU driver (ROCm k8s-gpu-dra-driver, `cmd/gpu-kubeletplugin`).
pub const AMD: RenderDriver = RenderDriver {
    name: "gpu.amd.com",
    project: "AMD GPU DRA Driver (ROCm)",
    key: "amd",
    since: "develop-6",
    before: Some("pciAddr"),
    // A CI build tag (commit 30915570): the v1.0 releases could not be tied to commits.
    pinned: "develop-7",
    whole_gpu: &[Term::Is("type", "amdgpu")],
    kinds: &[
        (Term::Is("type", "amdgpu-partition"), DeviceKind::Partition),
        (Term::Is("type", "vfio"), DeviceKind::Vfio),
    ],
    render_class: "amd-gpu-render",
    render_node_caveat: None,
};

/// Every render driver we know, liken first.
pub const ALL: [RenderDriver; 4] = [LIKEN, INTEL, NVIDIA, AMD];

/// The driver a flag or the agent falls back to: the product document's.
pub const DEFAULT: RenderDriver = LIKEN;

impl RenderDriver {
    /// The driver of that DRA name, if we know it.
    pub fn named(name: &str) -> Option<&'static RenderDriver> {
        ALL.iter().find(|d| d.name == name)
    }

    /// What a sentence calls it: `liken` for the product document's driver, as the document
    /// does, else its DRA name (`gpu.intel.com publishes ...`).
    pub fn called(&self) -> &'static str {
        if self.name == LIKEN.name {
            LIKEN.project
        } else {
            self.name
        }
    }

    /// Parses a flag's value: the driver's DRA name, any case.
    pub fn parse(input: &str) -> Result<&'static RenderDriver, UnknownRenderDriver> {
        let typed = input.trim();
        ALL.iter()
            .find(|d| d.name.eq_ignore_ascii_case(typed))
            .ok_or_else(|| UnknownRenderDriver {
                input: input.to_string(),
                nearest: nearest(typed),
            })
    }

    /// The CEL that selects its whole GPUs with a render node: the driver, then each term, one
    /// per line as the product document writes them. liken's is the document's, byte for byte.
    pub fn whole_gpu_cel(&self) -> String {
        let mut terms = vec![format!("device.driver == \"{}\"", self.name)];
        terms.extend(self.whole_gpu.iter().map(|t| t.cel(self.name)));
        let mut joined = terms.join(" &&\n");
        joined.push('\n');
        joined
    }

    /// Whether a device has none of the attributes the table's terms read: a release of the
    /// driver older than [`RenderDriver::since`] (Intel before gpu-v0.11.0 has no `type`),
    /// whose whole GPUs cannot be told from its sub-devices.
    pub fn predates<'a>(&self, attribute: impl Fn(&str) -> Option<Option<&'a str>>) -> bool {
        let name = |t: &Term| match *t {
            Term::Has(a) | Term::Is(a, _) | Term::OneOf(a, _) => a,
        };
        self.before.is_some()
            && self
                .whole_gpu
                .iter()
                .chain(self.kinds.iter().map(|(t, _)| t))
                .all(|t| attribute(name(t)).is_none())
    }

    /// What a device of this driver is, from its string attributes of the driver's domain.
    pub fn kind<'a>(&self, attribute: impl Fn(&str) -> Option<Option<&'a str>>) -> DeviceKind {
        if let Some(&(_, kind)) = self.kinds.iter().find(|(t, _)| t.holds(&attribute)) {
            return kind;
        }
        if self.whole_gpu.iter().all(|t| t.holds(&attribute)) {
            DeviceKind::Gpu
        } else {
            DeviceKind::Other
        }
    }
}

impl fmt::Display for RenderDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The driver names a flag accepts, for completion and messages.
pub fn names() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|d| d.name)
}

fn nearest(typed: &str) -> Option<&'static str> {
    let lower = typed.to_ascii_lowercase();
    // `intel`, `nvidia`: the project's short name points at its driver.
    if let Some(d) = ALL.iter().find(|d| lower.contains(d.key)) {
        return Some(d.name);
    }
    ALL.iter()
        .map(|d| (strsim::damerau_levenshtein(&lower, d.name), d.name))
        .filter(|&(distance, name)| distance <= name.len() / 3)
        .min()
        .map(|(_, name)| name)
}

/// A render driver named on a flag that the table does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct UnknownRenderDriver {
    pub input: String,
    pub nearest: Option<&'static str>,
}

impl fmt::Display for UnknownRenderDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown render driver {:?} (valid: {}",
            crate::text::elide(&self.input, 64),
            names().collect::<Vec<_>>().join(", ")
        )?;
        if let Some(nearest) = self.nearest {
            write!(f, "; did you mean {nearest}?")?;
        }
        f.write_str(")")
    }
}

/// `resource.kubernetes.io/pciBusID` in the one form upstream's helper writes and accepts
/// (`k8s.io/dynamic-resource-allocation/deviceattribute`: `^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$`).
/// `matchAttribute` compares strings exactly, so `0000:03:00.0` never pairs with `0000:03:00.0 `
/// or `0000:03:00.0` in capitals.
pub fn is_canonical_pci_bus_id(value: &str) -> bool {
    let b = value.as_bytes();
    let hex = |c: &u8| c.is_ascii_digit() || (b'a'..=b'f').contains(c);
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && [0, 1, 2, 3, 5, 6, 8, 9, 11].iter().all(|&i| hex(&b[i]))
}

/// The canonical form of a PCI address written in any case (sysfs, a recorded report), or
/// `None` when it is not `dddd:bb:dd.f` in hex at all.
pub fn canonical_pci_bus_id(value: &str) -> Option<String> {
    let lower = value.to_ascii_lowercase();
    is_canonical_pci_bus_id(&lower).then_some(lower)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn attributes<'a>(pairs: &'a [(&str, &'a str)]) -> impl Fn(&str) -> Option<Option<&'a str>> {
        let map: HashMap<&str, &str> = pairs.iter().copied().collect();
        move |name| map.get(name).map(|v| Some(*v))
    }

    #[test]
    fn likens_class_is_the_product_documents() {
        assert_eq!(
            LIKEN.whole_gpu_cel(),
            "device.driver == \"liken.sh\" &&\nhas(device.attributes[\"liken.sh\"].renderNode)\n"
        );
    }

    #[test]
    fn intels_class_is_the_whole_gpus_bound_to_a_drm_driver() {
        assert_eq!(
            INTEL.whole_gpu_cel(),
            "device.driver == \"gpu.intel.com\" &&\n\
             device.attributes[\"gpu.intel.com\"].?type.orValue(\"\") == \"gpu\" &&\n\
             device.attributes[\"gpu.intel.com\"].?driver.orValue(\"\") in [\"i915\", \"xe\"]\n"
        );
    }

    #[test]
    fn vendor_classes_never_fail_on_a_missing_attribute() {
        for driver in [INTEL, NVIDIA, AMD] {
            let cel = driver.whole_gpu_cel();
            assert!(cel.contains(".?"), "{}: {cel}", driver.name);
            assert!(!cel.contains("has("), "{}: {cel}", driver.name);
        }
    }

    #[test]
    fn sub_devices_are_never_whole_gpus() {
        let mig = [("type", "mig"), ("uuid", "MIG-1")];
        assert_eq!(NVIDIA.kind(attributes(&mig)), DeviceKind::Mig);
        assert_eq!(NVIDIA.kind(attributes(&[("type", "gpu")])), DeviceKind::Gpu);
        assert_eq!(NVIDIA.kind(attributes(&[])), DeviceKind::Other);
        let vfio = [("type", "gpu"), ("driver", "vfio-pci")];
        assert_eq!(INTEL.kind(attributes(&vfio)), DeviceKind::Vfio);
        // Bound to no driver at all: not a render node, not a VM's either.
        assert_eq!(
            INTEL.kind(attributes(&[("type", "gpu"), ("driver", "")])),
            DeviceKind::Other
        );
        assert_eq!(
            INTEL.kind(attributes(&[("type", "vf"), ("driver", "xe")])),
            DeviceKind::VirtualFunction
        );
        assert_eq!(
            INTEL.kind(attributes(&[("type", "gpu"), ("driver", "xe")])),
            DeviceKind::Gpu
        );
        assert_eq!(
            AMD.kind(attributes(&[("type", "amdgpu-partition")])),
            DeviceKind::Partition
        );
        assert_eq!(
            LIKEN.kind(attributes(&[("renderNode", "x")])),
            DeviceKind::Gpu
        );
    }

    #[test]
    fn a_release_without_the_tables_attributes_predates_it() {
        // gpu-v0.10.x: pciBusID, but neither `type` nor the bound `driver`.
        assert!(INTEL.predates(attributes(&[("model", "Arc A770"), ("pciAddress", "x")])));
        assert!(!INTEL.predates(attributes(&[("type", "vf")])));
        assert!(!NVIDIA.predates(attributes(&[("type", "mig")])));
        // liken has no older release: a device without renderNode is just not a render node.
        assert!(!LIKEN.predates(attributes(&[])));
    }

    #[test]
    fn an_unknown_driver_lists_the_known_ones_and_the_nearest() {
        let e = RenderDriver::parse("intel").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown render driver \"intel\" (valid: liken.sh, gpu.intel.com, gpu.nvidia.com, \
             gpu.amd.com; did you mean gpu.intel.com?)"
        );
        assert_eq!(
            RenderDriver::parse("gpu.nvida.com").unwrap_err().nearest,
            Some("gpu.nvidia.com")
        );
        assert_eq!(
            RenderDriver::parse("example.com").unwrap_err().nearest,
            None
        );
        assert_eq!(
            RenderDriver::parse("GPU.Intel.com").unwrap().name,
            "gpu.intel.com"
        );
    }

    #[test]
    fn only_the_lowercase_form_is_canonical() {
        assert!(is_canonical_pci_bus_id("0000:03:00.0"));
        assert!(is_canonical_pci_bus_id("0001:c3:1f.7"));
        for bad in [
            "0000:C3:00.0",
            "00000000:03:00.0",
            "03:00.0",
            "0000:03:00.0 ",
            "0000-03-00-0",
        ] {
            assert!(!is_canonical_pci_bus_id(bad), "{bad}");
        }
        assert_eq!(
            canonical_pci_bus_id("0000:C3:1F.7").as_deref(),
            Some("0000:c3:1f.7")
        );
        assert_eq!(canonical_pci_bus_id("0000:03:00"), None);
    }

    #[test]
    fn names_and_keys_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.key, b.key);
                assert_ne!(a.render_class, b.render_class);
            }
        }
    }
}
