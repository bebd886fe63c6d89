//! `kubectl media caps`: what every GPU in the fleet states, at a glance. Collects the
//! ResourceSlices (from the cluster or `-f` files), builds the [`Inventory`], and renders it as a
//! table, a wide table with one column per capability, JSON or YAML records, or a summary.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use clap::Args;
use serde::Serialize;

use crate::catalogue::{self, Capability, Group, Identity};
use crate::cli::output::{self, RenderError};
use crate::cli::table::{Cell, Grid, Paint, TableStyle, Width};
use crate::cli::{CapabilityFlags, Error, FileArgs, Global, Io};
use crate::ffprobe::Played;
use crate::fleet::cluster::Cluster;
use crate::fleet::files;
use crate::fleet::holders::{self, Hold, Holders};
use crate::fleet::inventory::{
    self, Counts, Drift, Filter, Gpu, Inventory, RenderProblem, Statements, Status, TaintedDevice,
};
use crate::render_drivers;

use crate::fleet::objects::{Kind, Kinds, Objects};
use ustr::Ustr;

/// Deletes the agent's pod on one node (the DaemonSet makes a new one, with a new claim); the
/// node name follows.
const AGENT_POD_DELETE: &str = "kubectl -n liken-system delete pod -l app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName";

/// Every line fits 70 columns, as `why`'s examples do (see there).
const EXAMPLES: &str = "\
Examples:
  # Every GPU and what its driver states
  kubectl media caps

  # The GPUs that decode 10-bit HEVC and scale 10-bit frames, with a
  # count (the table's shorthand works too: --decode HEVC-10
  # --scale 10)
  kubectl media caps --decode HEVCMain10 --scale 10bit

  # How many GPUs and nodes state each capability, and which models
  # drift
  kubectl media caps --summary

  # Full names and one column per capability; or records for scripts
  kubectl media caps -o wide
  kubectl media caps -o json \\
    | jq '.[] | select(.attributes.decodeAV1Main10)'

  # From saved objects instead of a cluster
  kubectl get resourceslices -o yaml > fleet.yaml
  kubectl media caps -f fleet.yaml";

/// Lists every GPU's statements from the media.liken.sh slices, beside liken's render nodes.
#[derive(Debug, Clone, Args)]
#[command(after_help = EXAMPLES)]
pub struct CapsArgs {
    #[command(flatten)]
    pub input: FileArgs,

    /// Only the GPUs of this node; repeat or give a comma list.
    #[arg(long, value_name = "NODE", value_delimiter = ',')]
    pub node: Vec<String>,

    #[command(flatten)]
    pub capabilities: CapabilityFlags,

    /// Per status and per capability, how many GPUs and nodes; then the models that drift.
    #[arg(long)]
    pub summary: bool,

    /// Output format: wide adds the PCI address, the full GPU name and VA driver string and one
    /// column per capability; json and yaml print one record per GPU with every attribute.
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    pub output: Option<CapsFormat>,

    /// Print no header row and no notes below the table.
    #[arg(long)]
    pub no_headers: bool,

    /// For each GPU, the claims that hold its render node or media device, their requests, and
    /// the pods they are reserved for (reads ResourceClaims in every namespace).
    #[arg(long)]
    pub claims: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CapsFormat {
    /// The table with the address, full names and one column per capability.
    Wide,
    /// One JSON record per GPU.
    Json,
    /// One YAML record per GPU.
    Yaml,
}

impl CapsArgs {
    /// The filter the flags ask for, with what the `--for` files need.
    pub(crate) fn filter(&self, played: &[Played]) -> Result<Filter, catalogue::UnknownCapability> {
        let mut capabilities = self.capabilities.with_played(played)?;
        capabilities.sort();
        capabilities.dedup();
        Ok(Filter {
            nodes: self.node.clone(),
            capabilities,
            files: played
                .iter()
                .map(|p| {
                    let streams: Vec<&str> =
                        p.streams.iter().map(|n| n.description.as_str()).collect();
                    (p.path.clone(), streams.join(" + "))
                })
                .collect(),
        })
    }

    /// Flags that cannot go together, as a usage message.
    pub(crate) fn conflict(&self) -> Option<String> {
        if self.summary && self.output == Some(CapsFormat::Wide) {
            return Some(
                "--summary has no wide form (hint: drop -o wide, or use -o json for the figures)"
                    .into(),
            );
        }
        if self.claims && self.summary {
            return Some(
                "--claims lists holders and --summary counts them: give one (hint: --summary \
                 alone has the counts of held GPUs and claims)"
                    .into(),
            );
        }
        if self.claims && self.output == Some(CapsFormat::Wide) {
            return Some(
                "--claims has no wide form (hint: drop -o wide; -o wide alone counts each GPU's \
                 claims, and -o json lists them with --claims)"
                    .into(),
            );
        }
        if self.no_headers && matches!(self.output, Some(CapsFormat::Json | CapsFormat::Yaml)) {
            return Some("--no-headers applies to tables only (hint: drop --no-headers with -o json or -o yaml)".into());
        }
        None
    }
}

/// Runs `caps`: reads the slices, builds the inventory, renders it.
pub(crate) fn run(args: &CapsArgs, global: &Global, io: &mut Io<'_>) -> Result<(), Error> {
    if let Some(conflict) = args.conflict() {
        return Err(Error::Usage(conflict));
    }
    // Flags first, so that a typo is told before ffprobe runs.
    args.filter(&[])?;
    let played = args.capabilities.played()?;
    crate::cli::warn_played(io, global, &played);
    let filter = args.filter(&played)?;
    if filter.nodes.iter().any(|n| n.trim().is_empty()) {
        return Err(Error::Usage(
            "--node is empty (hint: name a node, e.g. --node gpu-node-1, or leave --node out for \
             every node)"
                .into(),
        ));
    }
    // Slices, and in files the agent's pods where a dump holds them (for the log hints); claims
    // where the output shows who holds a GPU (the default table does not, so it reads none).
    let wants_claims = args.claims || args.summary || args.output.is_some();
    let kinds: &[Kind] = if wants_claims {
        &[Kind::ResourceSlice, Kind::Pod, Kind::ResourceClaim]
    } else {
        &[Kind::ResourceSlice, Kind::Pod]
    };
    // Of claims, only what they hold: the whole claim costs far more to read.
    let mut objects = Objects::wanting(Kinds::only(kinds).claims_as_allocations());
    let mut claims_unread = None;
    // From a cluster, the runtime and client stay for the agent-pod lookup of the notes.
    let sources = args.input.sources()?;
    let connected = if let Some(sources) = sources {
        files::read_into(&mut objects, &sources, io.stdin)?;
        None
    } else {
        let connection = global.kube.connection();
        // One worker drives the requests; pages are parsed on the runtime's blocking threads
        // while the next one is fetched (see `Cluster::list`).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let cluster = runtime.block_on(async {
            let cluster = Cluster::connect(&connection).await?;
            cluster.list_slices(&mut objects).await?;
            if wants_claims {
                claims_unread = list_claims(&cluster, &mut objects).await;
            }
            Ok::<_, crate::fleet::cluster::ClusterError>(cluster)
        })?;
        Some((runtime, cluster))
    };
    let warn = global.color.for_stderr();
    let warning = |io: &mut Io<'_>, note: &str| crate::cli::warn(io.stderr, &warn, note);
    for note in &objects.notes {
        warning(io, note);
    }
    let file_pods = std::mem::take(&mut objects.pods);
    let no_slices = objects.slices.is_empty();
    let inventory = inventory::build(objects.slices);
    let claims = if !wants_claims {
        Claims::NotRead
    } else if let Some(forbidden) = claims_unread {
        warning(
            io,
            &format!("the claims that hold each GPU are left out: {forbidden}"),
        );
        Claims::Unknown
    } else {
        // The files stand for the cluster, as with `why -f`: no claim in them is no holder.
        // Asked for holders, the likelier story is a dump without claims, so say so.
        if args.claims && connected.is_none() && objects.allocated.is_empty() {
            warning(
                io,
                "the files hold no ResourceClaims, so no GPU shows a holder (hint: add them: \
                 kubectl get resourceclaims -A -o yaml > claims.yaml, then -f claims.yaml)",
            );
        }
        Claims::Known(holders::holders(&inventory, &objects.allocated))
    };
    // As kubectl: an empty table is a line on stderr; JSON and YAML stay parseable (`[]`).
    let table = !matches!(args.output, Some(CapsFormat::Json | CapsFormat::Yaml));
    if inventory.gpus.is_empty() && table {
        // From files that hold no slice at all, the likelier story is the wrong file.
        let why = if connected.is_none() && no_slices {
            " (the files hold no ResourceSlices)"
        } else {
            ""
        };
        let _ = writeln!(
            io.stderr,
            "No media.liken.sh devices or render nodes found{why}."
        );
        return Ok(());
    }
    if !inventory.gpus.is_empty() {
        check_nodes(&inventory, &filter.nodes)?;
    }
    let text = match args.output {
        Some(CapsFormat::Json) | Some(CapsFormat::Yaml) => {
            let value = if args.summary {
                serde_json::to_value(summary_record(&inventory, &filter, &claims))
            } else {
                serde_json::to_value(records(&inventory, &filter, &claims, args.claims))
            }
            .map_err(RenderError::from)?;
            if args.output == Some(CapsFormat::Json) {
                let mut text = serde_json::to_string_pretty(&value).map_err(RenderError::from)?;
                text.push('\n');
                text
            } else {
                crate::cli::yaml::to_string(&value)
            }
        }
        _ => {
            let terminal = Width::of_stdout();
            let wide = args.output == Some(CapsFormat::Wide);
            let style = TableStyle {
                colored: global.color.for_stdout().colored,
                // `-o wide` never squeezes: like `kubectl get -o wide` it may run past the
                // terminal's edge, to be wrapped by the terminal or paged.
                width: if wide { Width::Unlimited } else { terminal },
                notes_width: terminal,
                no_headers: args.no_headers,
            };
            let logs = if style.no_headers {
                AgentLogs::default()
            } else {
                let nodes = log_nodes(&inventory, &filter);
                match &connected {
                    Some((runtime, cluster)) if !nodes.is_empty() => {
                        let (logs, trouble) = runtime.block_on(agent_logs(cluster, &nodes));
                        if let Some(trouble) = trouble {
                            warning(io, &trouble);
                        }
                        logs
                    }
                    _ => AgentLogs::from_pods(&file_pods, &nodes),
                }
            };
            let logs = AgentLogs {
                same_files: args.input.same_files(),
                ..logs
            };
            if args.summary {
                render_summary(&inventory, &filter, &claims, &logs, &style)
            } else if args.claims {
                render_claims(&inventory, &filter, &claims, &style)
            } else {
                render_table(&inventory, &filter, wide, &claims, &logs, &style)
            }
        }
    };
    output::write_all(io.stdout, &text)?;
    // The holds borrow the claims: released first.
    io.release(claims);
    io.release(objects.allocated);
    io.release(inventory);
    Ok(())
}

