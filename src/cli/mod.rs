//! `kubectl media`: the clap definitions, one module per command, and the shared rendering and
//! styling. kubectl runs the `kubectl-media` executable with the words after `kubectl media`, so
//! this is an ordinary program whose name, in help and errors, is `kubectl media`.

pub mod class;
pub mod complete;
pub mod output;
pub mod style;

use std::ffi::OsString;
use std::io::Write;

use clap::{CommandFactory, Parser, Subcommand};

use self::class::{ClassArgs, ClassError};
use self::output::RenderError;
use self::style::ColorChoice;

/// Claim GPUs by what their VA-API driver can decode, encode and scale.
///
/// The media-capabilities agent publishes one media.liken.sh device per GPU, stating what its
/// driver can do. These commands write claims for those devices.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-media",
    bin_name = "kubectl media",
    version,
    propagate_version = true
)]
pub struct Cli {
    /// When to colour output: auto colours a terminal unless NO_COLOR is set.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a DeviceClass (and claim template) that selects GPUs by capability.
    Class(ClassArgs),
    /// Answer kubectl's shell completion requests (run by the kubectl_complete-media shim).
    #[command(name = "__complete", hide = true)]
    Complete(complete::CompleteArgs),
}

/// Why a command failed, and so its exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line cannot be carried out as written (exit 2).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Class(#[from] ClassError),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error("write output: {0}")]
    Write(#[from] std::io::Error),
}

impl Error {
    /// 2 for usage errors, as clap and kubectl use it; 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Class(_) => 2,
            Error::Render(_) | Error::Write(_) => 1,
        }
    }
}

/// What parsing the command line came to.
pub enum Parsed {
    Run(Cli),
    /// `--help` or `--version`: print this on stdout and exit 0.
    Info(String),
}

/// Parses the command line. Clap's own errors are folded into one line ending in a hint, like
/// every other error of ours.
pub fn parse(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> Result<Parsed, Error> {
    match Cli::try_parse_from(args) {
        Ok(cli) => Ok(Parsed::Run(cli)),
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                Ok(Parsed::Info(e.render().to_string()))
            }
            clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let commands: Vec<String> = Cli::command()
                    .get_subcommands()
                    .filter(|c| !c.is_hide_set())
                    .map(|c| c.get_name().to_string())
                    .collect();
                Err(Error::Usage(format!(
                    "a command is required: {} (hint: see 'kubectl media --help')",
                    commands.join(", ")
                )))
            }
            _ => Err(Error::Usage(one_line(&e.render().to_string()))),
        },
    }
}

/// Turns clap's several-line error (message, tip, usage, "for more information") into
/// `message (hint: tip)`, pointing at the right `--help` when there is no tip.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let message = lines.next().unwrap_or("invalid arguments");
    let message = message.strip_prefix("error: ").unwrap_or(message);
    let rest: Vec<&str> = lines.collect();
    // Clap's "similar ... exists" tips help; its "use '-- --x' to pass it as a value" tip
    // misleads more often than not for a mistyped flag.
    let tip = rest
        .iter()
        .find_map(|l| l.strip_prefix("tip: "))
        .filter(|tip| tip.starts_with("a similar"));
    let command = rest
        .iter()
        .find_map(|l| l.strip_prefix("Usage: "))
        .map(|usage| {
            usage
                .split_whitespace()
                .take_while(|w| !w.starts_with(['[', '<', '-']))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "kubectl media".to_string());
    let possible = rest.iter().find_map(|l| {
        l.strip_prefix("[possible values: ")
            .and_then(|v| v.strip_suffix(']'))
    });
    match (tip, possible) {
        (Some(tip), _) => format!("{message} (hint: {tip})"),
        (None, Some(values)) => format!("{message} (hint: use one of {values})"),
        (None, None) => format!("{message} (hint: see '{command} --help')"),
    }
}

/// Runs a parsed command, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<(), Error> {
    match cli.command {
        Command::Class(args) => {
            let objects = args.plan()?;
            let text = output::render_objects(&objects, args.output)?;
            output::write_all(out, &text)?;
        }
        Command::Complete(args) => {
            let text = complete::complete(&mut Cli::command(), &args.words);
            output::write_all(out, &text)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line_with_a_hint() {
        let err = match parse(["kubectl-media", "class", "--bogus"]) {
            Err(e) => e,
            Ok(_) => panic!("parsed"),
        };
        let text = err.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert_eq!(
            text,
            "unexpected argument '--bogus' found (hint: see 'kubectl media class --help')"
        );
        assert_eq!(err.exit_code(), 2);

        let err = match parse(["kubectl-media", "clas"]) {
            Err(e) => e,
            Ok(_) => panic!("parsed"),
        };
        assert_eq!(
            err.to_string(),
            "unrecognized subcommand 'clas' (hint: a similar subcommand exists: 'class')"
        );
    }

    #[test]
    fn help_is_information_not_an_error() {
        assert!(matches!(
            parse(["kubectl-media", "class", "--help"]),
            Ok(Parsed::Info(_))
        ));
        assert!(matches!(
            parse(["kubectl-media", "--version"]),
            Ok(Parsed::Info(_))
        ));
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
