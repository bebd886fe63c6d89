//! The rules of docs/capabilities.md: a driver's report in, the catalogue's capability values out.
//!
//! This is the only place those rules are applied. It is one pure function over a `Report`, so the
//! agent, `media-capabilities probe` and `probe --from FILE` (a report sent from another node) all
//! publish the same values for the same statements. The `match` over `Capability` is exhaustive
//! on purpose: adding a capability to the catalogue does not compile until its rule is written
//! here.

use super::report::{Entrypoint, Fourcc, Profile, Report, RtFormat, SurfaceFormats};
use crate::catalogue::Capability;
use std::collections::BTreeMap;

/// The value of every capability in the catalogue for what `report` states.
///
/// A report whose query failed (`error` set) states nothing we can rely on, so every value is
/// false. A rule that needs an RT format the report does not hold (not queried) is not met: we
/// publish only what the driver stated.
pub fn capabilities(report: &Report) -> BTreeMap<Capability, bool> {
    Capability::ALL
        .into_iter()
        .map(|c| (c, report.error.is_none() && holds(report, c)))
        .collect()
}

fn holds(r: &Report, capability: Capability) -> bool {
    use Capability::*;
    let (vld, enc, lp) = (
        Entrypoint::VLD,
        Entrypoint::ENC_SLICE,
        Entrypoint::ENC_SLICE_LP,
    );
    match capability {
        DecodeAV1Main => lists(r, Profile::AV1_PROFILE0, vld),
        DecodeAV1Main10 => {
            lists(r, Profile::AV1_PROFILE0, vld)
                && match rt_format(r, Profile::AV1_PROFILE0, vld) {
                    Some(RtFormat::Formats(bits)) => bits & RtFormat::YUV420_10 != 0,
                    Some(RtFormat::NotStated) => has_format(r.av1_surfaces.as_ref(), Fourcc::P010),
                    None => false,
                }
        }
        DecodeH264 => lists(r, Profile::H264_HIGH, vld),
        DecodeHEVCMain => lists(r, Profile::HEVC_MAIN, vld),
        DecodeHEVCMain10 => lists(r, Profile::HEVC_MAIN10, vld),
        DecodeMPEG2 => lists(r, Profile::MPEG2_MAIN, vld),
        DecodeVC1 => lists(r, Profile::VC1_ADVANCED, vld),
        DecodeVP8 => lists(r, Profile::VP8_VERSION0_3, vld),
        DecodeVP9 => lists(r, Profile::VP9_PROFILE0, vld),
        DecodeVP9Profile2 => lists(r, Profile::VP9_PROFILE2, vld),
        EncodeH264 => encodes_h264(r, enc),
        EncodeH264LowPower => encodes_h264(r, lp),
        EncodeHEVCMain => encodes(r, Profile::HEVC_MAIN, enc, RtFormat::YUV420),
        EncodeHEVCMainLowPower => encodes(r, Profile::HEVC_MAIN, lp, RtFormat::YUV420),
        EncodeHEVCMain10 => encodes(r, Profile::HEVC_MAIN10, enc, RtFormat::YUV420_10),
        EncodeHEVCMain10LowPower => encodes(r, Profile::HEVC_MAIN10, lp, RtFormat::YUV420_10),
        Scale8bit => scales(r, Fourcc::NV12),
        Scale10bit => scales(r, Fourcc::P010),
    }
}

/// The profiles FFmpeg will encode H.264 with, in its order of preference.
const H264_ENCODE_PROFILES: [Profile; 3] = [
    Profile::H264_HIGH,
    Profile::H264_MAIN,
    Profile::H264_CONSTRAINED_BASELINE,
];

fn lists(r: &Report, profile: Profile, entrypoint: Entrypoint) -> bool {
    r.config(profile, entrypoint).is_some()
}

fn rt_format(r: &Report, profile: Profile, entrypoint: Entrypoint) -> Option<RtFormat> {
    r.config(profile, entrypoint).and_then(|c| c.rt_format)
}

fn encodes_h264(r: &Report, entrypoint: Entrypoint) -> bool {
    H264_ENCODE_PROFILES
        .into_iter()
        .any(|p| encodes(r, p, entrypoint, RtFormat::YUV420))
}

