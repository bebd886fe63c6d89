//! What the agent's loops share about talking to the API server: what went wrong with a request
//! ([`ApiCause`]), the one outage note for the whole agent, capped backoff with jitter, and a
//! problem logged once when it starts and once when it ends.

use std::fmt;
use std::time::Duration;

use kube::runtime::watcher;
use tracing::{Level, error, info, warn};

use crate::agent::answers::AnswerFault;
use crate::agent::health::Health;
use crate::api_errors::MAX_ERROR_TEXT;
use crate::duration::human;
use crate::text::one_line;

/// The first retry delay; doubled at each failure up to the configured maximum.
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(200);

/// The longest one API request may take before it counts as failed. The client itself has no
/// read timeout, so without this a hung connection would stall the publisher for good.
pub(crate) const API_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong with one API request, as an operator reads it (never a Rust `Debug` dump).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApiCause {
    /// The server answered with an error status.
    Status {
        code: u16,
        reason: String,
        /// The server's message, cut to one line.
        message: String,
        /// How long the server asked to wait before retrying (429, some 503s).
        retry_after: Option<Duration>,
    },
    /// No answer: the connection failed.
    Unreachable { url: String, detail: String },
    /// No answer within [`API_CALL_TIMEOUT`].
    TimedOut { url: String, after: Duration },
    /// Anything else (an answer that could not be read, ...).
    Other(String),
}

impl ApiCause {
    /// From a client error; `url` is the API server's address, named when it cannot be reached.
    pub(crate) fn from_kube(error: &kube::Error, url: &str) -> Self {
        match error {
            kube::Error::Api(status) => ApiCause::Status {
                // Always a Status with the HTTP code, whatever the body was: the client's
                // `crate::api_errors::ReadErrorAnswers` layer makes one of anything else.
                code: status.code,
                reason: status.reason.clone(),
                message: one_line(&status.message, MAX_ERROR_TEXT),
                retry_after: status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s))),
            },
            // An answer that came but is not read (too large, not paging): not an outage.
            kube::Error::Service(e) if AnswerFault::find(e.as_ref()).is_some() => {
                ApiCause::Other(chain(error))
            }
            // A refused certificate in the words the plugin uses, not rustls's Rust names.
            kube::Error::Service(_) | kube::Error::HyperError(_) => ApiCause::Unreachable {
                url: url.to_string(),
                detail: match crate::fleet::tls::certificate_problem(error) {
                    Some(refused) => format!(
                        "it sent a certificate that {} (hint: {})",
                        refused.problem, refused.hint
                    ),
                    None => chain(error),
                },
            },
            other => ApiCause::Other(chain(other)),
        }
    }

    /// From a watcher error.
    pub(crate) fn from_watcher(error: &watcher::Error, url: &str) -> (&'static str, Self) {
        match error {
            watcher::Error::InitialListFailed(e) => ("list", Self::from_kube(e, url)),
            watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
                ("watch", Self::from_kube(e, url))
            }
            watcher::Error::WatchError(status) => (
                "watch",
                ApiCause::Status {
                    code: status.code,
                    reason: status.reason.clone(),
                    message: one_line(&status.message, MAX_ERROR_TEXT),
                    retry_after: None,
                },
            ),
            watcher::Error::NoResourceVersion => ("watch", ApiCause::Other(error.to_string())),
        }
    }

    /// A refusal: the server understood the request and will not accept it as it is
    /// (validation, admission, authorisation). Retrying unchanged does not help until someone
    /// changes the policy, the permissions or the agent.
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(
            self,
            ApiCause::Status {
                code: 400 | 401 | 403 | 413 | 422,
                ..
            }
        )
    }

    /// The API server cannot be reached at all: no connection, or no answer in time. That is one
    /// problem for the whole agent. A server that answers with an error (5xx, 429) is reachable:
    /// that failure belongs to the request, which may well be the only one failing. A read whose
    /// connection closed before its answer reaches here only after it was sent again on a new
    /// connection and failed there too (`crate::agent::dropped_reads`).
    pub(crate) fn is_outage(&self) -> bool {
        matches!(
            self,
            ApiCause::Unreachable { .. } | ApiCause::TimedOut { .. }
        )
    }

    /// How long the server asked to wait before retrying.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiCause::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub(crate) fn status(&self) -> Option<(u16, &str)> {
        match self {
            ApiCause::Status { code, reason, .. } => Some((*code, reason)),
            _ => None,
        }
    }

    pub(crate) fn is_conflict(&self) -> bool {
        self.status() == Some((409, "Conflict"))
    }

    pub(crate) fn is_already_exists(&self) -> bool {
        self.status() == Some((409, "AlreadyExists"))
    }

    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self.status(), Some((404, _)))
    }

    /// What kind of failure it is: a problem is logged again only when this changes, so an
    /// outage that moves from "list" to "watch" or from one retry to the next is one problem.
    pub(crate) fn class(&self) -> String {
        match self {
            ApiCause::Status {
                code,
                reason,
                message,
                ..
            } if self.is_refusal() => format!("{code} {reason} {message}"),
            ApiCause::Status { code, reason, .. } => format!("{code} {reason}"),
            ApiCause::Unreachable { .. } => "unreachable".into(),
            ApiCause::TimedOut { .. } => "timeout".into(),
            ApiCause::Other(text) => text.clone(),
        }
    }
}

