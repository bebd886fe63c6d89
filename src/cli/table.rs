//! Tables as kubectl prints them: left-aligned columns two spaces apart, an upper-case header, one
//! line per row. A table wider than the terminal is never wrapped: [`Fit::ShrinkFirst`] then
//! [`Fit::Shrink`] columns give up width, widest first, cut with ` …` down to a readable floor;
//! past the floors, lines run over as `kubectl get -o wide`'s do. Widths count the text, never
//! colour escapes, and colour wraps the text, never its padding (comfy-table's did, which shifted
//! the header).

use owo_colors::OwoColorize;

/// How a table is drawn.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableStyle {
    pub colored: bool,
    /// What the table must fit.
    pub width: Width,
    /// What the notes below it wrap at: the terminal's width, also under a wide table.
    pub notes_width: Width,
    pub no_headers: bool,
}

/// The width a table must fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Width {
    /// A terminal this many columns wide.
    Columns(u16),
    /// A pipe or file, or `-o wide`: rows keep their natural width, as kubectl's do.
    Unlimited,
}

impl Width {
    /// Standard output's width when it is a terminal, asked of the terminal (TIOCGWINSZ) as
    /// kubectl asks it; else no limit. kubectl never reads `COLUMNS`: its help and wrapped text
    /// take the size of stdout's terminal (k8s.io/kubectl pkg/util/term/term_writer.go,
    /// `NewResponsiveWriter`, `GetWordWrapperLimit`, through moby/term), and its tables are
    /// never fitted at all; so `COLUMNS` changes nothing here either.
    pub(crate) fn of_stdout() -> Width {
        match terminal_size::terminal_size_of(std::io::stdout()) {
            Some((terminal_size::Width(w), _)) if w > 0 => Width::Columns(w),
            _ => Width::Unlimited,
        }
    }

    /// The number of columns, when there is a limit.
    pub(crate) fn limit(self) -> Option<usize> {
        match self {
            Width::Columns(columns) => Some(usize::from(columns)),
            Width::Unlimited => None,
        }
    }
}

/// The colour of a cell, when colour is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Paint {
    Green,
    Yellow,
    Red,
}

/// A cell's text and colour. The text is made terminal-safe when the cell is made (see
/// [`terminal_safe`](crate::text::terminal_safe)), and only then: a cell is the one way into a
/// table, so no renderer can forget it, and widths are counted on what is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    text: String,
    pub paint: Option<Paint>,
    /// How many words at its start a cut never parts (at least 1): `all but` in `all but VC1
    /// VP8`, which cut after `all` would read as its opposite.
    pub head_words: usize,
}

impl Cell {
    pub(crate) fn plain(text: impl Into<String>) -> Cell {
        Cell::painted(text, None)
    }

    pub(crate) fn painted(text: impl Into<String>, paint: Option<Paint>) -> Cell {
        let text = text.into();
        let text = match crate::text::terminal_safe(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(safe) => safe,
        };
        Cell {
            text,
            paint,
            head_words: 1,
        }
    }

    /// The same cell, its first `words` words never parted by a cut.
    pub(crate) fn keeping(self, words: usize) -> Cell {
        Cell {
            head_words: words.max(1),
            ..self
        }
    }
}

/// Whether a column may give up width when the table is wider than the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Names, addresses, statuses: what identifies a row or says what to do is never cut.
    Keep,
    /// Free text that gives up width first, having its full form elsewhere (GPU and driver
    /// names, shown whole by `-o wide`): cut at a word boundary with ` …`, or inside a first word
    /// wider than the column with `…`.
    ShrinkFirst,
    /// Lists of names that give up width once the [`Fit::ShrinkFirst`] columns are at their
    /// floor (capability lists, the table's substance): cut between names only, never inside
    /// one (a cut name could read as another: `HEVC-10-LP` as `HEVC-10…`).
    Shrink,
}

