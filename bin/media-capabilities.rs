//! Entry point of the capabilities agent; all behaviour lives in the library.

use clap::Parser;
use media_operator::agent::cli::{Cli, Command};
use media_operator::agent::probing::{ChildRequest, run_child};
use media_operator::va::ffi::LibvaPaths;
use media_operator::va::probe::ProbeOptions;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`probe | head`) is not an error worth a message.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // The library's messages already carry their causes.
            eprintln!("error: {e}");
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

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => anyhow::bail!(
            "running the agent is not wired up yet (hint: `media-capabilities probe` shows what it \
             would publish)"
        ),
        Some(Command::Probe(args)) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let mut out = std::io::stdout().lock();
            runtime.block_on(media_operator::agent::probe_cmd::run(&args, &mut out))?;
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
            run_child(&request, &mut std::io::stdout().lock())?;
            Ok(())
        }
    }
}
