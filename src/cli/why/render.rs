//! `why`'s output: the diagnosis as text (wrapped, coloured) and as the `-o json|yaml` record,
//! where each finding carries its code, its data and the sentence the text says.

use std::fmt::Write as _;

use owo_colors::{OwoColorize, Style};
use serde_json::Value;

use super::words;
use super::{SCHEMA, SameInput, carry, undecided};
use crate::cli::output::RenderError;
use crate::cli::style::Styles;
use crate::cli::table::{Cell, Grid, TableStyle, Width, pieces};
use crate::explain::findings::{
    ClaimReport, ClaimState, Diagnosis, ReasonKind, RequestAccount, TargetKind, reason_key,
};

/// The explanation as text, each line wrapped at `limit` columns (the terminal's; none into a
/// pipe) with a hanging indent under its own indentation, as caps wraps its notes.
pub(super) fn render(
    d: &Diagnosis,
    same: &SameInput,
    styles: &Styles,
    limit: Option<usize>,
) -> String {
    let mut page = Page {
        out: String::new(),
        limit,
    };
    let plain = Style::new();
    let verdict_style = if d.blocked {
        styles.no
    } else if undecided(d) {
        styles.warning
    } else {
        styles.yes
    };
    page.line(0, 2, &[(&capitalise(&words::verdict(d)), verdict_style)]);
    for claim in &d.claims {
        render_claim(&mut page, d, claim, styles);
    }
    if let Some(error) = &d.attempt_error {
        page.blank();
        let heading = if error.undecided {
            "Not decided:"
        } else if error.always {
            "Every scheduling attempt fails:"
        } else {
            "Scheduling attempts may fail:"
        };
        page.line(0, 2, &[(heading, styles.header)]);
        page.line(2, 2, &[(&error.message, styles.no)]);
        page.line(2, 2, &[(&words::consequence(error), plain)]);
    }
    if let Some(nodes) = &d.nodes {
        page.blank();
        let it = if d.kind == TargetKind::Pod {
            "the claims"
        } else {
            "it"
        };
        let heading = if d.unchecked.is_empty() {
            format!(
                "Nodes: {} of {} can allocate {it}",
                nodes.allocatable, nodes.total
            )
        } else {
            format!(
                "Nodes: the devices allow {it} on {} of {} (not everything was checked)",
                nodes.allocatable, nodes.total
            )
        };
        page.line(0, 2, &[(&heading, styles.header)]);
        for outcome in &nodes.outcomes {
            // Continuations line up with the detail, right of the count.
            let text = format!(
                "{:>6}  {}: {}",
                outcome.count,
                words::node_finding(&outcome.detail),
                words::shorten(&outcome.nodes)
            );
            page.line(2, 8, &[(&text, plain)]);
        }
    }
    if d.scheduler.condition.is_some() || !d.scheduler.events.is_empty() {
        page.blank();
        let heading = match d.used_by.first().filter(|_| d.kind != TargetKind::Pod) {
            Some(user) => format!("The scheduler says, of pod {user}:"),
            None => "The scheduler says:".to_owned(),
        };
        page.line(0, 2, &[(&heading, styles.header)]);
        if let Some(c) = &d.scheduler.condition {
            let text = format!(
                "PodScheduled={} {}: {}",
                c.status,
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            );
            page.line(2, 4, &[(&text, plain)]);
        }
        for e in &d.scheduler.events {
            let times = if e.count > 1 {
                format!(" (×{})", e.count)
            } else {
                String::new()
            };
            page.line(
                2,
                4,
                &[(&format!("{}{times}: {}", e.reason, e.message), plain)],
            );
        }
    }
    if !d.next_steps.is_empty() {
        page.blank();
        page.line(0, 2, &[("Next steps:", styles.header)]);
        for step in &d.next_steps {
            // Continuations line up with the text, right of the dash.
            let step = carry(&words::step(step), same);
            page.line(2, 2, &[(&format!("- {step}"), plain)]);
        }
    }
    if !d.notes.is_empty() {
        page.blank();
        for note in &d.notes {
            let note = format!(" {}", words::note(note));
            page.line(0, 2, &[("note:", styles.dim), (&note, plain)]);
        }
    }
    page.out
}