impl Fit {
    /// Whether a word may be cut inside when it does not fit.
    fn cuts_inside_words(self) -> bool {
        self != Fit::Shrink
    }
}

/// The narrowest a shrinking column gets (its header, if wider, is the floor instead): enough
/// for a codec label or the start of a name, so a narrow terminal never gets a column of single
/// characters.
pub(crate) const MIN_SHRUNK: usize = 8;

/// A table's header, rows, and how each column fits.
#[derive(Clone, Debug, Default)]
pub(crate) struct Grid {
    pub header: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// One per column; a missing entry is [`Fit::Keep`].
    pub fits: Vec<Fit>,
}

/// The width of a text on a terminal. Every string a table shows here is ASCII or Latin text
/// (names from pci.ids, driver strings, node names), one column per character.
pub(crate) fn width_of(text: &str) -> usize {
    text.chars().count()
}

/// The places a cut may end `text`, first to last: after each run of whole words, holding at
/// least `head_words` words, that leaves more to show (each given without its trailing spaces).
fn word_cuts(text: &str, head_words: usize) -> impl Iterator<Item = &str> {
    let mut words = 0;
    text.char_indices().filter_map(move |(index, c)| {
        // A space that ends a word (not the second of two).
        if c != ' ' || index == 0 || text[..index].ends_with(' ') {
            return None;
        }
        words += 1;
        let head = text[..index].trim_end();
        (words >= head_words && !head.is_empty()).then_some(head)
    })
}

/// The narrowest a cell is shown when it is cut between words only: its first `head_words`
/// words and ` …`, or the whole text when that is all of it.
fn narrowest_cut(text: &str, head_words: usize) -> usize {
    word_cuts(text, head_words)
        .next()
        .map_or(width_of(text), |head| width_of(head) + 2)
}

/// The narrowest width above `width` at which [`cut`] shows more of `text`: the next word
/// with ` …`, or the whole text.
fn next_stop(text: &str, width: usize, head_words: usize) -> Option<usize> {
    let full = width_of(text);
    if full <= width {
        return None;
    }
    word_cuts(text, head_words)
        .map(|head| width_of(head) + 2)
        .find(|&w| w > width && w < full)
        .or(Some(full))
}

/// Cuts `text` to at most `width` columns: whole words and ` …` when a word boundary leaves room,
/// else the first characters and `…`. Text that fits is returned as it is.
pub(crate) fn truncate(text: &str, width: usize) -> std::borrow::Cow<'_, str> {
    cut(text, width, 1, true)
}

/// [`truncate`] with its rules: the first `head_words` words stay together; and when no word
/// boundary leaves room, the start of the first word and `…` (`inside`), or else the narrowest
/// cut between words, wider than `width` (the columns of such cells are never that narrow).
fn cut(text: &str, width: usize, head_words: usize, inside: bool) -> std::borrow::Cow<'_, str> {
    if width_of(text) <= width {
        return text.into();
    }
    if width == 0 && inside {
        return "".into();
    }
    // The longest run of whole words that leaves room for " …".
    let mut fitting = None;
    let mut first = None;
    for head in word_cuts(text, head_words) {
        first = first.or(Some(head));
        if width_of(head) + 2 > width {
            break;
        }
        fitting = Some(head);
    }
    match (fitting, first) {
        (Some(head), _) => format!("{head} …").into(),
        (None, _) if inside => {
            let head: String = text.chars().take(width - 1).collect();
            format!("{head}…").into()
        }
        (None, Some(head)) => format!("{head} …").into(),
        (None, None) => text.into(),
    }
}

impl Grid {
    fn fit(&self, column: usize) -> Fit {
        self.fits.get(column).copied().unwrap_or(Fit::Keep)
    }

