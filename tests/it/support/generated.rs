//! Files in the repository that are generated from the code: the capability reference (from the
//! catalogue), the example fleet (from the recorded probes, with the agent's code) and the man
//! pages (from the clap definitions). The shell
//! completion scripts are not generated: they ask the program itself (`tests/it/completion.rs`).
//!
//! `tests/it/generated.rs` fails when a committed file differs from what this module produces, and
//! rewrites them all with `UPDATE_GENERATED=1 cargo test --test it generated`.

use std::fmt::Write;

use std::path::Path;

use clap::CommandFactory;

use super::examples::{self, ExampleError};
use media_operator::catalogue::{self, Attribute, Capability, Group, Identity};

/// Every generated file: its path relative to the repository root `root` (some are made from
/// inputs there), and its contents.
pub fn files(root: &Path) -> Result<Vec<(String, String)>, ExampleError> {
    let mut files = vec![("docs/capabilities.md".to_string(), capability_reference())];
    let fleet = examples::example_fleet(root)?;
    let mut yaml = String::from(
        "# Generated from the recorded probes in docs/examples/fleet/ by\n\
         # `UPDATE_GENERATED=1 cargo test --test it generated`; do not edit.\n",
    );
    // kubectl's quoting, so that `kubectl apply -f` reads PCI addresses back as strings.
    yaml.push_str(&media_operator::cli::yaml::to_string(&fleet));
    files.push(("docs/examples/fleet.yaml".to_string(), yaml));
    files.extend(man_pages());
    Ok(files)
}

/// The man pages of both programs and of each visible subcommand (`kubectl-media-caps.1`, as
/// git and kubectl name theirs), from the same clap definitions that parse the command lines.
pub fn man_pages() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    for root in [
        media_operator::cli::Cli::command(),
        media_operator::agent::cli::Cli::command(),
    ] {
        let mut root = root.version(env!("CARGO_PKG_VERSION"));
        // Building propagates the global flags (--kubeconfig, --context, ...) to the
        // subcommands, so each page lists every flag its command takes.
        root.build();
        let name = root.get_name().to_owned();
        pages.push((format!("docs/man/{name}.1"), man_page(root.clone())));
        let pages_of = |s: &&clap::Command| !s.is_hide_set() && s.get_name() != "help";
        for sub in root.get_subcommands().filter(pages_of) {
            // clap takes names as `&'static str` (its `string` feature is off); a few bytes
            // per page, once per test run.
            let full: &'static str = format!("{name}-{}", sub.get_name()).leak();
            let sub = sub.clone().name(full).version(env!("CARGO_PKG_VERSION"));
            pages.push((format!("docs/man/{full}.1"), man_page(sub)));
        }
    }
    pages
}

/// The centre of every page's header line: short, so that the header of the longest page
/// (`media-capabilities-probe(1)` on both sides) still has room at 80 columns; clap_mangen's
/// default, groff's "General Commands Manual", ran the three together there.
const MANUAL: &str = "media-operator";

/// A page as clap_mangen renders it, with three changes that make it read at 80 columns: prose
/// is left-aligned and never hyphenated (`.ad l`, `.nh`: justified and hyphenated text parts
/// commands and flags that are copied from it); the help's closing text (`Examples:`, `Exit
/// status:`) becomes sections of their own in no-fill mode, so commands keep their lines and
/// spacing (clap_mangen files it, justified, under `EXTRA`); and text between backticks, a
/// literal in the help, is bold.
pub fn man_page(command: clap::Command) -> String {
    let extra = command
        .get_after_long_help()
        .or(command.get_after_help())
        .map(|text| text.to_string());
    let command = command
        .after_help(None::<&str>)
        .after_long_help(None::<&str>);
    let mut page = Vec::new();
    let title = command.get_name().to_owned();
    let source = format!("{title} {}", command.get_version().unwrap_or_default());
    clap_mangen::Man::new(command)
        .render(&mut page)
        .expect("rendering into memory cannot fail");
    let page = String::from_utf8(page).expect("clap_mangen writes UTF-8");
    let mut out = String::with_capacity(page.len() + 1024);
    let sections = extra.as_deref().map(closing_sections).unwrap_or_default();
    for line in page.lines() {
        if line.starts_with(".SH VERSION") {
            out.push_str(&sections);
        }
        if line.starts_with(".TH ") {
            // clap_mangen writes an empty date as nothing, which moves the source into the
            // date's place and the manual into the source's; every field is quoted here.
            let _ = write!(out, ".TH \"{title}\" 1 \"\" \"{source}\" \"{MANUAL}\"");
        } else if line.starts_with('.') {
            out.push_str(line);
        } else {
            out.push_str(&bold_literals(line));
        }
        out.push('\n');
        if line.starts_with(".TH ") {
            out.push_str(".ad l\n.nh\n");
        }
    }
    if !page.contains("\n.SH VERSION") {
        out.push_str(&sections);
    }
    out
}

