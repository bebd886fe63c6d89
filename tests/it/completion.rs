//! The shipped completion scripts, run in the real shells: bash and, where installed, zsh and fish.
//! Each asks `kubectl-media __complete`, as kubectl's shim does, so every shell must give the same
//! answers. bash and fish complete without a terminal; zsh's builtins work only in its line editor,
//! so `compadd` and `_files` are replaced by functions that print what they are given, and the
//! script's own logic still runs in the real zsh.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A working directory with two files, and a PATH whose `kubectl-media` is the binary under test.
struct Shell {
    dir: tempfile::TempDir,
    path: String,
}

impl Shell {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_kubectl-media"),
            bin.join("kubectl-media"),
        )
        .unwrap();
        std::fs::write(dir.path().join("fleet.yaml"), "").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "").unwrap();
        std::fs::write(dir.path().join("film.mkv"), "").unwrap();
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
        Shell { dir, path }
    }

    fn run(&self, program: &str, args: &[&str]) -> Vec<String> {
        let out = Command::new(program)
            .args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", self.dir.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.split('\t').next().unwrap().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        lines.sort();
        lines
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("completions")
        .join(name)
}

/// Quotes a word for the shells' command lines (no word here has a single quote).
fn quoted(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What bash offers for `line`, split into words as bash splits them (`=` is a word break).
fn bash(shell: &Shell, words: &[&str]) -> Vec<String> {
    let cword = words.len() - 1;
    let program = format!(
        "source {script}\n\
         COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}\n\
         _kubectl_media kubectl-media \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script("kubectl-media.bash").display(),
        words = quoted(words),
    );
    shell.run("bash", &["--norc", "--noprofile", "-c", &program])
}

fn zsh(shell: &Shell, words: &[&str]) -> Vec<String> {
    let program = format!(
        "compdef() {{ : }}\n\
         compadd() {{ local array_name; while (( $# )); do case $1 in (-a) shift; array_name=$1;; (-d|-S) shift;; esac; shift; done; print -rl -- ${{(@P)array_name}} }}\n\
         _files() {{ if [[ $1 == -g ]]; then print -rl -- ${{words[CURRENT]}}${{~2}}(N.); else print -rl -- ${{words[CURRENT]}}*(N.); fi }}\n\
         source {script}\n\
         words=({words}); CURRENT={current}\n\
         _kubectl-media || true",
        script = script("_kubectl-media").display(),
        words = quoted(words),
        current = words.len(),
    );
    shell.run("zsh", &["-f", "-c", &program])
}

fn fish(shell: &Shell, words: &[&str]) -> Vec<String> {
    let line = words.join(" ");
    let program = format!(
        "source {script}; complete --do-complete='{line}'",
        script = script("kubectl-media.fish").display(),
    );
    shell.run("fish", &["--no-config", "-c", &program])
}

/// The questions every shell must answer alike, and the answers.
fn cases() -> Vec<(Vec<&'static str>, Vec<&'static str>)> {
    vec![
        // Subcommands, never the hidden `__complete`.
        (
            vec!["kubectl-media", ""],
            vec!["caps", "class", "help", "why"],
        ),
        (vec!["kubectl-media", "__c"], vec![]),
        // Flags of a subcommand.
        (vec!["kubectl-media", "caps", "--sc"], vec!["--scale"]),
        (
            vec!["kubectl-media", "class", "--with"],
            vec!["--with-base-class", "--with-render-class"],
        ),
        // Capability values, from a lowercase prefix too, and after a comma.
        (
            vec!["kubectl-media", "class", "--decode", "hevc"],
            vec!["HEVCMain", "HEVCMain10"],
        ),
        (
            vec!["kubectl-media", "class", "--scale", "8bit,"],
            vec!["8bit,10bit", "8bit,8bit"],
        ),
        // A value with nothing to offer stays quiet: no subcommands, no file names.
        (vec!["kubectl-media", "caps", "--node", ""], vec![]),
        // Files are the shell's: -f's, and the kubeconfig's before or after the command.
        (
            vec!["kubectl-media", "caps", "-f", "fl"],
            vec!["fleet.yaml"],
        ),
        // Media files only after --for: not fleet.yaml.
        (
            vec!["kubectl-media", "caps", "--for", "f"],
            vec!["film.mkv"],
        ),
        (
            vec!["kubectl-media", "class", "--for", "fi"],
            vec!["film.mkv"],
        ),
        (
            vec!["kubectl-media", "--kubeconfig", "fl"],
            vec!["fleet.yaml"],
        ),
        (
            vec!["kubectl-media", "why", "--kubeconfig", "fl"],
            vec!["fleet.yaml"],
        ),
        // The table's shorthand, which the flags accept.
        (
            vec!["kubectl-media", "caps", "--decode", "HEVC-"],
            vec!["HEVC-10"],
        ),
        // A flag of another command: nothing, not even file names.
        (
            vec!["kubectl-media", "caps", "--kubernetes-version", ""],
            vec![],
        ),
    ]
}

#[test]
fn bash_completes_subcommand_flags_and_values() {
    let shell = Shell::new();
    for (words, expected) in cases() {
        assert_eq!(bash(&shell, &words), expected, "bash: {words:?}");
    }
    // bash splits `--decode=hev` at `=`; the script glues it back and answers the value part.
    assert_eq!(
        bash(&shell, &["kubectl-media", "class", "--decode", "=", "hev"]),
        ["HEVCMain", "HEVCMain10"]
    );
}

#[test]
#[cfg_attr(not(have_zsh), ignore = "needs zsh: apt-get install zsh")]
fn zsh_completes_subcommand_flags_and_values() {
    let shell = Shell::new();
    for (words, expected) in cases() {
        assert_eq!(zsh(&shell, &words), expected, "zsh: {words:?}");
    }
}

#[test]
#[cfg_attr(not(have_fish), ignore = "needs fish: apt-get install fish")]
fn fish_completes_subcommand_flags_and_values() {
    let shell = Shell::new();
    for (words, expected) in cases() {
        // fish completes at the end of the line: an empty last word is a trailing space.
        assert_eq!(fish(&shell, &words), expected, "fish: {words:?}");
    }
}
