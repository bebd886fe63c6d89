//! `--for FILE` on `caps` and `class`, with real media files: Debian's ffmpeg makes them once per
//! test run under target/tmp (a few frames of 64×64 each, so the whole set takes about two
//! seconds), and the plugin reads them with the real ffprobe, as a user's would.
//!
//! What `--for` asks must be exactly what the equivalent `--decode`/`--scale` flags ask: the
//! tests compare the two outputs on the shipped example fleet. Every bad file is one error line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fleet() -> String {
    root()
        .join("docs/examples/fleet.yaml")
        .display()
        .to_string()
}

/// The test source every file is made from: a test pattern of 3 frames at 10 fps.
const SOURCE: &[&str] = &[
    "-f",
    "lavfi",
    "-i",
    "testsrc=size=64x64:rate=10:duration=0.3",
];

// The encoders' arguments: Debian 12's ffmpeg 5.1 ships libx264, libx265, libvpx and libaom.
const X264: &[&str] = &["-c:v", "libx264", "-pix_fmt", "yuv420p"];
const X264_444: &[&str] = &["-c:v", "libx264", "-pix_fmt", "yuv444p"];
const X265: &[&str] = &[
    "-c:v",
    "libx265",
    "-x265-params",
    "log-level=error",
    "-pix_fmt",
    "yuv420p",
];
const X265_10: &[&str] = &[
    "-c:v",
    "libx265",
    "-x265-params",
    "log-level=error",
    "-pix_fmt",
    "yuv420p10le",
];
const X265_422: &[&str] = &[
    "-c:v",
    "libx265",
    "-x265-params",
    "log-level=error",
    "-pix_fmt",
    "yuv422p10le",
];
const VP8: &[&str] = &["-c:v", "libvpx", "-pix_fmt", "yuv420p"];
const VP9: &[&str] = &["-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p"];
const VP9_2: &[&str] = &[
    "-c:v",
    "libvpx-vp9",
    "-profile:v",
    "2",
    "-pix_fmt",
    "yuv420p10le",
];
const AV1: &[&str] = &[
    "-c:v",
    "libaom-av1",
    "-cpu-used",
    "8",
    "-pix_fmt",
    "yuv420p",
];
const AV1_10: &[&str] = &[
    "-c:v",
    "libaom-av1",
    "-cpu-used",
    "8",
    "-pix_fmt",
    "yuv420p10le",
];
const MPEG2: &[&str] = &["-c:v", "mpeg2video", "-pix_fmt", "yuv420p"];

/// A made file: its name, the encoder's arguments, and what it needs (decode, scale).
type Made = (
    &'static str,
    &'static [&'static str],
    Option<(&'static str, &'static str)>,
);

/// Each made file: its name, the encoder's arguments, and the capabilities it needs (decode,
/// scale); `None` for the files that must be refused. MP4, MKV, WebM and MPEG-TS all appear.
pub(crate) const FILES: &[Made] = &[
    ("h264.mp4", X264, Some(("H264", "8bit"))),
    ("h264.ts", X264, Some(("H264", "8bit"))),
    ("hevc-main.mkv", X265, Some(("HEVCMain", "8bit"))),
    ("hevc-main10.mp4", X265_10, Some(("HEVCMain10", "10bit"))),
    ("vp8.webm", VP8, Some(("VP8", "8bit"))),
    ("vp9.webm", VP9, Some(("VP9", "8bit"))),
    ("vp9-profile2.webm", VP9_2, Some(("VP9Profile2", "10bit"))),
    ("av1.mkv", AV1, Some(("AV1Main", "8bit"))),
    ("av1-10bit.mp4", AV1_10, Some(("AV1Main10", "10bit"))),
    ("mpeg2.ts", MPEG2, Some(("MPEG2", "8bit"))),
    // The user guide's film.
    ("film.mkv", X265_10, Some(("HEVCMain10", "10bit"))),
    ("h264-444.mp4", X264_444, None),
    ("hevc-422.mkv", X265_422, None),
    // The user guide's camera recording.
    ("camera.mkv", X265_422, None),
];

