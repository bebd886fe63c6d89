//! The pure step from what was found to what is published: a GPU's PCI identity and probe outcome
//! in, the device's name and every attribute out, plus the log line that shows exactly the
//! published values. Every value is what sysfs, pci.ids or the driver stated, or a rule here:
//! `name` falls back to `<vendor>:<product>`, `name` and `vaDriver` are cut to the API's 64 bytes
//! ([`sanitise`]), and a failed probe has no `vaDriver` and every capability false.

use crate::catalogue::{Attribute, Capability, Identity, MAX_STRING_VALUE_BYTES};
use crate::node::failure::{Failure, FailureKind};
use crate::node::sysfs::RenderNode;
use crate::node::taint::{Taint, TaintPolicy};
use crate::node::va::report::Report;
use crate::node::va::rules;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// A published attribute value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrValue {
    Bool(bool),
    String(String),
}

impl std::fmt::Display for AttrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttrValue::Bool(b) => write!(f, "{b}"),
            AttrValue::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// How the probe of one GPU ended: a report from the driver, or a failure of the probe process
/// itself (crash, hang, garbage), already worded for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Boxed: a report is large next to a failure line.
    Report(Box<Report>),
    Failed(Failure),
}

/// One GPU as it will be published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuDevice {
    /// The ResourceSlice device name, `pci-0000-00-02-0`.
    pub name: String,
    pub render_node: PathBuf,
    /// Every attribute, keyed by its published name (`caps` is the source of the names).
    pub attributes: BTreeMap<&'static str, AttrValue>,
    /// The probe failure, word for word, when the query failed.
    pub failure: Option<Failure>,
    /// The taint the agent puts on the device (a failed probe's, [`GpuDevice::tainted`]);
    /// `describe` leaves it unset: what the device states does not depend on the flags.
    pub taint: Option<Taint>,
    /// Values cut to 64 bytes: (attribute, the full text), for the log.
    pub trimmed: Vec<(&'static str, String)>,
}

impl GpuDevice {
    /// The value of `attribute`, if the device carries it.
    pub fn get(&self, attribute: Attribute) -> Option<&AttrValue> {
        self.attributes.get(attribute.name())
    }

    /// The device with the taint `policy` gives a failed probe, and none when it worked.
    pub fn tainted(self, policy: &TaintPolicy) -> GpuDevice {
        let taint = self.failure.as_ref().map(|f| policy.taint(f.kind));
        GpuDevice { taint, ..self }
    }

    /// The value of a capability (always present).
    pub(crate) fn capability(&self, capability: Capability) -> bool {
        matches!(
            self.get(Attribute::Capability(capability)),
            Some(AttrValue::Bool(true))
        )
    }
}

/// The device name for a PCI address: `pci-` and the address with `:` and `.` as `-`, a valid DNS
/// label because discovery only accepts `dddd:bb:dd.f` addresses.
pub(crate) fn device_name(address: &str) -> String {
    format!(
        "pci-{}",
        address.replace([':', '.'], "-").to_ascii_lowercase()
    )
}

/// The failure line of a probe child (each GPU is asked in its own process): `probe of <node> (<address>) <what>; libva
/// said: <messages>`, with every message verbatim and separated by ` | `.
pub(crate) fn failure_text(node: &RenderNode, what: &str, said: &[String]) -> String {
    let said = if said.is_empty() {
        "libva said nothing".to_string()
    } else {
        format!("libva said: {}", said.join(" | "))
    };
    format!(
        "probe of {} ({}) {what}; {said}",
        node.path.display(),
        node.pci.address
    )
}

/// Trims a string to fit a DRA string attribute (at most 64 bytes, k8s.io/api resource/v1): trim, drop control characters;
/// when still over 64 bytes, cut before the first " (" if that fits, else at 64 bytes on a
/// character boundary.
pub(crate) fn sanitise(text: &str) -> String {
    let clean: String = text.trim().chars().filter(|c| !c.is_control()).collect();
    if clean.len() <= MAX_STRING_VALUE_BYTES {
        return clean;
    }
    if let Some(cut) = clean
        .find(" (")
        .filter(|&i| i > 0 && i <= MAX_STRING_VALUE_BYTES)
    {
        return clean[..cut].trim_end().to_string();
    }
    let mut end = MAX_STRING_VALUE_BYTES;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    clean[..end].trim_end().to_string()
}