/// One claim: where it stands, what it got or why not, and its constraints.
fn render_claim(page: &mut Page, d: &Diagnosis, claim: &ClaimReport, styles: &Styles) {
    let plain = Style::new();
    page.blank();
    let source = match (&claim.claim, &claim.template) {
        (Some(c), Some(t)) => format!(": {c} (from template {t})"),
        (Some(c), None) => format!(": {c}"),
        (None, Some(t)) => format!(" (from template {t})"),
        (None, None) => String::new(),
    };
    let state = match (d.kind, claim.state) {
        (TargetKind::Pod, state) => state_words(state).to_owned(),
        (_, ClaimState::Reserved) => {
            format!(
                "allocated and reserved for {}",
                claim.reserved_for.join(", ")
            )
        }
        (_, ClaimState::Allocated) => "allocated, not reserved for any pod yet".to_owned(),
        (_, state) => state_words(state).to_owned(),
    };
    let title = if d.kind == TargetKind::Pod {
        format!("Claim {}{source}: {state}", claim.name)
    } else {
        // `why claim/NAME`: the claim's name is all there is to say of it.
        format!("Claim {}: {state}", d.name)
    };
    page.line(0, 2, &[(&title, styles.header)]);
    if let Some(problem) = &claim.problem {
        page.line(2, 2, &[(&words::problem(problem), styles.no)]);
    }
    if let Some(allocation) = &claim.allocation {
        if let Some(node) = &allocation.node {
            page.line(2, 2, &[(&format!("node {node}"), plain)]);
        }
        for device in &allocation.devices {
            let mut line = format!(
                "request {}: {}/{}/{}",
                device.request, device.driver, device.pool, device.device
            );
            if let Some(pci) = &device.pci_bus_id {
                let _ = write!(line, ", GPU {pci}");
            }
            if let Some(render) = &device.render_node {
                let _ = write!(line, ", {render}");
            }
            if let Some(kind) = device.sub_device {
                let _ = write!(line, ", {}", kind.described());
            }
            page.line(2, 4, &[(&line, plain)]);
        }
    }
    for request in &claim.requests {
        render_request(page, request, styles);
    }
    for constraint in &claim.constraints {
        let text = format!("Constraint: {}", words::constraint(constraint));
        page.line(2, 4, &[(&text, plain)]);
    }
}

