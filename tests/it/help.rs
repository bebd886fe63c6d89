//! What a new user reads first, at 80 columns: every `--help` of both programs as clap wraps it
//! for an 80-column terminal, and every man page as `man` renders it at 80 columns. An example
//! command must stay on its lines whole (a command wrapped by clap or filled by roff breaks when
//! copied); a man page has no `EXTRA` section, no literal backticks and a header whose three
//! parts stand apart.

use std::process::Command;

use clap::CommandFactory;

/// Every command of both programs, its help text built (global flags propagated), by its path
/// (`kubectl-media class`).
fn commands() -> Vec<(String, clap::Command)> {
    let mut out = Vec::new();
    for root in [
        media_operator::cli::Cli::command(),
        media_operator::agent::cli::Cli::command(),
    ] {
        let mut root = root;
        root.build();
        let mut stack = vec![(root.get_name().to_owned(), root)];
        while let Some((path, command)) = stack.pop() {
            for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
                stack.push((format!("{path} {}", sub.get_name()), sub.clone()));
            }
            out.push((path, command));
        }
    }
    out
}

/// The help's closing text (examples, exit status), as written.
fn closing(command: &clap::Command) -> Option<String> {
    command
        .get_after_long_help()
        .or(command.get_after_help())
        .map(|text| text.to_string())
}

#[test]
fn every_help_keeps_its_examples_whole_at_80_columns() {
    let mut examples = 0;
    for (path, command) in commands() {
        let Some(closing) = closing(&command) else {
            continue;
        };
        for help in [
            command.clone().term_width(80).render_help().to_string(),
            command
                .clone()
                .term_width(80)
                .render_long_help()
                .to_string(),
        ] {
            let lines: Vec<&str> = help.lines().map(str::trim_end).collect();
            for line in closing.lines().map(str::trim_end) {
                assert!(
                    line.chars().count() <= 70,
                    "{path}: longer than man's 73 columns less a margin: {line:?}"
                );
                assert!(
                    lines.contains(&line),
                    "{path} --help at 80 columns parts {line:?}:\n{help}"
                );
                examples += usize::from(line.trim_start().starts_with("kubectl "));
            }
        }
    }
    assert!(examples >= 20, "{examples} example lines seen");
    // And as the program prints it in a real 80-column terminal.
    let shown = crate::caps::in_terminal(&["class", "--help"], 80, &[("NO_COLOR", "1")]);
    assert!(
        shown.contains("--scale 10bit \\\n    --claim --with-render-class\n"),
        "{shown}"
    );
}

/// `page` as `man` renders it for an 80-column terminal, into a pipe.
fn rendered(page: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("page.1");
    std::fs::write(&file, page).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .output()
        .expect("run man");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[cfg_attr(not(have_man), ignore = "needs man: apt-get install man-db")]
fn every_man_page_reads_at_80_columns() {
    let closings: Vec<(String, Option<String>)> = commands()
        .iter()
        .map(|(path, command)| (path.replace(' ', "-"), closing(command)))
        .collect();
    for (file, page) in crate::support::generated::man_pages() {
        let name = file
            .trim_start_matches("docs/man/")
            .trim_end_matches(".1")
            .to_owned();
        let shown = rendered(&page);
        for line in shown.lines() {
            assert!(line.chars().count() <= 80, "{name}: {line:?}");
        }
        assert!(!shown.contains('`'), "{name}: a literal backtick:\n{shown}");
        assert!(!shown.contains("EXTRA"), "{name}:\n{shown}");
        // The header: the page's name on both sides, apart from the centre.
        let header = shown.lines().next().unwrap();
        let title = format!("{name}(1)");
        assert!(
            header.starts_with(&format!("{title}  ")) && header.ends_with(&format!("  {title}")),
            "{name}: header {header:?}"
        );
        // Each line of the examples and exit status whole, as written (indented by man's 7).
        let closing = closings.iter().find(|(n, _)| *n == name).map(|(_, c)| c);
        for line in closing.into_iter().flatten().flat_map(|c| c.lines()) {
            if line.ends_with(':') && !line.starts_with(' ') {
                let heading = line.trim_end_matches(':').to_uppercase();
                assert!(
                    shown.contains(&format!("\n{heading}\n")),
                    "{name}: {heading}"
                );
                continue;
            }
            let expected = format!("       {}", line.strip_prefix("  ").unwrap_or(line));
            assert!(
                shown.lines().any(|l| l.trim_end() == expected.trim_end()),
                "{name}: {expected:?} not whole in:\n{shown}"
            );
        }
    }
}