/// Every `--node` must name a node of the fleet: a typo would otherwise show an empty table, as
/// if the node had no GPU.
fn check_nodes(inventory: &Inventory, asked: &[String]) -> Result<(), Error> {
    if asked.is_empty() {
        return Ok(());
    }
    let known: BTreeSet<&str> = inventory.gpus.iter().map(|g| g.node.as_str()).collect();
    for node in asked {
        if known.contains(node.as_str()) {
            continue;
        }
        let nearest = nearest_nodes(node, &known);
        return Err(Error::NotFound(format!(
            "--node {node:?}: no GPU of the fleet is on a node of that name (hint: the nearest \
             names with GPUs: {}{})",
            nearest.join(", "),
            if known.len() > nearest.len() {
                format!("; {} nodes in all", known.len())
            } else {
                String::new()
            }
        )));
    }
    Ok(())
}

/// The three node names closest to a typed one: the longest common prefix first (node names
/// differ at their end: `edge-1-2`, `edge-1-10`), then edit distance, then natural order.
pub(crate) fn nearest_nodes<'a>(typed: &str, known: &BTreeSet<&'a str>) -> Vec<&'a str> {
    let mut ranked: Vec<(std::cmp::Reverse<usize>, usize, &str)> = known
        .iter()
        .map(|&name| {
            let prefix = typed
                .chars()
                .zip(name.chars())
                .take_while(|(a, b)| a.eq_ignore_ascii_case(b))
                .count();
            let distance = strsim::damerau_levenshtein(
                &typed.to_ascii_lowercase(),
                &name.to_ascii_lowercase(),
            );
            (std::cmp::Reverse(prefix), distance, name)
        })
        .collect();
    ranked.sort_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| inventory::natural_cmp(a.2, b.2))
    });
    // Names that share nothing with the input are no hint; with none close, the first few.
    let close: Vec<&str> = ranked
        .iter()
        .filter(|(prefix, distance, name)| prefix.0 >= 2 || *distance <= (name.len() / 3).max(2))
        .take(3)
        .map(|&(_, _, n)| n)
        .collect();
    if close.is_empty() {
        let mut first: Vec<&str> = known.iter().copied().collect();
        first.sort_by(|a, b| inventory::natural_cmp(a, b));
        first.truncate(3);
        return first;
    }
    close
}

/// The table's GPU name: pci.ids writes `chip [marketing names]` (`DG2 [Arc A770]`, `Navi 31
/// [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]`); the table shows the chip, which is what decides
/// the media engine, and a name without brackets whole. The full name is in `-o wide`, JSON and
/// YAML.
pub(crate) fn short_gpu_name(name: &str) -> &str {
    match name.split_once(" [") {
        Some((chip, rest)) if !chip.trim().is_empty() && rest.ends_with(']') => chip.trim(),
        _ => name,
    }
}

/// How long an unrecognised VA driver string may be in the table before it is cut.
pub(crate) const VA_DRIVER_SHORT: usize = 20;

/// The table's VA driver: the driver's own name and version, read from its vendor string by the
/// forms the drivers write (libva-facts §5):
///
/// - `Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()` → `iHD 24.2.4` (`Intel <name> driver
///   ... - <version>`, also i965: `i965 2.4.1`);
/// - `Mesa Gallium driver 23.0.0-devel for Radeon RX 7900 XTX (...)` → `Mesa 23.0.0-devel`;
/// - `VA-API NVDEC driver [direct backend]` (nvidia-vaapi-driver) → `NVDEC`.
///
/// A version must start with a digit. Any other string is shown whole up to 20 characters, else
/// cut at a word boundary with `…`: never a guessed name. The full string is in `-o wide`, JSON
/// and YAML.
pub(crate) fn short_va_driver(vendor: &str) -> String {
    let version = |text: &str| {
        text.split_whitespace()
            .next()
            .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string)
    };
    let known = if let Some(rest) = vendor.strip_prefix("Intel ") {
        // "Intel iHD driver ... - 24.2.4 (...)": the name, then the version after the last " - ".
        rest.split_once(" driver").and_then(|(name, tail)| {
            let name = name.trim();
            let (_, after) = tail.rsplit_once(" - ")?;
            (!name.is_empty() && !name.contains(' '))
                .then_some(())
                .and_then(|()| version(after))
                .map(|v| format!("{name} {v}"))
        })
    } else if let Some(rest) = vendor.strip_prefix("Mesa Gallium driver ") {
        version(rest).map(|v| format!("Mesa {v}"))
    } else if vendor == "VA-API NVDEC driver" || vendor.starts_with("VA-API NVDEC driver ") {
        Some("NVDEC".to_string())
    } else {
        None
    };
    known.unwrap_or_else(|| crate::cli::table::truncate(vendor, VA_DRIVER_SHORT).into_owned())
}

/// A group's cell in the table: `all` when the GPU states every capability of the group, `all
/// but X Y` when it lacks fewer than it states, else the stated ones by their shorthand; `-` for
/// none. Scaling lists its depths (`8 10`).
pub(crate) fn group_cell(gpu: &Gpu, group: Group) -> String {
    if gpu.device.is_none() {
        return "-".into();
    }
    let (stated, missing): (Vec<Capability>, Vec<Capability>) = group
        .capabilities()
        .partition(|&c| gpu.states(c) == Some(true));
    let labels = |caps: &[Capability]| caps.iter().map(|c| c.label()).collect::<Vec<_>>().join(" ");
    match (group, stated.len(), missing.len()) {
        (_, 0, _) => "-".into(),
        (Group::Scale, _, _) => labels(&stated),
        (_, _, 0) => "all".into(),
        (_, s, m) if m < s => format!("{ALL_BUT}{}", labels(&missing)),
        _ => labels(&stated),
    }
}

