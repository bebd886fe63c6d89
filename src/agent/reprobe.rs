//! When the prober asks the GPUs again, and what of each probe it passes on to the publisher:
//! plain functions of state and time, so that every case is a unit test. The loop in
//! [`crate::agent::run`] only waits, lists, probes and logs.
//!
//! A probe runs at start, when the watched files change (render nodes, VA driver files, recorded
//! reports) and every `--reprobe-interval`. A GPU published working whose probe fails is not
//! published failed at once: it is asked again [`CONFIRM_DELAY`] later, and only a second
//! failure in a row is published. One bad probe between good ones costs one extra probe and no
//! write; a GPU that really failed is published failed one confirmation after the probe that saw
//! it. Every other change (a GPU comes, goes, recovers, or states other capabilities) is passed
//! on at once. docs/operations.md says the same for operators.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::node::device::GpuDevice;

/// How long after a working GPU's first failed probe it is asked again, before the failure is
/// published. Long enough for a driver that was busy or restarting to answer, short against the
/// re-probe period (it is never longer than the period).
pub(crate) const CONFIRM_DELAY: Duration = Duration::from_secs(5);

/// Why a probe runs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// The agent's first probe.
    First,
    /// The watched files changed.
    FilesChanged,
    /// The re-probe period came round.
    Period,
    /// A GPU that failed once after working is asked again.
    Confirm,
}

/// The prober's memory between probes.
#[derive(Debug)]
pub(crate) struct Reprobe {
    interval: Duration,
    /// What was last passed on; `None` before the first probe.
    sent: Option<Vec<GpuDevice>>,
    /// GPUs (by device name) whose last probe failed after they were passed on working.
    suspects: BTreeSet<String>,
    /// The next periodic probe.
    period_at: Instant,
    /// The confirmation of the suspects, when there are any.
    confirm_at: Option<Instant>,
}

/// What to do with one probe's devices.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Decision {
    /// The devices to pass on, when they differ from what was passed on last.
    pub send: Option<Vec<GpuDevice>>,
    /// Devices new or changed since the last ones passed on: their log lines are due.
    pub changed: Vec<String>,
    /// Devices whose first failure is held back until it is confirmed: (name, failure).
    pub held: Vec<(String, String)>,
    /// Devices passed on before that the probe no longer found.
    pub gone: Vec<String>,
}

impl Reprobe {
    /// Nothing probed yet; the periodic probes come `interval` apart.
    pub(crate) fn new(interval: Duration, now: Instant) -> Self {
        Self {
            interval,
            sent: None,
            suspects: BTreeSet::new(),
            period_at: now,
            confirm_at: None,
        }
    }

    /// When the next probe is due, whatever the files do.
    pub(crate) fn next_probe(&self) -> Instant {
        self.confirm_at
            .map_or(self.period_at, |at| at.min(self.period_at))
    }

    /// Whether a probe is due at `now`, and why; `files_changed`: the watched files differ from
    /// those of the last probe (the first listing counts as changed).
    pub(crate) fn due(&self, now: Instant, files_changed: bool) -> Option<Why> {
        if self.sent.is_none() {
            Some(Why::First)
        } else if files_changed {
            Some(Why::FilesChanged)
        } else if self.confirm_at.is_some_and(|at| now >= at) {
            Some(Why::Confirm)
        } else if now >= self.period_at {
            Some(Why::Period)
        } else {
            None
        }
    }