    /// The natural width of each column: its widest cell, and its header unless headers are off.
    fn natural_widths(&self, style: &TableStyle) -> Vec<usize> {
        let mut widths: Vec<usize> = if style.no_headers {
            vec![0; self.header.len()]
        } else {
            self.header.iter().map(|h| width_of(h)).collect()
        };
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(width_of(&cell.text));
            }
        }
        widths
    }

    /// The width of each column within `limit`: the widest shrinking column gives up one column
    /// at a time until the table fits or every shrinking column is at its floor.
    pub(crate) fn widths(&self, style: &TableStyle) -> Vec<usize> {
        let mut widths = self.natural_widths(style);
        let Some(limit) = style.width.limit() else {
            return widths;
        };
        let gaps = 2 * widths.len().saturating_sub(1);
        let floors: Vec<usize> = widths
            .iter()
            .enumerate()
            .map(|(i, &natural)| {
                let header = if style.no_headers {
                    0
                } else {
                    width_of(&self.header[i])
                };
                match self.fit(i) {
                    Fit::Keep => natural,
                    Fit::ShrinkFirst => natural.min(MIN_SHRUNK.max(header)),
                    // Never narrower than a cell's first name(s) and " …". A fleet has few
                    // distinct lists, so the widest is found on the way, not remembered per cell.
                    Fit::Shrink => {
                        let names = self
                            .rows
                            .iter()
                            .filter_map(|row| row.get(i))
                            .map(|c| narrowest_cut(&c.text, c.head_words))
                            .max()
                            .unwrap_or(0);
                        natural.min(MIN_SHRUNK.max(header).max(names))
                    }
                }
            })
            .collect();
        let mut total: usize = widths.iter().sum::<usize>() + gaps;
        while total > limit {
            let first =
                (0..widths.len()).any(|i| self.fit(i) == Fit::ShrinkFirst && widths[i] > floors[i]);
            let widest = (0..widths.len())
                .filter(|&i| widths[i] > floors[i])
                .filter(|&i| !first || self.fit(i) == Fit::ShrinkFirst)
                .max_by_key(|&i| (widths[i], std::cmp::Reverse(i)));
            let Some(i) = widest else { break };
            widths[i] -= 1;
            total -= 1;
        }
        // Cutting at word boundaries leaves a column narrower than its share (`Mesa …` in 17
        // columns): columns take what their cut cells need, and what that frees goes to the cut
        // column that needs the least of it to show one more word, again and again.
        let natural = self.natural_widths(style);
        let texts = |i: usize| {
            let header = (!style.no_headers).then(|| (self.header[i].as_str(), 1));
            header.into_iter().chain(
                self.rows
                    .iter()
                    .filter_map(move |row| row.get(i))
                    .map(|c| (c.text.as_str(), c.head_words)),
            )
        };
        let inside = |i: usize| self.fit(i).cuts_inside_words();
        let used = |i: usize, width: usize| {
            texts(i)
                .map(|(t, head)| width_of(&cut(t, width, head, inside(i))))
                .max()
                .unwrap_or(0)
        };
        let mut shown: Vec<usize> = (0..widths.len()).map(|i| used(i, widths[i])).collect();
        loop {
            let total = shown.iter().sum::<usize>() + gaps;
            let slack = limit.saturating_sub(total);
            // Per cut column, the narrowest width at which some cell shows more than now.
            let next = (0..widths.len())
                .filter(|&i| shown[i] < natural[i])
                .filter_map(|i| {
                    let width = texts(i)
                        .filter_map(|(t, head)| next_stop(t, widths[i].max(shown[i]), head))
                        .min()?;
                    let cost = used(i, width).saturating_sub(shown[i]);
                    (cost > 0 && cost <= slack).then_some((cost, i, width))
                })
                .min();
            let Some((_, i, width)) = next else { break };
            widths[i] = width;
            shown[i] = used(i, width);
        }
        shown
    }

    /// Renders the table, ending each line with a newline.
    pub(crate) fn render(&self, style: &TableStyle) -> String {
        let widths = self.widths(style);
        let mut out = String::with_capacity(
            (self.rows.len() + 1) * (widths.iter().sum::<usize>() + 2 * widths.len() + 1),
        );
        let mut line = String::new();
        let mut write_row =
            |cells: &mut dyn Iterator<Item = (&str, usize, Option<Paint>, bool)>| {
                line.clear();
                for (i, (text, head, paint, bold)) in cells.enumerate() {
                    if i > 0 {
                        line.push_str("  ");
                    }
                    let shown = cut(text, widths[i], head, self.fit(i).cuts_inside_words());
                    let padding = widths[i].saturating_sub(width_of(&shown));
                    match (style.colored, paint, bold) {
                        (true, _, true) => line.push_str(&shown.bold().to_string()),
                        (true, Some(paint), false) => line.push_str(&paint_text(&shown, paint)),
                        _ => line.push_str(&shown),
                    }
                    // Pad after the colour ends: escapes take no columns, and trailing blanks can be
                    // trimmed.
                    pad(&mut line, padding);
                }
                out.push_str(line.trim_end());
                out.push('\n');
            };
        if !style.no_headers {
            write_row(&mut self.header.iter().map(|h| (h.as_str(), 1, None, true)));
        }
        for row in &self.rows {
            write_row(
                &mut row
                    .iter()
                    .map(|c| (c.text.as_str(), c.head_words, c.paint, false)),
            );
        }
        out
    }
}