/// The directory of the made files, made once per test run. Files are written under a
/// temporary name and renamed, so a test binary running beside this one never reads half a file.
pub(crate) fn media() -> &'static Path {
    static MADE: OnceLock<PathBuf> = OnceLock::new();
    MADE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("for-file-media");
        std::fs::create_dir_all(&dir).unwrap();
        let made = |name: &str, args: &[&str]| {
            let partial = dir.join(format!(".{}.{name}", std::process::id()));
            let out = Command::new("ffmpeg")
                .args(["-nostdin", "-v", "error", "-y"])
                .args(args)
                .arg(&partial)
                .output()
                .expect("run ffmpeg (apt-get install ffmpeg)");
            assert!(
                out.status.success(),
                "ffmpeg {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::rename(&partial, dir.join(name)).unwrap();
        };
        for (name, codec, _) in FILES {
            made(name, &[SOURCE, codec].concat());
        }
        made(
            "audio.m4a",
            &["-f", "lavfi", "-i", "sine=duration=0.3", "-c:a", "aac"],
        );
        std::fs::write(dir.join("notes.txt"), "a shopping list, not a film\n").unwrap();
        std::fs::write(dir.join("empty.mp4"), b"").unwrap();
        // Cut in half: an MP4 from ffmpeg has its index (moov) at the end.
        let whole = std::fs::read(dir.join("hevc-main10.mp4")).unwrap();
        std::fs::write(dir.join("truncated.mp4"), &whole[..whole.len() / 2]).unwrap();
        std::fs::create_dir_all(dir.join("films.mkv")).unwrap();
        // The user guide's commands read the example fleet as `fleet.yaml`.
        std::fs::copy(
            root().join("docs/examples/fleet.yaml"),
            dir.join("fleet.yaml"),
        )
        .unwrap();
        dir
    })
}

/// The directory of the real ffprobe, for a scrubbed PATH.
fn ffprobe_dir() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|dir| dir.join("ffprobe").is_file())
        .expect("ffprobe on PATH (apt-get install ffmpeg)")
}

/// Runs kubectl-media in the media directory with nothing inherited but a PATH to `path_dir`.
fn run_with_path(args: &[&str], path_dir: &Path) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_kubectl-media"))
        .args(args)
        .current_dir(media())
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env("PATH", path_dir)
        .output()
        .unwrap()
}

fn run(args: &[&str]) -> Output {
    run_with_path(args, &ffprobe_dir())
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The table without its last line (the count line names the flags, which differ).
fn without_count_line(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    lines.join("\n")
}

#[test]
#[cfg_attr(
    not(have_ffmpeg),
    ignore = "needs ffmpeg and ffprobe: apt-get install ffmpeg"
)]
fn caps_for_a_file_lists_what_its_decode_and_scale_flags_list() {
    let fleet = fleet();
    for (name, _, needs) in FILES {
        let Some((decode, scale)) = needs else {
            continue;
        };
        let by_file = ok(&["caps", "-f", &fleet, "--for", name]);
        let by_flags = ok(&["caps", "-f", &fleet, "--decode", decode, "--scale", scale]);
        assert_eq!(
            without_count_line(&by_file),
            without_count_line(&by_flags),
            "{name}"
        );
        let count = by_file.lines().last().unwrap();
        assert!(
            count.contains(&format!("decode{decode}"))
                && count.contains(&format!("scale{scale}"))
                && count.contains(&format!("--for {name}: ")),
            "{name}: {count}"
        );
        // --no-scale leaves the scaling out.
        let decode_only = ok(&["caps", "-f", &fleet, "--for", name, "--no-scale"]);
        let by_decode = ok(&["caps", "-f", &fleet, "--decode", decode]);
        assert_eq!(
            without_count_line(&decode_only),
            without_count_line(&by_decode),
            "{name}"
        );
    }
}

