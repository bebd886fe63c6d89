//! The agent's configuration: the flags of the bare `media-capabilities` command (each one also
//! from the environment where operators expect it), and their validation. Everything is parsed
//! and checked here, before a socket is bound or the API server is contacted, so a mistake in the
//! DaemonSet shows up as one clear line and exit code 2 instead of a half-started agent.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::agent::kubelet::{self, KubeletArgs};
use crate::agent::probing::{
    DEFAULT_PARALLEL, DEFAULT_TIMEOUT, DriverOverride, Isolation, ProbeCommand, ProbeSource,
};
use crate::names::check_subdomain;
use crate::node::sysfs::Roots;
use crate::node::taint::{self, TaintEffect, TaintPolicy};
use crate::render_drivers::{RenderDriver, UnknownRenderDriver};

/// The default address of the health server (`/healthz`, `/readyz`, `/metrics`).
pub(crate) const DEFAULT_HEALTH_ADDR: &str = "0.0.0.0:8081";

/// The default period of `--reprobe-interval` (see its help for the cost that chose it).
pub(crate) const DEFAULT_REPROBE_INTERVAL: &str = "1m";

/// Where libva loads VA drivers from when `LIBVA_DRIVERS_PATH` is not set: Debian's libva2
/// (the agent's image) is built with `/usr/lib/<multiarch triplet>/dri`.
#[cfg(target_arch = "aarch64")]
pub(crate) const DEFAULT_VA_DRIVERS_PATH: &str = "/usr/lib/aarch64-linux-gnu/dri";
#[cfg(not(target_arch = "aarch64"))]
pub(crate) const DEFAULT_VA_DRIVERS_PATH: &str = "/usr/lib/x86_64-linux-gnu/dri";

/// The directories libva loads VA drivers from: `LIBVA_DRIVERS_PATH` as libva reads it
/// (colon-separated; the probe children inherit it), else [`DEFAULT_VA_DRIVERS_PATH`].
pub(crate) fn va_drivers_dirs(libva_drivers_path: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = libva_drivers_path
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    if dirs.is_empty() {
        vec![PathBuf::from(DEFAULT_VA_DRIVERS_PATH)]
    } else {
        dirs
    }
}

/// The flags of the agent itself (the bare `media-capabilities` command).
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// The node this agent runs on; its slice is `<node>-media.liken.sh`. In the DaemonSet it
    /// comes from the downward API (`spec.nodeName`).
    #[arg(long, env = "NODE_NAME", value_name = "NODE", required = true)]
    pub node_name: Option<String>,

    #[command(flatten)]
    pub probing: ProbingArgs,

    /// For tests and demos: read the GPUs' probes from recorded reports (a file, or a directory
    /// of `probe -o json` records, see docs/report-format.md) instead of probing this machine.
    /// The directory is watched like the render nodes: a change re-reads it.
    #[arg(long, env = "MEDIA_REPORTS", value_name = "DIR")]
    pub reports: Option<PathBuf>,

    #[command(flatten)]
    pub kubelet: KubeletArgs,

    /// Where /healthz, /readyz and /metrics are served (one port for the probes and scraping).
    #[arg(long, env = "HEALTH_ADDR", value_name = "ADDR", default_value = DEFAULT_HEALTH_ADDR)]
    pub health_addr: SocketAddr,

    /// A kubeconfig to reach the API server with (default: the pod's service account, or
    /// $KUBECONFIG and ~/.kube/config outside a cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// How often the render nodes (or the --reports directory) are listed to notice a GPU
    /// appearing or disappearing; a change re-probes and republishes. A listing is one
    /// readdir, so a short interval costs nothing measurable.
    #[arg(long, env = "RESCAN_INTERVAL", value_name = "DURATION", default_value = "10s", value_parser = crate::duration::parse_positive)]
    pub rescan_interval: Duration,

    /// How often every GPU is probed again even when nothing changed on disk, so that a driver
    /// that stops answering (or answers again) shows within one period. A probe that states
    /// what was published costs no API request; a working GPU's failure is confirmed once
    /// before it is published (docs/operations.md). At 1m a GPU is probed 60 times an hour; a
    /// probe is one short child process (its cost is in docs/operations.md).
    #[arg(long, env = "REPROBE_INTERVAL", value_name = "DURATION", default_value = DEFAULT_REPROBE_INTERVAL, value_parser = crate::duration::parse_positive)]
    pub reprobe_interval: Duration,

    /// The key of the taint a GPU whose probe failed carries: media.liken.sh/NAME (NAME: letters,
    /// digits, '-', '_', '.'; at most 63). Its value says why: query-failed, not-answering or
    /// probe-failed.
    #[arg(long, env = "TAINT_KEY", value_name = "KEY", default_value = taint::DEFAULT_KEY)]
    pub taint_key: String,

    /// What that taint does: NoSchedule (new claims do not get the GPU unless they tolerate
    /// it), NoExecute (pods using it are evicted too) or None (informational; Kubernetes 1.35+).
    #[arg(
        long,
        env = "TAINT_EFFECT",
        value_name = "EFFECT",
        default_value = "NoSchedule"
    )]
    pub taint_effect: String,

    /// How often the stored slice is read and compared even without a watch event (reads
    /// only; a write happens only when it differs). A safety net: the watch is the main path.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::duration::parse_positive)]
    pub resync_interval: Duration,

    /// The longest wait between retries when the API server fails (backoff doubles from
    /// 200ms up to this, with jitter).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::duration::parse_positive)]
    pub max_backoff: Duration,

    /// The DRA driver that publishes this node's render nodes: liken.sh, gpu.intel.com,
    /// gpu.nvidia.com or gpu.amd.com. The agent compares that driver's whole GPUs on the node
    /// with the GPUs it can open, and says which it cannot see.
    #[arg(long, env = "RENDER_DRIVER", value_name = "DRIVER", default_value = crate::render_drivers::DEFAULT.name)]
    pub render_driver: String,

    /// How often the kubelet plugin's socket files are checked (re-created when deleted).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = crate::duration::parse_positive)]
    pub socket_recheck_interval: Duration,
}

