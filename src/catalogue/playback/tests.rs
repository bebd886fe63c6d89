//! The mapping read from ffprobe JSON captured from real runs of Debian 12's ffprobe 5.1 on
//! files its ffmpeg made (tests/fixtures/ffprobe/). VC-1 has no encoder in FFmpeg, so its
//! capture is composed: the MPEG-TS capture with the fields ffprobe writes for a VC-1 Advanced
//! stream (codec descriptor `vc1`, libavcodec/profiles.c `Advanced`); the file says so in its name.

use super::*;
use Capability::*;

fn fixture(name: &str) -> Probe {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ffprobe")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn one(name: &str) -> Needs {
    let needs = needs(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(needs.len(), 1, "{name}");
    needs.into_iter().next().unwrap()
}

#[test]
fn captured_streams_map_to_their_decode_and_scale_capabilities() {
    let cases = [
        (
            "h264-high.json",
            DecodeH264,
            Scale8bit,
            "H.264 High, 8-bit 4:2:0",
        ),
        (
            "hevc-main10.json",
            DecodeHEVCMain10,
            Scale10bit,
            "HEVC Main 10, 10-bit 4:2:0",
        ),
        ("vp8.json", DecodeVP8, Scale8bit, "VP8, 8-bit 4:2:0"),
        (
            "vp9-profile2.json",
            DecodeVP9Profile2,
            Scale10bit,
            "VP9 Profile 2, 10-bit 4:2:0",
        ),
        (
            "av1-main-8bit.json",
            DecodeAV1Main,
            Scale8bit,
            "AV1 Main, 8-bit 4:2:0",
        ),
        (
            "av1-main-10bit.json",
            DecodeAV1Main10,
            Scale10bit,
            "AV1 Main, 10-bit 4:2:0",
        ),
        (
            "mpeg2-main.json",
            DecodeMPEG2,
            Scale8bit,
            "MPEG-2 Main, 8-bit 4:2:0",
        ),
        (
            "vc1-advanced.composed.json",
            DecodeVC1,
            Scale8bit,
            "VC-1 Advanced, 8-bit 4:2:0",
        ),
    ];
    for (file, decode, scale, description) in cases {
        let needs = one(file);
        assert_eq!((needs.decode, needs.scale), (decode, scale), "{file}");
        assert_eq!(needs.description, description, "{file}");
    }
}

#[test]
fn chroma_other_than_4_2_0_is_refused_with_what_it_is() {
    let err = needs(&fixture("h264-444.json")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stream 0 is H.264 High 4:4:4 Predictive in 8-bit 4:4:4 (yuv444p), and no GPU states \
         decoding it: the catalogue has no attribute for that profile (hint: H.264 profiles with \
         an attribute: Constrained Baseline, Main, High)"
    );
    let err = needs(&fixture("h264-422.json")).unwrap_err();
    assert!(err.to_string().contains("High 4:2:2"), "{err}");
    // A profile the catalogue has, with samples it does not cover: the pixel format decides.
    let mut probe = fixture("hevc-main10.json");
    probe.streams[0].pix_fmt = Some("yuv422p10le".into());
    assert_eq!(
        needs(&probe).unwrap_err().to_string(),
        "stream 0 is HEVC Main 10 in 10-bit 4:2:2 (yuv422p10le), and no GPU states decoding \
         that: the catalogue's attributes cover 4:2:0 without alpha only"
    );
    probe.streams[0].pix_fmt = Some("yuv420p12le".into());
    assert_eq!(
        needs(&probe).unwrap_err().to_string(),
        "stream 0 is HEVC Main 10 in 12-bit 4:2:0 (yuv420p12le), and no GPU states decoding \
         that: the catalogue's attributes cover 8- and 10-bit only"
    );
    // 10-bit samples under an 8-bit-only profile (a mislabelled stream) are not guessed at.
    let mut probe = fixture("h264-high.json");
    probe.streams[0].pix_fmt = Some("yuv420p10le".into());
    assert!(matches!(
        needs(&probe).unwrap_err(),
        Unplayable::Uncovered {
            covered: "8-bit",
            ..
        }
    ));
    let mut probe = fixture("vp8.json");
    probe.streams[0].pix_fmt = Some("yuva420p".into());
    assert!(
        needs(&probe)
            .unwrap_err()
            .to_string()
            .contains("8-bit 4:2:0 with alpha (yuva420p)")
    );
}

#[test]
fn files_without_a_video_stream_to_play_are_refused() {
    assert_eq!(
        needs(&fixture("audio-only.json")).unwrap_err().to_string(),
        "it has no video stream to play (streams: audio (aac))"
    );
    // Cover art is a one-frame video stream flagged attached_pic: not video to play.
    assert_eq!(
        needs(&fixture("cover-art.json")).unwrap_err().to_string(),
        "it has no video stream to play (streams: audio (aac), video (mjpeg, attached picture))"
    );
    assert_eq!(
        needs(&Probe::default()).unwrap_err().to_string(),
        "it has no video stream to play (ffprobe finds no streams)"
    );
}

#[test]
fn codecs_profiles_and_formats_outside_the_catalogue_are_never_guessed() {
    let mut probe = fixture("h264-high.json");
    probe.streams[0].codec_name = Some("prores".into());
    let err = needs(&probe).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stream 0 is prores, and no GPU states decoding it: the catalogue has no attribute for \
         it (hint: the decodable codecs are AV1 (av1), H.264 (h264), HEVC (hevc), MPEG-2 \
         (mpeg2video), VC-1 (vc1), VP8 (vp8), VP9 (vp9))"
    );
    let mut probe = fixture("h264-high.json");
    for (profile, refused) in [
        ("Baseline", true),
        ("Extended", true),
        ("High 10", true),
        ("Constrained Baseline", false),
        ("Main", false),
    ] {
        probe.streams[0].profile = Some(profile.into());
        assert_eq!(needs(&probe).is_err(), refused, "{profile}");
    }
    probe.streams[0].profile = None;
    assert_eq!(
        needs(&probe).unwrap_err(),
        Unplayable::NoProfile {
            index: 0,
            codec: "H.264"
        }
    );
    // VP8's versions are one VA profile: any profile string will do.
    let mut probe = fixture("vp8.json");
    probe.streams[0].profile = Some("3".into());
    assert_eq!(needs(&probe).unwrap()[0].decode, DecodeVP8);
    let mut probe = fixture("hevc-main10.json");
    probe.streams[0].pix_fmt = None;
    assert!(matches!(
        needs(&probe).unwrap_err(),
        Unplayable::NoPixelFormat { .. }
    ));
    probe.streams[0].pix_fmt = Some("xyz12".into());
    assert!(matches!(
        needs(&probe).unwrap_err(),
        Unplayable::UnknownPixelFormat { .. }
    ));
    // HEVC Main 10 holding 8-bit samples: the profile decides the decoder, the samples the scaler.
    probe.streams[0].pix_fmt = Some("yuv420p".into());
    let needs = needs(&probe).unwrap();
    assert_eq!(
        (needs[0].decode, needs[0].scale),
        (DecodeHEVCMain10, Scale8bit)
    );
}

