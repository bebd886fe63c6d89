//! Command-line interface of `media-capabilities`.

use crate::agent::config::{AgentArgs, ProbingArgs};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Publishes what each GPU's VA-API driver states it can decode, encode and scale as
/// `media.liken.sh` DRA devices.
#[derive(Debug, Parser)]
///
/// Without a subcommand it runs the agent: probes the node's GPUs, publishes and keeps the
/// node's ResourceSlice, serves the kubelet plugin and /healthz, /readyz, /metrics.
// `args_override_self`: a flag given twice takes its last value, as Kubernetes components'
// flags (pflag) do, so that a patch can append to the manifest's `args`; clap's default is an
// error. `--va-driver` collects values and keeps every one given.
#[command(
    name = "media-capabilities",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The agent's flags (the bare command).
    #[command(flatten)]
    pub agent: AgentArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show each GPU's identity, what its VA-API driver states, and the attributes the agent would
    /// publish for it.
    Probe(ProbeArgs),
    /// Probe one render node and print the driver's report as one JSON line (run by the agent in a
    /// child process; not for people).
    #[command(name = "__probe-gpu", hide = true)]
    ProbeGpu(ChildArgs),
}

impl Cli {
    /// The log level without `RUST_LOG`: the agent logs what it does (`info`); `probe` is a
    /// command whose output is its table, so its log says only what went wrong (`warn`), and
    /// `RUST_LOG=info` asks for the rest.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            None | Some(Command::ProbeGpu(_)) => "info",
            Some(Command::Probe(_)) => "warn",
        }
    }
}

/// How `probe` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Probe only this render node (e.g. /dev/dri/renderD128).
    #[arg(long, value_name = "PATH", conflicts_with = "from")]
    pub render_node: Option<PathBuf>,
    /// Output format; json and yaml can be read back with --from.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: OutputFormat,
    /// Derive the attributes from saved probes (`probe -o json` output, one record, or a
    /// directory of them) instead of probing this machine.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
    #[command(flatten)]
    pub probing: ProbingArgs,
}

/// Arguments of the hidden child subcommand.
#[derive(Debug, Args)]
pub struct ChildArgs {
    #[arg(long, value_name = "PATH")]
    pub render_node: PathBuf,
    /// VA driver name for vaSetDriverName.
    #[arg(long, value_name = "NAME")]
    pub va_driver: Option<String>,
    /// libva to load (default libva.so.2).
    #[arg(long, value_name = "PATH", default_value = "libva.so.2")]
    pub libva: String,
    /// libva-drm to load (default libva-drm.so.2).
    #[arg(long, value_name = "PATH", default_value = "libva-drm.so.2")]
    pub libva_drm: String,
    /// Print this recorded report instead of asking libva.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::time::Duration;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn probe_takes_its_options() {
        let cli = Cli::try_parse_from([
            "media-capabilities",
            "probe",
            "--render-node",
            "/dev/dri/renderD129",
            "-o",
            "yaml",
            "--va-driver",
            "8086=i965",
            "--probe-timeout",
            "2s",
        ])
        .unwrap();
        let Some(Command::Probe(args)) = cli.command else {
            panic!("not probe")
        };
        assert_eq!(args.output, OutputFormat::Yaml);
        assert_eq!(args.probing.probe_timeout, Duration::from_secs(2));
        assert_eq!(args.probing.va_driver.len(), 1);
        assert!(Cli::try_parse_from(["media-capabilities", "probe", "-o", "wide"]).is_err());
    }

    #[test]
    fn a_flag_given_twice_takes_its_last_value() {
        // As a patch appending to the DaemonSet's args would give them.
        let cli = Cli::try_parse_from([
            "media-capabilities",
            "--node-name",
            "a",
            "--probe-timeout",
            "2s",
            "--node-name",
            "b",
            "--probe-timeout",
            "3s",
            "--va-driver",
            "8086=i965",
            "--va-driver",
            "1002=radeonsi",
        ])
        .unwrap();
        assert_eq!(cli.agent.node_name.as_deref(), Some("b"));
        assert_eq!(cli.agent.probing.probe_timeout, Duration::from_secs(3));
        // --va-driver is meant to repeat: every one is kept.
        assert_eq!(cli.agent.probing.va_driver.len(), 2);
        let cli = Cli::try_parse_from(["media-capabilities", "probe", "-o", "json", "-o", "yaml"])
            .unwrap();
        let Some(Command::Probe(args)) = cli.command else {
            panic!("not probe")
        };
        assert_eq!(args.output, OutputFormat::Yaml);
    }
}