/// The agent's configuration after validation: what [`crate::agent::run`] works from.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The node; the slice is named after it and owned by its Node object.
    pub node_name: String,
    /// Where the GPUs and their probes come from (live, or recorded with `--reports`).
    pub source: ProbeSource,
    /// What the rescanner lists: the render nodes' directory or the reports.
    pub watched: Watched,
    /// The kubelet plugin's sockets and timings.
    pub kubelet: kubelet::Config,
    /// Where /healthz, /readyz and /metrics are served.
    pub health_addr: SocketAddr,
    /// An explicit kubeconfig; `None` infers (in-cluster first).
    pub kubeconfig: Option<PathBuf>,
    /// How often the watched directory is listed.
    pub rescan_interval: Duration,
    /// How often every GPU is probed again.
    pub reprobe_interval: Duration,
    /// The taint of a GPU whose probe failed.
    pub taints: TaintPolicy,
    /// How often the stored slice is re-read besides the watch.
    pub resync_interval: Duration,
    /// The cap of the retry backoff.
    pub max_backoff: Duration,
    /// The driver whose render nodes the agent compares with its GPUs.
    pub render_driver: &'static RenderDriver,
}

/// The files whose listing tells that what the GPUs state may have changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    /// `/dev/dri`: the names of its `renderD*` entries; and the VA driver files
    /// (`*_drv_video.so`) of the directories libva loads them from: names, sizes, times.
    RenderNodes { dev: PathBuf, drivers: Vec<PathBuf> },
    /// A reports file or directory: names, sizes and modification times.
    Reports(PathBuf),
}

/// A flag value that cannot work; reported as a usage error (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--node-name {name:?} is not a valid node name: {reason} (hint: the DaemonSet sets NODE_NAME from spec.nodeName)"
    )]
    NodeName { name: String, reason: String },
    #[error(
        "the node name is missing (hint: set NODE_NAME or --node-name; the DaemonSet takes it from spec.nodeName)"
    )]
    /// No node name at all.
    NoNodeName,
    /// The reports path does not exist.
    #[error("--reports {path}: {reason} (hint: give a recorded probe file or a directory of them)")]
    Reports { path: PathBuf, reason: String },
    /// The kubeconfig file does not exist.
    #[error("--kubeconfig {path}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    /// A render driver the table does not know.
    #[error("--render-driver: {0}")]
    RenderDriver(#[from] UnknownRenderDriver),
    /// The taint key is not one the API server takes in our domain.
    #[error(
        "--taint-key {key:?} cannot be this agent's taint key: {reason} (hint: valid keys are media.liken.sh/NAME, NAME of letters, digits, '-', '_' and '.', at most 63, a letter or digit at both ends, such as {default})",
        default = taint::DEFAULT_KEY
    )]
    TaintKey {
        key: String,
        #[source]
        reason: taint::KeyError,
    },
    /// The taint effect is not one the API has.
    #[error("--taint-effect {0}")]
    TaintEffect(#[source] taint::EffectError),
    /// The agent's own executable (which probes re-run) cannot be found.
    #[error("find this program to run probes with: {0}")]
    CurrentExe(std::io::Error),
}