/// What the GPU behind `node` publishes, given how its probe ended.
pub fn describe(node: &RenderNode, outcome: &Outcome) -> GpuDevice {
    let pci = &node.pci;
    let (report, failure) = match outcome {
        Outcome::Report(report) => match &report.error {
            None => (Some(report.as_ref()), None),
            Some(error) => (
                None,
                Some(Failure::new(
                    FailureKind::QueryFailed,
                    failure_text(node, &format!("failed: {error}"), &report.said()),
                )),
            ),
        },
        Outcome::Failed(failure) => (None, Some(failure.clone())),
    };
    let capabilities = report.map(rules::capabilities).unwrap_or_default();
    let mut attributes = BTreeMap::new();
    let mut trimmed = Vec::new();
    let mut text = |attribute: Identity, full: &str| {
        let value = sanitise(full);
        if value != full {
            trimmed.push((attribute.attribute(), full.to_string()));
        }
        attributes.insert(attribute.attribute(), AttrValue::String(value));
    };
    for identity in Identity::ALL {
        match identity {
            Identity::Address | Identity::PciBusId => text(identity, &pci.address),
            Identity::Driver => text(identity, &pci.driver),
            Identity::Vendor => text(identity, &pci.vendor),
            Identity::Product => text(identity, &pci.product),
            Identity::Name => match &pci.pci_name {
                Some(name) => text(identity, name),
                None => text(identity, &format!("{}:{}", pci.vendor, pci.product)),
            },
            Identity::VaDriver => {
                if let Some(vendor) = report.and_then(|r| r.vendor.as_deref()) {
                    text(identity, vendor);
                }
            }
        }
    }
    for capability in Capability::ALL {
        let value = capabilities.get(&capability).copied().unwrap_or(false);
        attributes.insert(capability.attribute(), AttrValue::Bool(value));
    }
    GpuDevice {
        name: device_name(&pci.address),
        render_node: node.path.clone(),
        attributes,
        failure,
        taint: None,
        trimmed,
    }
}

