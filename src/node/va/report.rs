//! What one GPU's VA-API driver stated, kept as data and not interpreted.
//!
//! A report is what the probe child prints and what `--from`/`--reports` read back, so its JSON
//! form is a stable, documented format (docs/report-format.md). Profiles and entrypoints are
//! written with libva's own names (`VAProfileH264High`, `VAEntrypointVLD`) so a report reads like
//! vainfo; numbers libva gives that this build does not know are kept as numbers rather than
//! dropped, because a newer driver may state things we cannot name yet. Interpretation happens in
//! exactly one place, `va::rules`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A `VAProfile` value (a C int in va.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Profile(pub i32);

/// A `VAEntrypoint` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entrypoint(pub i32);

// va.h, VAProfile. The whole enum as of VA-API 1.22, so reports name everything a current
// driver lists; anything newer stays a number.
const PROFILE_NAMES: &[(i32, &str)] = &[
    (-1, "VAProfileNone"),
    (0, "VAProfileMPEG2Simple"),
    (1, "VAProfileMPEG2Main"),
    (2, "VAProfileMPEG4Simple"),
    (3, "VAProfileMPEG4AdvancedSimple"),
    (4, "VAProfileMPEG4Main"),
    (5, "VAProfileH264Baseline"),
    (6, "VAProfileH264Main"),
    (7, "VAProfileH264High"),
    (8, "VAProfileVC1Simple"),
    (9, "VAProfileVC1Main"),
    (10, "VAProfileVC1Advanced"),
    (11, "VAProfileH263Baseline"),
    (12, "VAProfileJPEGBaseline"),
    (13, "VAProfileH264ConstrainedBaseline"),
    (14, "VAProfileVP8Version0_3"),
    (15, "VAProfileH264MultiviewHigh"),
    (16, "VAProfileH264StereoHigh"),
    (17, "VAProfileHEVCMain"),
    (18, "VAProfileHEVCMain10"),
    (19, "VAProfileVP9Profile0"),
    (20, "VAProfileVP9Profile1"),
    (21, "VAProfileVP9Profile2"),
    (22, "VAProfileVP9Profile3"),
    (23, "VAProfileHEVCMain12"),
    (24, "VAProfileHEVCMain422_10"),
    (25, "VAProfileHEVCMain422_12"),
    (26, "VAProfileHEVCMain444"),
    (27, "VAProfileHEVCMain444_10"),
    (28, "VAProfileHEVCMain444_12"),
    (29, "VAProfileHEVCSccMain"),
    (30, "VAProfileHEVCSccMain10"),
    (31, "VAProfileHEVCSccMain444"),
    (32, "VAProfileAV1Profile0"),
    (33, "VAProfileAV1Profile1"),
    (34, "VAProfileHEVCSccMain444_10"),
    (35, "VAProfileProtected"),
    (36, "VAProfileH264High10"),
    (37, "VAProfileVVCMain10"),
    (38, "VAProfileVVCMultilayerMain10"),
];

// va.h, VAEntrypoint (9 is unused upstream).
const ENTRYPOINT_NAMES: &[(i32, &str)] = &[
    (1, "VAEntrypointVLD"),
    (2, "VAEntrypointIZZ"),
    (3, "VAEntrypointIDCT"),
    (4, "VAEntrypointMoComp"),
    (5, "VAEntrypointDeblocking"),
    (6, "VAEntrypointEncSlice"),
    (7, "VAEntrypointEncPicture"),
    (8, "VAEntrypointEncSliceLP"),
    (10, "VAEntrypointVideoProc"),
    (11, "VAEntrypointFEI"),
    (12, "VAEntrypointStats"),
    (13, "VAEntrypointProtectedTEEComm"),
    (14, "VAEntrypointProtectedContent"),
];

fn name_of(table: &'static [(i32, &'static str)], value: i32) -> Option<&'static str> {
    table.iter().find(|(v, _)| *v == value).map(|(_, n)| *n)
}