/// Where GPUs are found and how their drivers are asked (shared by the agent and `probe`).
#[derive(Clone, Debug, clap::Args)]
pub struct ProbingArgs {
    /// Directory holding the render nodes.
    #[arg(long, value_name = "DIR", default_value = "/dev/dri")]
    pub dev_root: PathBuf,
    /// sysfs mount point, where each render node's PCI identity is read.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sys_root: PathBuf,
    /// The PCI ID database (default: /usr/share/misc/pci.ids, then /usr/share/hwdata/pci.ids;
    /// without one, names are published as vendor:product).
    #[arg(long, value_name = "FILE")]
    pub pci_ids: Option<PathBuf>,
    /// How long one GPU's probe may take before it is killed (e.g. 15s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::duration::parse_positive)]
    pub probe_timeout: Duration,
    /// How many GPUs are probed at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PARALLEL, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub probe_parallel: usize,
    /// Force a VA driver for one GPU (PCI address) or one vendor (PCI vendor ID), e.g.
    /// 0000:03:00.0=radeonsi or 8086=i965; repeatable. LIBVA_DRIVER_NAME is ignored because it
    /// would apply to every GPU.
    #[arg(long, value_name = "KEY=NAME")]
    pub va_driver: Vec<DriverOverride>,
}

impl Default for ProbingArgs {
    fn default() -> Self {
        ProbingArgs {
            dev_root: "/dev/dri".into(),
            sys_root: "/sys".into(),
            pci_ids: None,
            probe_timeout: DEFAULT_TIMEOUT,
            probe_parallel: DEFAULT_PARALLEL,
            va_driver: Vec::new(),
        }
    }
}