/// The help's closing text as man sections: a line `Heading:` at the margin starts a section
/// `HEADING`, and what follows is set line for line, its two-space indent dropped.
fn closing_sections(text: &str) -> String {
    let mut out = String::new();
    let mut open = false;
    for line in text.lines() {
        if let Some(heading) = line.strip_suffix(':').filter(|_| !line.starts_with(' ')) {
            if open {
                out.push_str(".fi\n");
            }
            let _ = writeln!(out, ".SH \"{}\"\n.nf", heading.to_uppercase());
            open = true;
        } else {
            let line = line.strip_prefix("  ").unwrap_or(line);
            let _ = writeln!(out, "{}", roff_literal(line));
        }
    }
    if open {
        out.push_str(".fi\n");
    }
    out
}

/// `text` as roff prints it character for character: `-`, quotes, `^` and `~` are otherwise
/// typeset (a hyphen, curly quotes, accents) and a copied command breaks.
fn roff_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    if text.starts_with(['.', '\'']) {
        out.push_str("\\&");
    }
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            '\'' => out.push_str("\\(aq"),
            '`' => out.push_str("\\(ga"),
            '^' => out.push_str("\\(ha"),
            '~' => out.push_str("\\(ti"),
            c => out.push(c),
        }
    }
    out
}

/// Text between a pair of backticks in bold, the backticks dropped.
fn bold_literals(line: &str) -> String {
    if !line.matches('`').count().is_multiple_of(2) {
        return line.to_owned();
    }
    let mut out = String::with_capacity(line.len() + 16);
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "\\fB{part}\\fR");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The capability reference, docs/capabilities.md.
pub fn capability_reference() -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(
        w,
        "<!-- Generated from src/catalogue.rs by `UPDATE_GENERATED=1 cargo test --test it generated`; do not edit. -->\n"
    );
    let _ = writeln!(w, "# Render node capabilities\n");
    let _ = writeln!(
        w,
        "The capabilities agent publishes one `{}` device per GPU. Each device carries the {} \
         attributes below ({} identity attributes and {} capabilities; the API server allows {} \
         per device). Every capability is present on every device, `true` or `false`, so a \
         selector needs no `has()` check. Unqualified names live in the `{}` domain: in CEL, \
         `device.attributes[\"{}\"].decodeHEVCMain10`.\n",
        catalogue::DRIVER,
        Identity::ALL.len() + Capability::ALL.len(),
        Identity::ALL.len(),
        Capability::ALL.len(),
        catalogue::MAX_ATTRIBUTES_PER_DEVICE,
        catalogue::DRIVER,
        catalogue::DRIVER,
    );
    let _ = writeln!(
        w,
        "The values are the driver's own statements, read through libva, with the rule in the \
         last column applied; the agent does not test them. A capability the GPU has but the \
         driver in the agent's image does not list publishes as `false`. When the query fails, \
         the device has every capability `false` and no `vaDriver`, and the agent's log has the \
         failure word for word: `kubectl -n liken-system logs ds/media-capabilities` shows one \
         agent's, which kubectl picks among the DaemonSet's pods, and the agent's on the GPU's \
         node is `kubectl -n liken-system logs $(kubectl -n liken-system get pods -l \
         app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName=NODE -o name)` \
         (`kubectl media caps` names that pod in its note; see \
         [operations.md](operations.md#reading-the-log)).\n"
    );
    let _ = writeln!(w, "## Identity\n");
    let _ = writeln!(w, "| attribute | type | meaning | source |");
    let _ = writeln!(w, "|---|---|---|---|");
    for identity in Identity::ALL {
        row(w, Attribute::Identity(identity));
    }
    let _ = writeln!(
        w,
        "\nString values are at most {} bytes: longer driver strings and names are cut before \
         their first ` (` when that fits, else at {} bytes on a character boundary; the full \
         string is in the agent's log.\n",
        catalogue::MAX_STRING_VALUE_BYTES,
        catalogue::MAX_STRING_VALUE_BYTES
    );
    for group in Group::ALL {
        let _ = writeln!(w, "## {}\n", title(group));
        let _ = writeln!(
            w,
            "`kubectl media class --{group} VALUE` takes the value column, in any letter case.\n"
        );
        let _ = writeln!(w, "| attribute | value | meaning | true when |");
        let _ = writeln!(w, "|---|---|---|---|");
        for capability in group.capabilities() {
            let _ = writeln!(
                w,
                "| `{}` | `{}` | {} | {} |",
                capability.attribute(),
                capability.value(),
                capability.meaning(),
                capability.va_rule()
            );
        }
        let _ = writeln!(w);
    }
    media_files(w);
    md
}