/// A [`group_cell`] in the table: `all but` is never cut after `all`, which alone would read as
/// its opposite (`all but …` at the narrowest).
fn group_table_cell(text: &str) -> Cell {
    let head = if text.starts_with(ALL_BUT) { 2 } else { 1 };
    Cell::plain(text).keeping(head)
}

/// How [`group_cell`] starts the list of what a GPU lacks.
const ALL_BUT: &str = "all but ";

/// The short status word of a row.
pub(crate) fn status_word(gpu: &Gpu) -> &'static str {
    match (&gpu.status, gpu.drift) {
        (Status::Described, _) if unpaired(gpu) => "no render device",
        (Status::Described, _) if gpu.blocking_taint().is_some() => "tainted",
        (Status::Described, None) => "ok",
        (Status::Described, Some(_)) => "drift",
        (Status::ProbeFailed, _) => "probe failed",
        (Status::Incomplete { .. }, _) => "incomplete",
        (
            Status::NotDescribed {
                agent_on_node: true,
            },
            _,
        ) => "not probed",
        (
            Status::NotDescribed {
                agent_on_node: false,
            },
            _,
        ) => "no agent",
    }
}

/// A GPU a media device states, on a node where a render driver publishes, with no whole-GPU
/// render device at its address: a claim that pairs the two by `pciBusID` never lands on it.
fn unpaired(gpu: &Gpu) -> bool {
    gpu.device.is_some() && gpu.render.is_none() && gpu.render_on_node
}

/// Every status word, in the order `--summary` lists them.
pub(crate) const STATUS_WORDS: [&str; 8] = [
    "ok",
    "drift",
    "tainted",
    "no render device",
    "probe failed",
    "incomplete",
    "not probed",
    "no agent",
];

fn status_paint(gpu: &Gpu) -> Option<Paint> {
    match (&gpu.status, gpu.drift) {
        (Status::Described, _) if unpaired(gpu) => Some(Paint::Red),
        (Status::Described, _) if gpu.blocking_taint().is_some() => Some(Paint::Yellow),
        (Status::Described, None) => None,
        (Status::Described, Some(_)) | (Status::Incomplete { .. }, _) => Some(Paint::Yellow),
        (Status::ProbeFailed, _) | (Status::NotDescribed { .. }, _) => Some(Paint::Red),
    }
}

/// `driver/device` of the GPU's render device, `-` when none pairs with it.
fn render_cell(gpu: &Gpu) -> String {
    match gpu.render {
        Some(r) => format!("{}/{}", r.driver, r.device),
        None => "-".into(),
    }
}

fn dash(value: Option<&str>) -> String {
    value.filter(|v| !v.is_empty()).unwrap_or("-").to_string()
}

fn status_cell(gpu: &Gpu) -> Cell {
    let mut status = status_word(gpu).to_string();
    if let Some(index) = gpu.drift {
        let _ = write!(status, " [{}]", index + 1);
    }
    // Why the scheduler keeps claims off it: the first taint that does, and how many more.
    let mut blocking = gpu.taints.iter().filter(|t| t.blocks());
    if let Some(first) = blocking.next() {
        let _ = write!(status, " ({}", first.reason());
        match blocking.count() {
            0 => status.push(')'),
            more => {
                let _ = write!(status, ", +{more})");
            }
        }
    }
    Cell::painted(status, status_paint(gpu))
}

/// `-o wide`'s TAINTS: each taint `key=value:effect`, the render device's marked so.
fn taints_cell(gpu: &Gpu) -> String {
    if gpu.taints.is_empty() {
        return "-".into();
    }
    let written: Vec<String> = gpu
        .taints
        .iter()
        .map(|t| match t.on {
            TaintedDevice::Media => t.written(),
            TaintedDevice::Render => format!("{} (render)", t.written()),
        })
        .collect();
    written.join(", ")
}

/// The table (`-o wide` when `wide`), then the notes that explain its marks.
///
/// The default columns are chosen so that a mixed fleet reads one line per GPU at 120 columns:
/// NODE, the GPU's chip, the VA driver's short name, what it decodes, encodes and scales, and the
/// status. `-o wide` adds the device, the PCI address, the kernel driver, the full GPU name and
/// VA driver string, vendor and product, and one column per capability.
pub(crate) fn render_table(
    inventory: &Inventory,
    filter: &Filter,
    wide: bool,
    claims: &Claims,
    logs: &AgentLogs,
    style: &TableStyle,
) -> String {
    use crate::cli::table::Fit::{Keep, Shrink, ShrinkFirst};
    let (header, fits): (Vec<String>, Vec<_>) = if wide {
        let mut columns: Vec<(String, _)> = [
            ("NODE", Keep),
            ("DEVICE", Keep),
            ("GPU", Keep),
            ("ADDRESS", Keep),
            ("RENDER", Keep),
            ("DRIVER", Keep),
            ("VA DRIVER", Keep),
            ("VENDOR", Keep),
            ("PRODUCT", Keep),
        ]
        .map(|(h, f)| (h.to_string(), f))
        .to_vec();
        columns.extend(Capability::ALL.iter().map(|c| (wide_header(*c), Keep)));
        columns.push((CLAIMS_HEADER.into(), Keep));
        columns.push(("TAINTS".into(), Keep));
        columns.push(("STATUS".into(), Keep));
        columns.into_iter().unzip()
    } else {
        [
            ("NODE", Keep),
            ("GPU", ShrinkFirst),
            ("VA DRIVER", ShrinkFirst),
            ("DECODE", Shrink),
            ("ENCODE", Shrink),
            ("SCALE", Keep),
            ("STATUS", Keep),
        ]
        .map(|(h, f)| (h.to_string(), f))
        .into_iter()
        .unzip()
    };

    let (indices, selected): (Vec<usize>, Vec<&Gpu>) = inventory.select_indexed(filter).unzip();
    // A fleet has a few VA drivers and capability sets and tens of thousands of GPUs: each
    // distinct one is shortened or grouped once.
    let mut va_drivers: HashMap<Ustr, String> = HashMap::new();
    let mut groups: HashMap<(Statements, bool), [String; 3]> = HashMap::new();
    let rows = selected
        .iter()
        .zip(&indices)
        .map(|(gpu, &index)| {
            if wide {
                let mut row = vec![
                    Cell::plain(gpu.node.as_str()),
                    Cell::plain(dash(gpu.device.as_deref())),
                    Cell::plain(dash(gpu.name.as_deref())),
                    Cell::plain(dash(Some(&gpu.address))),
                    Cell::plain(render_cell(gpu)),
                    Cell::plain(dash(gpu.kernel_driver.as_deref())),
                    Cell::plain(dash(gpu.va_driver.as_deref())),
                    Cell::plain(dash(gpu.vendor.as_deref())),
                    Cell::plain(dash(gpu.product.as_deref())),
                ];
                for capability in Capability::ALL {
                    row.push(match (gpu.device.is_some(), gpu.states(capability)) {
                        (false, _) => Cell::plain("-"),
                        (true, Some(true)) => Cell::painted("yes", Some(Paint::Green)),
                        (true, Some(false)) => Cell::plain("no"),
                        (true, None) => Cell::painted("?", Some(Paint::Yellow)),
                    });
                }
                row.push(Cell::plain(claims_cell(claims, index, gpu)));
                row.push(Cell::plain(taints_cell(gpu)));
                row.push(status_cell(gpu));
                row
            } else {
                let va_driver = gpu.va_driver.map(|v| {
                    va_drivers
                        .entry(v)
                        .or_insert_with(|| short_va_driver(&v))
                        .as_str()
                });
                let [decode, encode, scale] = groups
                    .entry((gpu.capabilities, gpu.device.is_some()))
                    .or_insert_with(|| {
                        [Group::Decode, Group::Encode, Group::Scale].map(|g| group_cell(gpu, g))
                    });
                vec![
                    Cell::plain(gpu.node.as_str()),
                    Cell::plain(dash(gpu.name.as_deref().map(short_gpu_name))),
                    Cell::plain(dash(va_driver)),
                    group_table_cell(decode),
                    group_table_cell(encode),
                    Cell::plain(scale.clone()),
                    status_cell(gpu),
                ]
            }
        })
        .collect();
    let grid = Grid { header, rows, fits };
    let mut out = if selected.is_empty() && style.no_headers {
        String::new()
    } else {
        grid.render(style)
    };
    push_notes(&mut out, inventory, &selected, filter, logs, style, true);
    out
}