#[test]
#[cfg_attr(
    not(have_ffmpeg),
    ignore = "needs ffmpeg and ffprobe: apt-get install ffmpeg"
)]
fn several_files_must_all_be_playable() {
    let fleet = fleet();
    let both = ok(&[
        "caps",
        "-f",
        &fleet,
        "--for",
        "hevc-main10.mp4",
        "--for",
        "vp9.webm",
    ]);
    let flags = ok(&[
        "caps",
        "-f",
        &fleet,
        "--decode",
        "HEVCMain10,VP9",
        "--scale",
        "10bit,8bit",
    ]);
    assert_eq!(without_count_line(&both), without_count_line(&flags));
    assert!(
        both.lines().last().unwrap().ends_with(
            "(decodeHEVCMain10, decodeVP9, scale8bit, scale10bit; --for hevc-main10.mp4: HEVC \
             Main 10, 10-bit 4:2:0; --for vp9.webm: VP9 Profile 0, 8-bit 4:2:0)"
        ),
        "{both}"
    );
}

#[test]
#[cfg_attr(
    not(have_ffmpeg),
    ignore = "needs ffmpeg and ffprobe: apt-get install ffmpeg"
)]
fn class_for_a_file_writes_the_class_its_flags_write() {
    for (name, _, needs) in FILES {
        let Some((decode, scale)) = needs else {
            continue;
        };
        let by_file = ok(&["class", "film", "--for", name, "--claim"]);
        let by_flags = ok(&[
            "class", "film", "--decode", decode, "--scale", scale, "--claim",
        ]);
        assert_eq!(by_file, by_flags, "{name}");
        assert!(by_file.contains("kind: ResourceClaimTemplate"), "{by_file}");
    }
    // Flags and files add up; a name is derived as with flags alone.
    assert_eq!(
        ok(&["class", "--for", "vp8.webm", "--encode", "H264"]),
        ok(&[
            "class", "--decode", "VP8", "--scale", "8bit", "--encode", "H264"
        ])
    );
}