/// Wraps a note to `limit` columns at spaces, continuation lines indented by two; a word longer
/// than a line stays whole. Without a limit (a pipe) the note stays one line. The note is made
/// terminal-safe first: notes name nodes, drivers and pods.
pub(crate) fn wrap_note(note: &str, limit: Option<usize>) -> String {
    let note = crate::text::terminal_safe(note);
    let Some(limit) = limit else {
        return note.into_owned();
    };
    let mut out = String::with_capacity(note.len() + 8);
    for (start, end, indent) in pieces(&note, 2, limit) {
        if start > 0 {
            out.push('\n');
            pad(&mut out, indent);
        }
        out.push_str(&note[start..end]);
    }
    out
}

/// Where `line` breaks to fit `limit` columns: the byte ranges of its pieces, and for each the
/// columns it is indented by (`hang` for a continuation, 0 for the first piece). It breaks only at
/// spaces after the line's own indentation, and the spaces it breaks at are dropped; other spaces
/// (alignment) are kept. A word longer than a line stays whole, and so does a command (see
/// [`commands`]) with the punctuation that ends its clause: one that does not fit where it
/// starts goes to the next line; one that fits a line only without the hang starts at the
/// margin (else its `)` would be the one column past the edge, alone on the terminal's next
/// line); one longer than a line has a line of its own and runs past the edge. A command parted
/// by a newline cannot be copied and run, while the terminal's own wrap of a long line is undone
/// when it is copied (xterm, VTE, iTerm2, Windows Terminal and tmux join such lines); so nothing
/// is added to a command (no `\`, no no-break spaces) and a pipe gets every line whole.
/// Renderers that colour parts of a line wrap the plain text with this, then colour the pieces.
pub(crate) fn pieces(line: &str, hang: usize, limit: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let (mut start, mut column, mut indent) = (0, 0, 0);
    // Whether the current piece has a word yet: the indentation before it never breaks.
    let mut has_word = false;
    let words = words(line);
    let commands = commands(line);
    let mut i = 0;
    while i < words.len() {
        let (spaces, word_start, mut word_end) = words[i];
        // A command is one unit, from its first word to its last.
        let mut next = i + 1;
        let command = commands.iter().find(|(first, _)| *first == i);
        if let Some(&(_, last)) = command {
            word_end = words[last].2;
            next = last + 1;
        }
        let width = width_of(&line[word_start..word_end]);
        let gap = width_of(&line[spaces..word_start]);
        if has_word && column + gap + width > limit {
            out.push((start, spaces, indent));
            start = word_start;
            indent = if command.is_some() && hang + width > limit && width <= limit {
                0
            } else {
                hang
            };
            column = indent + width;
        } else {
            column += gap + width;
        }
        has_word = true;
        i = next;
    }
    out.push((start, line.len(), indent));
    out
}