    /// Takes in one probe's devices at `now`, sorted by name as the prober gives them.
    pub(crate) fn probed(&mut self, devices: Vec<GpuDevice>, now: Instant) -> Decision {
        let mut decision = Decision::default();
        let sent = self.sent.take();
        let before = |name: &str| {
            sent.as_ref()
                .and_then(|s| s.iter().find(|d| d.name == name))
        };
        let mut suspects = BTreeSet::new();
        let mut kept = Vec::with_capacity(devices.len());
        for device in devices {
            let previous = before(&device.name);
            let first_failure = device.failure.is_some()
                && previous.is_some_and(|p| p.failure.is_none())
                && !self.suspects.contains(&device.name);
            if first_failure && let Some(previous) = previous {
                let failure = device.failure.as_ref().map(|f| f.text.clone());
                decision
                    .held
                    .push((device.name.clone(), failure.unwrap_or_default()));
                suspects.insert(device.name.clone());
                kept.push(previous.clone());
                continue;
            }
            if previous != Some(&device) {
                decision.changed.push(device.name.clone());
            }
            kept.push(device);
        }
        if let Some(sent) = &sent {
            decision.gone = sent
                .iter()
                .filter(|d| !kept.iter().any(|k| k.name == d.name))
                .map(|d| d.name.clone())
                .collect();
        }
        if sent.as_ref() != Some(&kept) {
            decision.send = Some(kept.clone());
        }
        self.sent = Some(kept);
        self.confirm_at = (!suspects.is_empty()).then(|| now + CONFIRM_DELAY.min(self.interval));
        self.suspects = suspects;
        self.period_at = now + self.interval;
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::device::AttrValue;
    use crate::node::failure::{Failure, FailureKind};

    const MINUTE: Duration = Duration::from_secs(60);

    fn working(name: &str, vp9: bool) -> GpuDevice {
        GpuDevice {
            name: name.into(),
            render_node: "/dev/dri/renderD128".into(),
            attributes: [("decodeVP9", AttrValue::Bool(vp9))].into_iter().collect(),
            failure: None,
            taint: None,
            trimmed: Vec::new(),
        }
    }

    fn failed(name: &str) -> GpuDevice {
        GpuDevice {
            failure: Some(Failure::new(FailureKind::NotAnswering, "timed out")),
            ..working(name, false)
        }
    }

    #[test]
    fn the_first_probe_is_passed_on_whole_failures_included() {
        let t0 = Instant::now();
        let mut state = Reprobe::new(MINUTE, t0);
        assert_eq!(state.due(t0, false), Some(Why::First));
        let decision = state.probed(vec![working("a", true), failed("b")], t0);
        assert_eq!(decision.send.as_ref().map(Vec::len), Some(2));
        assert_eq!(decision.changed, ["a", "b"]);
        assert!(decision.held.is_empty());
        assert_eq!(state.next_probe(), t0 + MINUTE);
    }

    #[test]
    fn a_probe_that_changes_nothing_passes_nothing_on() {
        let t0 = Instant::now();
        let mut state = Reprobe::new(MINUTE, t0);
        state.probed(vec![working("a", true)], t0);
        assert_eq!(state.due(t0 + MINUTE / 2, false), None);
        let t1 = t0 + MINUTE;
        assert_eq!(state.due(t1, false), Some(Why::Period));
        assert_eq!(
            state.probed(vec![working("a", true)], t1),
            Decision::default()
        );
        assert_eq!(state.next_probe(), t1 + MINUTE);
    }

    #[test]
    fn one_bad_probe_between_good_ones_is_held_back_and_costs_one_probe() {
        let t0 = Instant::now();
        let mut state = Reprobe::new(MINUTE, t0);
        state.probed(vec![working("a", true), working("b", true)], t0);
        let t1 = t0 + MINUTE;
        let decision = state.probed(vec![working("a", true), failed("b")], t1);
        assert_eq!(decision.send, None, "nothing changes yet");
        assert_eq!(decision.held, [("b".to_string(), "timed out".to_string())]);
        assert_eq!(state.next_probe(), t1 + CONFIRM_DELAY);
        assert_eq!(state.due(t1 + CONFIRM_DELAY, false), Some(Why::Confirm));
        let decision = state.probed(
            vec![working("a", true), working("b", true)],
            t1 + CONFIRM_DELAY,
        );
        assert_eq!(decision, Decision::default());
        assert_eq!(state.next_probe(), t1 + CONFIRM_DELAY + MINUTE);
    }

    #[test]
    fn a_second_failure_in_a_row_is_passed_on_within_the_period() {
        let t0 = Instant::now();
        let mut state = Reprobe::new(MINUTE, t0);
        state.probed(vec![working("a", true)], t0);
        let t1 = t0 + MINUTE;
        state.probed(vec![failed("a")], t1);
        let t2 = t1 + CONFIRM_DELAY;
        let decision = state.probed(vec![failed("a")], t2);
        assert_eq!(decision.send, Some(vec![failed("a")]));
        assert_eq!(decision.changed, ["a"]);
        assert!(t2 - t1 < MINUTE);
        // Failed it stays, without confirmations, until it works again: then at once.
        let t3 = t2 + MINUTE;
        assert_eq!(state.probed(vec![failed("a")], t3), Decision::default());
        let t4 = t3 + MINUTE;
        let decision = state.probed(vec![working("a", true)], t4);
        assert_eq!(decision.send, Some(vec![working("a", true)]));
    }

    #[test]
    fn a_gpu_that_flaps_at_every_period_makes_no_write() {
        let t0 = Instant::now();
        let mut state = Reprobe::new(MINUTE, t0);
        state.probed(vec![working("a", true)], t0);
        let mut now = t0;
        for round in 0..10 {
            now += MINUTE;
            let bad = state.probed(vec![failed("a")], now);
            assert_eq!(bad.send, None, "round {round}");
            now += CONFIRM_DELAY;
            let good = state.probed(vec![working("a", true)], now);
            assert_eq!(good.send, None, "round {round}");
        }
    }

    #[test]
    fn other_changes_pass_on_at_once_and_gone_gpus_are_named() {
        let t0 = Instant::now();
        let mut state = Reprobe::new(MINUTE, t0);
        state.probed(vec![working("a", true), working("b", true)], t0);
        let decision = state.probed(vec![working("a", false)], t0 + MINUTE);
        assert_eq!(decision.send, Some(vec![working("a", false)]));
        assert_eq!(decision.changed, ["a"]);
        assert_eq!(decision.gone, ["b"]);
        assert_eq!(state.due(t0 + MINUTE, true), Some(Why::FilesChanged));
    }

    #[test]
    fn the_confirmation_never_waits_longer_than_the_period() {
        let short = Duration::from_secs(2);
        let t0 = Instant::now();
        let mut state = Reprobe::new(short, t0);
        state.probed(vec![working("a", true)], t0);
        state.probed(vec![failed("a")], t0 + short);
        assert_eq!(state.next_probe(), t0 + short + short);
    }
}
