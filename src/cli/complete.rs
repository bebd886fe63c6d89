//! Shell completion through kubectl (`kubectl media <TAB>`): kubectl runs `kubectl_complete-media`,
//! our shim runs `kubectl-media __complete`, and this answers in Cobra's protocol (one
//! `candidate<TAB>description` per line, then `:<directive>`). clap_complete's engine walks the
//! clap definitions; we translate its candidates, refuse a flag its command lacks, and add `why`'s
//! targets from `-f` files. The scripts in `completions/` ask the same question, so every shell
//! offers what kubectl offers.

use std::ffi::{OsStr, OsString};

use clap::{Args, CommandFactory};
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate, ValueCompleter};

use crate::catalogue::{Capability, Group};
use crate::cli::{Cli, Error, Global, Io, output};

/// Cobra's "an error occurred: offer nothing" directive.
const ERROR: u8 = 1;
/// Cobra's "do not fall back to file names" directive, for every value that is not a file.
const NO_FILE_COMP: u8 = 4;
/// Cobra's default directive: the shell completes file names.
const DEFAULT: u8 = 0;
/// Cobra's "complete file names with these extensions" directive: the candidates are the
/// extensions.
const FILTER_FILE_EXT: u8 = 8;

/// The hidden command the shim and the shell scripts run, Cobra's name for it.
pub(crate) const COMMAND: &str = "__complete";

/// The arguments kubectl passes to the completion shim.
#[derive(Debug, Clone, Args)]
pub struct CompleteArgs {
    /// The words after `kubectl media`, the last being the one to complete ("" for a new word).
    #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
    pub words: Vec<OsString>,
}

/// Runs `__complete`: answers from the command definitions. Why nothing is offered, when that is
/// an error (a flag the command does not have), goes to stderr, which the shells' scripts and
/// kubectl discard, as Cobra's programs write theirs: for someone running `__complete` by hand.
pub(crate) fn run(args: &CompleteArgs, _: &Global, io: &mut Io<'_>) -> Result<(), Error> {
    let mut cmd = Cli::command();
    let text = complete(&mut cmd, &args.words);
    output::write_all(io.stdout, &text)?;
    if let Some(unknown) = unknown_flag(&cmd, &args.words) {
        let _ = writeln!(io.stderr, "{unknown}");
    }
    Ok(())
}

/// Completes the values of `--decode`, `--encode` or `--scale`: the catalogue's names that start
/// with what was typed, ignoring case (`hevc` offers `HEVCMain` and `HEVCMain10`), spelled as the
/// catalogue spells them; when no name starts so, the table's shorthand that does (`HEVC-`
/// offers `HEVC-10`, `h264-` offers `H264-LP`), which the flags accept as well. clap's own
/// completion of possible values matches case-sensitively and knows no shorthand.
#[derive(Clone, Copy, Debug)]
pub(super) struct CapabilityCompleter(pub(super) Group);

impl CapabilityCompleter {
    pub(super) fn arg(group: Group) -> ArgValueCompleter {
        ArgValueCompleter::new(Self(group))
    }
}

impl ValueCompleter for CapabilityCompleter {
    fn complete(&self, current: &OsStr) -> Vec<CompletionCandidate> {
        let typed = current.to_string_lossy().to_ascii_lowercase();
        let starting = |name: fn(Capability) -> &'static str| -> Vec<CompletionCandidate> {
            self.0
                .capabilities()
                .filter(|&c| name(c).to_ascii_lowercase().starts_with(&typed))
                .map(|c| CompletionCandidate::new(name(c)).help(Some(c.meaning().into())))
                .collect()
        };
        // Values first: offering both would double every list (`HEVC` is a value's start and a
        // shorthand).
        let values = starting(Capability::value);
        if values.is_empty() {
            starting(Capability::label)
        } else {
            values
        }
    }
}

/// Completes `--render-driver`: the render-driver table's names that start with what was typed,
/// ignoring case, each with its project.
#[derive(Clone, Copy, Debug)]
pub(super) struct RenderDriverCompleter;