/// The words of `line`: for each, where the spaces before it start, where it starts and where
/// it ends (byte offsets).
fn words(line: &str) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut spaces = 0;
    let mut word: Option<usize> = None;
    for (i, c) in line.char_indices() {
        match (c == ' ', word) {
            (true, Some(start)) => {
                out.push((spaces, start, i));
                word = None;
                spaces = i;
            }
            (false, None) => word = Some(i),
            _ => {}
        }
    }
    if let Some(start) = word {
        out.push((spaces, start, line.len()));
    }
    out
}

/// The commands in `line` (see [`commands`]), as byte ranges from the start of their first word
/// to the end of their last.
pub(crate) fn command_spans(line: &str) -> Vec<std::ops::Range<usize>> {
    let words = words(line);
    commands(line)
        .into_iter()
        .map(|(first, last)| words[first].1..words[last].2)
        .collect()
}

/// The commands in `line`, as the indices of their first and last words (of [`words`]). The
/// text says what to run in the words themselves (`... with kubectl get pods -n liken-system,
/// then ...`), so a command is found as a reader finds it: it starts at the word `kubectl`
/// (after a `(`, a quote or a backtick) and ends at the first word that ends its clause
/// (`,`, `;`, `:`, `)`, a `.` that is not `...`), before a word that opens a `(`, or at the end
/// of the line. Prose that names kubectl media (`kubectl media cannot decide...;`) is kept
/// together too, which costs no more than an earlier break.
fn commands(line: &str) -> Vec<(usize, usize)> {
    let words = words(line);
    let text = |i: usize| &line[words[i].1..words[i].2];
    let ends_clause = |word: &str| {
        word.ends_with([',', ';', ':', ')', '`', '\'', '"'])
            || (word.ends_with('.') && !word.ends_with(".."))
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if text(i).trim_start_matches(['(', '`', '\'', '"']) != "kubectl" {
            i += 1;
            continue;
        }
        let mut last = i;
        while last + 1 < words.len() && !ends_clause(text(last)) && !text(last + 1).starts_with('(')
        {
            last += 1;
        }
        out.push((i, last));
        i = last + 1;
    }
    out
}

/// Appends `n` spaces.
fn pad(line: &mut String, mut n: usize) {
    const SPACES: &str = "                                                                ";
    while n > 0 {
        let step = n.min(SPACES.len());
        line.push_str(&SPACES[..step]);
        n -= step;
    }
}

