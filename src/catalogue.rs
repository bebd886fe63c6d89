//! The capability catalogue: every attribute a `media.liken.sh` device carries, what it means and
//! where its value comes from. The one definition of those names: the agent, `class`, `caps`,
//! `why`, the docs and the completions all read it. A new capability is a new variant, and the
//! compiler then points at every `match` that must learn it (the VA rules in particular). The VA
//! rule texts live here for the docs; the rules are applied in one function of `node::va::rules`.

use std::fmt;

pub mod playback;

/// The DRA driver name the agent publishes under. Unqualified attribute names belong to it.
pub const DRIVER: &str = "media.liken.sh";

/// The standard attribute our devices and every render driver's publish
/// ([`crate::render_drivers`]); a `matchAttribute` constraint on it keeps a
/// claim's render node and capability statement on one GPU.
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";

/// The API server's limit on attributes plus capacities per device (k8s.io/api
/// resource/v1 `ResourceSliceMaxAttributesAndCapacitiesPerDevice`).
pub const MAX_ATTRIBUTES_PER_DEVICE: usize = 32;

/// The API server's limit on string attribute values, in bytes (k8s.io/api resource/v1
/// `DeviceAttributeMaxValueLength`).
pub const MAX_STRING_VALUE_BYTES: usize = 64;

/// What a capability is about; also the `kubectl media class` flag that asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    Decode,
    Encode,
    Scale,
}

impl Group {
    pub const ALL: [Group; 3] = [Group::Decode, Group::Encode, Group::Scale];

    /// The lowercase word used in attribute names, flags and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Decode => "decode",
            Group::Encode => "encode",
            Group::Scale => "scale",
        }
    }

    /// The capabilities of this group, in catalogue order.
    pub fn capabilities(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| c.group() == self)
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One published capability boolean. Every device carries every capability, true or false, so
/// a selector never needs `has()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    DecodeAV1Main,
    DecodeAV1Main10,
    DecodeH264,
    DecodeHEVCMain,
    DecodeHEVCMain10,
    DecodeMPEG2,
    DecodeVC1,
    DecodeVP8,
    DecodeVP9,
    DecodeVP9Profile2,
    EncodeH264,
    EncodeH264LowPower,
    EncodeHEVCMain,
    EncodeHEVCMain10,
    EncodeHEVCMain10LowPower,
    EncodeHEVCMainLowPower,
    Scale8bit,
    Scale10bit,
}

impl Capability {
    /// Every capability, in the order the catalogue (and every listing) uses.
    pub const ALL: [Capability; 18] = [
        Capability::DecodeAV1Main,
        Capability::DecodeAV1Main10,
        Capability::DecodeH264,
        Capability::DecodeHEVCMain,
        Capability::DecodeHEVCMain10,
        Capability::DecodeMPEG2,
        Capability::DecodeVC1,
        Capability::DecodeVP8,
        Capability::DecodeVP9,
        Capability::DecodeVP9Profile2,
        Capability::EncodeH264,
        Capability::EncodeH264LowPower,
        Capability::EncodeHEVCMain,
        Capability::EncodeHEVCMain10,
        Capability::EncodeHEVCMain10LowPower,
        Capability::EncodeHEVCMainLowPower,
        Capability::Scale8bit,
        Capability::Scale10bit,
    ];