impl RenderDriverCompleter {
    pub(super) fn arg() -> ArgValueCompleter {
        ArgValueCompleter::new(Self)
    }
}

impl ValueCompleter for RenderDriverCompleter {
    fn complete(&self, current: &OsStr) -> Vec<CompletionCandidate> {
        let typed = current.to_string_lossy().to_ascii_lowercase();
        crate::render_drivers::ALL
            .iter()
            .filter(|d| d.name.starts_with(&typed))
            .map(|d| CompletionCandidate::new(d.name).help(Some(d.project.into())))
            .collect()
    }
}

/// Answers one completion request in Cobra's format.
pub(crate) fn complete(cmd: &mut clap::Command, words: &[OsString]) -> String {
    // Global flags are the subcommands' too once built.
    cmd.build();
    // The engine passes over a flag the command lacks and would answer `caps --kubernetes-version
    // <TAB>` as `caps <TAB>`; a line that cannot run gets nothing (Cobra's error directive).
    if unknown_flag(cmd, words).is_some() {
        return format!(":{ERROR}\n");
    }
    // A file argument (`-f FILE`, `--kubeconfig FILE`) is the shell's to complete: it knows the
    // file system and the user's quoting.
    // `--for FILE`: media files (and directories to walk into), by their extensions.
    if completes_a_media_file(words) {
        let mut out = String::new();
        for extension in crate::ffprobe::MEDIA_EXTENSIONS {
            out.push_str(extension);
            out.push('\n');
        }
        out.push_str(&format!(":{FILTER_FILE_EXT}\n"));
        return out;
    }
    if completes_a_file(cmd, words) {
        return format!(":{DEFAULT}\n");
    }
    let mut args: Vec<OsString> = vec![cmd.get_name().into()];
    args.extend(words.iter().cloned());
    if words.is_empty() {
        args.push(OsString::new());
    }
    let index = args.len() - 1;
    // As kubectl (Cobra) does: flags are offered once the word starts with `-`, so that a new
    // word lists the subcommands or values rather than every flag.
    let current = args[index].to_string_lossy().into_owned();
    let typing_a_flag = current.starts_with('-');
    let targets = targets(&scan(cmd, words), &current);
    // The engine errors when it has nothing to offer; that is an empty answer, not a failure.
    let mut candidates =
        clap_complete::engine::complete(cmd, args, index, None).unwrap_or_default();
    candidates.extend(targets.into_iter().flatten());
    let mut out = String::new();
    for candidate in candidates
        .iter()
        .filter(|c| !c.is_hide_set())
        .filter(|c| typing_a_flag || !c.get_value().to_string_lossy().starts_with('-'))
    {
        out.push_str(&candidate.get_value().to_string_lossy());
        if let Some(help) = candidate.get_help() {
            let help = help.to_string();
            let first_line = help.lines().next().unwrap_or_default();
            if !first_line.is_empty() {
                out.push('\t');
                out.push_str(first_line);
            }
        }
        out.push('\n');
    }
    out.push_str(&format!(":{NO_FILE_COMP}\n"));
    out
}

/// The first flag before the word being completed that its command does not have, as a line
/// naming it (`unknown flag --kubernetes-version for 'kubectl media caps'`). Words after `--`,
/// and values of the options before them (`--node -x`, `--request-timeout -1s`), are not flags.
/// `cmd` is built (its subcommands have the global flags).
fn unknown_flag(cmd: &clap::Command, words: &[OsString]) -> Option<String> {
    scan(cmd, words).unknown
}

/// What the words before the one being completed say, as far as completion needs it.
struct Line<'c> {
    /// The (sub)command they name.
    command: &'c clap::Command,
    /// The first flag `command` does not have, as [`unknown_flag`] words it.
    unknown: Option<String>,
    /// The options given, by id, with their values (`""` for a flag without one), in order.
    given: Vec<(&'c str, String)>,
    /// How many positional arguments of `command` there are.
    positionals: usize,
    /// Whether the word being completed is the value of the last option.
    value_pending: bool,
}

