//! The integration tests, as one test binary: the control-plane harness, the fault proxy, the
//! kubelet stand-in and the other support code compile once instead of once per test file. Each module is the test file
//! of one part of the product; `cargo test --test it caps` runs one of them.

use std::path::Path;
use std::process::Output;

mod support;

mod agent;
mod architecture;
mod caps;
mod class;
mod cluster;
mod completion;
mod controlplane;
mod deploy;
mod docs;
mod exits;
mod explain;
mod files;
mod for_file;
mod fuzz;
mod generated;
mod helm;
mod help;
mod image;
mod isolation;
mod items;
mod kubelet;
mod kubelet_real;
mod libva;
mod lines;
mod oracle;
mod paging;
mod probe_cli;
mod quadratic;
mod reads;
mod release;
mod reprobe;
mod rules_captures;
mod terminal;
mod why;

/// `kubectl media ARGS` against the cluster of `kubeconfig`, in an empty environment but for
/// its own `HOME` and `NO_COLOR`.
fn kubectl_media(args: &[&str], kubeconfig: &Path) -> Output {
    let home = tempfile::tempdir().unwrap();
    support::timing::plugin(env!("CARGO_BIN_EXE_kubectl-media"), args, home.path())
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

/// A failure as a user meets it: the exit code `code`, nothing on stdout, and one line on stderr,
/// returned as written (with its newline).
fn one_error_line(out: Output, code: i32) -> String {
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "wrote to stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

/// The only line of a failure that exits 1 ([`one_error_line`]), without its newline.
fn error_line(out: Output) -> String {
    one_error_line(out, 1).trim_end().to_string()
}
