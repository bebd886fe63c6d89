//! `--for FILE`: runs the user's `ffprobe` on a media file and maps its video streams to the
//! catalogue's capabilities ([`crate::catalogue::playback`], pure). This is the edge: one run per
//! file, its output read up to a bound, killed past a timeout, local files only (the arguments
//! say why).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::catalogue::Capability;
use crate::catalogue::playback::{self, Needs, Probe, Unplayable};

/// The program run, looked up on PATH as the user's shell would.
pub const PROGRAM: &str = "ffprobe";

/// The command that installs ffprobe on Debian and Ubuntu (it ships with ffmpeg).
pub const INSTALL: &str = "apt-get install ffmpeg";

/// How long one ffprobe run may take: it reads headers and a few packets, which takes well under
/// a second even for a large file on a slow disk; a network mount that hangs is cut off here.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The most of ffprobe's JSON read: about 2 KB per stream, so room for two thousand streams.
pub const MAX_OUTPUT: u64 = 4 << 20;

/// The most of ffprobe's stderr kept: its error lines, never a flood.
pub const MAX_ERRORS: u64 = 64 << 10;

/// The file name extensions completion offers after `--for` (Cobra's file-extension filter):
/// the containers and raw streams of the codecs the catalogue has. Typing any other path works.
pub const MEDIA_EXTENSIONS: [&str; 22] = [
    "mp4", "m4v", "mov", "mkv", "webm", "ts", "m2ts", "mts", "mpg", "mpeg", "vob", "avi", "wmv",
    "asf", "flv", "ivf", "3gp", "mxf", "264", "h264", "265", "hevc",
];

/// How often a running ffprobe is checked on: short beside its own run time.
const POLL: Duration = Duration::from_millis(5);

/// Why a file's needs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ForFileError {
    #[error(
        "--for {path}: ffprobe is not installed (hint: install it with ffmpeg, e.g. {INSTALL}, \
         or name the capabilities with --decode and --scale)"
    )]
    Missing { path: String },
    #[error("--for {path}: no such file (hint: check the path)")]
    NoFile { path: String },
    #[error("--for {path}: is a directory (hint: name a media file in it)")]
    Directory { path: String },
    #[error("--for {path}: cannot read it: {source}")]
    Unreadable {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--for {path}: run ffprobe: {source}")]
    Run {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--for {path}: ffprobe did not finish within {timeout:?} and was stopped (hint: is the \
         file on a mount that hangs?)"
    )]
    Timeout { path: String, timeout: Duration },
    #[error("--for {path}: ffprobe wrote more than {limit} bytes and was stopped")]
    TooMuch { path: String, limit: u64 },
    #[error(
        "--for {path}: ffprobe cannot read it as media: {message} (hint: is it a complete media file?)"
    )]
    NotMedia { path: String, message: String },
    #[error("--for {path}: unreadable ffprobe output: {source}")]
    Output {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("--for {path}: {source}")]
    Unplayable {
        path: String,
        #[source]
        source: Unplayable,
    },
}

/// What one file needs, stream by stream, and what ffprobe said on the way (errors it met in a
/// file it still read, such as a cut-off WebM: the streams it read are what must be decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Played {
    pub path: String,
    pub streams: Vec<Needs>,
    pub warnings: Vec<String>,
}

/// The capabilities every file needs: each stream's decode capability, and its scaling unless
/// `scale` is false. Sorted and without repeats.
pub fn capabilities(played: &[Played], scale: bool) -> Vec<Capability> {
    let mut all: Vec<Capability> = played
        .iter()
        .flat_map(|p| p.streams.iter())
        .flat_map(|n| [Some(n.decode), scale.then_some(n.scale)])
        .flatten()
        .collect();
    all.sort();
    all.dedup();
    all
}

/// Probes each file, in order; the first that cannot be played is the error.
pub fn probe_all(paths: &[PathBuf]) -> Result<Vec<Played>, ForFileError> {
    paths.iter().map(|p| probe_file(p)).collect()
}