/// One request of a claim still to allocate: how many devices qualify, why the others do not,
/// and with `-o wide` every device.
fn render_request(page: &mut Page, request: &RequestAccount, styles: &Styles) {
    let plain = Style::new();
    let count = if request.allocation_mode == "All" {
        "all matching devices".to_owned()
    } else if request.count == 1 {
        "1 device".to_owned()
    } else {
        format!("{} devices", request.count)
    };
    page.line(
        2,
        2,
        &[(
            &format!(
                "Request {} (class {}, {count}):",
                request.name, request.class
            ),
            plain,
        )],
    );
    let qualify = format!(
        "{} of {} devices pass the selectors, {} free{}",
        request.qualifying,
        request.total,
        request.available,
        if request.qualifying > 0 && request.qualifying_nodes.len() <= 3 {
            format!(" (on {})", request.qualifying_nodes.join(", "))
        } else {
            String::new()
        }
    );
    let qualify_style = if request.available == 0 {
        styles.no
    } else {
        styles.yes
    };
    page.line(4, 2, &[(&qualify, qualify_style)]);
    let mut last_key = None;
    for reason in &request.reasons {
        let key = reason_key(reason);
        let heading_changed = last_key.as_ref() != Some(&key);
        last_key = Some(key);
        let devices = words::count(reason.devices, "device", "devices");
        let nodes = words::count(reason.nodes, "node", "nodes");
        let selector = reason.at.as_ref().map(|at| words::selector(&at.selector));
        let clause = reason.at.as_ref().and_then(|at| at.clause.as_ref());
        let detail = words::detail(&reason.detail);
        match reason.reason {
            ReasonKind::OtherDriver => {
                // `liken.sh devices, where class media-gpu selector #0 wants device.driver ==
                // "media.liken.sh"`: the devices' driver is in the model; the clause says the
                // one wanted.
                let wants = match (&selector, clause) {
                    (Some(selector), Some(clause)) => format!(", where {selector} wants {clause}"),
                    (None, Some(clause)) => format!(", where the request wants {clause}"),
                    (_, None) => " (another driver)".to_owned(),
                };
                let text = format!("{}{wants}: {devices} on {nodes}", reason.model);
                page.line(4, 2, &[(&text, styles.dim)]);
                continue;
            }
            _ if !heading_changed => {}
            // A reason that comes from a selector: the selector, then what it found.
            ReasonKind::SelectorFalse | ReasonKind::RuntimeError | ReasonKind::CannotEvaluate
                if selector.is_some() || clause.is_some() =>
            {
                let mut text = selector.unwrap_or_default();
                if let Some(clause) = clause {
                    let _ = write!(text, ": {clause}");
                }
                page.line(4, 2, &[(&text, plain)]);
                page.line(6, 2, &[(&detail, styles.no), (":", plain)]);
            }
            _ => {
                page.line(4, 2, &[(&detail, styles.no), (":", plain)]);
            }
        }
        let held = if reason.claims.is_empty() {
            String::new()
        } else {
            format!(", held by {}", words::shorten(&reason.claims))
        };
        page.line(
            8,
            2,
            &[(
                &format!("{devices} on {nodes}: {}{held}", reason.model),
                plain,
            )],
        );
    }
    for unknown in &request.unknown_attributes {
        let selector = words::selector(&unknown.selector);
        let text = match &unknown.nearest {
            Some(n) => format!(
                "no device has {} ({selector}); did you mean {n}?",
                unknown.attribute
            ),
            None => format!("no device has {} ({selector})", unknown.attribute),
        };
        page.line(4, 2, &[(&text, styles.warning)]);
    }
    if !request.devices.is_empty() {
        page.line(4, 2, &[("Devices:", plain)]);
        // Aligned as kubectl aligns -o wide: the columns as wide as their widest cell, never
        // cut or wrapped (the last, the verdict, runs past the edge as kubectl's wide rows do).
        let grid = Grid {
            header: ["NODE", "DEVICE", "PCI", "MODEL", "VERDICT"]
                .map(str::to_owned)
                .to_vec(),
            rows: request
                .devices
                .iter()
                .map(|device| {
                    vec![
                        Cell::plain(device.node.clone()),
                        Cell::plain(device.device.clone()),
                        Cell::plain(device.pci_bus_id.clone().unwrap_or_else(|| "-".into())),
                        Cell::plain(device.model.clone()),
                        Cell::plain(words::device_status(device.status.as_ref())),
                    ]
                })
                .collect(),
            fits: Vec::new(),
        };
        let table = grid.render(&TableStyle {
            colored: styles.colored,
            width: Width::Unlimited,
            notes_width: Width::Unlimited,
            no_headers: false,
        });
        for line in table.lines() {
            page.out.push_str("      ");
            page.out.push_str(line);
            page.out.push('\n');
        }
    }
}

/// Text being rendered: lines wrapped at `limit`.
struct Page {
    out: String,
    limit: Option<usize>,
}

impl Page {
    fn blank(&mut self) {
        self.out.push('\n');
    }

