//! Keeping time honestly: when probes start later than their due time, the fail and success
//! windows of SPEC 3 stretch by as much, so probed says so instead of letting status look fine.
//! Each result records how late its probe started (the runner's send plus any wait for an
//! HTTP slot or in the L4 engine's backlog) and keeps each profile's count of endpoints behind
//! in step; once a second the runner exports the counts and the worst lateness since the last
//! second, and logs when falling behind starts and when it has stopped. Counting as results
//! come, not by a scan: a scan of every endpoint each second held the runner up for tens of
//! milliseconds at 500k endpoints, and so made probes late itself.
use super::Runner;
use crate::rules::limits::BEHIND_NS;

/// Scans in a row with nothing behind before "back on time" is logged (one per second).
const CALM_SCANS: u32 = 5;

/// One scan of the endpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Scan {
    /// Probed endpoints whose last probe started more than `BEHIND_NS` late.
    pub behind: u64,
    /// The latest start among the probes that ended since the last scan.
    pub worst_ns: u64,
}

/// What to log after a scan.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PaceLog {
    Behind(Scan),
    OnTime { lasted_ns: u64, worst_ns: u64 },
}

/// Behind or on time, with a few calm scans before "on time" so that the log does not flap.
#[derive(Default)]
pub(super) struct Pace {
    behind_since: Option<u64>,
    calm: u32,
    worst_ns: u64,
}

impl Pace {
    pub(super) fn tick(&mut self, now_ns: u64, scan: Scan) -> Option<PaceLog> {
        let Some(since) = self.behind_since else {
            if scan.behind == 0 {
                return None;
            }
            self.behind_since = Some(now_ns);
            self.calm = 0;
            self.worst_ns = scan.worst_ns;
            return Some(PaceLog::Behind(scan));
        };
        self.worst_ns = self.worst_ns.max(scan.worst_ns);
        if scan.behind > 0 {
            self.calm = 0;
            return None;
        }
        self.calm += 1;
        if self.calm < CALM_SCANS {
            return None;
        }
        self.behind_since = None;
        Some(PaceLog::OnTime {
            lasted_ns: now_ns.saturating_sub(since),
            worst_ns: std::mem::take(&mut self.worst_ns),
        })
    }
}

impl Runner {
    /// Exports the endpoints behind schedule per profile and the worst lateness since the
    /// last call, and logs when falling behind starts or ends.
    pub(super) fn assess_pace(&mut self, now_ns: u64) {
        let per_profile: Vec<u64> = self.table.profiles().iter().map(|p| p.behind).collect();
        let scan = Scan {
            behind: per_profile.iter().sum(),
            worst_ns: std::mem::take(&mut self.probe.worst_late_ns),
        };
        self.metrics.pace(&self.table, &per_profile, scan.worst_ns);
        let ms = |ns: u64| ns as f64 / 1e6;
        match self.probe.pace.tick(now_ns, scan) {
            Some(PaceLog::Behind(s)) => log::warn!(
                "{} endpoint(s) are probed more than {} ms late (worst {:.0} ms): their fail and success \
                 windows stretch by as much; /v1/status shows them with windows.hold = false",
                s.behind,
                BEHIND_NS / 1_000_000,
                ms(s.worst_ns)
            ),
            Some(PaceLog::OnTime { lasted_ns, worst_ns }) => log::info!(
                "probes are on time again after {:.1} s behind schedule (worst {:.0} ms late)",
                lasted_ns as f64 / 1e9,
                ms(worst_ns)
            ),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn scan(behind: u64, worst_ms: u64) -> Scan {
        Scan {
            behind,
            worst_ns: worst_ms * 1_000_000,
        }
    }

    #[test]
    fn falling_behind_is_logged_once_and_recovery_after_calm_scans() {
        let mut p = Pace::default();
        assert_eq!(p.tick(S, scan(0, 3)), None, "on time: nothing to say");
        assert_eq!(p.tick(2 * S, scan(7, 120)), Some(PaceLog::Behind(scan(7, 120))));
        assert_eq!(p.tick(3 * S, scan(9, 400)), None, "still behind: said already");
        for i in 0..CALM_SCANS - 1 {
            assert_eq!(p.tick((4 + u64::from(i)) * S, scan(0, 10)), None, "calm scan {i}");
        }
        // A relapse before the calm scans are over restarts them, without a new warning.
        assert_eq!(p.tick(10 * S, scan(1, 60)), None);
        for i in 0..CALM_SCANS - 1 {
            assert_eq!(p.tick((11 + u64::from(i)) * S, scan(0, 10)), None);
        }
        assert_eq!(
            p.tick(20 * S, scan(0, 10)),
            Some(PaceLog::OnTime {
                lasted_ns: 18 * S,
                worst_ns: 400_000_000
            })
        );
        assert_eq!(
            p.tick(21 * S, scan(2, 80)),
            Some(PaceLog::Behind(scan(2, 80))),
            "a new episode"
        );
    }
}