fn value_of(table: &'static [(i32, &'static str)], name: &str) -> Option<i32> {
    table.iter().find(|(_, n)| *n == name).map(|(v, _)| *v)
}

impl Profile {
    pub const NONE: Profile = Profile(-1);
    pub(crate) const MPEG2_MAIN: Profile = Profile(1);
    pub(crate) const H264_MAIN: Profile = Profile(6);
    pub(crate) const H264_HIGH: Profile = Profile(7);
    pub(crate) const VC1_ADVANCED: Profile = Profile(10);
    pub(crate) const H264_CONSTRAINED_BASELINE: Profile = Profile(13);
    pub(crate) const VP8_VERSION0_3: Profile = Profile(14);
    pub(crate) const HEVC_MAIN: Profile = Profile(17);
    pub(crate) const HEVC_MAIN10: Profile = Profile(18);
    pub(crate) const VP9_PROFILE0: Profile = Profile(19);
    pub(crate) const VP9_PROFILE2: Profile = Profile(21);
    pub const AV1_PROFILE0: Profile = Profile(32);

    /// libva's name (`VAProfileH264High`), or `None` for a value this build does not know.
    pub fn name(self) -> Option<&'static str> {
        name_of(PROFILE_NAMES, self.0)
    }

    /// The profile with libva's name `name`, if this build knows it.
    pub fn from_name(name: &str) -> Option<Profile> {
        value_of(PROFILE_NAMES, name).map(Profile)
    }
}

impl Entrypoint {
    pub const VLD: Entrypoint = Entrypoint(1);
    pub const ENC_SLICE: Entrypoint = Entrypoint(6);
    pub const ENC_SLICE_LP: Entrypoint = Entrypoint(8);
    pub const VIDEO_PROC: Entrypoint = Entrypoint(10);

    /// libva's name (`VAEntrypointVLD`), or `None` for a value this build does not know.
    pub fn name(self) -> Option<&'static str> {
        name_of(ENTRYPOINT_NAMES, self.0)
    }

    /// The entrypoint with libva's name `name`, if this build knows it.
    pub fn from_name(name: &str) -> Option<Entrypoint> {
        value_of(ENTRYPOINT_NAMES, name).map(Entrypoint)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "VAProfile({})", self.0),
        }
    }
}

impl fmt::Display for Entrypoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "VAEntrypoint({})", self.0),
        }
    }
}

/// The JSON form shared by profiles and entrypoints: libva's name, or the bare number.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NameOrNumber {
    Number(i32),
    Name(String),
}

fn serialize_enum<S: Serializer>(
    table: &'static [(i32, &'static str)],
    value: i32,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match name_of(table, value) {
        Some(name) => serializer.serialize_str(name),
        None => serializer.serialize_i32(value),
    }
}

fn deserialize_enum<'de, D: Deserializer<'de>>(
    table: &'static [(i32, &'static str)],
    what: &str,
    deserializer: D,
) -> Result<i32, D::Error> {
    match NameOrNumber::deserialize(deserializer)? {
        NameOrNumber::Number(n) => Ok(n),
        NameOrNumber::Name(name) => value_of(table, &name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown {what} name {name:?} (hint: write values this build does not name as numbers)"
            ))
        }),
    }
}

impl Serialize for Profile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_enum(PROFILE_NAMES, self.0, s)
    }
}

impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_enum(PROFILE_NAMES, "VAProfile", d).map(Profile)
    }
}

impl Serialize for Entrypoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_enum(ENTRYPOINT_NAMES, self.0, s)
    }
}

impl<'de> Deserialize<'de> for Entrypoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_enum(ENTRYPOINT_NAMES, "VAEntrypoint", d).map(Entrypoint)
    }
}

/// The value of `VAConfigAttribRTFormat` for one (profile, entrypoint).
///
/// `NotStated` is libva's `VA_ATTRIB_NOT_SUPPORTED` (0x80000000): the driver does not say. It is
/// a different statement from `Formats(0)`, where the driver says "no formats".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtFormat {
    NotStated,
    Formats(u32),
}

