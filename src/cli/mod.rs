//! `kubectl media`: the clap definitions, one module per command, and the shared rendering and
//! styling. kubectl runs the `kubectl-media` executable with the words after `kubectl media`, so
//! this is an ordinary program whose name, in help and errors, is `kubectl media`.

pub mod caps;
pub mod class;
pub mod complete;
pub mod output;
pub mod style;
pub mod table;

use std::ffi::{OsStr, OsString};
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Arg, CommandFactory, Parser, Subcommand};

use crate::catalogue::{Capability, Group, UnknownCapability};

use self::caps::{CapsArgs, CapsFormat};
use self::class::{ClassArgs, ClassError};
use self::output::RenderError;
use self::style::ColorChoice;
use self::table::{TableStyle, Width};

/// The help heading of the flags every command takes.
const GLOBAL: &str = "Global options";

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
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto, help_heading = GLOBAL)]
    pub color: ColorChoice,

    #[command(flatten)]
    pub kube: KubeArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// kubectl's connection flags; kubectl passes them to a plugin untouched.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Path to the kubeconfig file [default: KUBECONFIG, then ~/.kube/config].
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub context: Option<String>,

    /// How long to wait for each API request: 0 waits indefinitely; else 30s, 1m, 500ms...
    #[arg(long, global = true, value_name = "DURATION", default_value = "0", help_heading = GLOBAL)]
    pub request_timeout: String,
}

impl KubeArgs {
    fn connection(&self) -> Result<crate::fleet::cluster::Connection, Error> {
        Ok(crate::fleet::cluster::Connection {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            request_timeout: crate::fleet::cluster::parse_timeout(&self.request_timeout)
                .map_err(Error::Usage)?,
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List what every GPU's driver states, beside liken's render nodes.
    Caps(CapsArgs),
    /// Write a DeviceClass (and claim template) that selects GPUs by capability.
    Class(ClassArgs),
    /// Answer kubectl's shell completion requests (run by the kubectl_complete-media shim).
    #[command(name = "__complete", hide = true)]
    Complete(complete::CompleteArgs),
}

/// Accepts any text for a capability flag (so that an unknown value gets our one-line error with
/// the nearest match, not clap's), while telling help and completion the valid values.
#[derive(Clone, Copy, Debug)]
struct CapabilityValues(Group);

impl TypedValueParser for CapabilityValues {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _: Option<&Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        value
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidUtf8).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            self.0
                .capabilities()
                .map(|c| PossibleValue::new(c.value()).help(c.meaning())),
        ))
    }
}

/// `--decode`, `--encode` and `--scale`, as `class` and `caps` take them.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CapabilityFlags {
    /// A decode capability the GPU must state; repeat or give a comma list.
    #[arg(long, value_name = "CAP", value_delimiter = ',', value_parser = CapabilityValues(Group::Decode),
        add = complete::CapabilityCompleter::arg(Group::Decode))]
    pub decode: Vec<String>,

    /// An encode capability the GPU must state; repeat or give a comma list.
    #[arg(long, value_name = "CAP", value_delimiter = ',', value_parser = CapabilityValues(Group::Encode),
        add = complete::CapabilityCompleter::arg(Group::Encode))]
    pub encode: Vec<String>,

    /// A bit depth the GPU's video processor must scale; repeat or give a comma list.
    #[arg(long, value_name = "DEPTH", value_delimiter = ',', value_parser = CapabilityValues(Group::Scale),
        add = complete::CapabilityCompleter::arg(Group::Scale))]
    pub scale: Vec<String>,
}

