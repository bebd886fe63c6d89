//! The standard streams as both programs use them: output to a closed stdout fails (Rust's
//! runtime quietly reopens a closed stdout on /dev/null, where everything "succeeds"), and an
//! error line to a stderr that cannot take it is dropped, never panicked on (`eprintln!` panics,
//! and a panic is exit 101, not the failure's own code).

use std::io::{self, Write};

/// Whether standard output was closed when the process started (`kubectl media caps >&-`).
///
/// Before `main`, Rust's runtime opens /dev/null read-write in place of a closed standard
/// stream; a shell's `>/dev/null` opens it write-only. So a standard output that is /dev/null
/// opened read-write was closed (or `1<>/dev/null`, which nobody writes to mean output). Linux
/// only (`/proc`); elsewhere, or without `/proc`, it cannot be told, and output is written.
pub fn stdout_closed() -> bool {
    closed_at_start(1)
}

fn closed_at_start(fd: u32) -> bool {
    let is_null = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|target| target == std::path::Path::new("/dev/null"));
    if !is_null {
        return false;
    }
    // `flags:` in octal, as the kernel's fdinfo writes it.
    let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
        return false;
    };
    info.lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
        .is_some_and(|flags| flags & libc::O_ACCMODE as u32 == libc::O_RDWR as u32)
}

/// What a write to a closed standard output answers: an error, worded for the error line
/// (`error: write output: standard output is closed ...`).
pub fn closed_error() -> io::Error {
    io::Error::other(
        "standard output is closed (hint: send the output to a file or a pipe, or to /dev/null \
         to discard it)",
    )
}

/// A writer in place of a closed standard output: every write fails with [`closed_error`].
#[derive(Debug, Default)]
pub struct Closed;

impl Write for Closed {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(closed_error())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The process's standard output, or [`Closed`] when it was closed at start.
pub fn stdout() -> Box<dyn Write> {
    if stdout_closed() {
        Box::new(Closed)
    } else {
        Box::new(io::stdout().lock())
    }
}

/// Writes `text` (help, a version) to standard output. A reader that went away (`| head`) is
/// fine; any other failure is returned, for an error line and a failure exit.
pub fn write_info(out: &mut dyn Write, text: &str) -> io::Result<()> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes one line to standard error, or drops it when standard error cannot take it
/// (`2>/dev/full`, closed): there is nowhere left to say so, and the exit code still does.
pub fn error_line(line: &str) {
    let mut stderr = io::stderr().lock();
    let _ = writeln!(stderr, "{line}").and_then(|()| stderr.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_output_fails_every_write_and_a_gone_reader_does_not() {
        let error = write_info(&mut Closed, "help\n").unwrap_err();
        assert!(
            error.to_string().starts_with("standard output is closed"),
            "{error}"
        );
        struct Gone;
        impl Write for Gone {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        assert!(write_info(&mut Gone, "help\n").is_ok());
        // A descriptor that is not open is not one closed at start.
        assert!(!closed_at_start(u32::MAX));
    }
}
