//! The rules of libva-facts §2 applied to reports built from real vainfo captures.

use crate::support::vainfo::report_from_vainfo;
use media_operator::catalogue::Capability::{self, *};
use media_operator::node::va::report::{
    Entrypoint, Fourcc, Profile, Report, RtFormat, SurfaceFormats,
};
use media_operator::node::va::rules::capabilities;

fn true_ones(report: &Report) -> Vec<Capability> {
    capabilities(report)
        .into_iter()
        .filter_map(|(c, v)| v.then_some(c))
        .collect()
}

/// What vainfo does not print, supplied explicitly so the encode and scale rules run on the real
/// profile lists: every queried RT format as "not stated" (0x80000000, the rule's permissive
/// path), and, when the driver lists VideoProc, the given surface formats for its config.
fn supplement(mut report: Report, video_proc: &[Fourcc]) -> Report {
    for config in &mut report.configs {
        let encoder = matches!(
            config.entrypoint,
            Entrypoint::ENC_SLICE | Entrypoint::ENC_SLICE_LP
        );
        if encoder
            || (config.profile, config.entrypoint) == (Profile::AV1_PROFILE0, Entrypoint::VLD)
        {
            config.rt_format = Some(RtFormat::NotStated);
        }
    }
    if report
        .config(Profile::NONE, Entrypoint::VIDEO_PROC)
        .is_some()
    {
        report.video_proc = Some(SurfaceFormats {
            profile: Profile::NONE,
            entrypoint: Entrypoint::VIDEO_PROC,
            formats: video_proc.to_vec(),
            error: None,
        });
    }
    report
}

#[test]
fn the_captures_convert_completely() {
    let tgl = report_from_vainfo("intel-tgl-ihd-22.3.1.txt");
    assert_eq!(
        tgl.vendor.as_deref(),
        Some("Intel iHD driver for Intel(R) Gen Graphics - 22.3.1 ()")
    );
    assert_eq!(tgl.va_api_version.as_deref(), Some("1.14"));
    // 55 profile/entrypoint lines in the capture.
    assert_eq!(tgl.configs.len(), 55);
    assert_eq!(tgl.messages.len(), 4);
    assert_eq!(
        tgl.said()[1],
        "libva info: Trying to open /usr/lib/x86_64-linux-gnu/dri/iHD_drv_video.so"
    );
    assert_eq!(
        report_from_vainfo("amd-rdna3-navi31-radeonsi.txt")
            .configs
            .len(),
        15
    );
    assert_eq!(
        report_from_vainfo("nvidia-nvdec-direct.txt").configs.len(),
        19
    );
}

#[test]
fn intel_tiger_lake_ihd() {
    let report = report_from_vainfo("intel-tgl-ihd-22.3.1.txt");
    // As captured: no RT formats and no surface formats, so only the decoders are stated.
    assert_eq!(
        true_ones(&report),
        [
            DecodeAV1Main,
            DecodeH264,
            DecodeHEVCMain,
            DecodeHEVCMain10,
            DecodeMPEG2,
            DecodeVC1,
            DecodeVP8,
            DecodeVP9,
            DecodeVP9Profile2
        ]
    );
    // iHD's VPP surface list is static and has P010 (libva-facts §2).
    let full = supplement(report, &[Fourcc::NV12, Fourcc::P010]);
    assert_eq!(
        true_ones(&full),
        [
            DecodeAV1Main,
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
            Scale10bit
        ]
    );
}

#[test]
fn amd_navi31_radeonsi() {
    let report = report_from_vainfo("amd-rdna3-navi31-radeonsi.txt");
    let decoders = [
        DecodeAV1Main,
        DecodeH264,
        DecodeHEVCMain,
        DecodeHEVCMain10,
        DecodeVP9,
        DecodeVP9Profile2,
    ];
    // No MPEG-2, VC-1 or VP8 on this Mesa build.
    assert_eq!(true_ones(&report), decoders);
    // Mesa never lists EncSliceLP; its shader VideoProc given NV12 only here.
    let full = supplement(report, &[Fourcc::NV12]);
    let mut expected = decoders.to_vec();
    expected.extend([EncodeH264, EncodeHEVCMain, EncodeHEVCMain10, Scale8bit]);
    assert_eq!(true_ones(&full), expected);
}

#[test]
fn nvidia_nvdec_decodes_only() {
    let report = report_from_vainfo("nvidia-nvdec-direct.txt");
    let decoders = [
        DecodeAV1Main,
        DecodeH264,
        DecodeHEVCMain,
        DecodeHEVCMain10,
        DecodeMPEG2,
        DecodeVC1,
        DecodeVP8,
        DecodeVP9,
        DecodeVP9Profile2,
    ];
    assert_eq!(true_ones(&report), decoders);
    // No encoders and no VideoProc: nothing to add.
    assert_eq!(true_ones(&supplement(report, &[Fourcc::NV12])), decoders);
}

#[test]
fn an_empty_driver_states_nothing() {
    let report = Report {
        vendor: Some(String::new()),
        va_api_version: Some("1.22".into()),
        ..Report::default()
    };
    assert!(true_ones(&report).is_empty());
    assert_eq!(capabilities(&report).len(), 18);
}