fn paint_text(text: &str, paint: Paint) -> String {
    match paint {
        Paint::Green => text.green().to_string(),
        Paint::Yellow => text.yellow().to_string(),
        Paint::Red => text.red().to_string(),
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
            fits: vec![Fit::Keep, Fit::Shrink, Fit::Keep],
        }
    }

    fn style(width: Width) -> TableStyle {
        TableStyle {
            colored: false,
            width,
            notes_width: width,
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
    fn a_table_too_wide_cuts_free_text_at_a_word_with_an_ellipsis() {
        let text = grid().render(&style(Width::Columns(30)));
        // TEXT gives up what the table is too wide by, then keeps only what its cut cell needs.
        assert_eq!(
            text,
            "NAME    TEXT      STATUS\n\
             a       short     ok\n\
             node-2  a much …  failed\n"
        );
        assert!(text.lines().all(|l| width_of(l) <= 30), "{text}");
        // A table that fits is the same whether a width is given or not.
        assert_eq!(
            grid().render(&style(Width::Columns(200))),
            grid().render(&style(Width::Unlimited))
        );
    }

    #[test]
    fn a_shrinking_column_keeps_a_readable_floor_and_then_the_lines_run_on() {
        let text = grid().render(&style(Width::Columns(5)));
        // NAME and STATUS are kept whole; TEXT stops at eight columns.
        let widths = grid().widths(&style(Width::Columns(5)));
        assert_eq!(widths, [6, 8, 6]);
        assert!(text.contains("node-2  a much …  failed"), "{text}");
    }

    #[test]
    fn truncation_prefers_word_boundaries() {
        assert_eq!(truncate("AV1 AV1-10 H264 HEVC", 20), "AV1 AV1-10 H264 HEVC");
        assert_eq!(truncate("AV1 AV1-10 H264 HEVC", 17), "AV1 AV1-10 H264 …");
        assert_eq!(truncate("AV1 AV1-10 H264 HEVC", 16), "AV1 AV1-10 …");
        // One word longer than the room: its start, marked.
        assert_eq!(truncate("TigerLake-H GT1", 8), "TigerLa…");
        assert_eq!(truncate("abc", 0), "");
    }

    #[test]
    fn lists_of_names_are_cut_between_names_only() {
        // Free text may be cut inside its first word; a list of names never is.
        assert_eq!(cut("HEVC-10-LP HEVC-LP", 8, 1, true), "HEVC-10…");
        assert_eq!(cut("HEVC-10-LP HEVC-LP", 8, 1, false), "HEVC-10-LP …");
        assert_eq!(narrowest_cut("HEVC-10-LP HEVC-LP", 1), 12);
        assert_eq!(narrowest_cut("VP9", 1), 3);
        // Words kept together: `all but` is never cut after `all`.
        assert_eq!(cut("all but VC1 VP8", 8, 2, false), "all but …");
        assert_eq!(cut("all but VC1 VP8", 13, 2, false), "all but VC1 …");
        assert_eq!(narrowest_cut("all but VC1 VP8", 2), 9);
        assert_eq!(narrowest_cut("all but", 2), 7);
        assert_eq!(next_stop("all but VC1 VP8", 8, 2), Some(9));
        // Two spaces in a row are one word boundary.
        assert_eq!(cut("a  b c", 5, 1, false), "a …");
        assert_eq!(cut("a  b c", 5, 2, false), "a  b …");
    }

    #[test]
    fn a_column_of_names_keeps_its_first_names_whole() {
        let grid = Grid {
            header: vec![
                "NODE".into(),
                "GPU".into(),
                "DECODE".into(),
                "ENCODE".into(),
            ],
            rows: vec![
                vec![
                    Cell::plain("n1"),
                    Cell::plain("TigerLake-H GT1"),
                    Cell::plain("all but VC1 VP8").keeping(2),
                    Cell::plain("H264-LP HEVC-10-LP HEVC-LP"),
                ],
                vec![
                    Cell::plain("n2"),
                    Cell::plain("Ellesmere"),
                    Cell::plain("H264 HEVC MPEG2"),
                    Cell::plain("-"),
                ],
            ],
            fits: vec![Fit::Keep, Fit::ShrinkFirst, Fit::Shrink, Fit::Shrink],
        };
        // Far too narrow: every column at its floor, the lines run on.
        let text = grid.render(&style(Width::Columns(20)));
        assert_eq!(
            text,
            "NODE  GPU       DECODE     ENCODE\n\
             n1    TigerLa…  all but …  H264-LP …\n\
             n2    Ellesme…  H264 …     -\n"
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
    fn colour_does_not_move_a_column() {
        for width in [Width::Unlimited, Width::Columns(30)] {
            let plain = grid().render(&style(width));
            let coloured = grid().render(&TableStyle {
                colored: true,
                ..style(width)
            });
            assert!(
                coloured.contains("\u{1b}[31mfailed\u{1b}[39m"),
                "{coloured:?}"
            );
            assert!(
                coloured.starts_with("\u{1b}[1mNAME\u{1b}[0m    "),
                "{coloured:?}"
            );
            assert_eq!(strip_ansi(&coloured), plain);
        }
    }

    #[test]
    fn notes_wrap_at_spaces_with_an_indent() {
        assert_eq!(
            wrap_note("one two three four", Some(9)),
            "one two\n  three\n  four"
        );
        assert_eq!(wrap_note("one two", None), "one two");
        assert_eq!(
            wrap_note("a kubectl-get-pods-long-token", Some(10)),
            "a\n  kubectl-get-pods-long-token"
        );
    }

    #[test]
    fn pieces_keep_alignment_and_hang() {
        let line = "       2  the pod's nodeSelector wants x";
        let cut = |limit| {
            pieces(line, 10, limit)
                .into_iter()
                .map(|(a, b, _)| &line[a..b])
                .collect::<Vec<_>>()
        };
        // Fits: one piece, the alignment kept.
        assert_eq!(cut(80), [line]);
        // Breaks at the spaces between words only, never in the indentation.
        assert_eq!(cut(30), ["       2  the pod's", "nodeSelector wants x"]);
        assert_eq!(
            cut(5),
            ["       2", "the", "pod's", "nodeSelector", "wants", "x"]
        );
    }

    #[test]
    fn a_command_is_never_parted_by_a_line_break() {
        let cut = |line: &str, hang, limit| {
            pieces(line, hang, limit)
                .into_iter()
                .map(|(a, b, _)| line[a..b].to_owned())
                .collect::<Vec<_>>()
        };
        // The step the audit saw parted at 80 columns: the command goes to the next line whole.
        let step = "  - recreate the pods that use them; for the media-capabilities agents, kubectl -n liken-system rollout restart daemonset/media-capabilities";
        assert_eq!(
            cut(step, 4, 80),
            [
                "  - recreate the pods that use them; for the media-capabilities agents,",
                "kubectl -n liken-system rollout restart daemonset/media-capabilities",
            ]
        );
        // Longer than a line: a line of its own, run past the edge (the terminal's own wrap is
        // undone on copy); the prose after it wraps as before.
        let note = "log: find the pod with kubectl get pods -n liken-system -l app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName=amd-2, then kubectl logs -n liken-system POD)";
        assert_eq!(
            cut(note, 2, 40),
            [
                "log: find the pod with",
                "kubectl get pods -n liken-system -l app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName=amd-2,",
                "then kubectl logs -n liken-system POD)",
            ]
        );
        // Commands end where their clause does, or before an aside in brackets.
        let words = |line: &'static str| {
            let all: Vec<&str> = line.split(' ').collect();
            commands(line)
                .into_iter()
                .map(|(a, b)| all[a..=b].join(" "))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            words(
                "create it (kubectl media class ... | kubectl apply -f -), or fix deviceClassName"
            ),
            ["(kubectl media class ... | kubectl apply -f -),"]
        );
        assert_eq!(
            words("check: kubectl -n x get pods --field-selector a=<node> (b is the agent)"),
            ["kubectl -n x get pods --field-selector a=<node>"]
        );
        assert_eq!(
            words("run kubectl apply -f . then kubectl get pods"),
            ["kubectl apply -f .", "kubectl get pods"]
        );
        assert!(commands("no command here, kubectl-free").is_empty());
        // Without a command, the same breaks as before; into a pipe nothing changes.
        assert_eq!(
            cut("one two three four", 2, 9),
            ["one two", "three", "four"]
        );
        assert_eq!(wrap_note(note, None), note);
        // A command that fits a line only at the margin starts there, its `)` with it: with the
        // hang it would reach one column past the edge.
        let hint = "no agent: (hint: is it there? kubectl get pods -o wide --field-selector spec.nodeName=edge-1)";
        let command = "kubectl get pods -o wide --field-selector spec.nodeName=edge-1)";
        assert_eq!(
            wrap_note(hint, Some(command.len())),
            format!("no agent: (hint: is it there?\n{command}")
        );
        assert_eq!(
            wrap_note(hint, Some(command.len() + 2)),
            format!("no agent: (hint: is it there?\n  {command}")
        );
    }

    fn strip_ansi(text: &str) -> String {
        let mut out = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}
