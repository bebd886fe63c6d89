//! Entry point of the capabilities agent; all behaviour lives in the library.

use anyhow::Context;
use clap::Parser as _;
use media_operator::agent::cli::{Cli, Command};
use media_operator::agent::config::AgentConfig;
use media_operator::agent::probing::{ChildRequest, run_child};
use media_operator::node::va::ffi::LibvaPaths;
use media_operator::node::va::probe::ProbeOptions;
use media_operator::stdio;
use media_operator::text::terminal_safe;
use std::process::ExitCode;

/// Completes at the first SIGTERM (the kubelet stopping the pod) or SIGINT (Ctrl-C).
async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // Without signal handlers the default action (exit) still applies; wait forever.
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!("cannot handle SIGTERM/SIGINT: {e}");
            std::future::pending::<()>().await;
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // --help and --version on stdout, exit 0 (a closed or full stdout is a failure).
        Err(e) if !e.use_stderr() => {
            return match stdio::write_info(&mut stdio::stdout(), &e.render().to_string()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    stdio::error_line(&format!("error: write output: {e}"));
                    ExitCode::from(1)
                }
            };
        }
        Err(e) => {
            let root = <Cli as clap::CommandFactory>::command();
            let message = media_operator::usage::message(&e, &root, "media-capabilities", &args);
            stdio::error_line(&format!("error: {}", terminal_safe(&message)));
            return ExitCode::from(2);
        }
    };
    // The agent's flags are checked before anything starts; a bad value is a usage error.
    let config = match cli.command {
        Some(_) => None,
        None => match cli.agent.validate() {
            Ok(config) => Some(config),
            Err(e) => {
                stdio::error_line(&format!("error: {}", terminal_safe(&e.to_string())));
                return ExitCode::from(2);
            }
        },
    };
    // Colour only for a person at a terminal: the pod log and log collectors want plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let rust_log = std::env::var("RUST_LOG").ok();
    let rust_log = rust_log
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| cli.default_log_level().to_owned());
    let filter = match media_operator::agent::run::log_filter(Some(&rust_log)) {
        Ok(filter) => filter,
        Err(e) => {
            stdio::error_line(&format!("error: {}", terminal_safe(&e.to_string())));
            return ExitCode::from(2);
        }
    };
    // A log line stderr cannot take is dropped: tracing-subscriber's default reports that with
    // `eprintln!`, which panics on the same full stderr.
    tracing_subscriber::fmt()
        .log_internal_errors(false)
        .fmt_fields(media_operator::agent::run::log_fields())
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_env_filter(filter)
        .init();
    match run(cli, config) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`probe | head`) is not an error worth a message.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // The library's messages already carry their causes. Never `eprintln!` (here or
            // in the log's writer): it panics on a full stderr, and the exit code is the error's.
            stdio::error_line(&format!("error: {}", terminal_safe(&e.to_string())));
            ExitCode::from(1)
        }
    }
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli, config: Option<AgentConfig>) -> anyhow::Result<()> {
    match cli.command {
        None => {
            let config = config.context("the agent's configuration was not validated")?;
            // The processes of killed probes come back to the agent to be reaped, PID 1 or not,
            // including helpers that left a probe's process group.
            media_operator::agent::probing::become_subreaper();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.spawn(media_operator::agent::probing::reap_orphans());
            runtime.block_on(media_operator::agent::run::run(config, signal()))?;
            Ok(())
        }
        Some(Command::Probe(args)) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let mut out = stdio::stdout();
            if args.from.is_none() {
                media_operator::agent::probing::become_subreaper();
                runtime.spawn(media_operator::agent::probing::reap_orphans());
            }
            runtime.block_on(media_operator::agent::probe_cmd::run(
                &args,
                &mut out,
                signal(),
            ))?;
            Ok(())
        }
        Some(Command::ProbeGpu(args)) => {
            let request = ChildRequest {
                render_node: args.render_node,
                options: ProbeOptions {
                    libva: LibvaPaths {
                        va: args.libva,
                        va_drm: args.libva_drm,
                    },
                    driver: args.va_driver,
                    echo_messages: true,
                },
                replay: args.replay,
            };
            run_child(&request, &mut stdio::stdout())?;
            Ok(())
        }
    }
}
