//! What a media file needs of a GPU, for `--for FILE`: each video stream needs the decode
//! capability of its codec and profile ([`PROFILES`]) and the scale capability of its bit depth. A
//! stream no attribute covers (4:2:2, 12-bit, alpha...) is refused with what it is: any mapping
//! would be a guess. Pure: ffprobe runs at the edge ([`crate::ffprobe`]).

use std::fmt;

use serde::Deserialize;

use super::Capability;

/// `ffprobe -print_format json -show_streams`, the fields read here. ffprobe leaves out a field
/// it cannot tell (`profile` of a stream it cannot parse, `pix_fmt` of a damaged one).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Probe {
    #[serde(default)]
    pub streams: Vec<Stream>,
}

/// One stream of a [`Probe`].
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Stream {
    #[serde(default)]
    pub index: u32,
    pub codec_type: Option<String>,
    pub codec_name: Option<String>,
    pub profile: Option<String>,
    pub pix_fmt: Option<String>,
    #[serde(default)]
    pub disposition: Disposition,
}

/// The stream's flags; only `attached_pic` matters here.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct Disposition {
    /// A cover picture (an MP3's or an MKV's artwork), stored as a one-frame video stream: shown,
    /// never played, so it asks nothing of the GPU's decoder.
    #[serde(default)]
    pub attached_pic: u8,
}

/// One row of the mapping: ffprobe's `codec_name` and the `profile` strings it writes
/// (libavcodec/profiles.c), the decode capability they need, and the deepest samples that
/// capability decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileRow {
    pub codec_name: &'static str,
    /// The codec as people write it, for messages and the docs.
    pub codec: &'static str,
    /// ffprobe's profile names; empty: any profile (VP8's versions 0 to 3 are one VA profile).
    pub profiles: &'static [&'static str],
    pub decode: Capability,
    pub max_bits: u8,
}

/// ffprobe's codec and profile → the decode capability, in catalogue order. Read by `--for` and
/// docs/capabilities.md. Each row follows the VA profile the attribute is decided on
/// (libva-facts §2) and FFmpeg's own choice of VA profile for the stream
/// (libavcodec/vaapi_decode.c): a decoder of a profile decodes its subsets (H.264 High decodes
/// Main and Constrained Baseline; MPEG-2 Main decodes Simple; HEVC Main Still Picture is Main).
/// AV1 Main has one VA profile for 8 and 10 bits; the depth picks the attribute.
pub const PROFILES: [ProfileRow; 10] = [
    ProfileRow {
        codec_name: "av1",
        codec: "AV1",
        profiles: &["Main"],
        decode: Capability::DecodeAV1Main,
        max_bits: 8,
    },
    ProfileRow {
        codec_name: "av1",
        codec: "AV1",
        profiles: &["Main"],
        decode: Capability::DecodeAV1Main10,
        max_bits: 10,
    },
    ProfileRow {
        codec_name: "h264",
        codec: "H.264",
        profiles: &["Constrained Baseline", "Main", "High"],
        decode: Capability::DecodeH264,
        max_bits: 8,
    },
    ProfileRow {
        codec_name: "hevc",
        codec: "HEVC",
        profiles: &["Main", "Main Still Picture"],
        decode: Capability::DecodeHEVCMain,
        max_bits: 8,
    },
    ProfileRow {
        codec_name: "hevc",
        codec: "HEVC",
        profiles: &["Main 10"],
        decode: Capability::DecodeHEVCMain10,
        max_bits: 10,
    },
    ProfileRow {
        codec_name: "mpeg2video",
        codec: "MPEG-2",
        profiles: &["Main", "Simple"],
        decode: Capability::DecodeMPEG2,
        max_bits: 8,
    },
    ProfileRow {
        codec_name: "vc1",
        codec: "VC-1",
        profiles: &["Advanced"],
        decode: Capability::DecodeVC1,
        max_bits: 8,
    },
    ProfileRow {
        codec_name: "vp8",
        codec: "VP8",
        profiles: &[],
        decode: Capability::DecodeVP8,
        max_bits: 8,
    },
    ProfileRow {
        codec_name: "vp9",
        codec: "VP9",
        profiles: &["Profile 0"],
        decode: Capability::DecodeVP9,
        max_bits: 8,
    },
    ProfileRow {
        codec_name: "vp9",
        codec: "VP9",
        profiles: &["Profile 2"],
        decode: Capability::DecodeVP9Profile2,
        max_bits: 10,
    },
];