/// Runs ffprobe on one file and maps its video streams.
pub fn probe_file(path: &Path) -> Result<Played, ForFileError> {
    let shown = path.display().to_string();
    let metadata = std::fs::metadata(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ForFileError::NoFile {
            path: shown.clone(),
        },
        _ => ForFileError::Unreadable {
            path: shown.clone(),
            source,
        },
    })?;
    if metadata.is_dir() {
        return Err(ForFileError::Directory { path: shown });
    }
    // `file:` takes the rest as a path; a relative one resolves against our working directory,
    // which is ffprobe's too.
    let mut input = std::ffi::OsString::from("file:");
    input.push(path.as_os_str());
    let mut command = Command::new(PROGRAM);
    command
        .args([
            // stderr holds only errors: what it says is why a file fails.
            "-v",
            "error",
            "-print_format",
            "json",
            // Only the streams' parameters, from the headers and a few packets.
            "-show_streams",
            // With `file:`, a local file whatever its name (`http://x`, `-i`), and a playlist
            // in it cannot make ffprobe open anything else: nothing is sent anywhere.
            "-protocol_whitelist",
            "file",
            "-i",
        ])
        .arg(input);
    let ran = run_bounded(command, TIMEOUT, MAX_OUTPUT).map_err(|e| match e {
        RunError::Spawn(source) if source.kind() == std::io::ErrorKind::NotFound => {
            ForFileError::Missing {
                path: shown.clone(),
            }
        }
        RunError::Spawn(source) | RunError::Io(source) => ForFileError::Run {
            path: shown.clone(),
            source,
        },
        RunError::Timeout => ForFileError::Timeout {
            path: shown.clone(),
            timeout: TIMEOUT,
        },
        RunError::TooMuch => ForFileError::TooMuch {
            path: shown.clone(),
            limit: MAX_OUTPUT,
        },
    })?;
    let errors = error_lines(&ran.stderr, path);
    if !ran.success {
        return Err(ForFileError::NotMedia {
            path: shown,
            message: if errors.is_empty() {
                "ffprobe failed and said nothing".into()
            } else {
                errors.join("; ")
            },
        });
    }
    let probe: Probe =
        serde_json::from_slice(&ran.stdout).map_err(|source| ForFileError::Output {
            path: shown.clone(),
            source,
        })?;
    match playback::needs(&probe) {
        Ok(streams) => Ok(Played {
            path: shown,
            streams,
            warnings: errors,
        }),
        // A file cut short reads as a data stream with an error beside it: the error is the news.
        Err(Unplayable::NoVideo { .. }) if !errors.is_empty() => Err(ForFileError::NotMedia {
            path: shown,
            message: format!("no video stream, and {}", errors.join("; ")),
        }),
        Err(source) => Err(ForFileError::Unplayable {
            path: shown,
            source,
        }),
    }
}

/// ffprobe's error lines without the noise around them: `[mov,mp4,... @ 0x55d0] moov atom not
/// found` loses its context tag, `file:PATH: Invalid data...` its input name (the error names the
/// file already); repeats are dropped, and at most a few lines are kept for one error line.
fn error_lines(stderr: &[u8], path: &Path) -> Vec<String> {
    const KEPT: usize = 3;
    let text = String::from_utf8_lossy(stderr);
    let input = format!("file:{}: ", path.display());
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut line = line.trim();
        if line.starts_with('[')
            && let Some((_, rest)) = line.split_once("] ")
        {
            line = rest.trim();
        }
        line = line.strip_prefix(input.as_str()).unwrap_or(line);
        if !line.is_empty() && !lines.iter().any(|l| l == line) {
            lines.push(line.to_string());
        }
    }
    if lines.len() > KEPT {
        let more = lines.len() - KEPT;
        lines.truncate(KEPT);
        lines.push(format!("{more} more"));
    }
    lines
}