/// The encoder is listed and its RT formats are not stated or include `needed`.
fn encodes(r: &Report, profile: Profile, entrypoint: Entrypoint, needed: u32) -> bool {
    match rt_format(r, profile, entrypoint) {
        Some(RtFormat::NotStated) => true,
        Some(RtFormat::Formats(bits)) => bits & needed != 0,
        // Either not listed, or listed without the RT format we need to judge it.
        None => false,
    }
}

fn scales(r: &Report, format: Fourcc) -> bool {
    lists(r, Profile::NONE, Entrypoint::VIDEO_PROC) && has_format(r.video_proc.as_ref(), format)
}

/// The config was created and queried (no error) and lists `format`.
fn has_format(surfaces: Option<&SurfaceFormats>, format: Fourcc) -> bool {
    surfaces.is_some_and(|s| s.error.is_none() && s.formats.contains(&format))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::va::report::Config;
    use Capability::*;

    fn config(profile: Profile, entrypoint: Entrypoint, rt: Option<RtFormat>) -> Config {
        Config {
            profile,
            entrypoint,
            rt_format: rt,
        }
    }

    fn surfaces(profile: Profile, entrypoint: Entrypoint, formats: &[Fourcc]) -> SurfaceFormats {
        SurfaceFormats {
            profile,
            entrypoint,
            formats: formats.to_vec(),
            error: None,
        }
    }

    fn true_ones(report: &Report) -> Vec<Capability> {
        capabilities(report)
            .into_iter()
            .filter_map(|(c, v)| v.then_some(c))
            .collect()
    }

    #[test]
    fn every_capability_gets_a_value() {
        assert_eq!(
            capabilities(&Report::default()).len(),
            Capability::ALL.len()
        );
        assert!(true_ones(&Report::default()).is_empty());
    }

    #[test]
    fn av1_10bit_comes_from_the_rt_format() {
        let with = |rt| Report {
            configs: vec![config(Profile::AV1_PROFILE0, Entrypoint::VLD, rt)],
            ..Report::default()
        };
        let yuv420_and_10 = RtFormat::Formats(RtFormat::YUV420 | RtFormat::YUV420_10);
        assert_eq!(
            true_ones(&with(Some(yuv420_and_10))),
            [DecodeAV1Main, DecodeAV1Main10]
        );
        assert_eq!(
            true_ones(&with(Some(RtFormat::Formats(RtFormat::YUV420)))),
            [DecodeAV1Main]
        );
        // Not queried: the 10-bit statement was never made.
        assert_eq!(true_ones(&with(None)), [DecodeAV1Main]);
    }

    #[test]
    fn av1_10bit_falls_back_to_surface_formats_only_when_rt_format_is_not_stated() {
        let mut report = Report {
            configs: vec![config(
                Profile::AV1_PROFILE0,
                Entrypoint::VLD,
                Some(RtFormat::NotStated),
            )],
            av1_surfaces: Some(surfaces(
                Profile::AV1_PROFILE0,
                Entrypoint::VLD,
                &[Fourcc::NV12, Fourcc::P010],
            )),
            ..Report::default()
        };
        assert_eq!(true_ones(&report), [DecodeAV1Main, DecodeAV1Main10]);
        report.av1_surfaces = Some(surfaces(
            Profile::AV1_PROFILE0,
            Entrypoint::VLD,
            &[Fourcc::NV12],
        ));
        assert_eq!(true_ones(&report), [DecodeAV1Main]);
        // A stated RT format without 10-bit wins over surfaces that list P010.
        report.configs[0].rt_format = Some(RtFormat::Formats(RtFormat::YUV420));
        report.av1_surfaces = Some(surfaces(
            Profile::AV1_PROFILE0,
            Entrypoint::VLD,
            &[Fourcc::P010],
        ));
        assert_eq!(true_ones(&report), [DecodeAV1Main]);
    }

    #[test]
    fn encoders_count_when_rt_format_is_not_stated_or_fits() {
        let report = |rt| Report {
            configs: vec![
                config(Profile::HEVC_MAIN, Entrypoint::ENC_SLICE, rt),
                config(Profile::HEVC_MAIN10, Entrypoint::ENC_SLICE, rt),
            ],
            ..Report::default()
        };
        assert_eq!(
            true_ones(&report(Some(RtFormat::NotStated))),
            [EncodeHEVCMain, EncodeHEVCMain10]
        );
        assert_eq!(
            true_ones(&report(Some(RtFormat::Formats(RtFormat::YUV420)))),
            [EncodeHEVCMain]
        );
        assert_eq!(
            true_ones(&report(Some(RtFormat::Formats(RtFormat::YUV420_10)))),
            [EncodeHEVCMain10]
        );
        // "None" is a statement, and it says no.
        assert!(true_ones(&report(Some(RtFormat::Formats(0)))).is_empty());
        assert!(true_ones(&report(None)).is_empty());
    }

    #[test]
    fn encoders_only_on_enc_slice_lp_are_low_power_only() {
        let report = Report {
            configs: vec![
                config(
                    Profile::H264_MAIN,
                    Entrypoint::ENC_SLICE_LP,
                    Some(RtFormat::Formats(RtFormat::YUV420)),
                ),
                config(
                    Profile::HEVC_MAIN,
                    Entrypoint::ENC_SLICE_LP,
                    Some(RtFormat::NotStated),
                ),
                config(
                    Profile::HEVC_MAIN10,
                    Entrypoint::ENC_SLICE_LP,
                    Some(RtFormat::Formats(RtFormat::YUV420 | RtFormat::YUV420_10)),
                ),
            ],
            ..Report::default()
        };
        assert_eq!(
            true_ones(&report),
            [
                EncodeH264LowPower,
                EncodeHEVCMain10LowPower,
                EncodeHEVCMainLowPower
            ]
        );
    }

    #[test]
    fn h264_encode_accepts_any_of_ffmpegs_profiles_but_not_others() {
        for profile in H264_ENCODE_PROFILES {
            let report = Report {
                configs: vec![config(
                    profile,
                    Entrypoint::ENC_SLICE,
                    Some(RtFormat::Formats(RtFormat::YUV420)),
                )],
                ..Report::default()
            };
            assert_eq!(true_ones(&report), [EncodeH264], "{profile}");
        }
        let baseline = Report {
            configs: vec![config(
                Profile(5),
                Entrypoint::ENC_SLICE,
                Some(RtFormat::NotStated),
            )],
            ..Report::default()
        };
        assert!(true_ones(&baseline).is_empty());
    }

    #[test]
    fn scaling_needs_the_video_proc_config_and_its_formats() {
        let mut report = Report {
            configs: vec![config(Profile::NONE, Entrypoint::VIDEO_PROC, None)],
            video_proc: Some(surfaces(
                Profile::NONE,
                Entrypoint::VIDEO_PROC,
                &[Fourcc::NV12, Fourcc(0x3432_5241)],
            )),
            ..Report::default()
        };
        // Mesa's shader VideoProc: listed, NV12 only.
        assert_eq!(true_ones(&report), [Scale8bit]);
        report
            .video_proc
            .as_mut()
            .unwrap()
            .formats
            .push(Fourcc::P010);
        assert_eq!(true_ones(&report), [Scale8bit, Scale10bit]);
        // vaCreateConfig failed: the formats were never listed for a working config.
        report.video_proc.as_mut().unwrap().error =
            Some("vaCreateConfig: operation failed (0x1)".into());
        assert!(true_ones(&report).is_empty());
    }

    #[test]
    fn profiles_the_catalogue_does_not_know_change_nothing() {
        let report = Report {
            configs: vec![
                config(Profile(77), Entrypoint::VLD, None),
                config(Profile(36), Entrypoint::VLD, None),
                config(Profile::HEVC_MAIN, Entrypoint(42), None),
            ],
            ..Report::default()
        };
        assert!(true_ones(&report).is_empty());
    }

    #[test]
    fn a_failed_query_states_nothing() {
        let report = Report {
            configs: vec![config(Profile::H264_HIGH, Entrypoint::VLD, None)],
            error: Some("vaInitialize failed: unknown libva error (-1)".into()),
            ..Report::default()
        };
        assert!(true_ones(&report).is_empty());
    }
}