/// The bit depths a scale capability converts (NV12 is 8-bit 4:2:0, P010 10-bit 4:2:0).
pub const SCALES: [(u8, Capability); 2] =
    [(8, Capability::Scale8bit), (10, Capability::Scale10bit)];

/// How a picture's colour is sampled, as `pix_fmt` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chroma {
    /// Monochrome (`gray`, `gray10le`).
    Gray,
    Yuv420,
    Yuv422,
    Yuv444,
    Yuv440,
    Yuv411,
    Yuv410,
    /// RGB planes (`gbrp`, `rgb24`...).
    Rgb,
}

impl fmt::Display for Chroma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Chroma::Gray => "4:0:0 (monochrome)",
            Chroma::Yuv420 => "4:2:0",
            Chroma::Yuv422 => "4:2:2",
            Chroma::Yuv444 => "4:4:4",
            Chroma::Yuv440 => "4:4:0",
            Chroma::Yuv411 => "4:1:1",
            Chroma::Yuv410 => "4:1:0",
            Chroma::Rgb => "RGB",
        })
    }
}

/// What a `pix_fmt` says about the decoded picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelFormat {
    pub chroma: Chroma,
    pub bits: u8,
    pub alpha: bool,
}

/// Reads FFmpeg's pixel format names (libavutil/pixdesc.c): planar `yuv420p10le`, `yuvj420p`,
/// `yuva420p`; semi-planar `nv12`, `p010le`, `p210le`, `y210le`; `gray12le`; RGB `gbrp10le`,
/// `rgb24`. `None` for a name not of these forms: never a guessed depth. `bits_per_raw_sample`
/// is no help: ffprobe leaves it out for most codecs.
pub fn pixel_format(name: &str) -> Option<PixelFormat> {
    let name = name
        .strip_suffix("le")
        .or_else(|| name.strip_suffix("be"))
        .unwrap_or(name);
    let depth = |digits: &str, default: u8| -> Option<u8> {
        if digits.is_empty() {
            Some(default)
        } else {
            digits.parse().ok().filter(|b| (8..=16).contains(b))
        }
    };
    let sampled = |chroma: Chroma, bits: u8, alpha: bool| {
        Some(PixelFormat {
            chroma,
            bits,
            alpha,
        })
    };
    // Planar YUV: yuv{,j,a}CCCp[BITS].
    if let Some(rest) = name.strip_prefix("yuv") {
        let (alpha, rest) = match rest.strip_prefix('a') {
            Some(r) => (true, r),
            None => (false, rest.strip_prefix('j').unwrap_or(rest)),
        };
        let (layout, bits) = rest.split_once('p')?;
        let chroma = match layout {
            "420" => Chroma::Yuv420,
            "422" => Chroma::Yuv422,
            "444" => Chroma::Yuv444,
            "440" => Chroma::Yuv440,
            "411" => Chroma::Yuv411,
            "410" => Chroma::Yuv410,
            _ => return None,
        };
        return sampled(chroma, depth(bits, 8)?, alpha);
    }
    // Semi-planar and packed forms that decoders output.
    let (chroma, bits) = match name {
        "nv12" | "nv21" => (Chroma::Yuv420, 8),
        "p010" => (Chroma::Yuv420, 10),
        "p012" => (Chroma::Yuv420, 12),
        "p016" => (Chroma::Yuv420, 16),
        "nv16" | "yuyv422" | "uyvy422" => (Chroma::Yuv422, 8),
        "nv20" | "p210" | "y210" => (Chroma::Yuv422, 10),
        "p216" | "y212" => (Chroma::Yuv422, 12),
        "nv24" | "nv42" => (Chroma::Yuv444, 8),
        "p410" | "y410" => (Chroma::Yuv444, 10),
        "p416" => (Chroma::Yuv444, 16),
        _ => {
            if let Some(bits) = name.strip_prefix("gray") {
                return sampled(Chroma::Gray, depth(bits, 8)?, false);
            }
            if let Some(rest) = name.strip_prefix("gbr") {
                let (alpha, bits) = match rest.strip_prefix("ap") {
                    Some(b) => (true, b),
                    None => (false, rest.strip_prefix('p')?),
                };
                return sampled(Chroma::Rgb, depth(bits, 8)?, alpha);
            }
            return match name {
                "rgb24" | "bgr24" | "0rgb" | "rgb0" | "0bgr" | "bgr0" => {
                    sampled(Chroma::Rgb, 8, false)
                }
                "rgba" | "bgra" | "argb" | "abgr" => sampled(Chroma::Rgb, 8, true),
                _ => None,
            };
        }
    };
    sampled(chroma, bits, false)
}