/// What a bounded run of a program came to.
#[derive(Debug)]
pub(crate) struct Ran {
    pub success: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

#[derive(Debug)]
pub(crate) enum RunError {
    Spawn(std::io::Error),
    Io(std::io::Error),
    Timeout,
    TooMuch,
}

/// Runs `command` with no stdin, reading at most `limit` bytes of stdout and [`MAX_ERRORS`] of
/// stderr, killed (and reaped) when it runs past `timeout` or writes past `limit`. It runs in a
/// process group of its own, killed whole when it ends or is stopped: a child it leaves behind
/// holding its output can neither keep us waiting nor outlive it; and the output is awaited no
/// longer than the timeout in any case.
pub(crate) fn run_bounded(
    mut command: Command,
    timeout: Duration,
    limit: u64,
) -> Result<Ran, RunError> {
    use std::os::unix::process::CommandExt;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(RunError::Spawn)?;
    let started = Instant::now();
    // Readers on their own threads, so that a full pipe never stalls the program while we wait;
    // they hand their bytes over a channel, which is waited on with a deadline.
    let reader = |pipe: Option<Box<dyn Read + Send>>, limit: u64| {
        let (done, output) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let read = match pipe {
                // One byte over the limit tells "too much" from "exactly the limit".
                Some(pipe) => pipe.take(limit + 1).read_to_end(&mut out).map(|_| out),
                None => Ok(out),
            };
            let _ = done.send(read);
        });
        output
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        limit,
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        MAX_ERRORS,
    );
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let kill_group = || {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    };
    // Past the limit the reader drops the pipe, and the program's next write ends it (SIGPIPE).
    let status = loop {
        if let Some(status) = child.try_wait().map_err(RunError::Io)? {
            break Some(status);
        }
        if started.elapsed() >= timeout {
            break None;
        }
        std::thread::sleep(POLL);
    };
    // What it started goes with it (the group outlives its leader while members remain).
    kill_group();
    let Some(status) = status else {
        // Killed, then reaped, so no zombie stays behind.
        let _ = child.kill();
        let _ = child.wait();
        return Err(RunError::Timeout);
    };
    let deadline = started + timeout;
    let collect = |output: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>| {
        let left = deadline.saturating_duration_since(Instant::now());
        match output.recv_timeout(left) {
            Ok(read) => read.map_err(RunError::Io),
            // A process that left the group (setsid) still holds the pipe: not waited for.
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(RunError::Timeout),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(RunError::Io(
                std::io::Error::other("reader thread panicked"),
            )),
        }
    };
    let stdout = collect(stdout)?;
    let mut stderr = collect(stderr)?;
    if stdout.len() as u64 > limit {
        return Err(RunError::TooMuch);
    }
    stderr.truncate(MAX_ERRORS as usize);
    Ok(Ran {
        success: status.success(),
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    #[test]
    fn a_program_past_its_timeout_is_killed() {
        let started = Instant::now();
        let err = run_bounded(sh("sleep 30"), Duration::from_millis(200), 1024).unwrap_err();
        assert!(matches!(err, RunError::Timeout), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn output_past_the_limit_stops_the_program() {
        let started = Instant::now();
        // `yes` never ends by itself: only the closed pipe or the kill ends it.
        let err = run_bounded(sh("yes"), Duration::from_secs(20), 1 << 16).unwrap_err();
        assert!(
            matches!(err, RunError::TooMuch | RunError::Timeout),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(15));
        let ran = run_bounded(sh("printf 1234; echo oops >&2; exit 3"), TIMEOUT, 4).unwrap();
        assert_eq!(ran.stdout, b"1234");
        assert_eq!(ran.stderr, b"oops\n");
        assert!(!ran.success);
    }

    /// ffprobe's children (a helper it forks, a script's `&`) holding its output: neither its
    /// end nor its timeout waits for them, and none outlives it.
    #[test]
    fn a_child_left_holding_the_output_neither_delays_nor_outlives_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let started = Instant::now();
        let script = format!("sleep 600 & echo $! > {}; printf '{{}}'", pid.display());
        let ran = run_bounded(sh(&script), Duration::from_secs(20), 1024).unwrap();
        assert_eq!(ran.stdout, b"{}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let child: i32 = std::fs::read_to_string(&pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Gone, or a zombie for init to reap: no process of the group runs on.
        let running = || {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or_default()
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!running(), "the child outlived ffprobe");

        // Past the timeout, the same: stopped at it, not at the child's end.
        let started = Instant::now();
        let err = run_bounded(
            sh("sleep 600 & sleep 600"),
            Duration::from_millis(300),
            1024,
        )
        .unwrap_err();
        assert!(matches!(err, RunError::Timeout), "{err:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_missing_program_is_told_apart() {
        let err =
            run_bounded(Command::new("/nonexistent/ffprobe"), TIMEOUT, MAX_OUTPUT).unwrap_err();
        assert!(
            matches!(&err, RunError::Spawn(e) if e.kind() == std::io::ErrorKind::NotFound),
            "{err:?}"
        );
    }

    #[test]
    fn error_lines_lose_their_context_tags_and_the_input_name() {
        let stderr = b"[mov,mp4,m4a,3gp,3g2,mj2 @ 0x5562cac61280] moov atom not found\n\
            file:/tmp/x.mp4: Invalid data found when processing input\n\
            file:/tmp/x.mp4: Invalid data found when processing input\n";
        assert_eq!(
            error_lines(stderr, Path::new("/tmp/x.mp4")),
            [
                "moov atom not found",
                "Invalid data found when processing input"
            ]
        );
        let many: Vec<u8> = (0..10)
            .flat_map(|i| format!("e{i}\n").into_bytes())
            .collect();
        assert_eq!(
            error_lines(&many, Path::new("x")),
            ["e0", "e1", "e2", "7 more"]
        );
    }
}