impl Line<'_> {
    fn values(&self, id: &str) -> impl Iterator<Item = &str> {
        self.given
            .iter()
            .filter(move |(given, _)| *given == id)
            .map(|(_, value)| value.as_str())
    }
}

/// Reads the words before the last as clap would parse them: subcommands, long and short flags
/// with their values (`--x=v`, `--x v`, `-xv`, `-x v`, bundles `-An`), `--` and positionals.
fn scan<'c>(cmd: &'c clap::Command, words: &[OsString]) -> Line<'c> {
    let mut line = Line {
        command: cmd,
        unknown: None,
        given: Vec::new(),
        positionals: 0,
        value_pending: false,
    };
    let Some((_, before)) = words.split_last() else {
        return line;
    };
    let takes_value = |arg: &clap::Arg| {
        arg.get_num_args()
            .is_some_and(|n| n.takes_values() && n.min_values() > 0)
    };
    let mut escaped = false;
    // The option whose value the next word is.
    let mut pending: Option<&'c str> = None;
    for word in before {
        let word = word.to_string_lossy();
        if let Some(id) = pending.take() {
            line.given.push((id, word.into_owned()));
            continue;
        }
        if escaped {
            line.positionals += 1;
            continue;
        }
        if word == "--" {
            escaped = true;
            continue;
        }
        if let Some(sub) = line.command.find_subcommand(word.as_ref()) {
            line.command = sub;
            line.positionals = 0;
            continue;
        }
        let command = line.command;
        if let Some(long) = word.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            match command.get_arguments().find(|a| {
                a.get_long_and_visible_aliases()
                    .is_some_and(|names| names.contains(&name))
            }) {
                Some(arg) => match value {
                    Some(value) => line.given.push((arg.get_id().as_str(), value.to_owned())),
                    None if takes_value(arg) => pending = Some(arg.get_id().as_str()),
                    None => line.given.push((arg.get_id().as_str(), String::new())),
                },
                None => {
                    line.unknown
                        .get_or_insert_with(|| unknown(command, &format!("--{name}")));
                }
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-oyaml`, `-An`: flags until one takes a value, which is the rest or the next word.
            for (i, short) in shorts.char_indices() {
                match command.get_arguments().find(|a| {
                    a.get_short_and_visible_aliases()
                        .is_some_and(|s| s.contains(&short))
                }) {
                    Some(arg) if takes_value(arg) => {
                        let rest = &shorts[i + short.len_utf8()..];
                        let id = arg.get_id().as_str();
                        match rest.strip_prefix('=').unwrap_or(rest) {
                            "" => pending = Some(id),
                            value => line.given.push((id, value.to_owned())),
                        }
                        break;
                    }
                    Some(arg) => line.given.push((arg.get_id().as_str(), String::new())),
                    None => {
                        line.unknown
                            .get_or_insert_with(|| unknown(command, &format!("-{short}")));
                        break;
                    }
                }
            }
        } else {
            line.positionals += 1;
        }
    }
    line.value_pending = pending.is_some();
    line
}

/// For `why <TAB>`: the pods (and with `claim/`, the claims) in the files `-f` names on the line,
/// in the namespace `-n` names if it does; `None` when the word is not why's target. From files
/// only: a listing from the cluster on each TAB would need the half-typed line's connection
/// flags and a network round trip behind a prompt, which kubectl's own completion risks and
/// this one does not. Files that cannot be read (or `-` for standard input) offer nothing.
fn targets(line: &Line<'_>, current: &str) -> Option<Vec<CompletionCandidate>> {
    use crate::fleet::objects::{Kind, Kinds, Objects};
    if line.command.get_name() != "why"
        || line.positionals > 0
        || line.value_pending
        || current.starts_with('-')
    {
        return None;
    }
    let files: Vec<String> = line
        .values("files")
        .filter(|f| *f != "-")
        .map(str::to_owned)
        .collect();
    if files.is_empty() {
        return Some(Vec::new());
    }
    let recursive = line.values("recursive").next().is_some();
    let namespace = line.values("namespace").last();
    let all = line.values("all_namespaces").next().is_some();
    let mut objects = Objects::wanting(Kinds::only(&[Kind::Pod, Kind::ResourceClaim]));
    let read = crate::fleet::files::sources(&files, recursive).and_then(|sources| {
        crate::fleet::files::read_into(&mut objects, &sources, &mut std::io::empty())
    });
    if read.is_err() {
        return Some(Vec::new());
    }
    let in_namespace = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        all || namespace.is_none_or(|n| meta.namespace.as_deref() == Some(n))
    };
    let mut named: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    let (prefix, typed) = match current.split_once('/') {
        Some((kind, rest)) => (format!("{kind}/"), rest),
        None => (String::new(), current),
    };
    let claims = matches!(prefix.as_str(), "claim/" | "resourceclaim/");
    let metas: Vec<_> = if claims {
        objects.claims.iter().map(|c| &c.metadata).collect()
    } else if matches!(prefix.as_str(), "" | "pod/" | "po/") {
        objects.pods.iter().map(|p| &p.metadata).collect()
    } else {
        Vec::new()
    };
    for meta in metas.into_iter().filter(|m| in_namespace(m)) {
        if let Some(name) = meta.name.as_deref().filter(|n| n.starts_with(typed)) {
            named
                .entry(name.to_owned())
                .or_default()
                .insert(meta.namespace.clone().unwrap_or_default());
        }
    }
    let what = if claims { "claim" } else { "pod" };
    Some(
        named
            .into_iter()
            .map(|(name, namespaces)| {
                let namespaces: Vec<String> = namespaces.into_iter().collect();
                CompletionCandidate::new(format!("{prefix}{name}"))
                    .help(Some(format!("{what} in {}", namespaces.join(", ")).into()))
            })
            .collect(),
    )
}

/// `unknown flag --x for 'kubectl media caps'`.
fn unknown(command: &clap::Command, flag: &str) -> String {
    let name = command.get_bin_name().unwrap_or(command.get_name());
    format!("unknown flag {flag} for '{name}'")
}

/// Whether the last word is the value of `--for` (`--for FI`, `--for=FI`).
fn completes_a_media_file(words: &[OsString]) -> bool {
    let Some(last) = words.last() else {
        return false;
    };
    let previous = words.len().checked_sub(2).map(|i| words[i].as_os_str());
    previous == Some(OsStr::new("--for")) || last.to_string_lossy().starts_with("--for=")
}

/// Whether the last word is the value of an option whose values are file paths (`-f FILE`,
/// `--filename FILE`, `--filename=FI`).
fn completes_a_file(cmd: &clap::Command, words: &[OsString]) -> bool {
    let words: Vec<String> = words
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let Some(last) = words.last() else {
        return false;
    };
    let previous = words.len().checked_sub(2).map(|i| words[i].as_str());
    // The subcommand being completed: the first word that names one.
    let command = words
        .iter()
        .find_map(|w| cmd.find_subcommand(w))
        .unwrap_or(cmd);
    command
        .get_arguments()
        .chain(cmd.get_arguments())
        .filter(|a| {
            matches!(
                a.get_value_hint(),
                clap::ValueHint::FilePath | clap::ValueHint::AnyPath | clap::ValueHint::DirPath
            )
        })
        .any(|arg| {
            let long = arg.get_long().map(|l| format!("--{l}"));
            let short = arg.get_short().map(|s| format!("-{s}"));
            let names: Vec<&str> = [long.as_deref(), short.as_deref()]
                .into_iter()
                .flatten()
                .collect();
            previous.is_some_and(|p| names.contains(&p))
                || long
                    .as_deref()
                    .is_some_and(|l| last.starts_with(&format!("{l}=")))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(words: &[&str]) -> Vec<String> {
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        complete(&mut Cli::command(), &words)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn completes_subcommands_without_the_hidden_one() {
        let lines = answer(&[""]);
        assert!(lines.iter().any(|l| l.starts_with("class\t")), "{lines:?}");
        assert!(
            !lines.iter().any(|l| l.starts_with("__complete")),
            "{lines:?}"
        );
        assert_eq!(lines.last().unwrap(), ":4");
    }

    #[test]
    fn completes_capability_values_from_the_catalogue() {
        let lines = answer(&["class", "--decode", "HEVC"]);
        let values: Vec<&str> = lines
            .iter()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(values, ["HEVCMain", "HEVCMain10", ":4"]);
        assert!(
            lines[0].contains("\tdecodes HEVC Main profile"),
            "{lines:?}"
        );
    }

    #[test]
    fn completes_render_drivers_from_the_table() {
        let lines = answer(&["class", "--claim", "--render-driver", "gpu."]);
        assert_eq!(
            lines,
            [
                "gpu.intel.com\tIntel Resource Drivers for Kubernetes (GPU)",
                "gpu.nvidia.com\tNVIDIA DRA Driver for GPUs",
                "gpu.amd.com\tAMD GPU DRA Driver (ROCm)",
                ":4",
            ]
        );
    }

    #[test]
    fn lowercase_prefixes_complete_capability_names() {
        let values = |words: &[&str]| -> Vec<String> {
            answer(words)
                .iter()
                .map(|l| l.split('\t').next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            values(&["class", "--decode", "hevc"]),
            ["HEVCMain", "HEVCMain10", ":4"]
        );
        assert_eq!(
            values(&["caps", "--encode", "h264l"]),
            ["H264LowPower", ":4"]
        );
        assert_eq!(values(&["class", "--scale", "10B"]), ["10bit", ":4"]);
        assert_eq!(values(&["class", "--decode", "nosuch"]), [":4"]);
    }

    #[test]
    fn option_values_without_candidates_stay_quiet() {
        // Not subcommands, not flags, not files: nothing, and no file-name fallback.
        assert_eq!(answer(&["caps", "--node", ""]), [":4"]);
        assert_eq!(answer(&["caps", "--context", ""]), [":4"]);
        assert_eq!(answer(&["class", "x", "--request-timeout", ""]), [":4"]);
    }

    #[test]
    fn hidden_subcommands_are_never_offered() {
        assert_eq!(answer(&["__c"]), [":4"]);
        assert_eq!(answer(&["help", "__c"]), [":4"]);
    }

    #[test]
    fn completes_after_a_comma() {
        let lines = answer(&["class", "--scale", "8bit,"]);
        let values: Vec<&str> = lines
            .iter()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(values, ["8bit,8bit", "8bit,10bit", ":4"]);
    }

    #[test]
    fn leaves_file_names_to_the_shell() {
        assert_eq!(answer(&["caps", "-f", ""]), [":0"]);
        assert_eq!(answer(&["caps", "--filename", "fl"]), [":0"]);
        assert_eq!(answer(&["caps", "--filename=fl"]), [":0"]);
        // Other values are not files.
        assert_eq!(answer(&["caps", "--node", ""]).last().unwrap(), ":4");
    }

    #[test]
    fn the_tables_shorthand_completes_where_no_name_starts_so() {
        let values = |words: &[&str]| -> Vec<String> {
            answer(words)
                .iter()
                .map(|l| l.split('\t').next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(values(&["caps", "--decode", "HEVC-"]), ["HEVC-10", ":4"]);
        assert_eq!(values(&["caps", "--decode", "vp9-"]), ["VP9-10", ":4"]);
        assert_eq!(
            values(&["class", "--encode", "hevc-"]),
            ["HEVC-10", "HEVC-10-LP", "HEVC-LP", ":4"]
        );
        assert_eq!(
            values(&["caps", "--decode", "AV1-10,HEVC-"]),
            ["AV1-10,HEVC-10", ":4"]
        );
        // A start that names are spelled with offers the names only.
        assert_eq!(
            values(&["caps", "--decode", "HEVC"]),
            ["HEVCMain", "HEVCMain10", ":4"]
        );
        // What the shorthand offers, the flag takes.
        for shorthand in ["HEVC-10", "VP9-10", "HEVC-10-LP"] {
            let group = if shorthand.ends_with("LP") {
                Group::Encode
            } else {
                Group::Decode
            };
            assert!(Capability::parse(group, shorthand).is_ok(), "{shorthand}");
        }
    }

    #[test]
    fn a_flag_the_command_does_not_have_is_an_error_not_an_answer() {
        // `--kubernetes-version` is why's: caps would refuse the line, so nothing is offered.
        assert_eq!(answer(&["caps", "--kubernetes-version", ""]), [":1"]);
        assert_eq!(answer(&["caps", "--bogus=1", "--dec"]), [":1"]);
        assert_eq!(answer(&["caps", "-Z", ""]), [":1"]);
        let mut cmd = Cli::command();
        cmd.build();
        assert_eq!(
            unknown_flag(
                &cmd,
                &["caps".into(), "--kubernetes-version".into(), "".into()]
            )
            .as_deref(),
            Some("unknown flag --kubernetes-version for 'kubectl media caps'")
        );
        // Not flags: values of options (even with a leading '-'), bundled short flags with their
        // value, and whatever follows `--`; and why has the flag.
        assert_eq!(answer(&["why", "p", "--kubernetes-version", ""]), [":4"]);
        for words in [
            &["caps", "--request-timeout", "-1s", "--dec"][..],
            &["caps", "-oyaml", "--dec"],
            &["-n", "media", "caps", "-Ao", "json", "--dec"],
            &["--context=x", "caps", "--dec"],
        ] {
            assert_eq!(
                answer(words)[0].split('\t').next(),
                Some("--decode"),
                "{words:?}"
            );
        }
        assert_eq!(answer(&["caps", "--", "--bogus", ""]).last().unwrap(), ":4");
    }

    #[test]
    fn the_kubeconfig_is_a_file_for_the_shell_before_or_after_the_command() {
        assert_eq!(answer(&["--kubeconfig", ""]), [":0"]);
        assert_eq!(answer(&["caps", "--kubeconfig", "/tm"]), [":0"]);
        assert_eq!(answer(&["why", "--kubeconfig=/tm"]), [":0"]);
    }

    #[test]
    fn why_completes_the_pods_and_claims_of_the_files_on_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.yaml");
        let pod = |name: &str, namespace: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\n---\n"
            )
        };
        let text = [
            pod("film-0", "media"),
            pod("film-1", "media"),
            pod("film-0", "batch"),
            pod("agent", "liken-system"),
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: film-0-gpu, namespace: media}\n"
                .to_string(),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        let file = path.to_str().unwrap();
        let lines = |words: &[&str]| answer(words);
        assert_eq!(
            lines(&["why", "-f", file, "fi"]),
            ["film-0\tpod in batch, media", "film-1\tpod in media", ":4"]
        );
        assert_eq!(
            lines(&["why", "--filename", file, "-n", "batch", ""]),
            ["film-0\tpod in batch", ":4"]
        );
        assert_eq!(
            lines(&[
                "-n",
                "batch",
                "why",
                &format!("--filename={file}"),
                "-A",
                "a"
            ]),
            ["agent\tpod in liken-system", ":4"]
        );
        assert_eq!(
            lines(&["why", "-f", file, "claim/"]),
            ["claim/film-0-gpu\tclaim in media", ":4"]
        );
        assert_eq!(
            lines(&["why", "-f", file, "pod/film-1"]),
            ["pod/film-1\tpod in media", ":4"]
        );
        // Not the target: after one, as an option's value, a flag; without files, nothing.
        assert_eq!(lines(&["why", "-f", file, "film-0", ""]), [":4"]);
        assert_eq!(lines(&["why", "-f", file, "-n", ""]), [":4"]);
        assert_eq!(lines(&["why", ""]), [":4"]);
        assert_eq!(lines(&["why", "-f", "-", ""]), [":4"]);
        assert_eq!(lines(&["why", "-f", "/nonexistent.yaml", ""]), [":4"]);
        assert_eq!(lines(&["caps", "-f", file, ""]), [":4"]);
    }

    #[test]
    fn completes_flags() {
        let lines = answer(&["class", "--with"]);
        let values: Vec<&str> = lines
            .iter()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(values, ["--with-render-class", "--with-base-class", ":4"]);
    }
}