    /// One line: `indent` spaces, then the segments (made terminal-safe), each in its style;
    /// wrapped at the limit between words, continuation lines indented by `indent + hang`. The
    /// plain text is wrapped and the pieces coloured, so that escapes never count as columns nor
    /// span a line break.
    fn line(&mut self, indent: usize, hang: usize, segments: &[(&str, Style)]) {
        let mut text = " ".repeat(indent);
        let mut spans = Vec::with_capacity(segments.len());
        for (segment, style) in segments {
            // Every line of `why` passes here: names and messages from the cluster are shown,
            // never acted on by the terminal.
            let segment = crate::text::terminal_safe(segment);
            spans.push((text.len(), text.len() + segment.len(), *style));
            text.push_str(&segment);
        }
        let pieces = match self.limit {
            Some(limit) => pieces(&text, indent + hang, limit),
            None => vec![(0, text.len(), 0)],
        };
        for (n, (from, to, continued)) in pieces.into_iter().enumerate() {
            if n > 0 {
                self.out.push('\n');
                self.out.push_str(&" ".repeat(continued));
            }
            // The indentation before the first segment, uncoloured.
            if let Some(&(first, _, _)) = spans.first()
                && from < first
            {
                self.out.push_str(&text[from..first.min(to)]);
            }
            for &(start, end, style) in &spans {
                let (a, b) = (start.max(from), end.min(to));
                if a < b {
                    let _ = write!(self.out, "{}", (&text[a..b]).style(style));
                }
            }
        }
        self.out.push('\n');
    }
}

fn state_words(state: ClaimState) -> &'static str {
    match state {
        ClaimState::Reserved => "allocated and reserved for the pod",
        ClaimState::Allocated => "allocated, not yet reserved for the pod",
        ClaimState::Pending => "not allocated",
        ClaimState::NotCreated => "not created yet",
        ClaimState::Missing => "missing",
        ClaimState::BeingDeleted => "being deleted",
        ClaimState::NotOwned => "not owned by the pod",
        ClaimState::NotNeeded => "not needed (the claim controller made none)",
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The `-o json|yaml` record: the diagnosis as data, with the sentence beside each code.
pub(super) fn record(d: &Diagnosis, same: &SameInput) -> Result<Value, RenderError> {
    let mut value = serde_json::to_value(d)?;
    say(&mut value["verdict"], words::verdict(d));
    for (i, step) in d.next_steps.iter().enumerate() {
        say(&mut value["nextSteps"][i], carry(&words::step(step), same));
    }
    for (i, note) in d.notes.iter().enumerate() {
        say(&mut value["notes"][i], words::note(note));
    }
    for (i, unchecked) in d.unchecked.iter().enumerate() {
        say(&mut value["unchecked"][i], words::unchecked(unchecked));
    }
    for (i, claim) in d.claims.iter().enumerate() {
        let record = &mut value["claims"][i];
        if let Some(problem) = &claim.problem {
            say(&mut record["problem"], words::problem(problem));
            record["problem"]["fix"] = words::fix(problem).into();
        }
        for (j, constraint) in claim.constraints.iter().enumerate() {
            say(&mut record["constraints"][j], words::constraint(constraint));
        }
        for (j, request) in claim.requests.iter().enumerate() {
            for (k, reason) in request.reasons.iter().enumerate() {
                let detail = &mut record["requests"][j]["reasons"][k]["detail"];
                say(detail, words::detail(&reason.detail));
            }
        }
    }
    if let Some(nodes) = &d.nodes {
        for (i, outcome) in nodes.outcomes.iter().enumerate() {
            let detail = &mut value["nodes"]["outcomes"][i]["detail"];
            say(detail, words::node_finding(&outcome.detail));
        }
    }
    if let Some(error) = &d.attempt_error {
        let record = &mut value["attemptError"];
        record["consequence"] = words::consequence(error).into();
        record["fix"] = carry(&words::attempt_fix(&error.error), same).into();
    }
    if let Some(map) = value.as_object_mut() {
        map.insert("schema".into(), SCHEMA.into());
    }
    Ok(value)
}

/// Puts the sentence beside a finding's code.
fn say(finding: &mut Value, sentence: String) {
    if let Some(map) = finding.as_object_mut() {
        map.insert("sentence".into(), sentence.into());
    }
}