    /// The attribute name as published (unqualified, so it lives in the `media.liken.sh` domain).
    pub fn attribute(self) -> &'static str {
        use Capability::*;
        match self {
            DecodeAV1Main => "decodeAV1Main",
            DecodeAV1Main10 => "decodeAV1Main10",
            DecodeH264 => "decodeH264",
            DecodeHEVCMain => "decodeHEVCMain",
            DecodeHEVCMain10 => "decodeHEVCMain10",
            DecodeMPEG2 => "decodeMPEG2",
            DecodeVC1 => "decodeVC1",
            DecodeVP8 => "decodeVP8",
            DecodeVP9 => "decodeVP9",
            DecodeVP9Profile2 => "decodeVP9Profile2",
            EncodeH264 => "encodeH264",
            EncodeH264LowPower => "encodeH264LowPower",
            EncodeHEVCMain => "encodeHEVCMain",
            EncodeHEVCMain10 => "encodeHEVCMain10",
            EncodeHEVCMain10LowPower => "encodeHEVCMain10LowPower",
            EncodeHEVCMainLowPower => "encodeHEVCMainLowPower",
            Scale8bit => "scale8bit",
            Scale10bit => "scale10bit",
        }
    }

    pub(crate) fn group(self) -> Group {
        use Capability::*;
        match self {
            DecodeAV1Main | DecodeAV1Main10 | DecodeH264 | DecodeHEVCMain | DecodeHEVCMain10
            | DecodeMPEG2 | DecodeVC1 | DecodeVP8 | DecodeVP9 | DecodeVP9Profile2 => Group::Decode,
            EncodeH264
            | EncodeH264LowPower
            | EncodeHEVCMain
            | EncodeHEVCMain10
            | EncodeHEVCMain10LowPower
            | EncodeHEVCMainLowPower => Group::Encode,
            Scale8bit | Scale10bit => Group::Scale,
        }
    }

    /// The attribute name without its group prefix: the value users give to `--decode`,
    /// `--encode` or `--scale` (`HEVCMain10`, `H264LowPower`, `10bit`).
    pub fn value(self) -> &'static str {
        let attribute = self.attribute();
        &attribute[self.group().as_str().len()..]
    }

    /// A short label for compact listings (`HEVC-10`, `H264-LP`, `10`).
    pub(crate) fn label(self) -> &'static str {
        use Capability::*;
        match self {
            DecodeAV1Main => "AV1",
            DecodeAV1Main10 => "AV1-10",
            DecodeH264 => "H264",
            DecodeHEVCMain => "HEVC",
            DecodeHEVCMain10 => "HEVC-10",
            DecodeMPEG2 => "MPEG2",
            DecodeVC1 => "VC1",
            DecodeVP8 => "VP8",
            DecodeVP9 => "VP9",
            DecodeVP9Profile2 => "VP9-10",
            EncodeH264 => "H264",
            EncodeH264LowPower => "H264-LP",
            EncodeHEVCMain => "HEVC",
            EncodeHEVCMain10 => "HEVC-10",
            EncodeHEVCMain10LowPower => "HEVC-10-LP",
            EncodeHEVCMainLowPower => "HEVC-LP",
            Scale8bit => "8",
            Scale10bit => "10",
        }
    }

    /// What a `true` value tells a workload, in one line.
    pub fn meaning(self) -> &'static str {
        use Capability::*;
        match self {
            DecodeAV1Main => "decodes AV1 Main profile (8-bit 4:2:0) in hardware",
            DecodeAV1Main10 => "decodes 10-bit AV1 Main profile in hardware",
            DecodeH264 => "decodes H.264 up to High profile in hardware",
            DecodeHEVCMain => "decodes HEVC Main profile (8-bit 4:2:0) in hardware",
            DecodeHEVCMain10 => "decodes HEVC Main 10 profile (10-bit 4:2:0) in hardware",
            DecodeMPEG2 => "decodes MPEG-2 Main profile in hardware",
            DecodeVC1 => "decodes VC-1 Advanced profile in hardware",
            DecodeVP8 => "decodes VP8 in hardware",
            DecodeVP9 => "decodes VP9 profile 0 (8-bit 4:2:0) in hardware",
            DecodeVP9Profile2 => "decodes VP9 profile 2 (10-bit 4:2:0) in hardware",
            EncodeH264 => "encodes 8-bit H.264 on the full encoder (EncSlice)",
            EncodeH264LowPower => "encodes 8-bit H.264 on the low-power encoder (EncSliceLP)",
            EncodeHEVCMain => "encodes 8-bit HEVC Main on the full encoder (EncSlice)",
            EncodeHEVCMain10 => "encodes 10-bit HEVC Main 10 on the full encoder (EncSlice)",
            EncodeHEVCMain10LowPower => {
                "encodes 10-bit HEVC Main 10 on the low-power encoder (EncSliceLP)"
            }
            EncodeHEVCMainLowPower => {
                "encodes 8-bit HEVC Main on the low-power encoder (EncSliceLP)"
            }
            Scale8bit => "scales and converts 8-bit (NV12) frames on the video processor",
            Scale10bit => "scales and converts 10-bit (P010) frames on the video processor",
        }
    }

    /// The libva rule that decides the value, in words. The code that applies it is
    /// the VA module's rules function; this text is for the reference docs and `--help`.
    pub fn va_rule(self) -> &'static str {
        use Capability::*;
        match self {
            DecodeAV1Main => "VLD among the entrypoints of VAProfileAV1Profile0",
            DecodeAV1Main10 => {
                "decodeAV1Main, and the RTFormat of (AV1Profile0, VLD) has YUV420_10; when the \
                 driver does not state RTFormat (0x80000000), P010 among the surface formats of an \
                 (AV1Profile0, VLD) config"
            }
            DecodeH264 => "VLD among the entrypoints of VAProfileH264High",
            DecodeHEVCMain => "VLD among the entrypoints of VAProfileHEVCMain",
            DecodeHEVCMain10 => "VLD among the entrypoints of VAProfileHEVCMain10",
            DecodeMPEG2 => "VLD among the entrypoints of VAProfileMPEG2Main",
            DecodeVC1 => "VLD among the entrypoints of VAProfileVC1Advanced",
            DecodeVP8 => "VLD among the entrypoints of VAProfileVP8Version0_3",
            DecodeVP9 => "VLD among the entrypoints of VAProfileVP9Profile0",
            DecodeVP9Profile2 => "VLD among the entrypoints of VAProfileVP9Profile2",
            EncodeH264 => {
                "EncSlice among the entrypoints of H264High, H264Main or H264ConstrainedBaseline, \
                 for a profile whose RTFormat is not stated (0x80000000) or has YUV420"
            }
            EncodeH264LowPower => {
                "EncSliceLP among the entrypoints of H264High, H264Main or \
                 H264ConstrainedBaseline, for a profile whose RTFormat is not stated (0x80000000) \
                 or has YUV420"
            }
            EncodeHEVCMain => {
                "EncSlice among the entrypoints of VAProfileHEVCMain, with RTFormat not stated \
                 (0x80000000) or having YUV420"
            }
            EncodeHEVCMain10 => {
                "EncSlice among the entrypoints of VAProfileHEVCMain10, with RTFormat not stated \
                 (0x80000000) or having YUV420_10"
            }
            EncodeHEVCMain10LowPower => {
                "EncSliceLP among the entrypoints of VAProfileHEVCMain10, with RTFormat not stated \
                 (0x80000000) or having YUV420_10"
            }
            EncodeHEVCMainLowPower => {
                "EncSliceLP among the entrypoints of VAProfileHEVCMain, with RTFormat not stated \
                 (0x80000000) or having YUV420"
            }
            Scale8bit => {
                "VideoProc among the entrypoints of VAProfileNone, vaCreateConfig(None, VideoProc) \
                 succeeds, and NV12 among the pixel formats vaQuerySurfaceAttributes lists for it"
            }
            Scale10bit => {
                "VideoProc among the entrypoints of VAProfileNone, vaCreateConfig(None, VideoProc) \
                 succeeds, and P010 among the pixel formats vaQuerySurfaceAttributes lists for it"
            }
        }
    }

    /// The codec a decode or encode capability is about (`HEVC` for `decodeHEVCMain10` and
    /// `encodeHEVCMainLowPower`); `None` for scaling. Suggestions stay within a codec, so a
    /// near-miss of `hevc...` never suggests `VC1`.
    pub(crate) fn codec(self) -> Option<&'static str> {
        use Capability::*;
        match self {
            DecodeAV1Main | DecodeAV1Main10 => Some("AV1"),
            DecodeH264 | EncodeH264 | EncodeH264LowPower => Some("H264"),
            DecodeHEVCMain
            | DecodeHEVCMain10
            | EncodeHEVCMain
            | EncodeHEVCMain10
            | EncodeHEVCMain10LowPower
            | EncodeHEVCMainLowPower => Some("HEVC"),
            DecodeMPEG2 => Some("MPEG2"),
            DecodeVC1 => Some("VC1"),
            DecodeVP8 => Some("VP8"),
            DecodeVP9 | DecodeVP9Profile2 => Some("VP9"),
            Scale8bit | Scale10bit => None,
        }
    }

    /// Resolves what a user typed for a `--decode`/`--encode`/`--scale` flag, in any letter case:
    /// the value with or without the group prefix (`hevcmain10`, `decodeHEVCMain10`), or the
    /// table's own shorthand (`HEVC-10`, `H264-LP`, `--scale 8`), so that what `caps` prints can
    /// be typed back.
    pub fn parse(group: Group, input: &str) -> Result<Capability, UnknownCapability> {
        let typed = input.trim();
        Capability::find(group, typed).ok_or_else(|| UnknownCapability {
            group,
            input: input.to_string(),
            nearest: nearest(group, typed),
            elsewhere: Group::ALL
                .into_iter()
                .filter(|&other| other != group)
                .find_map(|other| Capability::find(other, typed)),
        })
    }

    fn find(group: Group, typed: &str) -> Option<Capability> {
        let bare = strip_prefix_ignore_case(typed, group.as_str()).unwrap_or(typed);
        group
            .capabilities()
            .find(|c| c.value().eq_ignore_ascii_case(bare) || c.label().eq_ignore_ascii_case(typed))
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.attribute())
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    // A bare prefix ("decode") is not a capability; leave it for the error to name.
    (head.eq_ignore_ascii_case(prefix) && s.len() > prefix.len()).then(|| &s[prefix.len()..])
}