#[test]
#[cfg_attr(
    not(have_ffmpeg),
    ignore = "needs ffmpeg and ffprobe: apt-get install ffmpeg"
)]
fn bad_files_are_one_error_line_each() {
    let fleet = fleet();
    let cases: &[(&str, &str)] = &[
        (
            "h264-444.mp4",
            "error: --for h264-444.mp4: stream 0 is H.264 High 4:4:4 Predictive in 8-bit 4:4:4 \
             (yuv444p), and no GPU states decoding it",
        ),
        (
            "hevc-422.mkv",
            "error: --for hevc-422.mkv: stream 0 is HEVC Rext in 10-bit 4:2:2 (yuv422p10le), and \
             no GPU states decoding it",
        ),
        (
            "audio.m4a",
            "error: --for audio.m4a: it has no video stream to play (streams: audio (aac))",
        ),
        (
            "notes.txt",
            "error: --for notes.txt: ffprobe cannot read it as media: Invalid data found when \
             processing input (hint: is it a complete media file?)",
        ),
        (
            "empty.mp4",
            "error: --for empty.mp4: ffprobe cannot read it as media: moov atom not found; \
             Invalid data found when processing input",
        ),
        (
            "truncated.mp4",
            "error: --for truncated.mp4: ffprobe cannot read it as media: ",
        ),
        (
            "films.mkv",
            "error: --for films.mkv: is a directory (hint: name a media file in it)",
        ),
        (
            "missing.mkv",
            "error: --for missing.mkv: no such file (hint: check the path)",
        ),
    ];
    for (file, start) in cases {
        for args in [
            &["caps", "-f", &fleet, "--for", file][..],
            &["class", "film", "--for", file],
        ] {
            let line = crate::one_error_line(run(args), 1);
            assert!(
                line.starts_with(start),
                "{args:?}:\n{line}\nwanted: {start}"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(have_ffmpeg),
    ignore = "needs ffmpeg and ffprobe: apt-get install ffmpeg"
)]
fn a_missing_ffprobe_is_one_line_with_the_command_that_installs_it() {
    let empty = tempfile::tempdir().unwrap();
    for args in [
        &["caps", "-f", "x.yaml", "--for", "vp8.webm"][..],
        &["class", "--for", "vp8.webm"],
    ] {
        let line = crate::one_error_line(run_with_path(args, empty.path()), 1);
        assert_eq!(
            line,
            "error: --for vp8.webm: ffprobe is not installed (hint: install it with ffmpeg, e.g. \
             apt-get install ffmpeg, or name the capabilities with --decode and --scale)\n"
        );
    }
    // A typo in the flags is told before ffprobe is looked for.
    let line = crate::one_error_line(
        run_with_path(
            &["class", "--for", "vp8.webm", "--decode", "HEVX"],
            empty.path(),
        ),
        2,
    );
    assert!(
        line.starts_with("error: unknown decode capability \"HEVX\""),
        "{line}"
    );
    let line = crate::one_error_line(run(&["caps", "--no-scale"]), 2);
    assert!(line.contains("--for <FILE>"), "{line}");
}

/// `--for` costs one ffprobe run per file and nothing else: a wrapper on PATH counts the runs,
/// and the time of `caps --for` is measured beside `caps` with the same flags.
#[test]
#[cfg_attr(
    not(have_ffmpeg),
    ignore = "needs ffmpeg and ffprobe: apt-get install ffmpeg"
)]
fn each_file_costs_one_ffprobe_run() {
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("runs");
    let wrapper = bin.path().join("ffprobe");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho run >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            ffprobe_dir().join("ffprobe").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fleet = fleet();
    let files = ["h264.mp4", "vp9.webm", "av1.mkv"];
    let mut args = vec!["caps", "-f", &fleet];
    for file in files {
        args.extend(["--for", file]);
    }
    // The files are made before the clock starts.
    media();
    let started = std::time::Instant::now();
    let out = run_with_path(&args, bin.path());
    let with = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs = std::fs::read_to_string(&log).unwrap();
    assert_eq!(runs.lines().count(), files.len(), "{runs}");
    let started = std::time::Instant::now();
    let flags = ok(&[
        "caps",
        "-f",
        &fleet,
        "--decode",
        "H264,VP9,AV1Main",
        "--scale",
        "8bit",
    ]);
    let without = started.elapsed();
    assert_eq!(
        without_count_line(&String::from_utf8(out.stdout).unwrap()),
        without_count_line(&flags)
    );
    eprintln!(
        "caps with --for on {} files: {with:?}; with the same flags: {without:?}",
        files.len()
    );
}

/// The user guide's film section runs as shown: each ```console block that starts with
/// `$ kubectl media` is run in the directory of the made files (`film.mkv`, `camera.mkv`,
/// `fleet.yaml`), and the lines it shows must appear in what it printed (stdout, then stderr),
/// in order; `...` stands for lines left out.
#[test]
#[cfg_attr(
    not(have_ffmpeg),
    ignore = "needs ffmpeg and ffprobe: apt-get install ffmpeg"
)]
fn the_user_guide_s_film_section_reads_as_shown() {
    let guide = std::fs::read_to_string(root().join("docs/user-guide.md")).unwrap();
    let mut ran = 0;
    for (args, expected) in crate::docs::examples(&guide, "console") {
        let command = args.join(" ");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let refused = expected.iter().any(|l| l.starts_with("error: "));
        assert_eq!(
            out.status.success(),
            !refused,
            "kubectl media {command}: {printed}"
        );
        if let Err(problem) = crate::docs::reads_in(&expected, &printed) {
            panic!("kubectl media {command}: {problem}");
        }
        ran += 1;
    }
    assert!(ran >= 3, "{ran} runnable console blocks in the user guide");
}