/// The notes below a table, after a blank line, wrapped at the terminal's width; none with
/// `--no-headers`. `marked`: the rows carry `drift [1]` marks for the drift notes to name.
fn push_notes(
    out: &mut String,
    inventory: &Inventory,
    shown: &[&Gpu],
    filter: &Filter,
    logs: &AgentLogs,
    style: &TableStyle,
    marked: bool,
) {
    if style.no_headers {
        return;
    }
    let notes = notes(inventory, shown, filter, logs, marked);
    if !notes.is_empty() {
        let limit = style.notes_width.limit();
        out.push('\n');
        for note in notes {
            out.push_str(&crate::cli::table::wrap_note(&note, limit));
            out.push('\n');
        }
    }
}

/// What is known of the claims that hold the fleet's GPUs.
pub(crate) enum Claims<'a> {
    /// Not read: the default table shows no holders.
    NotRead,
    Known(Holders<'a>),
    /// Not readable (a role that may not list claims, say); a warning said why.
    Unknown,
}

impl Claims<'_> {
    /// How many claims hold the GPU's render node and its media device.
    fn counts(&self, gpu: usize) -> Option<(usize, usize)> {
        match self {
            Claims::Known(holders) => Some(holders.counts(gpu)),
            Claims::NotRead | Claims::Unknown => None,
        }
    }
}

/// The `-o wide` column of claim counts.
const CLAIMS_HEADER: &str = "CLAIMS (RENDER/MEDIA)";

/// `2/1`: claims on the render node, then on the media device (`-` for a GPU without one);
/// `?` when the claims could not be read.
fn claims_cell(claims: &Claims, index: usize, gpu: &Gpu) -> String {
    match claims.counts(index) {
        Some((render, media)) if gpu.device.is_some() => format!("{render}/{media}"),
        Some((render, _)) => format!("{render}/-"),
        None => "?".into(),
    }
}

/// Lists every ResourceClaim, in every namespace: a GPU is held from any of them. A role that
/// may not list them (403) is common for a reader of slices; that, or any other failure, is
/// returned as the reason the holders are left out, rather than failing `caps` over them (as
/// with the agent pods of the log hints).
async fn list_claims(cluster: &Cluster, objects: &mut Objects) -> Option<String> {
    use crate::fleet::cluster::{ListRequest, Namespaces};
    let request = ListRequest {
        kind: Kind::ResourceClaim,
        namespaces: &Namespaces::All,
        label_selector: None,
        field_selector: None,
    };
    let mut claims = Objects::wanting(Kinds::only(&[Kind::ResourceClaim]).claims_as_allocations());
    match cluster.list(&request, &mut claims).await {
        Ok(()) => {
            objects.allocated = claims.allocated;
            objects.notes.extend(claims.notes);
            None
        }
        Err(error) => Some(error.to_string()),
    }
}

/// `--claims`: one row per GPU, claim and pod that holds it (`-` for a claim reserved for no
/// pod); GPUs nobody holds are left out, and counted in the last line.
pub(crate) fn render_claims(
    inventory: &Inventory,
    filter: &Filter,
    claims: &Claims,
    style: &TableStyle,
) -> String {
    use crate::cli::table::Fit::{Keep, ShrinkFirst};
    let Claims::Known(holders) = claims else {
        return String::new();
    };
    let (header, fits): (Vec<String>, Vec<_>) = [
        ("NODE", Keep),
        ("GPU", ShrinkFirst),
        ("ADDRESS", Keep),
        ("POD", Keep),
        ("CLAIM", Keep),
        ("REQUEST", Keep),
        ("HOLDS", Keep),
    ]
    .map(|(h, f)| (h.to_string(), f))
    .into_iter()
    .unzip();
    let mut rows = Vec::new();
    let (mut shown, mut held) = (0, 0);
    let mut holding: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (index, gpu) in inventory.select_indexed(filter) {
        shown += 1;
        let holds = &holders.per_gpu[index];
        if !holds.is_empty() {
            held += 1;
        }
        for hold in holds {
            holding.insert((hold.namespace, hold.claim));
            let pods: Vec<&str> = if hold.pods.is_empty() {
                vec!["-"]
            } else {
                hold.pods.iter().map(String::as_str).collect()
            };
            for pod in pods {
                rows.push(vec![
                    Cell::plain(gpu.node.as_str()),
                    Cell::plain(dash(gpu.name.as_deref().map(short_gpu_name))),
                    Cell::plain(dash(Some(&gpu.address))),
                    Cell::plain(pod),
                    Cell::plain(hold.claim),
                    Cell::plain(hold.requests.join(",")),
                    Cell::plain(holds_word(hold)),
                ]);
            }
        }
    }
    let grid = Grid { header, rows, fits };
    let mut out = if grid.rows.is_empty() && style.no_headers {
        String::new()
    } else {
        grid.render(style)
    };
    if !style.no_headers {
        let mut line = format!(
            "{held} of {shown} GPUs held by {} claim{}",
            holding.len(),
            if holding.len() == 1 { "" } else { "s" }
        );
        if !filter.is_empty() {
            let counts = inventory.counts(filter);
            line = format!("{line}; {}", count_line(&counts, filter));
        }
        if holders.elsewhere > 0 {
            let _ = write!(
                line,
                "; {} more allocated claim{} hold no device of these GPUs",
                holders.elsewhere,
                if holders.elsewhere == 1 { "" } else { "s" }
            );
        }
        out.push('\n');
        out.push_str(&crate::cli::table::wrap_note(
            &line,
            style.notes_width.limit(),
        ));
        out.push('\n');
    }
    out
}

/// `render`, `media`, or `render,media`: which of the GPU's devices the claim holds.
fn holds_word(hold: &Hold) -> &'static str {
    match (hold.render_node, hold.media_device) {
        (true, true) => "render,media",
        (true, false) => "render",
        _ => "media",
    }
}

/// `-o wide` column names: the group and the compact label (`DEC HEVC-10`), short enough for
/// 18 columns.
fn wide_header(capability: Capability) -> String {
    let group = match capability.group() {
        Group::Decode => "DEC",
        Group::Encode => "ENC",
        Group::Scale => "SCALE",
    };
    format!("{group} {}", capability.label())
}

/// The namespace the agent's DaemonSet runs in (deploy/).
pub(crate) const AGENT_NAMESPACE: &str = "liken-system";
/// The labels of the agent's pods (deploy/base/daemonset.yaml, `spec.selector.matchLabels`).
pub(crate) const AGENT_LABELS: &str = "app.kubernetes.io/name=media-capabilities";

/// At most this many nodes get a note of their own for a failed probe; the rest share one line.
pub(crate) const NODE_NOTES: usize = 3;

/// The agent pod of each node whose log a note points to, where it could be found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AgentLogs {
    pods: std::collections::HashMap<String, String>,
    /// What a suggested `kubectl media caps` adds to read what this run read (the same `-f`).
    same_files: Vec<String>,
}

impl AgentLogs {
    /// Records that `pod` is the agent on `node`.
    pub(crate) fn insert(&mut self, node: &str, pod: &str) {
        self.pods.insert(node.to_string(), pod.to_string());
    }

    /// The agent pods among `pods` (a `-f` dump's), for the given nodes.
    fn from_pods(pods: &[k8s_openapi::api::core::v1::Pod], nodes: &[String]) -> AgentLogs {
        let mut logs = AgentLogs::default();
        for node in nodes {
            if let Some(pod) = pick_agent_pod(pods, node) {
                logs.insert(node, &pod);
            }
        }
        logs
    }

    /// The command that shows a node's agent log, or the one that finds its pod.
    pub(crate) fn hint(&self, node: &str) -> String {
        match self.pods.get(node) {
            Some(pod) => format!("kubectl logs -n {AGENT_NAMESPACE} {pod}"),
            None => format!(
                "find the pod with kubectl get pods -n {AGENT_NAMESPACE} -l {AGENT_LABELS} \
                 --field-selector spec.nodeName={node}, then kubectl logs -n {AGENT_NAMESPACE} POD"
            ),
        }
    }
}