impl CapabilityFlags {
    /// Resolves the values, in the order given.
    pub fn parse(&self) -> Result<Vec<Capability>, UnknownCapability> {
        let flags = [
            (Group::Decode, &self.decode),
            (Group::Encode, &self.encode),
            (Group::Scale, &self.scale),
        ];
        let mut parsed = Vec::new();
        for (group, values) in flags {
            for value in values {
                parsed.push(Capability::parse(group, value)?);
            }
        }
        Ok(parsed)
    }
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
    UnknownCapability(#[from] UnknownCapability),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Cluster(#[from] crate::fleet::cluster::ClusterError),
    #[error(transparent)]
    Snapshot(#[from] crate::fleet::files::SnapshotError),
    #[error("start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("write output: {0}")]
    Write(#[from] std::io::Error),
}

impl Error {
    /// 2 for usage errors, as clap and kubectl use it; 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Class(_) | Error::UnknownCapability(_) => 2,
            Error::Render(_)
            | Error::Write(_)
            | Error::Cluster(_)
            | Error::Snapshot(_)
            | Error::Runtime(_) => 1,
        }
    }
}

/// What parsing the command line came to.
pub enum Parsed {
    Run(Box<Cli>),
    /// `--help` or `--version`: print this on stdout and exit 0.
    Info(String),
}

/// Parses the command line. Clap's own errors are folded into one line ending in a hint, like
/// every other error of ours.
pub fn parse(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> Result<Parsed, Error> {
    match Cli::try_parse_from(args) {
        Ok(cli) => Ok(Parsed::Run(Box::new(cli))),
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
        .filter(|tip| tip.contains("similar"));
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

/// The streams a command reads and writes.
pub struct Io<'a> {
    pub stdin: &'a mut dyn Read,
    pub stdout: &'a mut dyn Write,
    pub stderr: &'a mut dyn Write,
}

/// Runs a parsed command.
pub fn run(cli: &Cli, io: &mut Io<'_>) -> Result<(), Error> {
    match &cli.command {
        Command::Caps(args) => run_caps(args, &cli.kube, cli.color, io),
        Command::Class(args) => {
            let objects = args.plan()?;
            let text = output::render_objects(&objects, args.output)?;
            output::write_all(io.stdout, &text)?;
            Ok(())
        }
        Command::Complete(args) => {
            let text = complete::complete(&mut Cli::command(), &args.words);
            output::write_all(io.stdout, &text)?;
            Ok(())
        }
    }
}

fn run_caps(
    args: &CapsArgs,
    kube: &KubeArgs,
    color: ColorChoice,
    io: &mut Io<'_>,
) -> Result<(), Error> {
    if let Some(conflict) = args.conflict() {
        return Err(Error::Usage(conflict));
    }
    let filter = args.filter()?;
    let objects = if args.files.is_empty() {
        let connection = kube.connection()?;
        // One worker drives the requests; pages are parsed on the runtime's blocking threads
        // while the next one is fetched (see `cluster::Cluster::list_slices`).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        runtime.block_on(async {
            let cluster = crate::fleet::cluster::Cluster::connect(&connection).await?;
            let mut objects = crate::fleet::objects::Objects::default();
            cluster.list_slices(&mut objects).await?;
            Ok::<_, Error>(objects)
        })?
    } else {
        let sources: Vec<_> = args
            .files
            .iter()
            .map(|f| crate::fleet::files::Source::parse(f))
            .collect();
        crate::fleet::files::read(&sources, io.stdin)?
    };
    let warn = color.for_stderr();
    for note in &objects.notes {
        let _ = writeln!(
            io.stderr,
            "{} {note}",
            owo_colors::OwoColorize::style(&"warning:", warn.warning)
        );
    }
    let inventory = crate::fleet::inventory::build(objects.slices);
    // As kubectl: an empty table is a line on stderr; JSON and YAML stay parseable (`[]`).
    let table = !matches!(args.output, Some(CapsFormat::Json | CapsFormat::Yaml));
    if inventory.gpus.is_empty() && table {
        let _ = writeln!(io.stderr, "No media.liken.sh or liken.sh devices found.");
        return Ok(());
    }
    let text = match args.output {
        Some(CapsFormat::Json) | Some(CapsFormat::Yaml) => {
            let value = if args.summary {
                serde_json::to_value(caps::summary_record(&inventory, &filter))
            } else {
                serde_json::to_value(caps::records(&inventory, &filter))
            }
            .map_err(RenderError::from)?;
            if args.output == Some(CapsFormat::Json) {
                let mut text = serde_json::to_string_pretty(&value).map_err(RenderError::from)?;
                text.push('\n');
                text
            } else {
                serde_yaml::to_string(&value).map_err(RenderError::from)?
            }
        }
        _ => {
            let style = TableStyle {
                colored: color.for_stdout().colored,
                width: table_width(),
                no_headers: args.no_headers,
            };
            if args.summary {
                caps::render_summary(&inventory, &filter, &style)
            } else {
                caps::render_table(
                    &inventory,
                    &filter,
                    args.output == Some(CapsFormat::Wide),
                    &style,
                )
            }
        }
    };
    output::write_all(io.stdout, &text)?;
    Ok(())
}

/// `COLUMNS` when set (tests and scripts set it), else the terminal's width when standard output
/// is one, else no limit.
fn table_width() -> Width {
    match std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<u16>().ok())
    {
        Some(columns) if columns > 0 => Width::Columns(columns),
        _ if std::io::stdout().is_terminal() => Width::Terminal,
        _ => Width::Unlimited,
    }
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

        let err = match parse(["kubectl-media", "classs"]) {
            Err(e) => e,
            Ok(_) => panic!("parsed"),
        };
        assert_eq!(
            err.to_string(),
            "unrecognized subcommand 'classs' (hint: some similar subcommands exist: 'caps', 'class')"
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