/// The log line for one GPU: its name, node, every published value in catalogue order, and the
/// failure word for word when the query failed.
pub fn log_line(device: &GpuDevice) -> String {
    let mut line = format!("{} ({}):", device.name, device.render_node.display());
    for attribute in Attribute::all() {
        let name = attribute.name();
        match device.attributes.get(name) {
            Some(value) => write!(line, " {name}={value}"),
            None => write!(line, " {name}=<absent>"),
        }
        .expect("writing to a String cannot fail");
    }
    for (name, full) in &device.trimmed {
        write!(line, "; {name} trimmed from {full:?}").expect("writing to a String cannot fail");
    }
    if let Some(failure) = &device.failure {
        write!(line, "; {failure}").expect("writing to a String cannot fail");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::sysfs::PciIdentity;
    use crate::node::va::report::{Config, Entrypoint, Profile};

    fn node(pci_name: Option<&str>) -> RenderNode {
        RenderNode {
            path: "/dev/dri/renderD129".into(),
            pci: PciIdentity {
                address: "0000:03:00.0".into(),
                vendor: "1002".into(),
                product: "744c".into(),
                driver: "amdgpu".into(),
                pci_name: pci_name.map(str::to_string),
            },
        }
    }

    const RADEONSI: &str = "Mesa Gallium driver 24.1.7 for AMD Radeon Graphics (radeonsi, rembrandt, LLVM 18.1.8, DRM 3.59, 6.11.3-200.fc40.x86_64)";

    #[test]
    fn sanitising_follows_libva_facts_5() {
        let ihd = "Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()";
        assert_eq!(sanitise(ihd), ihd);
        assert_eq!(
            sanitise(RADEONSI),
            "Mesa Gallium driver 24.1.7 for AMD Radeon Graphics"
        );
        let strix = "Strix Halo [Radeon Graphics / Radeon 8050S Graphics / Radeon 8060S Graphics]";
        assert_eq!(
            sanitise(strix),
            "Strix Halo [Radeon Graphics / Radeon 8050S Graphics / Radeon 806"
        );
        assert_eq!(
            sanitise("  VA-API NVDEC driver\t[direct backend]\n"),
            "VA-API NVDEC driver[direct backend]"
        );
        // A " (" too far in: cut on a character boundary (é is two bytes across byte 64).
        let long = format!("{}é (x)", "a".repeat(63));
        assert_eq!(sanitise(&long), "a".repeat(63));
        for s in [RADEONSI, strix, long.as_str()] {
            assert!(sanitise(s).len() <= 64);
        }
    }

    #[test]
    fn device_names_are_dns_labels() {
        assert_eq!(device_name("0000:00:02.0"), "pci-0000-00-02-0");
        assert_eq!(device_name("0001:C3:1f.7"), "pci-0001-c3-1f-7");
    }

    #[test]
    fn a_report_publishes_identity_vadriver_and_every_capability() {
        let report = Report {
            vendor: Some(RADEONSI.into()),
            configs: vec![Config {
                profile: Profile::HEVC_MAIN10,
                entrypoint: Entrypoint::VLD,
                rt_format: None,
            }],
            ..Report::default()
        };
        let device = describe(&node(Some("Navi 31")), &Outcome::Report(Box::new(report)));
        assert_eq!(device.name, "pci-0000-03-00-0");
        assert_eq!(device.attributes.len(), Attribute::all().count());
        assert_eq!(
            device.get(Attribute::Identity(Identity::VaDriver)),
            Some(&AttrValue::String(
                "Mesa Gallium driver 24.1.7 for AMD Radeon Graphics".into()
            ))
        );
        assert_eq!(
            device.get(Attribute::Identity(Identity::PciBusId)),
            Some(&AttrValue::String("0000:03:00.0".into()))
        );
        assert!(device.capability(Capability::DecodeHEVCMain10));
        assert!(!device.capability(Capability::DecodeHEVCMain));
        assert_eq!(device.trimmed, [("vaDriver", RADEONSI.to_string())]);
        assert_eq!(device.failure, None);
        let line = log_line(&device);
        assert!(line.starts_with("pci-0000-03-00-0 (/dev/dri/renderD129): address=\"0000:03:00.0\" driver=\"amdgpu\" name=\"Navi 31\" product=\"744c\" vendor=\"1002\" vaDriver=\"Mesa Gallium driver 24.1.7 for AMD Radeon Graphics\" resource.kubernetes.io/pciBusID=\"0000:03:00.0\" decodeAV1Main=false"), "{line}");
        assert!(line.contains(" decodeHEVCMain10=true "), "{line}");
        assert!(
            line.ends_with(&format!("; vaDriver trimmed from {RADEONSI:?}")),
            "{line}"
        );
    }

    #[test]
    fn a_failed_probe_publishes_no_vadriver_and_all_false() {
        let failure = "probe of /dev/dri/renderD129 (0000:03:00.0) killed by SIGSEGV after 0.4s; libva said: libva info: Trying to open /usr/lib/x86_64-linux-gnu/dri/radeonsi_drv_video.so";
        let device = describe(
            &node(None),
            &Outcome::Failed(Failure::new(FailureKind::ProbeFailed, failure)),
        );
        assert_eq!(device.get(Attribute::Identity(Identity::VaDriver)), None);
        assert!(Capability::ALL.iter().all(|c| !device.capability(*c)));
        assert_eq!(device.attributes.len(), Attribute::all().count() - 1);
        // The agent's taint says why, and the seed's rule stands beside it.
        assert_eq!(device.taint, None);
        let tainted = device.clone().tainted(&TaintPolicy::default());
        let taint = tainted.taint.as_ref().unwrap();
        assert_eq!(
            (taint.key.as_str(), taint.value, taint.effect.as_str()),
            (
                "media.liken.sh/unhealthy",
                FailureKind::ProbeFailed,
                "NoSchedule"
            )
        );
        assert_eq!(tainted.attributes, device.attributes);
        // No pci.ids entry: the documented fallback.
        assert_eq!(
            device.get(Attribute::Identity(Identity::Name)),
            Some(&AttrValue::String("1002:744c".into()))
        );
        let line = log_line(&device);
        assert!(line.contains(" vaDriver=<absent> "), "{line}");
        assert!(
            line.ends_with(&format!("scale10bit=false; {failure}")),
            "{line}"
        );
    }

    #[test]
    fn a_report_with_an_error_is_a_failure_in_the_same_words() {
        let report = Report {
            vendor: Some("stale".into()),
            error: Some("vaInitialize failed: unknown libva error (-1)".into()),
            messages: vec![crate::node::va::report::Message {
                level: crate::node::va::report::Level::Info,
                text: "Trying to open /usr/lib/x86_64-linux-gnu/dri/radeonsi_drv_video.so".into(),
            }],
            ..Report::default()
        };
        let device = describe(&node(None), &Outcome::Report(Box::new(report)));
        assert_eq!(device.get(Attribute::Identity(Identity::VaDriver)), None);
        assert_eq!(
            device.failure.as_ref().map(|f| f.kind),
            Some(FailureKind::QueryFailed)
        );
        assert_eq!(
            device.failure.as_ref().map(|f| f.text.as_str()),
            Some(
                "probe of /dev/dri/renderD129 (0000:03:00.0) failed: vaInitialize failed: unknown libva error (-1); libva said: libva info: Trying to open /usr/lib/x86_64-linux-gnu/dri/radeonsi_drv_video.so"
            )
        );
    }
}