/// The agent's pod on `node` among `pods`: in the agent's namespace with its labels, not being
/// deleted, running before pending, the newest first (during a rollout the new pod is the one
/// that publishes).
fn pick_agent_pod(pods: &[k8s_openapi::api::core::v1::Pod], node: &str) -> Option<String> {
    let (label, value) = AGENT_LABELS.split_once('=').expect("one label");
    pods.iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(AGENT_NAMESPACE)
                && p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(label))
                    .is_some_and(|v| v == value)
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        })
        .max_by_key(|p| {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            (
                running,
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                std::cmp::Reverse(p.metadata.name.clone()),
            )
        })
        .and_then(|p| p.metadata.name.clone())
}

/// The nodes whose agent log a note will point to: those with a failed or incomplete GPU among
/// the shown rows, the first [`NODE_NOTES`] of them.
fn log_nodes(inventory: &Inventory, filter: &Filter) -> Vec<String> {
    let mut nodes: Vec<String> = Vec::new();
    for gpu in inventory.select(filter) {
        if matches!(gpu.status, Status::ProbeFailed | Status::Incomplete { .. })
            && !nodes.iter().any(|n| n == gpu.node.as_str())
        {
            nodes.push(gpu.node.to_string());
            if nodes.len() == NODE_NOTES {
                break;
            }
        }
    }
    nodes
}

/// Finds the agent's pod on each node, one listing per node by the DaemonSet's labels and
/// `spec.nodeName`. A role that may not list pods in the agent's namespace (403) is normal for a
/// reader of slices: the notes then print the command that finds the pod. Any other failure
/// does the same, and says so (the second value) rather than failing `caps` over a hint.
async fn agent_logs(cluster: &Cluster, nodes: &[String]) -> (AgentLogs, Option<String>) {
    use crate::fleet::cluster::{ClusterError, ListRequest, Namespaces};
    let namespaces = Namespaces::One(AGENT_NAMESPACE.to_string());
    let lookups = nodes.iter().map(|node| {
        let namespaces = &namespaces;
        async move {
            let field = format!("spec.nodeName={node}");
            let mut objects = Objects::wanting(Kinds::only(&[Kind::Pod]));
            let request = ListRequest {
                kind: Kind::Pod,
                namespaces,
                label_selector: Some(AGENT_LABELS),
                field_selector: Some(&field),
            };
            cluster
                .list(&request, &mut objects)
                .await
                .map(|()| (node, pick_agent_pod(&objects.pods, node)))
        }
    });
    let mut logs = AgentLogs::default();
    let mut trouble = None;
    for result in futures_util::future::join_all(lookups).await {
        match result {
            Ok((node, Some(pod))) => logs.insert(node, &pod),
            Ok((_, None)) | Err(ClusterError::Forbidden { .. }) => {}
            Err(other) => {
                trouble.get_or_insert_with(|| {
                    format!("cannot look up the agent pods for the log hints: {other}")
                });
            }
        }
    }
    (logs, trouble)
}

/// One line per kind of mark in the shown rows, with the hint that resolves it, then each
/// drifting model, then the count when a filter is on.
fn notes(
    inventory: &Inventory,
    shown: &[&Gpu],
    filter: &Filter,
    logs: &AgentLogs,
    marked: bool,
) -> Vec<String> {
    let mut notes = Vec::new();
    let gpus = |n: usize| {
        if n == 1 {
            "1 GPU".to_string()
        } else {
            format!("{n} GPUs")
        }
    };
    // Per node, in table order: the failed probes, then the incomplete devices.
    let per_node = |pred: &dyn Fn(&Gpu) -> bool| {
        let mut nodes: Vec<(&str, usize)> = Vec::new();
        for gpu in shown.iter().filter(|g| pred(g)) {
            match nodes.last_mut() {
                Some((node, n)) if *node == gpu.node.as_str() => *n += 1,
                _ => nodes.push((gpu.node.as_str(), 1)),
            }
        }
        nodes
    };

    let failed = per_node(&|g| g.status == Status::ProbeFailed);
    for (node, n) in failed.iter().take(NODE_NOTES) {
        notes.push(format!(
            "probe failed: {} on node {node}: the agent's query of the VA-API driver failed, so \
             every capability reads false (hint: the failure is in the agent's log: {})",
            gpus(*n),
            logs.hint(node)
        ));
    }
    if failed.len() > NODE_NOTES {
        let rest = &failed[NODE_NOTES..];
        let nodes: Vec<&str> = rest.iter().map(|(n, _)| *n).collect();
        notes.push(format!(
            "probe failed: {} more on {} (hint: the log of each is named by kubectl media caps \
             --node NODE{})",
            gpus(rest.iter().map(|(_, n)| n).sum()),
            list_nodes(&nodes),
            logs.same_files
                .iter()
                .map(|flag| format!(" {flag}"))
                .collect::<String>()
        ));
    }
    let count = |pred: &dyn Fn(&Gpu) -> bool| shown.iter().filter(|g| pred(g)).count();
    let unprobed: BTreeSet<&str> = shown
        .iter()
        .filter(|g| {
            g.status
                == Status::NotDescribed {
                    agent_on_node: true,
                }
        })
        .map(|g| g.node.as_str())
        .collect();
    if !unprobed.is_empty() {
        let nodes: Vec<&str> = unprobed.iter().copied().collect();
        // The agent's render nodes come from a claim allocated once, when its pod started: a GPU
        // that appeared later (hot-plug, a reboot with a new card) is not in its container.
        notes.push(format!(
            "not probed: {} on {}: {} a render node, but the agent on that node \
             describes no GPU at its address: the agent's claim was allocated before this GPU \
             appeared, so its container cannot open it (hint: delete the agent's pod on that \
             node so that its claim is made anew: {AGENT_POD_DELETE}={})",
            gpus(count(&|g| g.status
                == Status::NotDescribed {
                    agent_on_node: true
                })),
            list_nodes(&nodes),
            publishers(shown, &|g| g.status
                == Status::NotDescribed {
                    agent_on_node: true
                }),
            nodes[0]
        ));
    }
    let agentless: BTreeSet<&str> = shown
        .iter()
        .filter(|g| {
            g.status
                == Status::NotDescribed {
                    agent_on_node: false,
                }
        })
        .map(|g| g.node.as_str())
        .collect();
    if !agentless.is_empty() {
        let nodes: Vec<&str> = agentless.iter().copied().collect();
        notes.push(format!(
            "no agent: {} on {}: {} render nodes there, but no media-capabilities \
             slice (hint: is the agent running there? kubectl -n liken-system get pods -o wide \
             --field-selector spec.nodeName={})",
            gpus(count(&|g| g.status
                == Status::NotDescribed {
                    agent_on_node: false
                })),
            list_nodes(&nodes),
            publishers(shown, &|g| g.status
                == Status::NotDescribed {
                    agent_on_node: false
                }),
            nodes[0]
        ));
    }
    let unpaired_nodes = per_node(&unpaired);
    if !unpaired_nodes.is_empty() {
        let nodes: Vec<&str> = unpaired_nodes.iter().map(|(n, _)| *n).collect();
        notes.push(format!(
            "no render device: {} on {}: the agent describes the GPU, but no render driver \
             publishes a whole GPU at its address there, so a claim that pairs a render node \
             with it by pciBusID never lands on it (hint: kubectl get resourceslices \
             --field-selector spec.nodeName={}; a GPU split into MIG devices, partitions or \
             SR-IOV VFs, or bound to vfio-pci, has only sub-devices, which never pair)",
            gpus(unpaired_nodes.iter().map(|(_, n)| n).sum()),
            list_nodes(&nodes),
            nodes[0]
        ));
    }
    // Tainted GPUs, failed ones included: the taints that keep new claims off them.
    let tainted = per_node(&|g| g.blocking_taint().is_some());
    if !tainted.is_empty() {
        let nodes: Vec<&str> = tainted.iter().map(|(n, _)| *n).collect();
        let mut taints: Vec<String> = Vec::new();
        for taint in shown.iter().flat_map(|g| &g.taints).filter(|t| t.blocks()) {
            let written = taint.written();
            if !taints.contains(&written) {
                taints.push(written);
            }
        }
        let more = taints.len().saturating_sub(NODE_NOTES);
        taints.truncate(NODE_NOTES);
        if more > 0 {
            taints.push(format!("{more} more"));
        }
        let ours = shown
            .iter()
            .flat_map(|g| &g.taints)
            .any(|t| t.on == TaintedDevice::Media && t.blocks());
        notes.push(format!(
            "tainted: {} on {}: {}; the scheduler gives them only to requests that tolerate \
             the taint (hint: kubectl media class --claim --tolerate KEY writes a template whose \
             requests do{})",
            gpus(tainted.iter().map(|(_, n)| n).sum()),
            list_nodes(&nodes),
            taints.join(", "),
            if ours {
                "; the agent lifts its own taint once a probe of the GPU succeeds again"
            } else {
                ""
            }
        ));
    }
    let shown_nodes: HashSet<&str> = shown.iter().map(|g| g.node.as_str()).collect();
    notes.extend(render_problem_notes(inventory, &shown_nodes));
    let incomplete = per_node(&|g| matches!(g.status, Status::Incomplete { .. }));
    if !incomplete.is_empty() {
        let mut missing = BTreeSet::new();
        for gpu in shown {
            if let Status::Incomplete { unreadable } = &gpu.status {
                missing.extend(unreadable.iter().map(|c| c.attribute()));
            }
        }
        let nodes: Vec<&str> = incomplete.iter().map(|(n, _)| *n).collect();
        notes.push(format!(
            "incomplete: {} on {}: no bool value for {} (hint: published by another version of \
             the agent? see its log: {})",
            gpus(incomplete.iter().map(|(_, n)| n).sum()),
            list_nodes(&nodes),
            missing.into_iter().collect::<Vec<_>>().join(", "),
            logs.hint(nodes[0])
        ));
    }
    let shown_drift: BTreeSet<usize> = shown.iter().filter_map(|g| g.drift).collect();
    for index in shown_drift {
        let drift = describe_drift(&inventory.drift[index]);
        // The table's STATUS says `drift [1]`; the summary has no such mark to point back to.
        notes.push(if marked {
            format!("[{}] {drift}", index + 1)
        } else {
            drift
        });
    }
    if !filter.is_empty() {
        notes.push(count_line(&inventory.counts(filter), filter));
    }
    notes
}

