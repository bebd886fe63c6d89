//! The probe of one render node, call by call (the order vainfo of intel/libva-utils makes them),
//! in safe code.
//!
//! It runs in a short-lived child process (see `agent::isolate`): a driver that crashes, aborts or
//! hangs takes only that child with it. Everything the driver states goes into a `Report`
//! unchanged; a call that fails is recorded, never guessed around.

use super::ffi::{
    Display, Initialised, Libva, LibvaPaths, Opened, STATUS_UNSUPPORTED_PROFILE, VaError,
};
use super::report::{Config, Entrypoint, Fourcc, Profile, Report, RtFormat, SurfaceFormats};
use std::path::Path;

/// How to probe: where libva is and which VA driver to force, if any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeOptions {
    pub libva: LibvaPaths,
    /// A VA driver name for `vaSetDriverName` (the per-GPU override); `None` lets libva choose
    /// from the node's kernel driver.
    pub driver: Option<String>,
    /// Write each libva message to stderr as it arrives (the child does, so its parent still
    /// hears them when the driver crashes the child).
    pub echo_messages: bool,
}

/// Probes `node`. Never fails as a function: whatever went wrong is the report's `error`.
pub fn probe(node: &Path, options: &ProbeOptions) -> Report {
    let mut report = Report {
        driver_override: options.driver.clone(),
        ..Report::default()
    };
    let libva = match Libva::load(&options.libva) {
        Ok(libva) => libva,
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    let display = match libva.open_display(node, options.driver.as_deref(), options.echo_messages) {
        Ok(display) => display,
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    query(display, &mut report);
    report
}

/// Steps 4–9 on an open display; terminates it on every path.
fn query(display: Display<'_, Opened>, report: &mut Report) {
    let (display, (major, minor)) = match display.initialize() {
        Ok(initialised) => initialised,
        Err(failed) => {
            report.error = Some(failed.error.to_string());
            report.messages = failed.messages;
            return;
        }
    };
    report.va_api_version = Some(format!("{major}.{minor}"));
    if let Err(e) = statements(&display, report) {
        report.error = Some(e.to_string());
    }
    report.messages = display.terminate();
}

/// Steps 5–8: what the initialised driver states.
fn statements(display: &Display<'_, Initialised>, report: &mut Report) -> Result<(), VaError> {
    report.vendor = display.vendor();
    for profile in display.profiles()? {
        let entrypoints = match display.entrypoints(profile) {
            Ok(list) => list,
            // Listed, then "not supported" (some drivers list profiles they refuse): skip, but keep
            // the record.
            Err(e) if e.status == STATUS_UNSUPPORTED_PROFILE => {
                report.warnings.push(format!("{}: {e}", Profile(profile)));
                continue;
            }
            Err(e) => return Err(e),
        };
        for entrypoint in entrypoints {
            let (p, e) = (Profile(profile), Entrypoint(entrypoint));
            let rt_format = needs_rt_format(p, e)
                .then(|| match display.rt_format(profile, entrypoint) {
                    Ok(raw) => Some(RtFormat::from_raw(raw)),
                    Err(err) => {
                        report.warnings.push(format!("{p}/{e}: {err}"));
                        None
                    }
                })
                .flatten();
            report.configs.push(Config {
                profile: p,
                entrypoint: e,
                rt_format,
            });
        }
    }
    if report
        .config(Profile::NONE, Entrypoint::VIDEO_PROC)
        .is_some()
    {
        report.video_proc = Some(surfaces(display, Profile::NONE, Entrypoint::VIDEO_PROC));
    }
    let av1 = report.config(Profile::AV1_PROFILE0, Entrypoint::VLD);
    if av1.is_some_and(|c| c.rt_format == Some(RtFormat::NotStated)) {
        report.av1_surfaces = Some(surfaces(display, Profile::AV1_PROFILE0, Entrypoint::VLD));
    }
    Ok(())
}

/// Whether a rule of `va::rules` reads the RT format of this pair (docs/capabilities.md): AV1 decode
/// and the encoders of H.264 and HEVC.
fn needs_rt_format(profile: Profile, entrypoint: Entrypoint) -> bool {
    let encoder = matches!(entrypoint, Entrypoint::ENC_SLICE | Entrypoint::ENC_SLICE_LP);
    match profile {
        Profile::AV1_PROFILE0 => entrypoint == Entrypoint::VLD,
        Profile::H264_HIGH
        | Profile::H264_MAIN
        | Profile::H264_CONSTRAINED_BASELINE
        | Profile::HEVC_MAIN
        | Profile::HEVC_MAIN10 => encoder,
        _ => false,
    }
}

fn surfaces(
    display: &Display<'_, Initialised>,
    profile: Profile,
    entrypoint: Entrypoint,
) -> SurfaceFormats {
    match display.surface_formats(profile.0, entrypoint.0) {
        Ok(formats) => SurfaceFormats {
            profile,
            entrypoint,
            formats: formats.into_iter().map(Fourcc).collect(),
            error: None,
        },
        Err(e) => SurfaceFormats {
            profile,
            entrypoint,
            formats: Vec::new(),
            error: Some(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libva_absent_gives_the_loaders_error_word_for_word() {
        let options = ProbeOptions {
            libva: LibvaPaths {
                va: "/nonexistent/libva.so.2".into(),
                va_drm: "/nonexistent/libva-drm.so.2".into(),
            },
            ..ProbeOptions::default()
        };
        let report = probe(Path::new("/dev/dri/renderD128"), &options);
        assert_eq!(
            report.error.as_deref(),
            Some(
                "dlopen failed: /nonexistent/libva.so.2: cannot open shared object file: \
                 No such file or directory"
            )
        );
        assert!(report.configs.is_empty() && report.vendor.is_none());
    }

    #[test]
    fn rt_formats_are_queried_exactly_where_a_rule_reads_them() {
        assert!(needs_rt_format(Profile::AV1_PROFILE0, Entrypoint::VLD));
        assert!(needs_rt_format(
            Profile::H264_MAIN,
            Entrypoint::ENC_SLICE_LP
        ));
        assert!(needs_rt_format(Profile::HEVC_MAIN10, Entrypoint::ENC_SLICE));
        assert!(!needs_rt_format(Profile::HEVC_MAIN10, Entrypoint::VLD));
        assert!(!needs_rt_format(Profile::VP9_PROFILE2, Entrypoint::VLD));
        assert!(!needs_rt_format(Profile(23), Entrypoint::ENC_SLICE));
    }

    /// Run on a machine with a GPU and libva + a VA driver installed:
    /// `MEDIA_RENDER_NODE=/dev/dri/renderD128 cargo test --lib real_render_node -- --ignored --nocapture`
    /// (the node defaults to /dev/dri/renderD128). It prints the report; compare it with `vainfo
    /// --display drm --device <node>`.
    #[test]
    #[ignore = "needs a VA-API render node (libva and a VA driver); see the doc comment"]
    fn real_render_node() {
        let node = std::env::var("MEDIA_RENDER_NODE").unwrap_or("/dev/dri/renderD128".into());
        let report = probe(Path::new(&node), &ProbeOptions::default());
        println!("{}", serde_json::to_string_pretty(&report).unwrap());
        assert_eq!(report.error, None, "{:#?}", report.messages);
        assert!(report.vendor.is_some());
        assert!(!report.configs.is_empty());
        assert!(report.va_api_version.is_some());
    }
}
