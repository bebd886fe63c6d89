//! The loops' heartbeats: each loop of the agent promises its next progress within a bound, and
//! `/healthz` ([`crate::agent::health`]) names the loops that are past their promise and a
//! margin. A leaf: the loops hold a [`Heartbeat`], the health server reads [`Liveness`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::duration::human;

/// How long past its promise a loop may be before `/healthz` calls it wedged. It absorbs a
/// loaded node's scheduling delays; the kubelet's own probe period and failure threshold come
/// on top.
pub(crate) const DEFAULT_LIVENESS_MARGIN: Duration = Duration::from_secs(30);

/// The loops' heartbeats, read by `/healthz`.
#[derive(Debug)]
pub struct Liveness {
    margin: Duration,
    loops: Mutex<Vec<Beating>>,
}

#[derive(Debug)]
struct Beating {
    name: &'static str,
    last: Instant,
    promised: Duration,
    wedged: bool,
}

impl Default for Liveness {
    fn default() -> Self {
        Self::new(DEFAULT_LIVENESS_MARGIN)
    }
}

impl Liveness {
    /// Heartbeats that may be `margin` late before the loop counts as wedged.
    pub fn new(margin: Duration) -> Self {
        Self {
            margin,
            loops: Mutex::new(Vec::new()),
        }
    }

    /// A heartbeat for the loop `name`, which promises its first beat `within` from now.
    pub(crate) fn register(self: &Arc<Self>, name: &'static str, within: Duration) -> Heartbeat {
        let mut loops = self.lock();
        loops.push(Beating {
            name,
            last: Instant::now(),
            promised: within,
            wedged: false,
        });
        Heartbeat {
            liveness: Arc::clone(self),
            index: loops.len() - 1,
        }
    }

    /// For tests of `/healthz`: the next beat of the loop `name` never returns, as in a loop
    /// that deadlocked there. Not reachable from the command line.
    #[doc(hidden)]
    pub fn wedge(&self, name: &str) -> bool {
        let mut found = false;
        for beating in self.lock().iter_mut().filter(|b| b.name == name) {
            beating.wedged = true;
            found = true;
        }
        found
    }

    /// One line per loop that is past its promise and the margin.
    pub(crate) fn overdue(&self) -> Vec<String> {
        let now = Instant::now();
        self.lock()
            .iter()
            .filter_map(|b| {
                let silent = now.saturating_duration_since(b.last);
                (silent > b.promised + self.margin).then(|| {
                    format!(
                        "the {} made no progress for {} (it promised progress within {}, plus a margin of {})",
                        b.name,
                        human(silent),
                        human(b.promised),
                        human(self.margin),
                    )
                })
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Beating>> {
        self.loops.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One loop's heartbeat (see [`Liveness`]).
#[derive(Clone, Debug)]
pub(crate) struct Heartbeat {
    liveness: Arc<Liveness>,
    index: usize,
}

impl Heartbeat {
    /// Records progress before a bounded step (an API call with a timeout, a probe with its
    /// budget): the next beat comes `within` from now. Never blocks; the wedge point of a loop
    /// is its [`beat`](Self::beat) once per round.
    pub(crate) fn busy(&self, within: Duration) {
        let mut loops = self.liveness.lock();
        let beating = &mut loops[self.index];
        beating.last = Instant::now();
        beating.promised = within;
    }

    /// Records progress once per round of the loop and promises the next beat `within` from
    /// now. Returns at once, except for a loop [`Liveness::wedge`]d by a test, where it never
    /// returns.
    pub(crate) async fn beat(&self, within: Duration) {
        let wedged = {
            let mut loops = self.liveness.lock();
            let beating = &mut loops[self.index];
            // A wedged loop beats this once more, then sticks: its last promise is this one.
            beating.last = Instant::now();
            beating.promised = within;
            beating.wedged
        };
        if wedged {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_past_its_promise_and_the_margin_is_named() {
        use futures_util::FutureExt;
        let liveness = Arc::new(Liveness::new(Duration::ZERO));
        let prober = liveness.register("prober", Duration::from_secs(3600));
        let publisher = liveness.register("publisher", Duration::ZERO);
        // Time passes (a sleep only makes the clock move; nothing races it).
        std::thread::sleep(Duration::from_millis(2));
        let overdue = liveness.overdue();
        assert_eq!(overdue.len(), 1, "{overdue:?}");
        assert!(
            overdue[0].starts_with("the publisher made no progress for "),
            "{overdue:?}"
        );
        assert!(
            overdue[0].contains("it promised progress within 0ms"),
            "{overdue:?}"
        );
        publisher.busy(Duration::from_secs(3600));
        assert!(liveness.overdue().is_empty());

        // A normal beat returns at once; a wedged loop's beat never does.
        assert!(prober.beat(Duration::from_secs(1)).now_or_never().is_some());
        assert!(liveness.wedge("prober"));
        assert!(!liveness.wedge("no such loop"));
        assert!(prober.beat(Duration::from_secs(1)).now_or_never().is_none());
        let margin = Liveness::new(Duration::from_secs(3600));
        let lazy = Arc::new(margin).register("kubelet plugin", Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            lazy.liveness.overdue().is_empty(),
            "the margin absorbs lateness"
        );
    }
}