/// Who publishes the render devices of the GPUs `pred` keeps: `liken publishes`, or the DRA
/// names of the drivers, in table order.
fn publishers(shown: &[&Gpu], pred: &dyn Fn(&Gpu) -> bool) -> String {
    let drivers: Vec<&str> = render_drivers::ALL
        .iter()
        .filter(|d| {
            shown
                .iter()
                .any(|g| pred(g) && g.render.is_some_and(|r| r.driver == d.name))
        })
        .map(|d| d.called())
        .collect();
    match drivers.as_slice() {
        [] => "a render driver publishes".into(),
        [one] => format!("{one} publishes"),
        more => format!("{} publish", more.join(" and ")),
    }
}

/// The render devices that can never pair, and addresses two publish, on the shown nodes: one
/// note per kind, naming the first few.
fn render_problem_notes(inventory: &Inventory, shown: &HashSet<&str>) -> Vec<String> {
    let mut shared = Vec::new();
    let mut uncanonical = Vec::new();
    let mut notes = Vec::new();
    for problem in &inventory.render_problems {
        match problem {
            RenderProblem::SharedAddress {
                node,
                address,
                devices,
            } if shown.contains(node.as_str()) => {
                let named: Vec<String> = devices
                    .iter()
                    .map(|d| format!("{}/{}", d.driver, d.device))
                    .collect();
                shared.push(format!("{address} on {node} ({})", named.join(", ")));
            }
            RenderProblem::NotCanonical {
                node,
                device,
                value,
            } if shown.contains(node.as_str()) => {
                uncanonical.push(format!(
                    "{}/{} on {node} states {:?}",
                    device.driver,
                    device.device,
                    value.as_str()
                ));
            }
            RenderProblem::NoPciBusId {
                driver,
                nodes,
                devices,
            } => {
                let on: Vec<&str> = nodes
                    .iter()
                    .map(|n| n.as_str())
                    .filter(|n| shown.contains(n))
                    .collect();
                if on.is_empty() {
                    continue;
                }
                let before = driver
                    .before
                    .map(|b| format!(" (before it, the address was {b})"))
                    .unwrap_or_default();
                notes.push(format!(
                    "no pciBusID: {} publishes {devices} GPU(s) on {} without \
                     resource.kubernetes.io/pciBusID or the attributes that tell a whole GPU \
                     from a part of one, so no claim pairs them with a media device (hint: \
                     upgrade {} to {} or newer{before})",
                    driver.name,
                    list_nodes(&on),
                    driver.name,
                    driver.since
                ));
            }
            _ => {}
        }
    }
    let first_few = |items: &[String]| {
        let mut text = items
            .iter()
            .take(NODE_NOTES)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if items.len() > NODE_NOTES {
            let _ = write!(text, "; {} more", items.len() - NODE_NOTES);
        }
        text
    };
    if !shared.is_empty() {
        notes.insert(
            0,
            format!(
                "one address, two render devices: {}: a claim pairs the media device with \
                 either (hint: publish each GPU through one render driver, or name the driver \
                 in the claim's render class: kubectl media class --render-driver DRIVER)",
                first_few(&shared)
            ),
        );
    }
    if !uncanonical.is_empty() {
        notes.push(format!(
            "pciBusID not canonical: {}: matchAttribute compares strings exactly and the agent \
             publishes lowercase dddd:bb:dd.f, so these never pair (hint: a driver release that \
             writes the address as k8s.io/dynamic-resource-allocation/deviceattribute does)",
            first_few(&uncanonical)
        ));
    }
    notes
}

fn list_nodes(nodes: &[&str]) -> String {
    match nodes.len() {
        0 => String::new(),
        1 => format!("node {}", nodes[0]),
        n if n <= 4 => format!("nodes {}", nodes.join(", ")),
        n => format!("nodes {}, ... ({n} in all)", nodes[..3].join(", ")),
    }
}

/// The model of a drift, as a note names it.
fn model_name(drift: &Drift) -> String {
    match &drift.name {
        Some(name) => format!("{name} ({}:{})", drift.vendor, drift.product),
        None => format!("{}:{}", drift.vendor, drift.product),
    }
}