impl AgentArgs {
    /// Checks every value and builds the configuration; nothing is started here.
    pub fn validate(&self) -> Result<AgentConfig, ConfigError> {
        let node_name = self.node_name.clone().ok_or(ConfigError::NoNodeName)?;
        let render_driver = RenderDriver::parse(&self.render_driver)?;
        check_subdomain(&node_name).map_err(|reason| ConfigError::NodeName {
            name: node_name.clone(),
            reason: reason.to_string(),
        })?;
        taint::check_key(&self.taint_key).map_err(|reason| ConfigError::TaintKey {
            key: crate::text::one_line(&self.taint_key, 80),
            reason,
        })?;
        let effect: TaintEffect = self
            .taint_effect
            .parse()
            .map_err(ConfigError::TaintEffect)?;
        if let Some(path) = &self.kubeconfig
            && !path.is_file()
        {
            return Err(ConfigError::Kubeconfig {
                path: path.clone(),
                reason: "no such file".into(),
            });
        }
        let (source, watched) = match &self.reports {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError::Reports {
                        path: path.clone(),
                        reason: "no such file or directory".into(),
                    });
                }
                (
                    ProbeSource::Recorded(path.clone()),
                    Watched::Reports(path.clone()),
                )
            }
            None => {
                let p = &self.probing;
                let source = ProbeSource::Live {
                    roots: Roots {
                        dev: p.dev_root.clone(),
                        sys: p.sys_root.clone(),
                    },
                    pci_ids: p.pci_ids.clone(),
                    only: None,
                    isolation: Isolation {
                        command: ProbeCommand::current_exe().map_err(ConfigError::CurrentExe)?,
                        timeout: p.probe_timeout,
                        parallel: p.probe_parallel,
                        overrides: p.va_driver.clone(),
                    },
                };
                let drivers = va_drivers_dirs(std::env::var_os("LIBVA_DRIVERS_PATH").as_deref());
                let watched = Watched::RenderNodes {
                    dev: p.dev_root.clone(),
                    drivers,
                };
                (source, watched)
            }
        };
        let mut kubelet = self.kubelet.config();
        kubelet.recheck_interval = self.socket_recheck_interval;
        Ok(AgentConfig {
            node_name,
            source,
            watched,
            kubelet,
            health_addr: self.health_addr,
            kubeconfig: self.kubeconfig.clone(),
            rescan_interval: self.rescan_interval,
            reprobe_interval: self.reprobe_interval,
            taints: TaintPolicy {
                key: self.taint_key.clone(),
                effect,
            },
            resync_interval: self.resync_interval,
            max_backoff: self.max_backoff,
            render_driver,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::cli::Cli;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("media-capabilities").chain(args.iter().copied()))
    }

    #[test]
    fn the_bare_command_takes_the_agent_flags() {
        let cli = parse(&[
            "--node-name",
            "gpu-1",
            "--reports",
            "docs/examples/fleet/amd-1",
            "--health-addr",
            "127.0.0.1:9000",
            "--rescan-interval",
            "500ms",
            "--kubelet-registry-dir",
            "/tmp/reg",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        let config = cli.agent.validate().unwrap();
        assert_eq!(config.node_name, "gpu-1");
        assert_eq!(config.health_addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.rescan_interval, Duration::from_millis(500));
        assert_eq!(config.reprobe_interval, Duration::from_secs(60));
        assert_eq!(config.kubelet.registry_dir, PathBuf::from("/tmp/reg"));
        assert!(matches!(config.source, ProbeSource::Recorded(_)));
    }

    #[test]
    fn the_va_driver_files_are_where_libva_loads_them_from() {
        assert_eq!(
            va_drivers_dirs(None),
            [PathBuf::from(DEFAULT_VA_DRIVERS_PATH)]
        );
        assert_eq!(
            va_drivers_dirs(Some("/opt/dri:/usr/local/dri".as_ref())),
            [PathBuf::from("/opt/dri"), PathBuf::from("/usr/local/dri")]
        );
        assert_eq!(
            va_drivers_dirs(Some("".as_ref())),
            [PathBuf::from(DEFAULT_VA_DRIVERS_PATH)]
        );
    }

    #[test]
    fn subcommands_do_not_need_a_node_name() {
        let cli = parse(&["probe", "--from", "x.json"]).unwrap();
        assert!(cli.command.is_some());
    }

    #[test]
    fn bad_values_are_refused_before_anything_starts() {
        let bad_name = parse(&["--node-name", "Not_A_Node"]).unwrap();
        let err = bad_name.agent.validate().unwrap_err().to_string();
        assert!(err.contains("not a valid node name"), "{err}");
        let missing = parse(&["--node-name", "n1", "--reports", "/nonexistent/reports"]).unwrap();
        let err = missing.agent.validate().unwrap_err().to_string();
        assert!(err.contains("no such file or directory"), "{err}");
        assert!(parse(&["--node-name", "n1", "--health-addr", "localhost"]).is_err());
        assert!(parse(&["--node-name", "n1", "--max-backoff", "0s"]).is_err());
    }

    #[test]
    fn the_taint_is_ours_by_default_and_a_bad_key_or_effect_names_the_valid_ones() {
        let config = parse(&[
            "--node-name",
            "n1",
            "--reports",
            "docs/examples/fleet/amd-1",
        ])
        .unwrap()
        .agent
        .validate()
        .unwrap();
        assert_eq!(config.taints, TaintPolicy::default());
        let chosen = parse(&[
            "--node-name",
            "n1",
            "--reports",
            "docs/examples/fleet/amd-1",
            "--taint-key",
            "media.liken.sh/gpu-lost",
            "--taint-effect",
            "NoExecute",
        ])
        .unwrap()
        .agent
        .validate()
        .unwrap();
        assert_eq!(
            chosen.taints,
            TaintPolicy {
                key: "media.liken.sh/gpu-lost".into(),
                effect: TaintEffect::NoExecute
            }
        );
        let err = parse(&["--node-name", "n1", "--taint-key", "gpu.nvidia.com/xid"])
            .unwrap()
            .agent
            .validate()
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--taint-key \"gpu.nvidia.com/xid\" cannot be this agent's taint key: it is not in the media.liken.sh domain (hint: valid keys are media.liken.sh/NAME, NAME of letters, digits, '-', '_' and '.', at most 63, a letter or digit at both ends, such as media.liken.sh/unhealthy)"
        );
        let err = parse(&["--node-name", "n1", "--taint-effect", "PreferNoSchedule"])
            .unwrap()
            .agent
            .validate()
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "--taint-effect \"PreferNoSchedule\" is not a device taint effect (hint: valid effects are NoSchedule, NoExecute and None; the nearest is NoSchedule)"
        );
    }
}
