//! `kubectl media`: the root command, dispatch and exit codes. kubectl runs the
//! `kubectl-media` executable with the words after `kubectl media`, so this is an ordinary
//! program whose name, in help and errors, is `kubectl media`.
//!
//! Each command is a module that owns its arguments, its orchestration and its rendering
//! behind one signature, `run(&args, &Global, &mut Io) -> Result<(), Error>`: `caps`, `class`,
//! `why`, and the hidden `__complete`. What several commands share lives beside them: the capability
//! flags and kubectl's global flags here, tables, output and colour in their own modules.

pub(crate) mod caps;
pub(crate) mod class;
pub(crate) mod complete;
pub(crate) mod output;
pub mod style;
pub(crate) mod table;
pub(crate) mod why;
pub mod yaml;

pub use why::WhyArgError;

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Arg, CommandFactory, Parser, Subcommand};

use crate::catalogue::{Capability, Group, UnknownCapability};
use crate::fleet::cluster::{Connection, Namespaces};

use self::caps::CapsArgs;
use self::class::{ClassArgs, ClassError};
use self::output::RenderError;
use self::style::{ColorChoice, Styles};
use self::why::WhyArgs;

/// The help heading of the flags every command takes.
const GLOBAL: &str = "Global options";

/// Claim GPUs by what their VA-API driver can decode, encode and scale.
///
/// The media-capabilities agent publishes one media.liken.sh device per GPU, stating what its
/// driver can do. These commands list those statements, write claims for them, and explain why
/// a claim stays Pending.
// `args_override_self`: a flag given twice takes its last value, as in kubectl (aliases put
// flags before the user's); flags that collect values (`-f`, `--decode`) keep every one.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-media",
    bin_name = "kubectl media",
    version,
    propagate_version = true,
    args_override_self = true
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

/// kubectl's connection and namespace flags; kubectl passes them to a plugin untouched.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Path to the kubeconfig file [default: KUBECONFIG, then ~/.kube/config].
    // Parsed as an OsString: clap's PathBuf parser refuses an empty value, which kubectl (pflag)
    // takes as not given; `Cli::parse` sets empty values aside.
    #[arg(long, global = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath,
        value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from), help_heading = GLOBAL)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub context: Option<String>,

    /// The namespace to read namespaced objects from [default: the context's namespace, else
    /// default; for why -f, first the files' namespace of the name].
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE", help_heading = GLOBAL)]
    pub namespace: Option<String>,

    /// Read namespaced objects from every namespace; overrides --namespace, as in kubectl.
    #[arg(short = 'A', long, global = true, help_heading = GLOBAL)]
    pub all_namespaces: bool,

    /// How long to wait for each API request: 0 waits indefinitely; else 30s, 1m, 500ms...
    // `allow_hyphen_values`: `--request-timeout -1s` is a value to refuse as negative, as pflag
    // hands kubectl the next word whatever it starts with, not an unknown flag `-1`.
    #[arg(long, global = true, value_name = "DURATION", default_value = "0", value_parser = RequestTimeout::parse,
        allow_hyphen_values = true, help_heading = GLOBAL)]
    pub request_timeout: RequestTimeout,
}

/// `--request-timeout`, parsed with the rest of the command line: `None` waits indefinitely.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestTimeout(pub Option<Duration>);

impl RequestTimeout {
    /// kubectl's forms (client-go's `clientcmd.ParseTimeout`): `0` for none, a number of
    /// seconds, or a duration such as `30s`, `1m30s`, `500ms`, `2h`. A negative one is refused:
    /// kubectl refuses `-1` and lets Go's `-1s` through, which its HTTP client then takes as no
    /// timeout at all; a user who means that writes 0.
    pub(crate) fn parse(text: &str) -> Result<RequestTimeout, RequestTimeoutError> {
        let negative = text
            .trim()
            .strip_prefix('-')
            .and_then(|magnitude| crate::duration::parse(magnitude).ok())
            .is_some_and(|magnitude| !magnitude.is_zero());
        if negative {
            return Err(RequestTimeoutError::Negative(text.trim().to_owned()));
        }
        let timeout = crate::duration::parse(text)?;
        Ok(RequestTimeout((!timeout.is_zero()).then_some(timeout)))
    }
}

