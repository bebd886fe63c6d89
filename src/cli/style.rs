//! The one colour decision of `kubectl media`, and the styles that follow from it.
//!
//! Styles are plain by default; they only colour when `--color` says so, or when it is `auto`,
//! `NO_COLOR` is unset and the stream is a terminal. YAML and JSON are never coloured whatever
//! the choice: scripts pipe them into other tools.

use std::io::IsTerminal;

use owo_colors::Style;

/// `--color`: when to colour tables and messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when writing to a terminal and `NO_COLOR` is not set.
    #[default]
    Auto,
    /// Colour even when writing to a pipe or file.
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Decides for one stream. `no_color` is the value of `NO_COLOR`; per no-color.org any
    /// non-empty value turns colour off.
    pub(crate) fn enabled(self, no_color: Option<&str>, is_terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => no_color.is_none_or(str::is_empty) && is_terminal,
        }
    }

    /// Decides for standard error, the stream errors and warnings go to.
    pub fn for_stderr(self) -> Styles {
        let no_color = std::env::var("NO_COLOR").ok();
        Styles::new(self.enabled(no_color.as_deref(), std::io::stderr().is_terminal()))
    }

    /// Decides for standard output, the stream tables go to.
    pub(crate) fn for_stdout(self) -> Styles {
        let no_color = std::env::var("NO_COLOR").ok();
        Styles::new(self.enabled(no_color.as_deref(), std::io::stdout().is_terminal()))
    }
}

/// The styles a renderer uses; every one is a no-op when colour is off.
#[derive(Clone, Copy, Debug, Default)]
pub struct Styles {
    /// Whether these styles colour at all (for renderers with their own styling, such as tables).
    pub colored: bool,
    pub error: Style,
    pub warning: Style,
    pub header: Style,
    pub yes: Style,
    pub no: Style,
    pub dim: Style,
}

impl Styles {
    pub fn new(colored: bool) -> Self {
        if !colored {
            return Styles::default();
        }
        Styles {
            colored: true,
            error: Style::new().red().bold(),
            warning: Style::new().yellow().bold(),
            header: Style::new().bold(),
            yes: Style::new().green(),
            no: Style::new().red(),
            dim: Style::new().dimmed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use owo_colors::OwoColorize;

    #[test]
    fn auto_colours_only_a_terminal_without_no_color() {
        assert!(ColorChoice::Auto.enabled(None, true));
        assert!(!ColorChoice::Auto.enabled(None, false));
        assert!(!ColorChoice::Auto.enabled(Some("1"), true));
        // An empty NO_COLOR does not count (no-color.org).
        assert!(ColorChoice::Auto.enabled(Some(""), true));
        assert!(ColorChoice::Always.enabled(Some("1"), false));
        assert!(!ColorChoice::Never.enabled(None, true));
    }

    #[test]
    fn plain_styles_write_plain_text() {
        let styles = Styles::new(false);
        assert_eq!(format!("{}", "error:".style(styles.error)), "error:");
        let styles = Styles::new(true);
        assert_ne!(format!("{}", "error:".style(styles.error)), "error:");
    }
}