impl RtFormat {
    /// `VA_ATTRIB_NOT_SUPPORTED`.
    pub(crate) const NOT_SUPPORTED: u32 = 0x8000_0000;
    /// `VA_RT_FORMAT_YUV420`.
    pub(crate) const YUV420: u32 = 0x1;
    /// `VA_RT_FORMAT_YUV420_10`.
    pub(crate) const YUV420_10: u32 = 0x100;

    /// The statement the raw attribute value makes.
    pub(crate) fn from_raw(raw: u32) -> RtFormat {
        if raw == Self::NOT_SUPPORTED {
            RtFormat::NotStated
        } else {
            RtFormat::Formats(raw)
        }
    }

    /// The raw attribute value.
    pub fn raw(self) -> u32 {
        match self {
            RtFormat::NotStated => Self::NOT_SUPPORTED,
            RtFormat::Formats(bits) => bits,
        }
    }
}

// JSON: "not stated", or the bits as "0x00000101" (hex, because they are flags).
impl Serialize for RtFormat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RtFormat::NotStated => s.serialize_str("not stated"),
            RtFormat::Formats(bits) => s.serialize_str(&format!("{bits:#010x}")),
        }
    }
}

impl<'de> Deserialize<'de> for RtFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "not stated" {
            return Ok(RtFormat::NotStated);
        }
        text.strip_prefix("0x")
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .map(RtFormat::from_raw)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "invalid RT format {text:?} (valid: \"not stated\" or hex such as \"0x00000101\")"
                ))
            })
    }
}

/// A surface pixel format, a fourcc code such as NV12.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fourcc(pub u32);

impl Fourcc {
    pub const NV12: Fourcc = Fourcc(0x3231_564E);
    pub const P010: Fourcc = Fourcc(0x3031_3050);

    /// The four characters, when they are all printable ASCII.
    fn text(self) -> Option<String> {
        let bytes = self.0.to_le_bytes();
        bytes
            .iter()
            .all(|b| b.is_ascii_graphic() || *b == b' ')
            .then(|| bytes.iter().map(|b| char::from(*b)).collect())
    }

    /// The code of a four-character text (`"NV12"`).
    pub(crate) fn from_text(text: &str) -> Option<Fourcc> {
        let bytes: [u8; 4] = text.as_bytes().try_into().ok()?;
        Some(Fourcc(u32::from_le_bytes(bytes)))
    }
}

impl fmt::Display for Fourcc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text() {
            Some(text) => f.write_str(&text),
            None => write!(f, "{:#010x}", self.0),
        }
    }
}

// JSON: the four characters when printable, else the number.
impl Serialize for Fourcc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.text() {
            Some(text) => s.serialize_str(&text),
            None => s.serialize_u32(self.0),
        }
    }
}

impl<'de> Deserialize<'de> for Fourcc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Number(u32),
            Text(String),
        }
        match Form::deserialize(d)? {
            Form::Number(n) => Ok(Fourcc(n)),
            Form::Text(text) => Fourcc::from_text(&text).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "invalid fourcc {text:?} (hint: four characters such as \"NV12\", or a number)"
                ))
            }),
        }
    }
}

/// One (profile, entrypoint) pair the driver listed, with its RT formats when a rule needed them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub profile: Profile,
    pub entrypoint: Entrypoint,
    /// Absent: not queried (no rule needs it). Present: what the driver answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rt_format: Option<RtFormat>,
}

/// The pixel formats `vaQuerySurfaceAttributes` listed for a config we created, or why there are
/// none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurfaceFormats {
    pub profile: Profile,
    pub entrypoint: Entrypoint,
    /// The pixel formats, in the driver's order. Empty when `error` is set.
    #[serde(default)]
    pub formats: Vec<Fourcc>,
    /// The failed call and libva's words, when `vaCreateConfig` or the query failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How loud a libva message was: which callback received it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Info,
}

/// One message libva or the driver passed to our callbacks, verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub level: Level,
    pub text: String,
}

