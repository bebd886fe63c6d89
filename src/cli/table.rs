//! Tables as kubectl prints them: left-aligned columns two spaces apart, no borders, an
//! upper-case header. A table that fits (or goes to a pipe) is aligned directly, row by row, which
//! stays fast and small for fleets of tens of thousands of rows; only a table wider than the
//! terminal goes through comfy-table, which wraps the free-text columns to fit.

use comfy_table::{
    Attribute, Cell as ComfyCell, Color, ColumnConstraint, ContentArrangement, Table, presets,
};
use owo_colors::OwoColorize;

/// How a table is drawn.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableStyle {
    pub colored: bool,
    pub width: Width,
    pub no_headers: bool,
}

/// The width a table must fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Width {
    /// `COLUMNS` says how wide the screen is.
    Columns(u16),
    /// Standard output is a terminal: ask it.
    Terminal,
    /// A pipe or file: rows keep their natural width, as kubectl's do.
    Unlimited,
}

/// The colour of a cell, when colour is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Paint {
    Green,
    Yellow,
    Red,
}

/// A cell's text and colour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    pub text: String,
    pub paint: Option<Paint>,
}

impl Cell {
    pub(crate) fn plain(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            paint: None,
        }
    }

    pub(crate) fn painted(text: impl Into<String>, paint: Option<Paint>) -> Cell {
        Cell {
            text: text.into(),
            paint,
        }
    }
}

/// A table's header, rows, and the columns that must never wrap (names, addresses, statuses).
#[derive(Clone, Debug, Default)]
pub(crate) struct Grid {
    pub header: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    pub unwrapped: Vec<usize>,
}

fn width_of(text: &str) -> usize {
    text.chars().count()
}

impl Grid {
    /// Renders the table, ending each line with a newline.
    pub(crate) fn render(&self, style: &TableStyle) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = if style.no_headers {
            vec![0; columns]
        } else {
            self.header.iter().map(|h| width_of(h)).collect()
        };
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(width_of(&cell.text));
            }
        }
        let natural = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
        let limit = match style.width {
            Width::Columns(columns) => Some(usize::from(columns)),
            Width::Terminal => Table::new().width().map(usize::from),
            Width::Unlimited => None,
        };
        match limit {
            Some(limit) if natural > limit => self.wrapped(style, limit),
            _ => self.aligned(style, &widths),
        }
    }

    fn aligned(&self, style: &TableStyle, widths: &[usize]) -> String {
        let mut out = String::with_capacity(
            (self.rows.len() + 1) * (widths.iter().sum::<usize>() + 2 * widths.len()),
        );
        let mut line = String::new();
        let mut write_row = |cells: &mut dyn Iterator<Item = (&str, Option<Paint>, bool)>| {
            line.clear();
            for (i, (text, paint, bold)) in cells.enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let padding = widths[i].saturating_sub(width_of(text));
                match (style.colored, paint, bold) {
                    (true, _, true) => line.push_str(&text.bold().to_string()),
                    (true, Some(paint), false) => line.push_str(&paint_text(text, paint)),
                    _ => line.push_str(text),
                }
                // Pad after the colour ends, so trailing blanks can be trimmed.
                line.extend(std::iter::repeat_n(' ', padding));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        };
        if !style.no_headers {
            write_row(&mut self.header.iter().map(|h| (h.as_str(), None, true)));
        }
        for row in &self.rows {
            write_row(&mut row.iter().map(|c| (c.text.as_str(), c.paint, false)));
        }
        out
    }

    fn wrapped(&self, style: &TableStyle, limit: usize) -> String {
        let mut table = Table::new();
        table.load_preset(presets::NOTHING);
        table.set_content_arrangement(ContentArrangement::Dynamic);
        table.set_width(u16::try_from(limit).unwrap_or(u16::MAX));
        if style.colored {
            table.enforce_styling();
        } else {
            table.force_no_tty();
        }
        if !style.no_headers {
            table.set_header(self.header.iter().map(|h| {
                let cell = ComfyCell::new(h);
                if style.colored {
                    cell.add_attribute(Attribute::Bold)
                } else {
                    cell
                }
            }));
        }
        for row in &self.rows {
            table.add_row(row.iter().map(|c| {
                let cell = ComfyCell::new(&c.text);
                match c.paint {
                    Some(paint) if style.colored => cell.fg(comfy_color(paint)),
                    _ => cell,
                }
            }));
        }
        for &index in &self.unwrapped {
            if let Some(column) = table.column_mut(index) {
                column.set_constraint(ColumnConstraint::ContentWidth);
            }
        }
        // comfy-table pads each cell with a space on both sides; kubectl's tables start at the
        // first column and have no trailing blanks.
        let mut out = String::new();
        for line in table.lines() {
            out.push_str(line.strip_prefix(' ').unwrap_or(&line).trim_end());
            out.push('\n');
        }
        out
    }
}

fn paint_text(text: &str, paint: Paint) -> String {
    match paint {
        Paint::Green => text.green().to_string(),
        Paint::Yellow => text.yellow().to_string(),
        Paint::Red => text.red().to_string(),
    }
}

fn comfy_color(paint: Paint) -> Color {
    match paint {
        Paint::Green => Color::Green,
        Paint::Yellow => Color::Yellow,
        Paint::Red => Color::Red,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Grid {
        Grid {
            header: vec!["NAME".into(), "TEXT".into(), "STATUS".into()],
            rows: vec![
                vec![
                    Cell::plain("a"),
                    Cell::plain("short"),
                    Cell::painted("ok", None),
                ],
                vec![
                    Cell::plain("node-2"),
                    Cell::plain("a much longer text here"),
                    Cell::painted("failed", Some(Paint::Red)),
                ],
            ],
            unwrapped: vec![0, 2],
        }
    }

    fn style(width: Width) -> TableStyle {
        TableStyle {
            colored: false,
            width,
            no_headers: false,
        }
    }

    #[test]
    fn aligns_columns_two_spaces_apart() {
        assert_eq!(
            grid().render(&style(Width::Unlimited)),
            "NAME    TEXT                     STATUS\n\
             a       short                    ok\n\
             node-2  a much longer text here  failed\n"
        );
    }

    #[test]
    fn wraps_only_the_free_text_when_too_wide() {
        let text = grid().render(&style(Width::Columns(30)));
        assert!(text.lines().all(|l| l.chars().count() <= 30), "{text}");
        assert!(text.contains("node-2"), "{text}");
        assert!(text.contains("failed"), "{text}");
        // A table that fits is the same whether a width is given or not.
        assert_eq!(
            grid().render(&style(Width::Columns(200))),
            grid().render(&style(Width::Unlimited))
        );
    }

    #[test]
    fn no_headers_drops_the_header_row() {
        let text = grid().render(&TableStyle {
            no_headers: true,
            ..style(Width::Unlimited)
        });
        assert_eq!(
            text.lines().next(),
            Some("a       short                    ok")
        );
    }

    #[test]
    fn colour_does_not_change_the_layout() {
        let text = grid().render(&TableStyle {
            colored: true,
            ..style(Width::Unlimited)
        });
        assert!(text.contains("\u{1b}[31mfailed\u{1b}[39m"), "{text:?}");
    }
}
