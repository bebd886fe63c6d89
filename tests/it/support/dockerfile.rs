//! `deploy/Dockerfile` read as its instructions: the one place the image's stages, its Debian
//! packages and its entry point are stated. tests/it/deploy.rs checks them against Debian's lists
//! and Cargo.toml; support/image.rs builds and runs what they say.

use std::path::{Path, PathBuf};

/// One instruction: its keyword (`RUN`), its arguments with continuations joined, and the line
/// it starts on (for messages that name it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    pub keyword: String,
    pub args: String,
    pub line: usize,
}

/// A `FROM` and the instructions up to the next one.
#[derive(Clone, Debug)]
pub struct Stage {
    /// The image it starts from (`docker.io/library/debian:trixie-slim`).
    pub from: String,
    /// Its `AS` name, if it has one.
    pub name: Option<String>,
    pub line: usize,
    pub instructions: Vec<Instruction>,
}

/// The Dockerfile's path.
pub fn path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/Dockerfile")
}

/// Every instruction, in order, comments dropped.
pub fn instructions() -> Vec<Instruction> {
    let text = std::fs::read_to_string(path()).expect("read deploy/Dockerfile");
    let mut instructions = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        if current.is_empty() {
            start = index + 1;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, args) = current.split_once(' ').unwrap_or((&current, ""));
                instructions.push(Instruction {
                    keyword: keyword.to_owned(),
                    args: args.trim().to_owned(),
                    line: start,
                });
                current.clear();
            }
        }
    }
    instructions
}

/// The instructions grouped by stage.
pub fn stages() -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    for instruction in instructions() {
        if instruction.keyword == "FROM" {
            let (from, name) = match instruction.args.split_once(" AS ") {
                Some((from, name)) => (from.to_owned(), Some(name.trim().to_owned())),
                None => (instruction.args.clone(), None),
            };
            stages.push(Stage {
                from,
                name,
                line: instruction.line,
                instructions: Vec::new(),
            });
        } else {
            stages
                .last_mut()
                .unwrap_or_else(|| panic!("deploy/Dockerfile: {instruction:?} before any FROM"))
                .instructions
                .push(instruction);
        }
    }
    stages
}

/// The packages of the `apt-get install` in `run` (a RUN's arguments), in order.
pub fn installed_packages(run: &str) -> Vec<String> {
    run.split("apt-get install")
        .nth(1)
        .unwrap_or_else(|| panic!("no apt-get install in {run:?}"))
        .split("&&")
        .next()
        .unwrap()
        .split_whitespace()
        .filter(|w| !w.starts_with('-'))
        .map(str::to_owned)
        .collect()
}

/// The runtime stage's `RUN` that installs the Debian packages.
pub fn install_run() -> Instruction {
    instructions()
        .into_iter()
        .find(|i| i.keyword == "RUN" && i.args.contains("apt-get install"))
        .expect("deploy/Dockerfile has a RUN with apt-get install")
}