/// What one video stream needs: its decode capability and the scaling of its frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needs {
    pub index: u32,
    /// `HEVC Main 10, 10-bit 4:2:0`.
    pub description: String,
    pub decode: Capability,
    pub scale: Capability,
}

/// Why a file cannot be mapped to capabilities. Each says what the stream is; the caller names
/// the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unplayable {
    #[error("it has no video stream to play ({found})")]
    NoVideo {
        /// `streams: audio (aac)`, or `no streams`.
        found: String,
    },
    #[error(
        "stream {index} is {codec}, and no GPU states decoding it: the catalogue has no \
         attribute for it (hint: the decodable codecs are {known})"
    )]
    UnknownCodec {
        index: u32,
        codec: String,
        known: String,
    },
    #[error(
        "stream {index} is {codec} {profile}{sampling}, and no GPU states decoding it: the \
         catalogue has no attribute for that profile (hint: {codec} profiles with an attribute: \
         {known})"
    )]
    UnknownProfile {
        index: u32,
        codec: &'static str,
        profile: String,
        /// ` in 10-bit 4:2:2 (yuv422p10le)`, when ffprobe names a pixel format.
        sampling: String,
        known: String,
    },
    #[error(
        "stream {index} is {codec} but ffprobe names no profile, so no attribute can be chosen \
         (hint: is the file complete? ffprobe -show_streams shows what it reads)"
    )]
    NoProfile { index: u32, codec: &'static str },
    #[error(
        "stream {index} is {what} but ffprobe names no pixel format, so its bit depth and chroma \
         are unknown (hint: is the file complete? ffprobe -show_streams shows what it reads)"
    )]
    NoPixelFormat { index: u32, what: String },
    #[error(
        "stream {index} is {what} in pixel format {pix_fmt}, which no attribute covers, so no GPU \
         states it (hint: the catalogue covers 8- and 10-bit 4:2:0)"
    )]
    UnknownPixelFormat {
        index: u32,
        what: String,
        pix_fmt: String,
    },
    #[error(
        "stream {index} is {what} in {sampling} ({pix_fmt}), and no GPU states decoding that: the \
         catalogue's attributes cover {covered} only"
    )]
    Uncovered {
        index: u32,
        what: String,
        sampling: String,
        pix_fmt: String,
        covered: &'static str,
    },
}

/// What every video stream of a probed file needs, in stream order; attached pictures are
/// passed over. The first stream no attribute covers refuses the whole file.
pub fn needs(probe: &Probe) -> Result<Vec<Needs>, Unplayable> {
    let video: Vec<&Stream> = probe
        .streams
        .iter()
        .filter(|s| s.codec_type.as_deref() == Some("video") && s.disposition.attached_pic == 0)
        .collect();
    if video.is_empty() {
        return Err(Unplayable::NoVideo {
            found: found(probe),
        });
    }
    video.into_iter().map(stream_needs).collect()
}

/// The streams [`found`] names; the rest are counted, so a file of 500 streams is one line.
const NAMED_STREAMS: usize = 4;

/// `streams: audio (aac), video (mjpeg, attached picture)`, or `no streams`.
fn found(probe: &Probe) -> String {
    if probe.streams.is_empty() {
        return "ffprobe finds no streams".into();
    }
    let mut each: Vec<String> = probe
        .streams
        .iter()
        .take(NAMED_STREAMS)
        .map(|s| {
            let kind = s.codec_type.as_deref().unwrap_or("unknown");
            let mut parts: Vec<&str> = s.codec_name.as_deref().into_iter().collect();
            if s.disposition.attached_pic != 0 {
                parts.push("attached picture");
            }
            // ffprobe's words, not ours: a hostile one's are cut.
            let shown = if parts.is_empty() {
                kind.to_string()
            } else {
                format!("{kind} ({})", parts.join(", "))
            };
            crate::text::one_line(&shown, 80)
        })
        .collect();
    if probe.streams.len() > NAMED_STREAMS {
        each.push(format!("{} more", probe.streams.len() - NAMED_STREAMS));
    }
    format!("streams: {}", each.join(", "))
}