/// One line on a drifting model: which capabilities differ, and per variant what it states,
/// where, and with which VA drivers.
pub(crate) fn describe_drift(drift: &Drift) -> String {
    let differing: Vec<&str> = drift.differing.iter().map(|c| c.attribute()).collect();
    let variants: Vec<String> = drift
        .variants
        .iter()
        .map(|v| {
            // One capability differs: say true or false. Several: name each with its value.
            let stated = match drift.differing.as_slice() {
                [one] => (v.capabilities[*one as usize] == Some(true)).to_string(),
                several => several
                    .iter()
                    .map(|&c| {
                        format!(
                            "{}={}",
                            c.attribute(),
                            v.capabilities[c as usize] == Some(true)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            let nodes: Vec<&str> = v.nodes.iter().map(String::as_str).collect();
            let drivers: Vec<&str> = v.va_drivers.iter().map(String::as_str).collect();
            format!(
                "{stated} on {} GPU{} ({}) with {}",
                v.gpus,
                if v.gpus == 1 { "" } else { "s" },
                list_nodes(&nodes),
                drivers.join(" / ")
            )
        })
        .collect();
    format!(
        "drift: {} states {} differently: {}",
        model_name(drift),
        differing.join(", "),
        variants.join("; ")
    )
}

/// `5 of 9 GPUs on 5 of 9 nodes (decodeHEVCMain10, scale10bit; --node a, b)`: the capabilities
/// asked for, then the nodes, apart, so that a node never reads as a capability.
fn count_line(counts: &Counts, filter: &Filter) -> String {
    let capabilities: Vec<&str> = filter.capabilities.iter().map(|c| c.attribute()).collect();
    let mut asked = Vec::new();
    if !capabilities.is_empty() {
        asked.push(capabilities.join(", "));
    }
    if !filter.nodes.is_empty() {
        asked.push(format!("--node {}", filter.nodes.join(", ")));
    }
    for (path, streams) in &filter.files {
        asked.push(format!("--for {path}: {streams}"));
    }
    format!(
        "{} of {} GPUs on {} of {} nodes ({})",
        counts.matching_gpus,
        counts.gpus,
        counts.matching_nodes,
        counts.nodes,
        asked.join("; ")
    )
}

/// Per status word, how many of the selected GPUs have it and on how many nodes.
fn status_counts(inventory: &Inventory, filter: &Filter) -> Vec<(&'static str, usize, usize)> {
    STATUS_WORDS
        .iter()
        .map(|&word| {
            let gpus: Vec<&Gpu> = inventory
                .select(filter)
                .filter(|g| status_word(g) == word)
                .collect();
            let nodes: BTreeSet<&str> = gpus.iter().map(|g| g.node.as_str()).collect();
            (word, gpus.len(), nodes.len())
        })
        .collect()
}

/// `--summary`: per status, then per capability, the GPUs and nodes; then the notes.
pub(crate) fn render_summary(
    inventory: &Inventory,
    filter: &Filter,
    claims: &Claims,
    logs: &AgentLogs,
    style: &TableStyle,
) -> String {
    let counts = inventory.counts(filter);
    let of = |n: usize, all: usize| Cell::plain(format!("{n}/{all}"));
    let statuses = Grid {
        header: ["STATUS", "GPUS", "NODES"].map(String::from).to_vec(),
        rows: status_counts(inventory, filter)
            .into_iter()
            .map(|(word, gpus, nodes)| {
                vec![
                    Cell::plain(word),
                    of(gpus, counts.matching_gpus),
                    of(nodes, counts.matching_nodes),
                ]
            })
            .collect(),
        fits: vec![],
    };
    let capabilities = Grid {
        header: ["CAPABILITY", "GPUS", "NODES"].map(String::from).to_vec(),
        rows: inventory
            .summary(filter)
            .into_iter()
            .map(|(capability, gpus, nodes)| {
                vec![
                    Cell::plain(capability.attribute()),
                    of(gpus, counts.matching_gpus),
                    of(nodes, counts.matching_nodes),
                ]
            })
            .collect(),
        fits: vec![],
    };
    let mut out = statuses.render(style);
    out.push('\n');
    out.push_str(&capabilities.render(style));
    if let Some(held) = held_counts(inventory, filter, claims) {
        let grid = Grid {
            header: ["HELD", "GPUS", "CLAIMS"].map(String::from).to_vec(),
            rows: [
                ("render node", held.render_node),
                ("media device", held.media_device),
            ]
            .into_iter()
            .map(|(what, count)| {
                vec![
                    Cell::plain(what),
                    of(count.gpus, counts.matching_gpus),
                    Cell::plain(count.claims.to_string()),
                ]
            })
            .collect(),
            fits: vec![],
        };
        out.push('\n');
        out.push_str(&grid.render(style));
    }
    let selected: Vec<&Gpu> = inventory.select(filter).collect();
    push_notes(&mut out, inventory, &selected, filter, logs, style, false);
    out
}

/// A GPU as `-o json|yaml` prints it: every catalogue attribute, `null` when absent, its
/// model's drift (`null` when its model does not drift), and the claims that hold it (`null`
/// when they could not be read).
#[derive(Serialize)]
pub(crate) struct Record<'a> {
    pub node: &'a str,
    pub device: Option<&'a str>,
    /// The render driver's whole GPU paired with this one; `null` when none is.
    pub render: Option<RenderRecord<'a>>,
    pub status: &'static str,
    /// The taints on the GPU's media and render devices, as their slices state them.
    pub taints: Vec<TaintRecord<'a>>,
    pub drift: Option<DriftRecord>,
    pub claims: Option<ClaimsRecord<'a>>,
    pub attributes: serde_json::Map<String, serde_json::Value>,
}

/// A device taint (resource.k8s.io/v1 `DeviceTaint`) and which of the GPU's devices has it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaintRecord<'a> {
    /// `media` (the `media.liken.sh` device) or `render` (the render driver's).
    pub device: &'static str,
    pub key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<&'a str>,
    pub effect: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_added: Option<&'a str>,
}

/// A render driver's device, as a claim's allocation result names it.
#[derive(Serialize)]
pub(crate) struct RenderRecord<'a> {
    pub driver: &'a str,
    pub pool: &'a str,
    pub device: &'a str,
}

/// How many claims hold a GPU's render node and its media device; with `--claims`, each hold.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimsRecord<'a> {
    pub render_node: usize,
    /// `null` for a GPU without a media device.
    pub media_device: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holders: Option<Vec<HoldRecord<'a>>>,
}

/// One claim's hold on a GPU.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HoldRecord<'a> {
    pub namespace: &'a str,
    pub claim: &'a str,
    pub requests: &'a [&'a str],
    pub render_node: bool,
    pub media_device: bool,
    pub pods: &'a [String],
}

/// Per device kind, how many of the selected GPUs are held and by how many claims.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct HeldCount {
    pub gpus: usize,
    pub claims: usize,
}

/// [`HeldCount`]s for the render nodes and the media devices.
#[derive(Clone, Copy, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeldCounts {
    pub render_node: HeldCount,
    pub media_device: HeldCount,
}

/// What `--summary` counts of the holders; `None` when the claims could not be read. A claim
/// holding several GPUs counts once.
fn held_counts(inventory: &Inventory, filter: &Filter, claims: &Claims) -> Option<HeldCounts> {
    let Claims::Known(holders) = claims else {
        return None;
    };
    let mut render: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut media: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut counts = HeldCounts::default();
    for (index, _) in inventory.select_indexed(filter) {
        let holds = &holders.per_gpu[index];
        let (r, m) = holders.counts(index);
        counts.render_node.gpus += usize::from(r > 0);
        counts.media_device.gpus += usize::from(m > 0);
        for hold in holds {
            let key = (hold.namespace, hold.claim);
            if hold.render_node {
                render.insert(key);
            }
            if hold.media_device {
                media.insert(key);
            }
        }
    }
    counts.render_node.claims = render.len();
    counts.media_device.claims = media.len();
    Some(counts)
}

/// A drifting model as data: the model, the capabilities whose value differs, and each variant
/// with what it states for them, its VA drivers, its nodes and its GPU count. In a GPU's record,
/// `variant` is the index of the variant the GPU belongs to.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DriftRecord {
    pub model: ModelRecord,
    pub differing: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<usize>,
    pub variants: Vec<VariantRecord>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ModelRecord {
    pub vendor: String,
    pub product: String,
    pub name: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VariantRecord {
    /// The differing capabilities' values in this variant.
    pub capabilities: serde_json::Map<String, serde_json::Value>,
    pub va_drivers: Vec<String>,
    pub nodes: Vec<String>,
    pub gpus: usize,
}

fn drift_record(drift: &Drift, of: Option<&Gpu>) -> DriftRecord {
    DriftRecord {
        model: ModelRecord {
            vendor: drift.vendor.clone(),
            product: drift.product.clone(),
            name: drift.name.clone(),
        },
        differing: drift.differing.iter().map(|c| c.attribute()).collect(),
        variant: of.and_then(|gpu| {
            drift
                .variants
                .iter()
                .position(|v| v.capabilities == gpu.capabilities)
        }),
        variants: drift
            .variants
            .iter()
            .map(|v| VariantRecord {
                capabilities: drift
                    .differing
                    .iter()
                    .map(|&c| {
                        (
                            c.attribute().to_string(),
                            v.capabilities[c as usize].map_or(serde_json::Value::Null, Into::into),
                        )
                    })
                    .collect(),
                va_drivers: v.va_drivers.iter().cloned().collect(),
                nodes: v.nodes.iter().cloned().collect(),
                gpus: v.gpus,
            })
            .collect(),
    }
}

pub(crate) fn records<'a>(
    inventory: &'a Inventory,
    filter: &'a Filter,
    claims: &'a Claims,
    list_holders: bool,
) -> Vec<Record<'a>> {
    inventory
        .select_indexed(filter)
        .map(|(index, gpu)| {
            let mut attributes = serde_json::Map::new();
            for identity in Identity::ALL {
                let value = match identity {
                    Identity::Address | Identity::PciBusId => {
                        Some(gpu.address).filter(|a| !a.is_empty())
                    }
                    Identity::Driver => gpu.kernel_driver,
                    Identity::Name => gpu.name,
                    Identity::Product => gpu.product,
                    Identity::Vendor => gpu.vendor,
                    Identity::VaDriver => gpu.va_driver,
                };
                attributes.insert(
                    identity.attribute().to_string(),
                    value.map_or(serde_json::Value::Null, |v| v.as_str().into()),
                );
            }
            for capability in Capability::ALL {
                let value = gpu
                    .states(capability)
                    .map_or(serde_json::Value::Null, Into::into);
                attributes.insert(capability.attribute().to_string(), value);
            }
            Record {
                node: &gpu.node,
                device: gpu.device.as_deref(),
                render: gpu.render.as_ref().map(|r| RenderRecord {
                    driver: &r.driver,
                    pool: &r.pool,
                    device: &r.device,
                }),
                status: status_word(gpu),
                taints: gpu
                    .taints
                    .iter()
                    .map(|t| TaintRecord {
                        device: t.on.as_str(),
                        key: &t.taint.key,
                        value: t.taint.value.as_deref(),
                        effect: &t.taint.effect,
                        time_added: t.taint.time_added.as_deref(),
                    })
                    .collect(),
                drift: gpu
                    .drift
                    .map(|i| drift_record(&inventory.drift[i], Some(gpu))),
                claims: match claims {
                    Claims::Known(holders) => {
                        let (render_node, media_device) = holders.counts(index);
                        Some(ClaimsRecord {
                            render_node,
                            media_device: gpu.device.map(|_| media_device),
                            holders: list_holders.then(|| {
                                holders.per_gpu[index]
                                    .iter()
                                    .map(|h| HoldRecord {
                                        namespace: h.namespace,
                                        claim: h.claim,
                                        requests: &h.requests,
                                        render_node: h.render_node,
                                        media_device: h.media_device,
                                        pods: &h.pods,
                                    })
                                    .collect()
                            }),
                        })
                    }
                    Claims::NotRead | Claims::Unknown => None,
                },
                attributes,
            }
        })
        .collect()
}

