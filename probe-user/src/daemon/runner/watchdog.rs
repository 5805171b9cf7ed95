//! The watchdog: a probe whose result has not come by its timeout plus a grace is lost (the
//! engine dropped it, a task hung). It becomes a result of outcome `lost` on its endpoints,
//! counted in `probed_probe_results_total`, and its check is scheduled again; it is not fed to
//! the threshold machine, because it says nothing about the backend. Without it, a lost probe
//! would leave its check unscheduled and the endpoint's health frozen for ever.
use std::{sync::Arc, time::Duration};

use super::Runner;
use crate::{daemon::checks::ProbeReport, outcome::Outcome, schedule::Cadence};

/// How often the per-second work (pace, DNS RTTs) runs, and how long one pass of the
/// watchdog over every check slot takes.
pub(super) const EVERY_NS: u64 = 1_000_000_000;

/// How many of `slots` check slots to look over `elapsed_ns` after the last look, for one
/// pass per `EVERY_NS`: the pass is spread over the firings in between (a tick apart at
/// fleet rates). One pass over a million slots at once (200 MB) held the runner up for tens
/// of milliseconds each second, and every probe due meanwhile left late.
pub(super) fn slice(slots: usize, elapsed_ns: u64) -> usize {
    let share = (slots as u128 * u128::from(elapsed_ns)).div_ceil(u128::from(EVERY_NS));
    usize::try_from(share).unwrap_or(usize::MAX)
}
/// Beyond a probe's own timeout: the engine reports timeouts itself within a tick or two.
pub(super) const GRACE_NS: u64 = 2_000_000_000;

/// When a probe with this timeout, sent now, counts as lost (relative to its send).
pub(super) fn deadline(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_add(GRACE_NS)
}

impl Runner {
    /// Gives up on the probes past their deadline among the next `most` check slots (from
    /// where the last call stopped, round the table at most once).
    pub(super) fn reap_lost(&mut self, now: u64, most: usize) {
        let mut lost = Vec::new();
        for _ in 0..most.min(self.probe.slots.len()) {
            if self.probe.reap_from >= self.probe.slots.len() {
                self.probe.reap_from = 0;
            }
            let slot = &mut self.probe.slots[self.probe.reap_from];
            self.probe.reap_from += 1;
            let Some(timeout) = slot.cache.as_ref().map(super::SlotCache::timeout) else {
                continue;
            };
            if let Some(i) = slot
                .inflight
                .take_if(|i| i.started_ns.saturating_add(deadline(timeout)) <= now)
            {
                lost.push(i);
            }
        }
        for i in lost {
            let waited = Duration::from_nanos(now.saturating_sub(i.started_ns));
            log::warn!(
                "a {} probe got no result in {:.1} s: counted as lost, not as a failure",
                i.protocol.as_str(),
                waited.as_secs_f64()
            );
            let report = ProbeReport {
                healthy: false,
                outcome: Outcome::Lost,
                elapsed: waited,
                reason: Arc::from("lost: no result within the timeout and a grace"),
                cert_not_after: None,
            };
            let at_unix_ms = self.ports.clock.unix_ms_at(now);
            let rtt_us = crate::health::Observation::micros(waited);
            for &owner in self.probe.sched.owners(i.check) {
                if let Some(profile_ix) = self.table.record_lost(owner, &report.reason, rtt_us, at_unix_ms) {
                    self.metrics.result(i.protocol, profile_ix, &report);
                }
            }
            // Probe again at the check's usual pace; its owners' health is unchanged.
            let _ = self.probe.sched.completed(i.check, now, Cadence::Steady);
        }
    }
}