/// Lowercase letters and digits only: `HEVC-10`, `hevc_10` and `Hevc 10` are all `hevc10`.
fn squash(text: &str) -> String {
    text.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Other names people give a codec, squashed, and the catalogue's name for it.
const CODEC_ALIASES: [(&str, &str); 5] = [
    ("h265", "hevc"),
    ("x265", "hevc"),
    ("avc", "h264"),
    ("x264", "h264"),
    ("mpeg", "mpeg2"),
];

/// The closest capability of `group` to what the user typed, when one plausibly is what they
/// meant. Tried in order, the first rule with a candidate wins:
///
/// 1. the same letters and digits as a value or shorthand, ignoring case and punctuation
///    (`HEVC10`, `h.264`, `vp9_profile2`);
/// 2. the same after a codec's other name (`h265` is HEVC, `avc` is H264: `h265-10` → HEVCMain10);
/// 3. a prefix either way: what was typed starts a name (`hevcm` → HEVCMain, the shortest such),
///    or a name starts what was typed and only letters follow (`av1main10bit` → AV1Main10,
///    the longest such; `hevcmain12` is left to the next rule);
/// 4. edit distance, among the capabilities of the codec the input starts with when it starts
///    with one (`hevcmain12` → HEVCMain10; never VC1 for a HEVC typo), else among all, within a
///    third of the name's length (at least 1: `JPEG` is not a typo of `MPEG2`).
fn nearest(group: Group, typed: &str) -> Option<Capability> {
    let bare = strip_prefix_ignore_case(typed, group.as_str()).unwrap_or(typed);
    let typed = squash(bare);
    if typed.is_empty() {
        return None;
    }
    let names = |c: Capability| [squash(c.value()), squash(c.label())];
    let exact = |typed: &str| {
        group
            .capabilities()
            .find(|&c| names(c).iter().any(|n| n == typed))
    };
    if let Some(c) = exact(&typed) {
        return Some(c);
    }
    let unaliased = CODEC_ALIASES.iter().find_map(|(alias, codec)| {
        typed
            .strip_prefix(alias)
            .map(|rest| format!("{codec}{rest}"))
    });
    if let Some(c) = unaliased.as_deref().and_then(exact) {
        return Some(c);
    }
    let typed = unaliased.unwrap_or(typed);
    if typed.len() >= 2 {
        let starting = group
            .capabilities()
            .filter(|&c| names(c).iter().any(|n| n.starts_with(&typed)))
            .min_by_key(|&c| squash(c.value()).len());
        if starting.is_some() {
            return starting;
        }
    }
    let started = group
        .capabilities()
        .filter_map(|c| {
            names(c)
                .into_iter()
                .filter(|n| {
                    n.len() >= 2
                        && typed
                            .strip_prefix(n.as_str())
                            .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_alphabetic()))
                })
                .map(|n| n.len())
                .max()
                .map(|len| (len, c))
        })
        .max_by_key(|&(len, _)| len)
        .map(|(_, c)| c);
    if started.is_some() {
        return started;
    }
    let codec = group
        .capabilities()
        .filter_map(Capability::codec)
        .map(squash)
        .find(|codec| typed.starts_with(codec.as_str()));
    group
        .capabilities()
        .filter(|c| codec.is_none() || c.codec().map(squash) == codec)
        .map(|c| {
            let distance = names(c)
                .iter()
                .map(|n| strsim::damerau_levenshtein(&typed, n))
                .min()
                .unwrap_or(usize::MAX);
            (distance, c)
        })
        .filter(|(distance, c)| *distance <= (squash(c.value()).len() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// A value for `--decode`/`--encode`/`--scale` that names no capability of that group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct UnknownCapability {
    pub group: Group,
    pub input: String,
    pub nearest: Option<Capability>,
    /// The capability of another group the input names exactly (`--decode scale8bit`).
    pub elsewhere: Option<Capability>,
}

impl fmt::Display for UnknownCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let valid: Vec<&str> = self.group.capabilities().map(Capability::value).collect();
        write!(
            f,
            "unknown {} capability {:?} (valid: {}",
            self.group,
            self.input,
            valid.join(", ")
        )?;
        if let Some(other) = self.elsewhere {
            write!(f, "; did you mean --{} {}?", other.group(), other.value())?;
        } else if let Some(nearest) = self.nearest {
            write!(f, "; did you mean {}?", nearest.value())?;
        }
        f.write_str(")")
    }
}

