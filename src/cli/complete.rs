//! Shell completion through kubectl (`kubectl media <TAB>`).
//!
//! kubectl (1.26+) completes a plugin by running `kubectl_complete-media` with the words typed so
//! far plus the word being completed, and reads one `candidate<TAB>description` per line and a
//! last line `:<directive>` (Cobra's protocol, spf13/cobra completions.go). Our shim runs
//! `kubectl-media __complete "$@"`, and this module answers from the clap definitions, so flag
//! names and capability values come from the same place as parsing: the catalogue.
//!
//! clap_complete's completion engine does the walking (subcommands, flags, values after a flag,
//! comma lists); we only translate its candidates into Cobra's format. The scripts for bash, zsh
//! and fish in `completions/` ask the same question (`kubectl-media __complete ...`), so a shell
//! and kubectl always offer the same candidates, and hidden subcommands never.

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

/// Answers one completion request in Cobra's format.
pub(crate) fn complete(cmd: &mut clap::Command, words: &[OsString]) -> String {
    // Global flags are the subcommands' too once built.
    cmd.build();
    // clap_complete's engine passes over a flag the command does not have (it cannot tell it
    // from a value), and would then complete the next word as if the flag were not there:
    // `caps --kubernetes-version <TAB>` (a flag of `why`) would be answered as `caps <TAB>`.
    // The command line cannot run as typed; offer nothing, as Cobra's error directive says.
    if unknown_flag(cmd, words).is_some() {
        return format!(":{ERROR}\n");
    }
    // A file argument (`-f FILE`, `--kubeconfig FILE`) is the shell's to complete: it knows the
    // file system and the user's quoting.
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
    let typing_a_flag = args[index].to_string_lossy().starts_with('-');
    // The engine errors when it has nothing to offer; that is an empty answer, not a failure.
    let candidates = clap_complete::engine::complete(cmd, args, index, None).unwrap_or_default();
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
    let (_, before) = words.split_last()?;
    let mut command = cmd;
    let mut value_follows = false;
    for word in before {
        let word = word.to_string_lossy();
        if std::mem::take(&mut value_follows) {
            continue;
        }
        if word == "--" {
            return None;
        }
        if let Some(sub) = command.find_subcommand(word.as_ref()) {
            command = sub;
            continue;
        }
        let takes_value = |arg: &clap::Arg| {
            arg.get_num_args()
                .is_some_and(|n| n.takes_values() && n.min_values() > 0)
        };
        if let Some(long) = word.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, _)) => (name, true),
                None => (long, false),
            };
            match command.get_arguments().find(|a| {
                a.get_long_and_visible_aliases()
                    .is_some_and(|names| names.contains(&name))
            }) {
                Some(arg) => value_follows = !value && takes_value(arg),
                None => return Some(unknown(command, &format!("--{name}"))),
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-oyaml`, `-An`: flags until one takes a value, which is the rest or the next word.
            for (i, short) in shorts.char_indices() {
                match command.get_arguments().find(|a| {
                    a.get_short_and_visible_aliases()
                        .is_some_and(|s| s.contains(&short))
                }) {
                    Some(arg) if takes_value(arg) => {
                        value_follows = i + short.len_utf8() == shorts.len();
                        break;
                    }
                    Some(_) => {}
                    None => return Some(unknown(command, &format!("-{short}"))),
                }
            }
        }
    }
    None
}

/// `unknown flag --x for 'kubectl media caps'`.
fn unknown(command: &clap::Command, flag: &str) -> String {
    let name = command.get_bin_name().unwrap_or(command.get_name());
    format!("unknown flag {flag} for '{name}'")
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
    fn completes_flags() {
        let lines = answer(&["class", "--with"]);
        let values: Vec<&str> = lines
            .iter()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(values, ["--with-render-class", "--with-base-class", ":4"]);
    }
}