/// `--summary -o json|yaml`: the counts of the table, per status and per capability.
#[derive(Serialize)]
pub(crate) struct SummaryRecord {
    pub gpus: usize,
    pub nodes: usize,
    pub statuses: serde_json::Map<String, serde_json::Value>,
    pub capabilities: serde_json::Map<String, serde_json::Value>,
    /// `null` when the claims could not be read.
    pub claims: Option<HeldCounts>,
    pub drift: Vec<DriftRecord>,
}

pub(crate) fn summary_record(
    inventory: &Inventory,
    filter: &Filter,
    claims: &Claims,
) -> SummaryRecord {
    let counts = inventory.counts(filter);
    let mut capabilities = serde_json::Map::new();
    for (capability, gpus, nodes) in inventory.summary(filter) {
        capabilities.insert(
            capability.attribute().to_string(),
            serde_json::json!({"gpus": gpus, "nodes": nodes}),
        );
    }
    let mut statuses = serde_json::Map::new();
    for (word, gpus, nodes) in status_counts(inventory, filter) {
        statuses.insert(
            word.to_string(),
            serde_json::json!({"gpus": gpus, "nodes": nodes}),
        );
    }
    let selected: BTreeSet<usize> = inventory.select(filter).filter_map(|g| g.drift).collect();
    SummaryRecord {
        gpus: counts.matching_gpus,
        nodes: counts.matching_nodes,
        statuses,
        capabilities,
        claims: held_counts(inventory, filter, claims),
        drift: selected
            .into_iter()
            .map(|i| drift_record(&inventory.drift[i], None))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn va_drivers_are_shortened_by_their_own_vendor_strings() {
        let cases = [
            (
                "Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()",
                "iHD 24.2.4",
            ),
            (
                "Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 (2a8f3e0c9)",
                "iHD 24.2.4",
            ),
            (
                "Intel i965 driver for Intel(R) Skylake - 2.4.1",
                "i965 2.4.1",
            ),
            (
                "Intel i965 driver for Intel(R) Coffee Lake - 2.4.0.pre1 (2.3.0-11-g9a1f3d7)",
                "i965 2.4.0.pre1",
            ),
            (
                "Mesa Gallium driver 23.0.0-devel for Radeon RX 7900 XTX (gfx1100, LLVM 16.0.0, \
                 DRM 3.49, 6.1.1-zen1-1-zen)",
                "Mesa 23.0.0-devel",
            ),
            (
                "Mesa Gallium driver 24.1.7 for AMD Radeon Graphics",
                "Mesa 24.1.7",
            ),
            ("VA-API NVDEC driver [direct backend]", "NVDEC"),
            ("VA-API NVDEC driver [egl backend]", "NVDEC"),
            // Unknown forms, or a known form without a version: shown whole when short, else
            // cut at a word, never a guessed name.
            ("some driver", "some driver"),
            (
                "Splitted-Desktop Systems VDPAU backend for VA-API - 0.7.4",
                "Splitted-Desktop …",
            ),
            (
                "Intel iHD driver for Intel(R) Gen Graphics",
                "Intel iHD driver …",
            ),
            ("Mesa Gallium driver for radeonsi", "Mesa Gallium …"),
        ];
        for (vendor, short) in cases {
            assert_eq!(short_va_driver(vendor), short, "{vendor}");
            assert!(
                short_va_driver(vendor).chars().count() <= VA_DRIVER_SHORT,
                "{vendor}"
            );
        }
    }

    /// The recorded `vainfo` captures' vendor strings all have a short name of their driver.
    #[test]
    fn the_recorded_drivers_have_short_names() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vainfo");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines() {
                if let Some(vendor) = line.strip_prefix("vainfo: Driver version: ") {
                    let short = short_va_driver(vendor.trim());
                    assert!(!short.ends_with('…'), "{vendor} → {short}");
                    seen += 1;
                }
            }
        }
        assert!(seen >= 3, "{seen} captures in {}", dir.display());
    }

    #[test]
    fn gpu_names_show_the_chip() {
        let cases = [
            ("DG2 [Arc A770]", "DG2"),
            (
                "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]",
                "Navi 31",
            ),
            ("Meteor Lake-P [Intel Arc Graphics]", "Meteor Lake-P"),
            ("HD Graphics 530", "HD Graphics 530"),
            ("8086:7d55", "8086:7d55"),
            ("[Radeon]", "[Radeon]"),
            ("Odd [unclosed", "Odd [unclosed"),
        ];
        for (name, short) in cases {
            assert_eq!(short_gpu_name(name), short, "{name}");
        }
    }

    #[test]
    fn nearest_nodes_share_a_prefix_or_are_a_typo_away() {
        let known: BTreeSet<&str> = ["edge-1-1", "edge-1-2", "edge-1-10", "edge-2-1", "gpu-a"]
            .into_iter()
            .collect();
        assert_eq!(
            nearest_nodes("edge-1-3", &known),
            ["edge-1-1", "edge-1-2", "edge-1-10"]
        );
        assert_eq!(nearest_nodes("gpu-b", &known), ["gpu-a"]);
        assert_eq!(nearest_nodes("EDGE-2-1x", &known)[0], "edge-2-1");
        // Nothing close: the first names, so the hint still shows what names look like.
        assert_eq!(
            nearest_nodes("zz", &known),
            ["edge-1-1", "edge-1-2", "edge-1-10"]
        );
    }

    #[test]
    fn the_agent_pod_is_the_running_newest_one_of_the_node() {
        let pod = |name: &str, node: &str, phase: &str, created: &str, labelled: bool| {
            serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(serde_json::json!({
                "metadata": {
                    "name": name, "namespace": AGENT_NAMESPACE,
                    "creationTimestamp": created,
                    "labels": if labelled {
                        serde_json::json!({"app.kubernetes.io/name": "media-capabilities"})
                    } else {
                        serde_json::json!({"app": "other"})
                    }
                },
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase}
            }))
            .unwrap()
        };
        let pods = [
            pod("old", "n1", "Running", "2026-01-01T00:00:00Z", true),
            pod("new", "n1", "Running", "2026-02-01T00:00:00Z", true),
            pod(
                "newer-pending",
                "n1",
                "Pending",
                "2026-03-01T00:00:00Z",
                true,
            ),
            pod(
                "other-program",
                "n1",
                "Running",
                "2026-04-01T00:00:00Z",
                false,
            ),
            pod("elsewhere", "n2", "Running", "2026-04-01T00:00:00Z", true),
        ];
        assert_eq!(pick_agent_pod(&pods, "n1").as_deref(), Some("new"));
        assert_eq!(pick_agent_pod(&pods, "n2").as_deref(), Some("elsewhere"));
        assert_eq!(pick_agent_pod(&pods, "n3"), None);
        let logs = AgentLogs::from_pods(&pods, &["n1".into(), "n3".into()]);
        assert_eq!(logs.hint("n1"), "kubectl logs -n liken-system new");
        assert!(
            logs.hint("n3").starts_with(
                "find the pod with kubectl get pods -n liken-system -l \
                 app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName=n3"
            ),
            "{}",
            logs.hint("n3")
        );
    }
}
