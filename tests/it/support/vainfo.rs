//! A vainfo-text → report converter, so the rules are tested against the real captures in
//! tests/fixtures/vainfo/ (copied from ../shared/fixtures/vainfo/, source lines kept), and
//! stand-in probe scripts for the isolation tests.

use media_operator::node::va::report::{Config, Entrypoint, Level, Message, Profile, Report};
use std::path::{Path, PathBuf};

/// The directory of the vainfo captures.
pub fn captures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vainfo")
}

/// Reads a capture and converts what vainfo printed into a report. vainfo (without `-a`) prints
/// the vendor string, every (profile, entrypoint) pair and libva's messages, but neither RT formats
/// nor surface formats: those stay "not queried" in the result.
pub fn report_from_vainfo(name: &str) -> Report {
    let text = std::fs::read_to_string(captures().join(name)).expect("capture exists");
    let mut report = Report::default();
    for line in text.lines() {
        if let Some(vendor) = line.strip_prefix("vainfo: Driver version: ") {
            report.vendor = Some(vendor.to_string());
        } else if let Some(rest) = line.strip_prefix("vainfo: VA-API version: ") {
            report.va_api_version = rest.split_whitespace().next().map(str::to_string);
        } else if let Some(text) = line.strip_prefix("libva info: ") {
            report.messages.push(Message {
                level: Level::Info,
                text: text.to_string(),
            });
        } else if let Some(text) = line.strip_prefix("libva error: ") {
            report.messages.push(Message {
                level: Level::Error,
                text: text.to_string(),
            });
        } else if let Some((profile, entrypoint)) = line.trim().split_once(':') {
            let (profile, entrypoint) = (profile.trim(), entrypoint.trim());
            if !profile.starts_with("VAProfile") {
                continue;
            }
            report.configs.push(Config {
                profile: Profile::from_name(profile)
                    .unwrap_or_else(|| panic!("{name}: unknown profile {profile}")),
                entrypoint: Entrypoint::from_name(entrypoint)
                    .unwrap_or_else(|| panic!("{name}: unknown entrypoint {entrypoint}")),
                rt_format: None,
            });
        }
    }
    report
}

/// Writes an executable shell script (a stand-in probe) and returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}
