//! The documentation's examples run: every ```text block of the user guide and the README that
//! starts with `$ kubectl media ...` is run from the repository (the real binary, nothing
//! inherited from the environment), and the lines the block shows must appear in its output,
//! in order; a line `...` stands for any number of lines left out. A change that makes the docs
//! untrue fails here.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// (command words after `kubectl media`, expected lines) of each runnable block fenced as
/// ```` ```LANGUAGE ````.
pub(crate) fn examples(markdown: &str, language: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let fence = format!("```{language}");
    let mut out = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        if line.trim() != fence {
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let Some(command) = block
            .first()
            .and_then(|l| l.strip_prefix("$ kubectl media "))
        else {
            continue;
        };
        out.push((
            command.split_whitespace().map(str::to_owned).collect(),
            block[1..].iter().map(|l| l.to_string()).collect(),
        ));
    }
    out
}

/// Whether `expected` (with `...` gaps) reads in `output`: each run of lines between gaps
/// appears as consecutive lines, the runs in order.
pub(crate) fn reads_in(expected: &[String], output: &str) -> Result<(), String> {
    let output: Vec<&str> = output.lines().collect();
    let mut at = 0;
    for run in expected.split(|l| l.trim() == "...") {
        if run.is_empty() {
            continue;
        }
        let found = (at..output.len().saturating_sub(run.len() - 1))
            .find(|&i| run.iter().zip(&output[i..]).all(|(e, o)| e == o));
        match found {
            Some(i) => at = i + run.len(),
            None => {
                return Err(format!(
                    "these lines do not appear (in order) in the output:\n{}\n--- output:\n{}",
                    run.join("\n"),
                    output.join("\n")
                ));
            }
        }
    }
    Ok(())
}

fn check(document: &str, minimum: usize) {
    let path = root().join(document);
    let markdown = std::fs::read_to_string(&path).unwrap();
    let examples = examples(&markdown, "text");
    assert!(
        examples.len() >= minimum,
        "{document}: {} runnable examples, expected at least {minimum}",
        examples.len()
    );
    let home = tempfile::tempdir().unwrap();
    for (args, expected) in examples {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-media"))
            .args(&args)
            .current_dir(root())
            .env_clear()
            .env("HOME", home.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{document}: kubectl media {}: {stderr}",
            args.join(" ")
        );
        if let Err(problem) = reads_in(&expected, &String::from_utf8_lossy(&out.stdout)) {
            panic!("{document}: kubectl media {}: {problem}", args.join(" "));
        }
    }
}

#[test]
fn the_user_guide_s_examples_read_as_shown() {
    check("docs/user-guide.md", 4);
}

#[test]
fn the_readme_s_quickstart_reads_as_shown() {
    check("README.md", 3);
}

#[test]
fn the_checker_finds_drift() {
    let expected: Vec<String> = ["a", "...", "c", "d"].map(String::from).to_vec();
    assert!(reads_in(&expected, "a\nb\nc\nd\n").is_ok());
    assert!(reads_in(&expected, "a\nc\nb\nd\n").is_err());
    assert!(reads_in(&expected, "x\nc\nd\n").is_err());
}