/// The identity attributes every device carries beside its capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Identity {
    Address,
    Driver,
    Name,
    Product,
    Vendor,
    VaDriver,
    PciBusId,
}

impl Identity {
    pub const ALL: [Identity; 7] = [
        Identity::Address,
        Identity::Driver,
        Identity::Name,
        Identity::Product,
        Identity::Vendor,
        Identity::VaDriver,
        Identity::PciBusId,
    ];

    /// The attribute name as published; all but `resource.kubernetes.io/pciBusID` are
    /// unqualified and so live in the `media.liken.sh` domain.
    pub fn attribute(self) -> &'static str {
        match self {
            Identity::Address => "address",
            Identity::Driver => "driver",
            Identity::Name => "name",
            Identity::Product => "product",
            Identity::Vendor => "vendor",
            Identity::VaDriver => "vaDriver",
            Identity::PciBusId => PCI_BUS_ID,
        }
    }

    pub fn meaning(self) -> &'static str {
        match self {
            Identity::Address => "the GPU's PCI address (domain:bus:device.function)",
            Identity::Driver => "the kernel driver bound to the GPU (i915, xe, amdgpu, nvidia...)",
            Identity::Name => "the GPU's model name from the PCI ID database",
            Identity::Product => "the PCI device ID, 4 lowercase hex digits",
            Identity::Vendor => {
                "the PCI vendor ID, 4 lowercase hex digits (8086 Intel, 1002 AMD, 10de NVIDIA)"
            }
            Identity::VaDriver => "the VA-API driver's vendor string; absent when the query failed",
            Identity::PciBusId => {
                "the GPU's PCI address, the same value the liken.sh render node carries, for \
                 matchAttribute constraints"
            }
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Identity::Address | Identity::PciBusId => {
                "PCI_SLOT_NAME in /sys/class/drm/renderDN/device/uevent"
            }
            Identity::Driver => "DRIVER in /sys/class/drm/renderDN/device/uevent",
            Identity::Name => {
                "the vendor/device entry of the system's pci.ids (/usr/share/misc/pci.ids or \
                 /usr/share/hwdata/pci.ids), or vendor:product (e.g. 8086:7d55) when there is no database \
                 or no entry; trimmed to 64 bytes"
            }
            Identity::Product => "/sys/class/drm/renderDN/device/device, without 0x",
            Identity::Vendor => "/sys/class/drm/renderDN/device/vendor, without 0x",
            Identity::VaDriver => "vaQueryVendorString; trimmed to 64 bytes",
        }
    }
}

