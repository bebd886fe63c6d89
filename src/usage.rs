//! Usage errors of both programs as one line, like every other error of ours: built from clap's
//! error kind and context (never from its rendered text), ending in a hint: clap's suggestion
//! (never a hidden subcommand), the valid values, or the command's `--help`.

use std::ffi::OsString;

use clap::Command;
use clap::error::{ContextKind, ContextValue, ErrorKind};

/// One line for a clap error, built from its kind and context (never from its rendered text):
/// `message (hint: ...)`, the hint being clap's suggestion, the valid values, or the command's
/// `--help`.
pub fn message(e: &clap::Error, root: &Command, program: &str, args: &[OsString]) -> String {
    let context = |kind: ContextKind| match e.get(kind) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(list)) => list.clone(),
        Some(ContextValue::StyledStr(s)) => vec![s.to_string()],
        Some(ContextValue::StyledStrs(list)) => list.iter().map(ToString::to_string).collect(),
        _ => Vec::new(),
    };
    let first = |kind: ContextKind| context(kind).into_iter().next().unwrap_or_default();
    let quoted = |list: &[String]| {
        list.iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let command = command_of(root, program, args);
    let help = format!("see '{command} --help'");
    let (message, hint) = match e.kind() {
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            let commands: Vec<String> = root
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .map(|c| c.get_name().to_string())
                .collect();
            (
                format!("a command is required: {}", commands.join(", ")),
                help,
            )
        }
        ErrorKind::InvalidSubcommand => {
            // clap suggests hidden subcommands too (the probe child's own): never those.
            let similar: Vec<String> = context(ContextKind::SuggestedSubcommand)
                .into_iter()
                .filter(|name| root.find_subcommand(name).is_none_or(|c| !c.is_hide_set()))
                .collect();
            let hint = match similar.len() {
                0 => help,
                1 => format!("a similar subcommand exists: {}", quoted(&similar)),
                _ => format!("some similar subcommands exist: {}", quoted(&similar)),
            };
            (
                format!(
                    "unrecognized subcommand '{}'",
                    first(ContextKind::InvalidSubcommand)
                ),
                hint,
            )
        }
        ErrorKind::UnknownArgument => {
            // Clap's other tip for an unknown flag ("to pass it as a value, use '-- --x'")
            // misleads more often than not for a mistyped flag; only its suggestion is kept.
            let similar = context(ContextKind::SuggestedArg);
            let hint = match similar.len() {
                0 => help,
                1 => format!("a similar argument exists: {}", quoted(&similar)),
                _ => format!("some similar arguments exist: {}", quoted(&similar)),
            };
            (
                format!(
                    "unexpected argument '{}' found",
                    first(ContextKind::InvalidArg)
                ),
                hint,
            )
        }
        ErrorKind::InvalidValue => {
            let arg = first(ContextKind::InvalidArg);
            let value = first(ContextKind::InvalidValue);
            let similar = context(ContextKind::SuggestedValue);
            let valid = context(ContextKind::ValidValue);
            let hint = if let Some(similar) = similar.first() {
                format!("a similar value exists: '{similar}'")
            } else if !valid.is_empty() {
                format!("use one of {}", valid.join(", "))
            } else {
                help
            };
            let message = if value.is_empty() {
                format!("a value is required for '{arg}' but none was supplied")
            } else {
                format!("invalid value '{value}' for '{arg}'")
            };
            (message, hint)
        }
        ErrorKind::ValueValidation => {
            // Our own parsers' errors carry their hint ("(valid: ...)"): the flag, then it.
            let arg = first(ContextKind::InvalidArg);
            let flag = arg
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            let cause = std::error::Error::source(e)
                .map(ToString::to_string)
                .unwrap_or_else(|| format!("invalid value '{}'", first(ContextKind::InvalidValue)));
            return format!("{flag}: {cause}");
        }
        ErrorKind::MissingRequiredArgument => (
            format!(
                "the following required arguments were not provided: {}",
                context(ContextKind::InvalidArg).join(", ")
            ),
            help,
        ),
        ErrorKind::ArgumentConflict => (
            format!(
                "the argument '{}' cannot be used with {}",
                first(ContextKind::InvalidArg),
                quoted(&context(ContextKind::PriorArg))
            ),
            help,
        ),
        kind => {
            let what = kind.as_str().unwrap_or("invalid arguments");
            match context(ContextKind::InvalidArg).first() {
                Some(arg) => (format!("{what}: '{arg}'"), help),
                None => (what.to_string(), help),
            }
        }
    };
    format!("{message} (hint: {hint})")
}

/// `kubectl media caps` when the words name a command, else `kubectl media`: which `--help`
/// to point at.
fn command_of(root: &Command, program: &str, args: &[OsString]) -> String {
    let named = args.iter().skip(1).find_map(|arg| {
        let arg = arg.to_str()?;
        root.get_subcommands()
            .find(|c| !c.is_hide_set() && c.get_name() == arg)
            .map(|c| c.get_name().to_string())
    });
    match named {
        Some(name) => format!("{program} {name}"),
        None => program.to_string(),
    }
}