impl fmt::Display for Message {
    /// The way libva itself prints it to stderr by default (`libva info: ...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.level {
            Level::Error => "error",
            Level::Info => "info",
        };
        write!(f, "libva {level}: {}", self.text)
    }
}

/// Everything one probe of one render node learned, uninterpreted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// `major.minor` from `vaInitialize`: the VA-API version libva implements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub va_api_version: Option<String>,
    /// The VA driver name forced with `vaSetDriverName`, when the operator configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_override: Option<String>,
    /// `vaQueryVendorString`, untrimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Every (profile, entrypoint) the driver listed, in its order.
    #[serde(default)]
    pub configs: Vec<Config>,
    /// Surface formats of the `(VAProfileNone, VAEntrypointVideoProc)` config; absent when the
    /// driver lists no VideoProc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video_proc: Option<SurfaceFormats>,
    /// Surface formats of the `(VAProfileAV1Profile0, VAEntrypointVLD)` config; queried only when
    /// the driver does not state that pair's RT formats (the AV1 10-bit fallback rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub av1_surfaces: Option<SurfaceFormats>,
    /// Calls that failed without ending the probe (e.g. an RT format query), with libva's words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What libva and the driver said through the message callbacks, in order.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Why the query failed, when it did (libva not loadable, vaInitialize failed, ...). A report
    /// with an error publishes no vaDriver and every capability false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Report {
    /// The listed config for (profile, entrypoint), if the driver listed that pair.
    pub fn config(&self, profile: Profile, entrypoint: Entrypoint) -> Option<&Config> {
        self.configs
            .iter()
            .find(|c| c.profile == profile && c.entrypoint == entrypoint)
    }

    /// libva's messages as libva would print them, one per line.
    pub fn said(&self) -> Vec<String> {
        self.messages.iter().map(ToString::to_string).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_serialise_as_libva_names_and_unknown_ones_as_numbers() {
        let config = Config {
            profile: Profile(99),
            entrypoint: Entrypoint::VLD,
            rt_format: Some(RtFormat::NotStated),
        };
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            json,
            r#"{"profile":99,"entrypoint":"VAEntrypointVLD","rt_format":"not stated"}"#
        );
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), config);
        let named: Config = serde_json::from_str(
            r#"{"profile":"VAProfileAV1Profile0","entrypoint":42,"rt_format":"0x00000101"}"#,
        )
        .unwrap();
        assert_eq!(named.profile, Profile::AV1_PROFILE0);
        assert_eq!(named.entrypoint, Entrypoint(42));
        assert_eq!(named.rt_format, Some(RtFormat::Formats(0x101)));
    }

    #[test]
    fn not_stated_none_and_not_queried_are_three_different_things() {
        assert_eq!(RtFormat::from_raw(0x8000_0000), RtFormat::NotStated);
        assert_eq!(RtFormat::from_raw(0), RtFormat::Formats(0));
        let none: Config = serde_json::from_str(
            r#"{"profile":"VAProfileHEVCMain","entrypoint":"VAEntrypointEncSlice","rt_format":"0x00000000"}"#,
        )
        .unwrap();
        let absent: Config = serde_json::from_str(
            r#"{"profile":"VAProfileHEVCMain","entrypoint":"VAEntrypointEncSlice"}"#,
        )
        .unwrap();
        assert_eq!(none.rt_format, Some(RtFormat::Formats(0)));
        assert_eq!(absent.rt_format, None);
    }

    #[test]
    fn misspelt_names_are_rejected_with_a_hint() {
        let err = serde_json::from_str::<Profile>(r#""VAProfileH264Hihg""#).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown VAProfile name \"VAProfileH264Hihg\"")
        );
    }

    #[test]
    fn fourccs_read_as_text() {
        assert_eq!(Fourcc::NV12.to_string(), "NV12");
        assert_eq!(Fourcc::P010.to_string(), "P010");
        assert_eq!(Fourcc::from_text("P010"), Some(Fourcc::P010));
        assert_eq!(serde_json::to_string(&Fourcc(1)).unwrap(), "1");
    }
}
