//! Tells the tests which outside tools this machine has, so that a test needing one is reported
//! by the test harness as *ignored, with the command that installs it* where the tool is missing,
//! instead of printing "skipped" and counting as passed.
//!
//! - `have_kubectl`: `kubectl` is on PATH (the tests drive it as a real client);
//! - `have_libva`: the real libva (`libva.so.2` and `libva-drm.so.2`) can be loaded;
//! - `have_zsh`, `have_fish`: those shells are on PATH (the completion scripts are tested in them);
//! - `have_go`: Go 1.26 or newer is on PATH (the scheduler's allocator, tests/oracle/, and the real
//!   control plane, tests/controlplane/, are built from their Go modules);
//! - `have_man`: `man` is on PATH (the man pages are rendered with it at 80 columns);
//! - `have_ffmpeg`: `ffmpeg` and `ffprobe` are on PATH (the `--for` tests make media files with
//!   ffmpeg and read them with the user's ffprobe, as the plugin does);
//! - `have_openssl`: `openssl` is on PATH (the TLS tests make certificates with it and serve
//!   them with `openssl s_server`);
//! - `have_image_tools`: `mmdebstrap` is on PATH and this runs as root (the agent's image is
//!   built from Debian's packages into a root filesystem and run in it; tests/it/image.rs).
//!
//! In CI (`CI` set to anything but `false`) all are always on, so a missing tool fails the run
//! rather than hiding its tests: CI installs them (`.ci/run`).
//!
//! Only `CI` and `PATH` are watched: watching the tool's files would re-run this script (and so
//! rebuild the crate) on every build where one is missing. After installing a tool, `touch
//! build.rs` makes the next build look again.

use std::env;
use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(have_kubectl)");
    println!("cargo::rustc-check-cfg=cfg(have_libva)");
    println!("cargo::rustc-check-cfg=cfg(have_zsh)");
    println!("cargo::rustc-check-cfg=cfg(have_fish)");
    println!("cargo::rustc-check-cfg=cfg(have_go)");
    println!("cargo::rustc-check-cfg=cfg(have_man)");
    println!("cargo::rustc-check-cfg=cfg(have_ffmpeg)");
    println!("cargo::rustc-check-cfg=cfg(have_image_tools)");
    println!("cargo::rustc-check-cfg=cfg(have_openssl)");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=PATH");
    let ci = env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");

    if ci || on_path("kubectl") {
        println!("cargo::rustc-cfg=have_kubectl");
    }
    for tool in ["zsh", "fish"] {
        if ci || on_path(tool) {
            println!("cargo::rustc-cfg=have_{tool}");
        }
    }
    if ci || go_new_enough() {
        println!("cargo::rustc-cfg=have_go");
    }
    if ci || on_path("man") {
        println!("cargo::rustc-cfg=have_man");
    }
    if ci || (on_path("ffmpeg") && on_path("ffprobe")) {
        println!("cargo::rustc-cfg=have_ffmpeg");
    }
    if ci || on_path("openssl") {
        println!("cargo::rustc-cfg=have_openssl");
    }
    if ci || (on_path("mmdebstrap") && is_root()) {
        println!("cargo::rustc-cfg=have_image_tools");
    }
    if ci || libva_installed() {
        println!("cargo::rustc-cfg=have_libva");
    }
}

fn on_path(program: &str) -> bool {
    env::var_os("PATH")
        .is_some_and(|path| env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Whether this build runs as root (the `Uid:` line of /proc/self/status: real, effective, ...).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|ids| ids.split_whitespace().nth(1) == Some("0"))
    })
}

/// k8s.io/dynamic-resource-allocation v0.36 and v0.37 ask for Go 1.26 (their go.mod); the
/// oracle is built with GOTOOLCHAIN=local, so an older Go cannot fetch a newer one.
fn go_new_enough() -> bool {
    if !on_path("go") {
        return false;
    }
    let Ok(out) = std::process::Command::new("go")
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local")
        .output()
    else {
        return false;
    };
    // `go1.26.8`, `go1.27rc1`
    let version = String::from_utf8_lossy(&out.stdout);
    let mut parts = version.trim().trim_start_matches("go").split('.');
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts
        .next()
        .map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|p| p.parse::<u32>().ok());
    matches!((major, minor), (Some(1), Some(m)) if m >= 26) || major.is_some_and(|m| m > 1)
}

/// Debian's `libva2` and `libva-drm2` put these in the multiarch directory; the dynamic loader
/// finds them there, which is how the probe loads them at run time.
fn libva_installed() -> bool {
    const DIRS: &[&str] = &[
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ];
    ["libva.so.2", "libva-drm.so.2"]
        .iter()
        .all(|lib| DIRS.iter().any(|dir| Path::new(dir).join(lib).exists()))
}