/// Why `--request-timeout` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RequestTimeoutError {
    #[error(
        "a negative timeout ({0:?}) is invalid (valid: 0 to wait indefinitely, else e.g. 30, \
         30s, 1m30s, 500ms, 2h)"
    )]
    Negative(String),
    #[error(transparent)]
    Duration(#[from] crate::duration::DurationError),
}

impl KubeArgs {
    /// An empty `--kubeconfig`, `--context` or `--namespace` is not given, as in kubectl,
    /// where an empty string flag is its default (`-n ""` is the context's namespace).
    fn without_empty_values(mut self) -> Self {
        self.kubeconfig = self.kubeconfig.filter(|k| !k.as_os_str().is_empty());
        self.context = self.context.filter(|c| !c.is_empty());
        self.namespace = self.namespace.filter(|n| !n.is_empty());
        self
    }

    /// How to reach the cluster.
    pub(crate) fn connection(&self) -> Connection {
        Connection {
            source: crate::kubeconfig::Source {
                kubeconfig: self.kubeconfig.clone(),
                context: self.context.clone(),
            },
            namespace: self.namespace.clone(),
            request_timeout: self.request_timeout.0,
        }
    }

    /// The namespaces a listing covers, given the namespace in effect (`-n`, else the
    /// context's): `-A` wins over `-n`, as in kubectl.
    pub(crate) fn namespaces(&self, in_effect: &str) -> Namespaces {
        if self.all_namespaces {
            Namespaces::All
        } else {
            Namespaces::One(in_effect.to_string())
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List what every GPU's driver states, beside liken's render nodes.
    Caps(CapsArgs),
    /// Write a DeviceClass (and claim template) that selects GPUs by capability.
    Class(ClassArgs),
    /// Explain, device by device, why a pod's claims stay Pending.
    Why(WhyArgs),
    /// Answer kubectl's shell completion requests (run by the kubectl_complete-media shim).
    #[command(name = complete::COMMAND, hide = true)]
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

    /// A media file the GPU must play: the decode capability of each video stream's codec and
    /// profile and the scaling of its bit depth, read with ffprobe; repeat for several files.
    #[arg(long = "for", value_name = "FILE", value_hint = clap::ValueHint::FilePath,
        value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from))]
    pub for_files: Vec<PathBuf>,

    /// With --for, ask only for decoding the files, not for scaling their frames.
    #[arg(long, requires = "for_files")]
    pub no_scale: bool,
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

    /// Runs ffprobe on each `--for` file (none without `--for`).
    pub(crate) fn played(
        &self,
    ) -> Result<Vec<crate::ffprobe::Played>, crate::ffprobe::ForFileError> {
        crate::ffprobe::probe_all(&self.for_files)
    }

    /// The flags' capabilities, then what the played files need, without repeats.
    pub(crate) fn with_played(
        &self,
        played: &[crate::ffprobe::Played],
    ) -> Result<Vec<Capability>, UnknownCapability> {
        let mut all = self.parse()?;
        for capability in crate::ffprobe::capabilities(played, !self.no_scale) {
            if !all.contains(&capability) {
                all.push(capability);
            }
        }
        Ok(all)
    }
}

/// Writes ffprobe's errors about files it still read as warnings.
pub(crate) fn warn_played(io: &mut Io<'_>, global: &Global, played: &[crate::ffprobe::Played]) {
    let styles = global.color.for_stderr();
    for file in played {
        for warning in &file.warnings {
            warn(
                io.stderr,
                &styles,
                &format!("--for {}: ffprobe: {warning}", file.path),
            );
        }
    }
}

