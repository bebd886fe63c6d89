//! Why a GPU's probe gave no capabilities: the kind a taint's value names, and the failure as
//! the log says it. A leaf: [`super::device`] describes a failed GPU with it, [`super::taint`]
//! taints it.

use serde::{Deserialize, Serialize};

/// Why a GPU's probe gave no capabilities, as the taint's value says it (a label value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The driver answered, and its query failed (`vaInitialize` and the like).
    QueryFailed,
    /// The probe did not end within its timeout: the driver stopped answering.
    NotAnswering,
    /// The probe process failed otherwise: it crashed, exited, printed no readable report, or
    /// a recorded probe says only that it failed.
    ProbeFailed,
}

impl FailureKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [FailureKind; 3] = [
        FailureKind::QueryFailed,
        FailureKind::NotAnswering,
        FailureKind::ProbeFailed,
    ];

    /// The name the taint's value and the record carry.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::QueryFailed => "query-failed",
            FailureKind::NotAnswering => "not-answering",
            FailureKind::ProbeFailed => "probe-failed",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed probe: what kind of failure, and the log line saying it word for word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub text: String,
}

impl Failure {
    /// A failure of `kind` worded `text`.
    pub fn new(kind: FailureKind, text: impl Into<String>) -> Failure {
        Failure {
            kind,
            text: text.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}
