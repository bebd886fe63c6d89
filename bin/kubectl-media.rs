//! Entry point of `kubectl media` (kubectl runs `kubectl-media` from PATH with the words after
//! `kubectl media`). Parses the command line, hands over to the library, and turns the outcome
//! into an exit code: 0 success, 1 failure, 2 usage error, 3 when `why` finds a claim that
//! cannot be allocated.

use std::process::ExitCode;

use media_operator::cli::{self, Parsed};
use media_operator::stdio;
use owo_colors::OwoColorize;

// Listing a large fleet allocates hundreds of thousands of small strings; mimalloc does that
// markedly faster than glibc's allocator (see benches/caps.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // No transparent huge pages (also where THP is "always"): compaction in page faults made
    // `caps` on 40,000 GPUs 2-4x slower one run in three (benches/caps.rs). A hint only.
    let _ = nix::sys::prctl::set_thp_disable(true);
    let args: Vec<_> = std::env::args_os().collect();
    let result = match cli::parse(args) {
        Ok(Parsed::Info(text)) => {
            // Help and version go to stdout; a closed pipe (`| head`) is fine, a closed or
            // full stdout is not.
            stdio::write_info(&mut stdio::stdout(), &text)
                .map_err(|e| (cli::Error::Write(e), cli::style::ColorChoice::Auto))
        }
        Ok(Parsed::Run(cli)) => {
            let color = cli.color;
            let mut io = cli::Io {
                stdin: &mut std::io::stdin().lock(),
                stdout: &mut stdio::stdout(),
                stderr: &mut std::io::stderr(),
                ending: true,
            };
            cli::run(&cli, &mut io).map_err(|e| (e, color))
        }
        Err(e) => Err((e, cli::style::ColorChoice::Auto)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((error, _)) if error.is_silent() => ExitCode::from(error.exit_code()),
        Err((error, color)) => {
            let styles = color.for_stderr();
            // Never `eprintln!`: it panics on a full stderr, and the exit code must be the error's.
            stdio::error_line(&format!(
                "{} {}",
                "error:".style(styles.error),
                error.line()
            ));
            ExitCode::from(error.exit_code())
        }
    }
}