/// The value type of a published attribute, as in the ResourceSlice API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bool,
    String,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Bool => "bool",
            Kind::String => "string",
        }
    }
}

/// Any published attribute: a capability or an identity attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attribute {
    Capability(Capability),
    Identity(Identity),
}

impl Attribute {
    /// Every attribute a device can carry: identity first, then the capabilities.
    pub fn all() -> impl Iterator<Item = Attribute> {
        Identity::ALL
            .into_iter()
            .map(Attribute::Identity)
            .chain(Capability::ALL.into_iter().map(Attribute::Capability))
    }

    pub fn name(self) -> &'static str {
        match self {
            Attribute::Capability(c) => c.attribute(),
            Attribute::Identity(i) => i.attribute(),
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Attribute::Capability(_) => Kind::Bool,
            Attribute::Identity(_) => Kind::String,
        }
    }

    pub fn meaning(self) -> &'static str {
        match self {
            Attribute::Capability(c) => c.meaning(),
            Attribute::Identity(i) => i.meaning(),
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Attribute::Capability(c) => c.va_rule(),
            Attribute::Identity(i) => i.source(),
        }
    }
}

/// The CEL expression that reads a capability of a `media.liken.sh` device.
pub(crate) fn cel_capability(capability: Capability) -> String {
    format!("device.attributes[\"{DRIVER}\"].{}", capability.attribute())
}