/// The playback table: what `--for FILE` asks of a GPU for each kind of video stream.
fn media_files(w: &mut String) {
    use media_operator::catalogue::playback::{PROFILES, SCALES};
    let _ = writeln!(
        w,
        "## Media files: `--for FILE`
"
    );
    let _ = writeln!(
        w,
        "`kubectl media caps --for FILE` and `kubectl media class --for FILE` read the file's \
         video streams with ffprobe (`codec_name`, `profile`, and `pix_fmt` for the bit depth and \
         chroma) and ask, for each stream, the decode capability of its codec and profile and the \
         scale capability of its bit depth; `--no-scale` leaves the scaling out. Several files: \
         a GPU must play every one. Attached pictures (cover art) are not video to play.\n"
    );
    let _ = writeln!(
        w,
        "| codec | ffprobe `codec_name` | ffprobe `profile` | bit depth (4:2:0) | decode | scale |"
    );
    let _ = writeln!(w, "|---|---|---|---|---|---|");
    for row in PROFILES {
        // The shallowest depth this row takes: above the deepest of a shallower row of the same
        // codec and profiles (AV1 Main is decodeAV1Main at 8 bits, decodeAV1Main10 at 10).
        let lower = PROFILES
            .iter()
            .filter(|r| {
                r.codec_name == row.codec_name
                    && r.profiles == row.profiles
                    && r.max_bits < row.max_bits
            })
            .map(|r| r.max_bits + 1)
            .max()
            .unwrap_or(0);
        let scales: Vec<(u8, &str)> = SCALES
            .iter()
            .filter(|(bits, _)| *bits >= lower && *bits <= row.max_bits)
            .map(|(bits, c)| (*bits, c.attribute()))
            .collect();
        let profiles = if row.profiles.is_empty() {
            "any".to_string()
        } else {
            row.profiles
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            w,
            "| {} | `{}` | {} | {} | `{}` | {} |",
            row.codec,
            row.codec_name,
            profiles,
            scales
                .iter()
                .map(|(b, _)| b.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            row.decode.attribute(),
            scales
                .iter()
                .map(|(_, s)| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        );
    }
    let _ = writeln!(
        w,
        "\nA stream no row covers is refused in one line that says what it is, never mapped to a \
         near capability: no GPU states it. That is 4:2:2, 4:4:4 or monochrome chroma, samples \
         deeper than 10 bits, an alpha plane, a profile not in the table (H.264 Baseline, which \
         allows what High decoders need not decode, and High 10 or 4:2:2; HEVC Rext; VP9 profiles \
         1 and 3; AV1 High and Professional; VC-1 Simple and Main), or a codec not in it. Each \
         row follows the VA profile the decode attribute is decided on and FFmpeg's own choice of \
         VA profile for the stream (libavcodec/vaapi_decode.c): a decoder of a profile decodes its \
         subsets (H.264 High decodes Main and Constrained Baseline, MPEG-2 Main decodes Simple, \
         HEVC Main Still Picture is HEVC Main); the pixel format decides the scaling (an HEVC \
         Main 10 stream of 8-bit samples needs `scale8bit`)."
    );
}

fn row(w: &mut String, attribute: Attribute) {
    let _ = writeln!(
        w,
        "| `{}` | {} | {} | {} |",
        attribute.name(),
        attribute.kind().as_str(),
        attribute.meaning(),
        attribute.source()
    );
}

fn title(group: Group) -> &'static str {
    match group {
        Group::Decode => "Decode",
        Group::Encode => "Encode",
        Group::Scale => "Scale (video processor)",
    }
}