fn stream_needs(stream: &Stream) -> Result<Needs, Unplayable> {
    let index = stream.index;
    let codec_name = stream.codec_name.as_deref().unwrap_or("an unknown codec");
    let rows: Vec<&ProfileRow> = PROFILES
        .iter()
        .filter(|r| r.codec_name == codec_name)
        .collect();
    let Some(&first) = rows.first() else {
        return Err(Unplayable::UnknownCodec {
            index,
            codec: codec_name.to_string(),
            known: known_codecs(),
        });
    };
    let codec = first.codec;
    let profile = stream.profile.as_deref().map(str::trim);
    let rows: Vec<&ProfileRow> = match profile {
        _ if first.profiles.is_empty() => rows,
        None | Some("") | Some("unknown") => {
            return Err(Unplayable::NoProfile { index, codec });
        }
        Some(profile) => {
            let matching: Vec<&ProfileRow> = rows
                .iter()
                .copied()
                .filter(|r| r.profiles.contains(&profile))
                .collect();
            if matching.is_empty() {
                let mut known: Vec<&str> = rows
                    .iter()
                    .flat_map(|r| r.profiles.iter())
                    .copied()
                    .collect();
                known.dedup();
                return Err(Unplayable::UnknownProfile {
                    index,
                    codec,
                    profile: profile.to_string(),
                    sampling: stream
                        .pix_fmt
                        .as_deref()
                        .and_then(|name| Some((name, pixel_format(name)?)))
                        .map(|(name, f)| format!(" in {} ({name})", sampling(f)))
                        .unwrap_or_default(),
                    known: known.join(", "),
                });
            }
            matching
        }
    };
    let what = match profile {
        Some(p) if !first.profiles.is_empty() => format!("{codec} {p}"),
        _ => codec.to_string(),
    };
    let Some(pix_fmt) = stream.pix_fmt.as_deref().filter(|p| !p.is_empty()) else {
        return Err(Unplayable::NoPixelFormat { index, what });
    };
    let Some(format) = pixel_format(pix_fmt) else {
        return Err(Unplayable::UnknownPixelFormat {
            index,
            what,
            pix_fmt: pix_fmt.to_string(),
        });
    };
    let sampling = sampling(format);
    let uncovered = |covered: &'static str| Unplayable::Uncovered {
        index,
        what: what.clone(),
        sampling: sampling.clone(),
        pix_fmt: pix_fmt.to_string(),
        covered,
    };
    if format.chroma != Chroma::Yuv420 || format.alpha {
        return Err(uncovered("4:2:0 without alpha"));
    }
    // The shallowest row deep enough: AV1 Main is decodeAV1Main at 8 bits, decodeAV1Main10 at 10.
    let Some(row) = rows
        .iter()
        .filter(|r| r.max_bits >= format.bits)
        .min_by_key(|r| r.max_bits)
    else {
        let deepest = rows.iter().map(|r| r.max_bits).max().unwrap_or(8);
        return Err(uncovered(if deepest >= 10 {
            "8- and 10-bit"
        } else {
            "8-bit"
        }));
    };
    let Some(&(_, scale)) = SCALES.iter().find(|(bits, _)| *bits >= format.bits) else {
        return Err(uncovered("8- and 10-bit"));
    };
    Ok(Needs {
        index,
        description: format!("{what}, {sampling}"),
        decode: row.decode,
        scale,
    })
}

/// `10-bit 4:2:0`, `8-bit 4:2:0 with alpha`.
fn sampling(format: PixelFormat) -> String {
    format!(
        "{}-bit {}{}",
        format.bits,
        format.chroma,
        if format.alpha { " with alpha" } else { "" }
    )
}

/// `AV1 (av1), H.264 (h264), ...`: the codecs of [`PROFILES`], as ffprobe names them.
fn known_codecs() -> String {
    let mut known: Vec<String> = Vec::new();
    for row in PROFILES {
        let entry = format!("{} ({})", row.codec, row.codec_name);
        if !known.contains(&entry) {
            known.push(entry);
        }
    }
    known.join(", ")
}

#[cfg(test)]
mod tests;
