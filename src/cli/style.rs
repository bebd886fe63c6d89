//! The one colour decision of `kubectl media`, and the styles that follow from it.
//!
//! Styles are plain by default; they only colour when `--color` says so, or when it is `auto`,
//! `NO_COLOR` is unset, `TERM` is not `dumb` (a terminal that shows escape codes as text, such as
//! Emacs' shell) and the stream is a terminal. YAML and JSON are never coloured whatever
//! the choice: scripts pipe them into other tools.

use std::io::IsTerminal;

use owo_colors::Style;

/// `--color`: when to colour tables and messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when writing to a terminal, `NO_COLOR` is not set and `TERM` is not `dumb`.
    #[default]
    Auto,
    /// Colour even when writing to a pipe or file.
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Decides for one stream. `no_color` is the value of `NO_COLOR` (per no-color.org any
    /// non-empty value turns colour off) and `term` that of `TERM`.
    pub(crate) fn enabled(
        self,
        no_color: Option<&str>,
        term: Option<&str>,
        is_terminal: bool,
    ) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                no_color.is_none_or(str::is_empty) && term != Some("dumb") && is_terminal
            }
        }
    }

    fn decide(self, is_terminal: bool) -> Styles {
        let no_color = std::env::var("NO_COLOR").ok();
        let term = std::env::var("TERM").ok();
        Styles::new(self.enabled(no_color.as_deref(), term.as_deref(), is_terminal))
    }

    /// Decides for standard error, the stream errors and warnings go to.
    pub fn for_stderr(self) -> Styles {
        self.decide(std::io::stderr().is_terminal())
    }

    /// Decides for standard output, the stream tables go to.
    pub(crate) fn for_stdout(self) -> Styles {
        self.decide(std::io::stdout().is_terminal())
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
    fn auto_colours_only_a_terminal_without_no_color_or_a_dumb_term() {
        assert!(ColorChoice::Auto.enabled(None, None, true));
        assert!(ColorChoice::Auto.enabled(None, Some("xterm-256color"), true));
        assert!(!ColorChoice::Auto.enabled(None, None, false));
        assert!(!ColorChoice::Auto.enabled(Some("1"), None, true));
        // An empty NO_COLOR does not count (no-color.org).
        assert!(ColorChoice::Auto.enabled(Some(""), None, true));
        assert!(!ColorChoice::Auto.enabled(None, Some("dumb"), true));
        assert!(ColorChoice::Always.enabled(Some("1"), Some("dumb"), false));
        assert!(!ColorChoice::Never.enabled(None, None, true));
    }

    #[test]
    fn plain_styles_write_plain_text() {
        let styles = Styles::new(false);
        assert_eq!(format!("{}", "error:".style(styles.error)), "error:");
        let styles = Styles::new(true);
        assert_ne!(format!("{}", "error:".style(styles.error)), "error:");
    }
}
