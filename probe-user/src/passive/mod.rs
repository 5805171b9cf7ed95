//! Passive detection's rules, pure and clock-free: what a watched backend's counters
//! (`probe_common::passive::PassiveStats`, read from the kernel every `POLL_NS`) say under a
//! profile's `[profile.passive]`, and how many of a profile's endpoints it may eject at once.
//! The runner (`daemon::runner::passive`) reads the counters and acts.
use std::collections::VecDeque;

use probe_common::passive::PassiveStats;

use crate::config::Passive;

/// How often the runner reads the counters.
pub const POLL_NS: u64 = 100_000_000;

/// Why passive detection ejects an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trip {
    /// `run` failed handshakes in a row (at least the threshold), the first at `since_ns`.
    Consecutive { run: u64, since_ns: u64 },
    /// `failed` of `decided` handshakes within the window failed.
    Ratio { failed: u64, decided: u64 },
}

/// What the runner keeps of one watched backend for one of its endpoints (a backend in two
/// passive profiles is judged by each profile's rule) between two reads.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// The counters at the last read.
    last: PassiveStats,
    /// (when, handshakes decided, of which failed) per read with any, within the window.
    samples: VecDeque<(u64, u64, u64)>,
    /// The backend's failures when this rule last tripped: a run counts only the failures
    /// after it, so one run ejects once (an ejected backend takes no more traffic, and its run
    /// would still stand when it comes back).
    failed_at_trip: u64,
}

impl Watch {
    /// A watch that starts at `last` (an endpoint that joins a backend already watched): what
    /// came before it is not its to judge.
    pub fn seeded(last: &PassiveStats) -> Self {
        Self {
            last: *last,
            samples: VecDeque::new(),
            failed_at_trip: last.failed(),
        }
    }

    /// Takes a new read of the counters at `now_ns` and judges it under `rule`. `now.peak` is
    /// the longest run since the previous read (the runner zeroes it after each read).
    pub fn judge(&mut self, rule: &Passive, now: &PassiveStats, now_ns: u64) -> Option<Trip> {
        let decided = now.decided().saturating_sub(self.last.decided());
        let failed = now.failed().saturating_sub(self.last.failed());
        self.last = *now;
        if decided > 0 {
            self.samples.push_back((now_ns, decided, failed));
        }
        let trip = self.consecutive(rule, now).or_else(|| self.ratio(rule, now_ns));
        if trip.is_some() {
            self.failed_at_trip = now.failed();
            self.samples.clear();
        }
        trip
    }

    fn consecutive(&self, rule: &Passive, now: &PassiveStats) -> Option<Trip> {
        let n = u64::from(rule.consecutive?);
        let fresh = now.failed().saturating_sub(self.failed_at_trip);
        let run = now.peak.max(now.consecutive).min(fresh);
        // When the run began: the current one's start, or the broken one's that set the peak.
        let since_ns = if now.consecutive >= now.peak {
            now.streak_first_ns
        } else {
            now.peak_first_ns
        };
        (run >= n).then_some(Trip::Consecutive { run, since_ns })
    }

    fn ratio(&mut self, rule: &Passive, now_ns: u64) -> Option<Trip> {
        let ratio = rule.ratio?;
        let window_ns = u64::try_from(ratio.window.as_nanos()).unwrap_or(u64::MAX);
        while self
            .samples
            .front()
            .is_some_and(|(at, _, _)| now_ns.saturating_sub(*at) > window_ns)
        {
            self.samples.pop_front();
        }
        let (decided, failed) = self.samples.iter().fold((0, 0), |(d, f), (_, sd, sf)| (d + sd, f + sf));
        (decided >= u64::from(ratio.min_attempts) && failed * 100 >= decided * u64::from(ratio.percent))
            .then_some(Trip::Ratio { failed, decided })
    }
}

/// The most of `endpoints` endpoints passive detection may eject at once at `percent`:
/// rounded down, but at least one when `percent` is above 0.
pub fn cap(endpoints: usize, percent: u8) -> usize {
    if percent == 0 || endpoints == 0 {
        return 0;
    }
    (endpoints * usize::from(percent) / 100).max(1)
}

/// The reason an ejection's result carries, e.g. "passive: 5 failed client handshakes in a
/// row (of all seen: refused 5)".
pub fn reason(trip: Trip, s: &PassiveStats) -> String {
    let kinds = [
        ("refused", s.refused),
        ("unreachable", s.unreachable),
        ("timed out", s.timed_out),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{k} {n}"))
    .collect::<Vec<_>>()
    .join(", ");
    let what = match trip {
        Trip::Consecutive { run, .. } => format!("{run} failed client handshakes in a row"),
        Trip::Ratio { failed, decided } => format!("{failed} of {decided} client handshakes failed"),
    };
    format!("passive: {what} (of all seen: {kinds})")
}

/// The outcome an ejection's result carries: the kind of failure the backend's clients met
/// most.
pub fn outcome(s: &PassiveStats) -> crate::outcome::Outcome {
    use crate::outcome::Outcome;
    let most = s.refused.max(s.unreachable).max(s.timed_out);
    if most == s.refused && most > 0 {
        Outcome::Refused
    } else if most == s.unreachable && most > 0 {
        Outcome::Unreachable
    } else {
        Outcome::Timeout
    }
}

#[cfg(test)]
mod tests;