// The API server rejects a whole slice when a device has more than 32 attributes; fail the
// build instead.
const _: () = assert!(Capability::ALL.len() + Identity::ALL.len() <= MAX_ATTRIBUTES_PER_DEVICE);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The DRA validation rule for attribute names (k/k pkg/apis/resource/validation): a C identifier of at most 32
    /// characters, optionally behind a domain and a `/`; the domain is checked as a driver name
    /// (`ValidateCSIDriverName`: a DNS subdomain of at most 63 characters once lower-cased).
    fn valid_attribute_name(name: &str) -> bool {
        let (domain, ident) = match name.split_once('/') {
            Some((d, i)) => (Some(d), i),
            None => (None, name),
        };
        let ident_ok = !ident.is_empty()
            && ident.len() <= 32
            && ident
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let domain_ok = domain.map(str::to_ascii_lowercase).is_none_or(|d| {
            d.len() <= 63
                && d.split('.').all(|label| {
                    !label.is_empty()
                        && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && label
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                })
        });
        ident_ok && domain_ok
    }

    #[test]
    fn attribute_names_are_valid_kubernetes_attribute_names() {
        for attribute in Attribute::all() {
            assert!(
                valid_attribute_name(attribute.name()),
                "{}",
                attribute.name()
            );
        }
        // The validator itself must reject what the API server rejects.
        for bad in [
            "1decode",
            "decode-hevc",
            "a".repeat(33).as_str(),
            "exa_mple.com/x",
            "-example.com/x",
            "x/",
        ] {
            assert!(!valid_attribute_name(bad), "{bad}");
        }
        // Upper case in the domain passes: it is lower-cased before the check.
        assert!(valid_attribute_name("Example.com/x"));
    }

    #[test]
    fn attribute_names_are_unique_and_fit_one_device() {
        let names: HashSet<&str> = Attribute::all().map(Attribute::name).collect();
        assert_eq!(names.len(), Attribute::all().count());
        assert_eq!(names.len(), 25);
        assert!(names.len() <= MAX_ATTRIBUTES_PER_DEVICE);
    }

    #[test]
    fn the_catalogue_holds_the_documented_set() {
        let capabilities: Vec<&str> = Capability::ALL.iter().map(|c| c.attribute()).collect();
        assert_eq!(
            capabilities,
            [
                "decodeAV1Main",
                "decodeAV1Main10",
                "decodeH264",
                "decodeHEVCMain",
                "decodeHEVCMain10",
                "decodeMPEG2",
                "decodeVC1",
                "decodeVP8",
                "decodeVP9",
                "decodeVP9Profile2",
                "encodeH264",
                "encodeH264LowPower",
                "encodeHEVCMain",
                "encodeHEVCMain10",
                "encodeHEVCMain10LowPower",
                "encodeHEVCMainLowPower",
                "scale8bit",
                "scale10bit",
            ]
        );
        let identity: Vec<&str> = Identity::ALL.iter().map(|i| i.attribute()).collect();
        assert_eq!(
            identity,
            [
                "address", "driver", "name", "product", "vendor", "vaDriver", PCI_BUS_ID
            ]
        );
    }

    #[test]
    fn every_capability_name_starts_with_its_group() {
        for c in Capability::ALL {
            assert!(c.attribute().starts_with(c.group().as_str()), "{c}");
            assert!(!c.value().is_empty());
            assert_eq!(format!("{}{}", c.group(), c.value()), c.attribute());
        }
        assert_eq!(Group::Decode.capabilities().count(), 10);
        assert_eq!(Group::Encode.capabilities().count(), 6);
        assert_eq!(Group::Scale.capabilities().count(), 2);
    }

    #[test]
    fn labels_are_unique_within_a_group() {
        for group in Group::ALL {
            let labels: HashSet<&str> = group.capabilities().map(Capability::label).collect();
            assert_eq!(labels.len(), group.capabilities().count(), "{group}");
        }
    }

    #[test]
    fn every_attribute_is_documented() {
        for attribute in Attribute::all() {
            assert!(!attribute.meaning().is_empty(), "{}", attribute.name());
            assert!(!attribute.source().is_empty(), "{}", attribute.name());
            assert!(!attribute.meaning().contains('\n'), "{}", attribute.name());
        }
    }

    #[test]
    fn parse_accepts_values_with_or_without_prefix_in_any_case() {
        use Capability::*;
        assert_eq!(
            Capability::parse(Group::Decode, "hevcmain10"),
            Ok(DecodeHEVCMain10)
        );
        assert_eq!(
            Capability::parse(Group::Decode, "HEVCMain10"),
            Ok(DecodeHEVCMain10)
        );
        assert_eq!(
            Capability::parse(Group::Decode, "decodeHEVCMain10"),
            Ok(DecodeHEVCMain10)
        );
        assert_eq!(
            Capability::parse(Group::Encode, "H264LowPower"),
            Ok(EncodeH264LowPower)
        );
        assert_eq!(
            Capability::parse(Group::Encode, "ENCODEh264"),
            Ok(EncodeH264)
        );
        assert_eq!(Capability::parse(Group::Scale, "10bit"), Ok(Scale10bit));
        assert_eq!(Capability::parse(Group::Scale, "scale8BIT"), Ok(Scale8bit));
        // A value of another group is not accepted.
        assert!(Capability::parse(Group::Decode, "10bit").is_err());
        assert!(Capability::parse(Group::Scale, "decodeVP9").is_err());
        // A bare prefix names nothing.
        assert!(Capability::parse(Group::Decode, "decode").is_err());
    }

    #[test]
    fn unknown_values_list_the_valid_ones_and_the_nearest() {
        let err = Capability::parse(Group::Decode, "HEVCMain12").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown decode capability \"HEVCMain12\" (valid: AV1Main, AV1Main10, H264, HEVCMain, \
             HEVCMain10, MPEG2, VC1, VP8, VP9, VP9Profile2; did you mean HEVCMain10?)"
        );
        let err = Capability::parse(Group::Scale, "12bit").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown scale capability \"12bit\" (valid: 8bit, 10bit; did you mean 10bit?)"
        );
        let err = Capability::parse(Group::Encode, "ProRes").unwrap_err();
        assert_eq!(err.nearest, None);
        assert!(!err.to_string().contains("did you mean"));
        let err = Capability::parse(Group::Decode, "scale8bit").unwrap_err();
        assert_eq!(err.elsewhere, Some(Capability::Scale8bit));
        assert!(
            err.to_string().ends_with("; did you mean --scale 8bit?)"),
            "{err}"
        );
        let err = Capability::parse(Group::Scale, "vp9").unwrap_err();
        assert!(
            err.to_string().ends_with("; did you mean --decode VP9?)"),
            "{err}"
        );
    }

    #[test]
    fn the_tables_shorthand_is_accepted() {
        use Capability::*;
        let cases = [
            (Group::Decode, "HEVC-10", DecodeHEVCMain10),
            (Group::Decode, "hevc-10", DecodeHEVCMain10),
            (Group::Decode, "HEVC", DecodeHEVCMain),
            (Group::Decode, "hevc", DecodeHEVCMain),
            (Group::Decode, "AV1", DecodeAV1Main),
            (Group::Decode, "AV1-10", DecodeAV1Main10),
            (Group::Decode, "VP9-10", DecodeVP9Profile2),
            (Group::Encode, "H264-LP", EncodeH264LowPower),
            (Group::Encode, "HEVC-10-LP", EncodeHEVCMain10LowPower),
            (Group::Encode, "hevc-lp", EncodeHEVCMainLowPower),
            (Group::Scale, "8", Scale8bit),
            (Group::Scale, "10", Scale10bit),
        ];
        for (group, typed, expected) in cases {
            assert_eq!(
                Capability::parse(group, typed),
                Ok(expected),
                "{group} {typed}"
            );
        }
        // Every label of every group reads back as its own capability.
        for c in Capability::ALL {
            assert_eq!(Capability::parse(c.group(), c.label()), Ok(c), "{c}");
        }
        // Shorthand is per group: `--encode AV1` is not decoding.
        let err = Capability::parse(Group::Encode, "AV1").unwrap_err();
        assert_eq!(err.elsewhere, Some(DecodeAV1Main));
        assert!(
            err.to_string()
                .ends_with("; did you mean --decode AV1Main?)"),
            "{err}"
        );
        let err = Capability::parse(Group::Decode, "8").unwrap_err();
        assert_eq!(err.elsewhere, Some(Scale8bit));
    }

    /// What people type and what they mean: the ranking of `nearest`, case by case.
    #[test]
    fn near_misses_suggest_what_people_mean() {
        use Capability::*;
        let cases: [(Group, &str, Option<Capability>); 22] = [
            // Same letters and digits as a value or a label.
            (Group::Decode, "HEVC10", Some(DecodeHEVCMain10)),
            (Group::Decode, "hevc_main_10", Some(DecodeHEVCMain10)),
            (Group::Decode, "h.264", Some(DecodeH264)),
            (Group::Decode, "VP9 Profile 2", Some(DecodeVP9Profile2)),
            (Group::Encode, "h264lp", Some(EncodeH264LowPower)),
            (Group::Scale, "10-bit", Some(Scale10bit)),
            // Another name of the codec.
            (Group::Decode, "h265", Some(DecodeHEVCMain)),
            (Group::Decode, "H.265-10", Some(DecodeHEVCMain10)),
            (Group::Decode, "avc", Some(DecodeH264)),
            (Group::Encode, "x265", Some(EncodeHEVCMain)),
            // Prefixes, either way.
            (Group::Decode, "hevcm", Some(DecodeHEVCMain)),
            (Group::Decode, "av1main1", Some(DecodeAV1Main10)),
            (Group::Decode, "av1main10bit", Some(DecodeAV1Main10)),
            (Group::Decode, "mpeg", Some(DecodeMPEG2)),
            (
                Group::Encode,
                "hevcmain10low",
                Some(EncodeHEVCMain10LowPower),
            ),
            // Typos, within the codec typed.
            (Group::Decode, "HEVCMain12", Some(DecodeHEVCMain10)),
            (Group::Decode, "hevcmian", Some(DecodeHEVCMain)),
            (Group::Decode, "AV1Man", Some(DecodeAV1Main)),
            (Group::Decode, "hevx", Some(DecodeHEVCMain)),
            (Group::Scale, "12bit", Some(Scale10bit)),
            // Nothing close: no guess.
            (Group::Encode, "ProRes", None),
            (Group::Decode, "JPEG", None),
        ];
        for (group, typed, expected) in cases {
            let err = Capability::parse(group, typed).unwrap_err();
            assert_eq!(err.nearest, expected, "{group} {typed:?}");
        }
        // Never VC1 for a HEVC typo.
        for typed in ["hevc1", "hvec", "hevcc", "hecv"] {
            let nearest = Capability::parse(Group::Decode, typed).unwrap_err().nearest;
            assert_ne!(nearest, Some(DecodeVC1), "{typed}");
        }
    }

    #[test]
    fn cel_reads_a_capability_in_our_domain() {
        assert_eq!(
            cel_capability(Capability::DecodeVP9),
            "device.attributes[\"media.liken.sh\"].decodeVP9"
        );
    }
}