impl fmt::Display for ApiCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiCause::Status {
                code,
                reason,
                message,
                ..
            } => {
                let refused = if self.is_refusal() { "refused, " } else { "" };
                write!(f, "{refused}{code} {reason}: {message}")
            }
            ApiCause::Unreachable { url, detail } => write!(f, "cannot reach {url}: {detail}"),
            ApiCause::TimedOut { url, after } => {
                write!(f, "no answer from {url} within {}", human(*after))
            }
            ApiCause::Other(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for ApiCause {}

/// An error and its sources on one line, without repeating a source its parent already quotes.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = one_line(&error.to_string(), MAX_ERROR_TEXT);
    let mut source = error.source();
    while let Some(cause) = source {
        let next = one_line(&cause.to_string(), MAX_ERROR_TEXT);
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    // kube-rs prefixes its own variant names; they say nothing to an operator.
    for prefix in ["ServiceError: ", "HyperError: "] {
        if let Some(rest) = text.strip_prefix(prefix) {
            text = rest.to_string();
        }
    }
    text
}

/// Records that the API server did not work for a request; logs once when such an outage
/// starts, whichever loop meets it first. Returns false (nothing recorded) for a cause that is
/// not an outage: that one is the caller's to report.
pub(crate) fn api_unanswered(health: &Health, url: &str, cause: &ApiCause) -> bool {
    if !cause.is_outage() {
        return false;
    }
    let mut outage = health.api_outage.lock().unwrap_or_else(|e| e.into_inner());
    if outage.is_none() {
        let message = format!("the API server at {url} is not working: {cause}");
        warn!(
            "{message}; the agent keeps serving the kubelet and retries with backoff (logged again when it works)"
        );
        *outage = Some(message);
    }
    true
}

/// Records that the API server answered; logs the end of an outage.
pub(crate) fn api_answered(health: &Health, url: &str) {
    let previous = health
        .api_outage
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(previous) = previous {
        info!("the API server at {url} works again (after: {previous})");
    }
}

/// Capped exponential backoff with jitter ("equal jitter": half fixed, half random), so a fleet
/// of agents that lost the API server together does not come back in lockstep.
#[derive(Debug)]
pub(crate) struct Backoff {
    failures: u32,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff from 200 ms that never waits longer than `max`.
    pub(crate) fn new(max: Duration) -> Self {
        Self::starting_at(INITIAL_BACKOFF, max)
    }

    /// A backoff from `initial` that never waits longer than `max`.
    pub(crate) fn starting_at(initial: Duration, max: Duration) -> Self {
        Self {
            failures: 0,
            initial,
            max,
        }
    }

    /// The delay before the next attempt after one more failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let exp = self.initial.saturating_mul(1 << self.failures.min(20));
        self.failures = self.failures.saturating_add(1);
        let capped = exp.min(self.max);
        let half = capped / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Back to the first delay after a success.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Logs a problem once when it starts (or its kind changes) and once when it is over, not per
/// retry.
#[derive(Debug)]
pub(crate) struct Problem {
    what: &'static str,
    /// The kind of the current problem, and its message as first logged.
    current: Option<(String, String)>,
}

impl Problem {
    /// A tracker for one activity (`what`: "publish the ResourceSlice", "watch ...").
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            current: None,
        }
    }

    /// Records a failure whose kind is its message, at WARN; returns whether it was logged.
    pub(crate) fn failed(&mut self, error: &str) -> bool {
        self.report(Level::WARN, error, error)
    }

    /// Records a failure of kind `kind` (logged again only when the kind changes); returns
    /// whether it was logged.
    pub(crate) fn report(&mut self, level: Level, kind: &str, message: &str) -> bool {
        if self
            .current
            .as_ref()
            .is_some_and(|(current, _)| current == kind)
        {
            return false;
        }
        let what = self.what;
        if level == Level::ERROR {
            error!(
                "{what}: {message}; retrying with backoff (logged again only when this changes)"
            );
        } else {
            warn!("{what}: {message}; retrying with backoff (logged again only when this changes)");
        }
        self.current = Some((kind.to_string(), message.to_string()));
        true
    }

    /// Records a success; logs the recovery if there was a problem.
    pub(crate) fn ok(&mut self) {
        if let Some((_, previous)) = self.current.take() {
            info!("{}: works again (after: {previous})", self.what);
        }
    }

    /// Whether a problem is current.
    #[cfg(test)]
    pub(crate) fn is_failing(&self) -> bool {
        self.current.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_outages_read_as_operators_read_them() {
        let cause = ApiCause::Status {
            code: 422,
            reason: "Invalid".into(),
            message: "x".into(),
            retry_after: None,
        };
        assert!(cause.is_refusal());
        assert_eq!(cause.to_string(), "refused, 422 Invalid: x");
        let outage = ApiCause::Status {
            code: 503,
            reason: "ServiceUnavailable".into(),
            message: "down".into(),
            retry_after: None,
        };
        assert!(!outage.is_refusal());
        assert_eq!(outage.to_string(), "503 ServiceUnavailable: down");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let mut backoff = Backoff::new(Duration::from_secs(2));
        let delays: Vec<Duration> = (0..8).map(|_| backoff.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(100) && delays[0] <= INITIAL_BACKOFF);
        assert!(
            delays[3] >= Duration::from_millis(800) && delays[3] <= Duration::from_millis(1600)
        );
        for d in &delays[5..] {
            assert!(
                *d >= Duration::from_secs(1) && *d <= Duration::from_secs(2),
                "{d:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next_delay() <= INITIAL_BACKOFF);
    }

    #[test]
    fn a_problem_is_logged_once_per_change() {
        let mut problem = Problem::new("publish");
        assert!(problem.failed("503"));
        assert!(!problem.failed("503"));
        assert!(problem.failed("500"));
        problem.ok();
        assert!(problem.failed("500"));
        // The same kind of failure with another message (list, then watch) is one problem.
        assert!(problem.report(Level::WARN, "unreachable", "list: cannot reach x"));
        assert!(!problem.report(Level::WARN, "unreachable", "watch: cannot reach x"));
        assert!(problem.is_failing());
        problem.ok();
        assert!(!problem.is_failing());
    }
}