#[test]
fn every_video_stream_counts_and_the_first_refused_one_refuses_the_file() {
    let mut probe = fixture("h264-high.json");
    let mut second = fixture("vp9-profile2.json").streams.remove(0);
    second.index = 1;
    probe.streams.push(second.clone());
    let needs_both = needs(&probe).unwrap();
    assert_eq!(
        needs_both
            .iter()
            .map(|n| (n.index, n.decode))
            .collect::<Vec<_>>(),
        [(0, DecodeH264), (1, DecodeVP9Profile2)]
    );
    second.index = 2;
    second.profile = Some("Profile 1".into());
    probe.streams.push(second);
    assert!(
        needs(&probe)
            .unwrap_err()
            .to_string()
            .starts_with("stream 2 is VP9 Profile 1 in 10-bit 4:2:0 (yuv420p10le), and no GPU")
    );
}

#[test]
fn pixel_formats_read_as_ffmpeg_names_them() {
    let format = |chroma, bits, alpha| {
        Some(PixelFormat {
            chroma,
            bits,
            alpha,
        })
    };
    let cases = [
        ("yuv420p", format(Chroma::Yuv420, 8, false)),
        ("yuvj420p", format(Chroma::Yuv420, 8, false)),
        ("yuv420p10le", format(Chroma::Yuv420, 10, false)),
        ("yuv420p10be", format(Chroma::Yuv420, 10, false)),
        ("yuv420p12le", format(Chroma::Yuv420, 12, false)),
        ("yuva420p", format(Chroma::Yuv420, 8, true)),
        ("nv12", format(Chroma::Yuv420, 8, false)),
        ("p010le", format(Chroma::Yuv420, 10, false)),
        ("yuv422p", format(Chroma::Yuv422, 8, false)),
        ("yuv444p10le", format(Chroma::Yuv444, 10, false)),
        ("gray", format(Chroma::Gray, 8, false)),
        ("gray10le", format(Chroma::Gray, 10, false)),
        ("gbrp", format(Chroma::Rgb, 8, false)),
        ("gbrap12le", format(Chroma::Rgb, 12, true)),
        ("y210le", format(Chroma::Yuv422, 10, false)),
        ("rgb24", format(Chroma::Rgb, 8, false)),
        ("yuv420p99", None),
        ("yuv423p", None),
        ("pal8", None),
        ("", None),
    ];
    for (name, expected) in cases {
        assert_eq!(pixel_format(name), expected, "{name}");
    }
}

#[test]
fn the_table_covers_every_decode_capability_once_per_depth() {
    for capability in super::super::Group::Decode.capabilities() {
        assert!(
            PROFILES.iter().any(|r| r.decode == capability),
            "{capability} has no row"
        );
    }
    for (bits, scale) in SCALES {
        assert_eq!(scale.group(), super::super::Group::Scale);
        assert!(scale.attribute().contains(&bits.to_string()));
    }
}

#[test]
fn a_file_of_many_streams_without_video_is_one_short_line() {
    let audio = |i: u32| Stream {
        index: i,
        codec_type: Some("audio".into()),
        codec_name: Some(if i == 1 {
            "x".repeat(5000)
        } else {
            "aac".into()
        }),
        ..Stream::default()
    };
    let probe = Probe {
        streams: (0..500).map(audio).collect(),
    };
    let said = needs(&probe).unwrap_err().to_string();
    assert!(said.len() < 300, "{said}");
    assert!(
        said.starts_with("it has no video stream to play (streams: audio (aac), audio (xxx")
            && said.ends_with(", audio (aac), audio (aac), 496 more)"),
        "{said}"
    );
}