/// `-f` and `-R`, as kubectl's (cli-runtime's `FilenameOptions`) for `caps` and `why`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FileArgs {
    /// Read objects from this file, or from a directory's .json, .yaml and .yml files, instead of
    /// the cluster (kubectl get -o yaml|json output, Lists, multi-document YAML); repeat for
    /// several, - for standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE", value_hint = clap::ValueHint::AnyPath)]
    pub files: Vec<String>,

    /// Also read the subdirectories of the directories -f names, as kubectl -R does.
    #[arg(short = 'R', long)]
    pub recursive: bool,
}

impl FileArgs {
    /// The files to read, directories expanded; `None` without `-f` (read the cluster).
    pub(crate) fn sources(
        &self,
    ) -> Result<Option<Vec<crate::fleet::files::Source>>, crate::fleet::files::SnapshotError> {
        if self.files.is_empty() {
            return Ok(None);
        }
        crate::fleet::files::sources(&self.files, self.recursive).map(Some)
    }
}

impl FileArgs {
    /// The flags that make a suggested command read the same files (`-f` each, `-R`), each
    /// quoted for the shell when it needs to be; none when the cluster is read.
    pub(crate) fn same_files(&self) -> Vec<String> {
        let mut flags = Vec::new();
        for file in &self.files {
            flags.push("-f".to_owned());
            flags.push(shell_word(file));
        }
        if self.recursive && !self.files.is_empty() {
            flags.push("-R".to_owned());
        }
        flags
    }
}

/// `word` as a POSIX shell reads it back: as it is when it holds only characters the shell
/// takes literally, else in single quotes.
pub(crate) fn shell_word(word: &str) -> String {
    let literal = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(literal) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
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
    /// `why`'s target or `--kubernetes-version` cannot be read (exit 2).
    #[error(transparent)]
    WhyArg(#[from] WhyArgError),
    #[error(transparent)]
    Why(Box<crate::explain::pod::TargetError>),
    #[error(transparent)]
    ForFile(#[from] crate::ffprobe::ForFileError),
    /// `why` found a claim that cannot be allocated; the explanation is on stdout (exit 3).
    #[error("")]
    Blocked,
    /// `why` found nothing that blocks the claims in what it read, but could not read all that
    /// could (the nodes, say); the explanation is on stdout (exit 4).
    #[error("")]
    Undecided,
    /// What the command line names is not there (`--node` of a node without GPUs); exit 1, as
    /// kubectl's NotFound.
    #[error("{0}")]
    NotFound(String),
    /// What the command line names is in several places and none is chosen for the user (`why
    /// NAME -A` of a pod in two namespaces); exit 1.
    #[error("{0}")]
    Ambiguous(String),
    #[error("start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("write output: {0}")]
    Write(#[from] std::io::Error),
}

impl Error {
    /// The error as its one line on stderr: an argument or a name from the cluster with a
    /// newline or an escape sequence in it is shown escaped, so the error stays one line and
    /// cannot act on the terminal.
    pub fn line(&self) -> String {
        crate::text::terminal_safe(&self.to_string()).into_owned()
    }

    /// Whether the error has nothing to print (its output is already written).
    pub fn is_silent(&self) -> bool {
        matches!(self, Error::Blocked | Error::Undecided)
    }

    /// 2 for usage errors, as clap and kubectl use it; 3 when `why` finds a claim that cannot
    /// be allocated, 4 when it cannot tell (see [`Error::Undecided`]); 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::WhyArg(_) | Error::Class(_) | Error::UnknownCapability(_) => 2,
            Error::Blocked => 3,
            Error::Undecided => 4,
            Error::Render(_)
            | Error::Write(_)
            | Error::Cluster(_)
            | Error::Snapshot(_)
            | Error::Why(_)
            | Error::ForFile(_)
            | Error::NotFound(_)
            | Error::Ambiguous(_)
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
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // `kubectl media` alone prints the help, as `kubectl` alone does.
    if args.len() <= 1 {
        return Ok(Parsed::Info(Cli::command().render_long_help().to_string()));
    }
    // `__complete WORDS...`: the words are the user's half-typed command line, to be completed,
    // never parsed here. clap would take a global flag among them (`__complete --kubeconfig ""`)
    // for `__complete`'s own and fail on its empty value.
    if args[1] == complete::COMMAND {
        let mut cli = Cli::try_parse_from(&args[..2]).map_err(|e| {
            Error::Usage(crate::usage::message(
                &e,
                &Cli::command(),
                "kubectl media",
                &args,
            ))
        })?;
        cli.command = Command::Complete(complete::CompleteArgs {
            words: args[2..].to_vec(),
        });
        return Ok(Parsed::Run(Box::new(cli)));
    }
    match Cli::try_parse_from(&args) {
        Ok(mut cli) => {
            cli.kube = cli.kube.without_empty_values();
            Ok(Parsed::Run(Box::new(cli)))
        }
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                Ok(Parsed::Info(e.render().to_string()))
            }
            _ => Err(Error::Usage(crate::usage::message(
                &e,
                &Cli::command(),
                "kubectl media",
                &args,
            ))),
        },
    }
}

/// The streams a command reads and writes.
pub struct Io<'a> {
    pub stdin: &'a mut dyn Read,
    pub stdout: &'a mut dyn Write,
    pub stderr: &'a mut dyn Write,
    /// The process ends when the command returns: what it read (80,000 devices, 40,000
    /// claims) is left to the OS, not freed object by object (a twentieth of `caps --claims`).
    pub ending: bool,
}

impl Io<'_> {
    /// Frees `value`, or leaves it to the OS when the process is [`Io::ending`].
    pub(crate) fn release<T>(&self, value: T) {
        if self.ending {
            std::mem::forget(value);
        }
    }
}

/// Writes `warning: NOTE` on stderr. Notes name objects of the files or the cluster, so the
/// note is made terminal-safe.
pub(crate) fn warn(stderr: &mut dyn Write, styles: &Styles, note: &str) {
    use owo_colors::OwoColorize as _;
    let _ = writeln!(
        stderr,
        "{} {}",
        "warning:".style(styles.warning),
        crate::text::terminal_safe(note)
    );
}

/// What every command gets beside its own arguments: the global flags.
#[derive(Clone, Debug)]
pub(crate) struct Global {
    pub color: ColorChoice,
    pub kube: KubeArgs,
}

/// Runs a parsed command.
pub fn run(cli: &Cli, io: &mut Io<'_>) -> Result<(), Error> {
    let global = Global {
        color: cli.color,
        kube: cli.kube.clone(),
    };
    match &cli.command {
        Command::Caps(args) => caps::run(args, &global, io),
        Command::Class(args) => class::run(args, &global, io),
        Command::Why(args) => why::run(args, &global, io),
        Command::Complete(args) => complete::run(args, &global, io),
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
    fn completion_words_are_never_parsed_as_flags() {
        // kubectl runs the shim with the user's words: a global flag first is one of them.
        for words in [
            &["--kubeconfig", ""][..],
            &["--color", ""],
            &["-n", "", "caps"],
            &["--help"],
            &["caps", "--request-timeout", "soon", "--dec"],
        ] {
            let args = ["kubectl-media", "__complete"].iter().chain(words);
            match parse(args.copied()) {
                Ok(Parsed::Run(cli)) => match cli.command {
                    Command::Complete(complete) => {
                        assert_eq!(
                            complete.words,
                            words.iter().map(OsString::from).collect::<Vec<_>>()
                        )
                    }
                    other => panic!("{words:?}: {other:?}"),
                },
                Err(e) => panic!("{words:?}: {e}"),
                Ok(Parsed::Info(_)) => panic!("{words:?}: help"),
            }
        }
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
    fn timeouts_parse_like_kubectl() {
        let parse = |t: &str| RequestTimeout::parse(t).map(|t| t.0);
        assert_eq!(parse("0"), Ok(None));
        assert_eq!(parse("30"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse("30s"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse("1m30s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(parse("500ms"), Ok(Some(Duration::from_millis(500))));
        assert_eq!(parse("2h"), Ok(Some(Duration::from_secs(7200))));
        for bad in ["", "s", "10x", "1m30", "-1s", "abc"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_request_timeout_is_checked_when_the_arguments_are() {
        // Even where no request is ever sent (-f): a typo is a usage error, not silence.
        let err = match parse([
            "kubectl-media",
            "caps",
            "-f",
            "x",
            "--request-timeout",
            "soon",
        ]) {
            Err(e) => e,
            Ok(_) => panic!("parsed"),
        };
        assert_eq!(
            err.to_string(),
            "--request-timeout: invalid duration \"soon\" (valid: e.g. 30, 30s, 1m30s, 500ms, 2h)"
        );
        assert_eq!(err.exit_code(), 2);
        // A negative one, with or without `=`, is said to be negative (not an unknown `-1`).
        for args in [
            &["kubectl-media", "caps", "--request-timeout", "-1s"][..],
            &["kubectl-media", "caps", "--request-timeout=-1s"],
            &["kubectl-media", "--request-timeout", "-1s", "caps"],
        ] {
            let err = match parse(args.iter().copied()) {
                Err(e) => e,
                Ok(_) => panic!("parsed {args:?}"),
            };
            assert_eq!(
                err.to_string(),
                "--request-timeout: a negative timeout (\"-1s\") is invalid (valid: 0 to wait \
                 indefinitely, else e.g. 30, 30s, 1m30s, 500ms, 2h)",
                "{args:?}"
            );
            assert_eq!(err.exit_code(), 2);
        }
    }

    #[test]
    fn usage_errors_come_from_clap_context() {
        let message = |args: &[&str]| match parse(args.iter().copied()) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("parsed {args:?}"),
        };
        assert_eq!(
            message(&["kubectl-media", "caps", "--decod", "VP9"]),
            "unexpected argument '--decod' found (hint: a similar argument exists: '--decode')"
        );
        assert_eq!(
            message(&["kubectl-media", "caps", "-o", "table"]),
            "invalid value 'table' for '--output <FORMAT>' (hint: use one of wide, json, yaml)"
        );
        assert_eq!(
            message(&["kubectl-media", "caps", "-o"]),
            "a value is required for '--output <FORMAT>' but none was supplied (hint: use one of wide, json, yaml)"
        );
        assert_eq!(
            message(&["kubectl-media", "--bogus"]),
            "unexpected argument '--bogus' found (hint: see 'kubectl media --help')"
        );
        // Flags without a command: the command is missing (alone, it prints the help).
        assert_eq!(
            message(&["kubectl-media", "--color", "never"]),
            "a command is required: caps, class, why (hint: see 'kubectl media --help')"
        );
        assert!(matches!(parse(["kubectl-media"]), Ok(Parsed::Info(_))));
    }

    #[test]
    fn empty_connection_flags_are_not_given_as_in_kubectl() {
        let parsed = |args: &[&str]| match parse(args) {
            Ok(Parsed::Run(cli)) => cli.kube,
            _ => panic!("{args:?}: not a command to run"),
        };
        let kube = parsed(&[
            "kubectl-media",
            "caps",
            "-n",
            "",
            "--kubeconfig",
            "",
            "--context",
            "",
        ]);
        assert_eq!(kube.namespace, None);
        assert_eq!(kube.kubeconfig, None);
        assert_eq!(kube.context, None);
        let kube = parsed(&["kubectl-media", "caps", "--kubeconfig", "k", "-n", "x"]);
        assert_eq!(kube.kubeconfig, Some(PathBuf::from("k")));
        assert_eq!(kube.namespace.as_deref(), Some("x"));
    }

    #[test]
    fn namespaces_follow_kubectl() {
        let cli = |args: &[&str]| match parse(args.iter().copied()) {
            Ok(Parsed::Run(cli)) => cli,
            _ => panic!("did not parse {args:?}"),
        };
        let kube = cli(&["kubectl-media", "caps", "-n", "media"]).kube;
        assert_eq!(kube.connection().namespace.as_deref(), Some("media"));
        assert_eq!(kube.namespaces("media"), Namespaces::One("media".into()));
        // -A wins over -n, as in kubectl; the flags are global, before or after the command.
        let kube = cli(&["kubectl-media", "-A", "caps", "--namespace", "media"]).kube;
        assert_eq!(kube.namespaces("media"), Namespaces::All);
        let kube = cli(&["kubectl-media", "caps"]).kube;
        assert_eq!(kube.connection().namespace, None);
    }

    #[test]
    fn a_flag_given_twice_takes_its_last_value_as_in_kubectl() {
        let cli = |args: &[&str]| match parse(args.iter().copied()) {
            Ok(Parsed::Run(cli)) => cli,
            Err(e) => panic!("{args:?}: {e}"),
            Ok(Parsed::Info(_)) => panic!("{args:?}: help"),
        };
        let caps = |cli: &Cli| match &cli.command {
            Command::Caps(args) => args.clone(),
            _ => panic!("not caps"),
        };
        let twice = cli(&["kubectl-media", "caps", "-o", "wide", "-o", "json"]);
        assert_eq!(caps(&twice).output, Some(caps::CapsFormat::Json));
        let twice = cli(&["kubectl-media", "caps", "--summary", "--summary"]);
        assert!(caps(&twice).summary);
        // Global flags too, on either side of the command, as an alias puts them in front.
        let twice = cli(&["kubectl-media", "-n", "a", "caps", "-n", "b"]);
        assert_eq!(twice.kube.namespace.as_deref(), Some("b"));
        let twice = cli(&["kubectl-media", "caps", "--namespace", "a", "-n", "b"]);
        assert_eq!(twice.kube.namespace.as_deref(), Some("b"));
        let twice = cli(&[
            "kubectl-media",
            "--color",
            "never",
            "caps",
            "--color",
            "always",
        ]);
        assert_eq!(twice.color, ColorChoice::Always);
        let twice = cli(&[
            "kubectl-media",
            "why",
            "p",
            "--request-timeout",
            "5s",
            "--request-timeout",
            "1m",
        ]);
        assert_eq!(
            twice.kube.request_timeout,
            RequestTimeout(Some(Duration::from_secs(60)))
        );
        let twice = cli(&[
            "kubectl-media",
            "class",
            "--decode",
            "VP9",
            "--base-class",
            "a",
            "--base-class",
            "b",
        ]);
        let Command::Class(class) = &twice.command else {
            panic!("not class")
        };
        assert_eq!(class.base_class.as_deref(), Some("b"));
        // Flags meant to repeat keep every value.
        let many = caps(&cli(&[
            "kubectl-media",
            "caps",
            "-f",
            "a.yaml",
            "-f",
            "b.yaml",
            "--decode",
            "VP9",
            "--decode",
            "AV1Main,HEVCMain",
            "--node",
            "n1",
            "--node",
            "n2",
        ]));
        assert_eq!(many.input.files, ["a.yaml", "b.yaml"]);
        assert_eq!(many.capabilities.decode, ["VP9", "AV1Main", "HEVCMain"]);
        assert_eq!(many.node, ["n1", "n2"]);
    }

    #[test]
    fn words_are_quoted_for_the_shell_only_when_they_must_be() {
        assert_eq!(shell_word("docs/a-b_c.yaml"), "docs/a-b_c.yaml");
        assert_eq!(shell_word("-"), "-");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("$HOME/x"), "'$HOME/x'");
        assert_eq!(shell_word("my dir/b's.yaml"), r"'my dir/b'\''s.yaml'");
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
