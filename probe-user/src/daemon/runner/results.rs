//! Taking results: each report goes to every owner of its check (a shared check has several),
//! through the owner's threshold machine; a verdict becomes a health change on the stream.
//! Then the check is rescheduled at the cadence its owners need.
use crate::changes::{ChangeKind, RunResult, TransitionDetail};
use std::sync::Arc;

use super::{Inflight, Runner};
use crate::{
    clock::ms,
    config::Protocol,
    daemon::checks::{ProbeKind, ProbeReport},
    engine::L4Result,
    health::{Observation, Transition},
    prefetch,
    schedule::{Cadence, CheckId},
};

/// An L4 outcome as a result says it: the outcome and its reason.
pub(super) type Words = (crate::outcome::Outcome, Arc<str>);

/// Distinct L4 outcomes whose words are kept.
const WORDS_KEPT: usize = 4096;

/// Kernel HTTP response timeouts in a row that sockets contradict, with no response in the
/// kernel path between them, before the kernel path is given up (`KernelHttpGuard`).
const KERNEL_HTTP_CONTRADICTIONS: u32 = 3;

/// The least time a run of contradictions must span before the kernel path is given up.
const KERNEL_HTTP_GUARD_NS: u64 = 1_000_000_000;

/// The run-time guard of the kernel HTTP path: counts kernel response timeouts that a socket
/// then contradicted (it got an answer in time), and says when they mean the kernel's requests
/// are not getting out: at least `KERNEL_HTTP_CONTRADICTIONS` of them over at least a second,
/// with fewer kernel probes answered since the first of them than contradicted. A path that
/// answers other probes meanwhile works, and its few timeouts are a busy server's (the socket
/// asked later, once it had caught up). The guard used to count the settlements alone, in a
/// row, and under load a node whose backends were slow at times turned its fast path off for
/// good; every HTTP check then fell to sockets it could not keep up with (65k targets here:
/// 5-8k checks a second of 65k).
#[derive(Debug, Default)]
pub(super) struct KernelHttpGuard {
    /// Contradictions since the run began (0: no run).
    in_row: u32,
    /// When the run's first contradiction came.
    since_ns: u64,
    /// Kernel probes answered since then.
    answered: u32,
}

impl KernelHttpGuard {
    /// A kernel HTTP probe got its response.
    pub fn answered(&mut self) {
        if self.in_row > 0 {
            self.answered = self.answered.saturating_add(1);
            // Plenty answered since the run began: the path works; start over.
            if self.answered >= 64 * self.in_row {
                *self = Self::default();
            }
        }
    }

    /// A kernel response timeout was settled at `now_ns` by a socket with `socket`'s outcome;
    /// true when the kernel path should be given up.
    pub fn settled(&mut self, socket: crate::outcome::Outcome, now_ns: u64) -> bool {
        use crate::outcome::Outcome;
        if socket == Outcome::Timeout || socket == Outcome::LocalError {
            // The socket did no better: the server is slow or gone, not the path.
            *self = Self::default();
            return false;
        }
        if self.in_row == 0 {
            self.since_ns = now_ns;
            self.answered = 0;
        }
        self.in_row += 1;
        self.in_row >= KERNEL_HTTP_CONTRADICTIONS
            && now_ns.saturating_sub(self.since_ns) >= KERNEL_HTTP_GUARD_NS
            && self.answered < self.in_row
    }

    pub fn in_row(&self) -> u32 {
        self.in_row
    }
}

/// Why a kernel HTTP probe is settled through a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settle {
    /// probe_rx could not be sure (`probe_common::l4::Undecided`, by name).
    Undecided(&'static str),
    /// The request went out and nothing came back in time.
    ResponseTimeout,
    /// probe_rx could not send the request at all.
    Unsupported,
}

impl Settle {
    fn reason(self) -> &'static str {
        match self {
            Settle::Undecided(why) => why,
            Settle::ResponseTimeout => "response_timeout",
            Settle::Unsupported => "unsupported",
        }
    }
}

/// How often probes that could not run for want of a local resource are logged.
const LOCAL_WARN_EVERY_NS: u64 = 10_000_000_000;

impl Runner {
    /// Prefetches what `on_result` reads for each result of a batch, in two passes: the
    /// check's slot and scheduler entry (found by index), then its owners' targets (found
    /// through them). At a million targets each was a cache miss, taken one after another
    /// per result, and together they were most of the runner's time.
    pub(super) fn warm(&self, batch: &[L4Result]) {
        for r in batch {
            let check = CheckId::from_u64(r.token);
            if let Some(slot) = self.probe.slots.get(check.index()) {
                prefetch::line(&slot.inflight);
            }
            self.probe.sched.prefetch(check);
        }
        for r in batch {
            for owner in self.probe.sched.owners(CheckId::from_u64(r.token)) {
                if let Some(t) = self.table.targets().get(owner) {
                    t.prefetch();
                }
            }
        }
    }

    pub(super) fn on_l4(&mut self, r: L4Result) {
        // The engine's wait before the wire is the probe's lateness as much as the runner's.
        let queued_ns = u64::try_from(r.queued.as_nanos()).unwrap_or(u64::MAX);
        match self.kernel_http_report(&r) {
            Some(Some(report)) => return self.on_result(r.token, report, queued_ns),
            // Being settled through a socket: its report comes as a task's.
            Some(None) => return,
            None => {}
        }
        let udp = self.inflight_of(r.token).is_some_and(|i| i.protocol == Protocol::Udp);
        let (outcome, reason) = self.l4_words(udp, r.outcome);
        let report = ProbeReport {
            healthy: r.outcome.healthy(),
            outcome,
            elapsed: r.elapsed,
            reason,
            cert_not_after: None,
        };
        self.on_result(r.token, report, queued_ns);
    }

    /// The outcome and reason an L4 outcome reports: UDP results speak UDP's words ("port
    /// unreachable"), as `probed check udp://` does. Made once per distinct outcome and shared:
    /// formatting and allocating a reason for every result cost the runner a malloc and a free
    /// per probe at fleet rates. The outcomes are a handful (ICMP codes and HTTP statuses make
    /// at most a few thousand); past `WORDS_KEPT` they are made each time.
    fn l4_words(&mut self, udp: bool, o: crate::engine::L4Outcome) -> Words {
        if let Some(w) = self.probe.l4_words.get(&(udp, o)) {
            return w.clone();
        }
        let w = match crate::probe::udp::UdpOutcome::try_from(o) {
            Ok(u) if udp => ((&u).into(), Arc::from(u.to_string())),
            _ => (o.into(), Arc::from(o.to_string())),
        };
        if self.probe.l4_words.len() < WORDS_KEPT {
            self.probe.l4_words.insert((udp, o), w.clone());
        }
        w
    }

    /// Feeds one result to every owner of its check, then reschedules the check. `queued_ns`
    /// is how long the probe waited to start after it was sent (for an HTTP slot, or in the
    /// L4 engine's backlog).
    pub(super) fn on_result(&mut self, token: u64, report: ProbeReport, queued_ns: u64) {
        let check = CheckId::from_u64(token);
        let Some(inflight) = self
            .probe
            .slots
            .get_mut(check.index())
            .and_then(|slot| slot.inflight.take_if(|i| i.check == check))
        else {
            return;
        };
        // When the probe ended, by its own clock: results are taken in batches (at most one
        // tick late), and that wait is not the backend's, nor part of the next interval.
        let ended = inflight
            .started_ns
            .saturating_add(queued_ns)
            .saturating_add(u64::try_from(report.elapsed.as_nanos()).unwrap_or(u64::MAX));
        let now = self.now();
        let finished = ended.min(now);
        self.probe.last_result_ns = now;
        let obs = Observation {
            success: report.healthy,
            started_ns: inflight.started_ns,
            finished_ns: finished,
            response_us: Observation::micros(report.elapsed),
            outcome: report.outcome,
            reason: report.reason.clone(),
        };
        let proto = inflight.protocol;
        let late_ns = inflight.late_ns().saturating_add(queued_ns);
        self.metrics.late(late_ns);
        self.probe.worst_late_ns = self.probe.worst_late_ns.max(late_ns);
        let at_unix_ms = self.ports.clock.unix_ms_at(finished);
        // Shared checks follow the most urgent owner's cadence (Cadence::combine).
        let mut cadence: Option<Cadence> = None;
        let mut verdicts = Vec::new();
        let mut notices = Vec::new();
        let stamp = self.stamp(finished);
        for &owner in self.probe.sched.owners(inflight.check) {
            let Some(r) = self.table.record(owner, &report, &obs, late_ns, at_unix_ms) else {
                continue;
            };
            if let Some(not_after) = report.cert_not_after {
                notices.extend(self.table.record_cert(owner, not_after, stamp));
            }
            self.metrics.result(proto, r.profile_ix, &report);
            if let Some(tr) = r.transition {
                verdicts.push((owner, tr));
            }
            cadence = Some(Cadence::combine(cadence.into_iter().chain([r.cadence])));
        }
        if !notices.is_empty() {
            self.publish(crate::daemon::table::Changed {
                changes: notices,
                moved: false,
            });
        }
        for (owner, tr) in verdicts {
            self.on_verdict(owner, tr);
        }
        if report.outcome == crate::outcome::Outcome::LocalError {
            self.note_local_error(finished, &report.reason);
        }
        let cadence = cadence.unwrap_or(Cadence::Steady);
        // None or an error: disabled, always-serve or removed meanwhile, nothing to schedule.
        let _ = self.probe.sched.completed(inflight.check, finished, cadence);
    }

    /// A threshold was reached: the endpoint's status changes, and the stream hears of it.
    fn on_verdict(&mut self, owner: u64, tr: Transition) {
        self.on_verdict_of(owner, tr, ChangeKind::Health);
    }

    /// As `on_verdict`, for a verdict of `kind` (a check's, or passive detection's).
    pub(super) fn on_verdict_of(&mut self, owner: u64, tr: Transition, kind: ChangeKind) {
        if let Some(t) = self.table.targets().get(&owner) {
            self.metrics.transition(self.table.profile_of(t), tr.to);
        }
        let detail = TransitionDetail {
            results: tr
                .run
                .iter()
                .map(|o| RunResult {
                    ok: o.success,
                    outcome: o.outcome,
                    reason: o.reason.clone(),
                    rtt_us: o.response_us,
                    started_ns: o.started_ns,
                    finished_ns: o.finished_ns,
                })
                .collect(),
            measured_window_ms: ms(tr.measured_window),
            formula_window_ms: ms(tr.formula_window),
        };
        // In a cluster this node's verdict is one vote: the endpoint changes only when the
        // aggregate does.
        if self.cluster.is_some() && !self.cluster_sync(owner) {
            return;
        }
        self.restatus(owner, kind, tr.at_ns, Some(Arc::new(detail)));
    }

    /// Warns that probes fail for want of a local resource, at most once per
    /// `LOCAL_WARN_EVERY_NS`, with how many did since the last warning.
    fn note_local_error(&mut self, now: u64, reason: &str) {
        self.probe.local_errors += 1;
        if self
            .probe
            .local_warned_ns
            .is_some_and(|t| now.saturating_sub(t) < LOCAL_WARN_EVERY_NS)
        {
            return;
        }
        log::warn!(
            "{} probe(s) could not run for want of a local resource (last: {reason}); \
             their endpoints keep their health: raise LimitNOFILE or look for what exhausts the node",
            self.probe.local_errors
        );
        self.probe.local_errors = 0;
        self.probe.local_warned_ns = Some(now);
    }

    /// The report of an HTTP check the kernel ran; None for other checks, and for a probe the
    /// kernel could not decide, which is then settled through a socket (`settle`). When the
    /// kernel says it cannot run HTTP probes here, every HTTP check goes back to sockets (the
    /// slot caches are refilled).
    fn kernel_http_report(&mut self, r: &L4Result) -> Option<Option<ProbeReport>> {
        use crate::engine::L4Outcome as K;
        if self.inflight_of(r.token)?.protocol != Protocol::Http {
            return None;
        }
        let settle = match r.outcome {
            K::HttpUndecided { why } => Some(Settle::Undecided(why.as_str())),
            // Nothing came back after the request: a hung server, or requests that never
            // reached it. Only a socket can tell the two apart, with a time of its own.
            K::HttpResponseTimeout => Some(Settle::ResponseTimeout),
            K::HttpUnsupported => Some(Settle::Unsupported),
            _ => None,
        };
        let ProbeKind::Task(probe) = &self.probe.sched.key(CheckId::from_u64(r.token))?.spec.kind else {
            return None;
        };
        if probe.tunnel().is_some() {
            // No socket can settle what the kernel left open through a tunnel: the kernel's
            // word stands (an undecided probe is no verdict), and the other checks keep the
            // kernel path whatever happens to this one.
            return Some(Some(probe.kernel_report(r.outcome, r.elapsed)));
        }
        let Some(settle) = settle else {
            if matches!(r.outcome, K::HttpStatus { .. }) {
                self.probe.kernel_http_guard.answered();
            }
            return Some(Some(probe.kernel_report(r.outcome, r.elapsed)));
        };
        let timeout = probe.timeout();
        if settle == Settle::Unsupported && !self.probe.kernel_http_off {
            log::warn!(
                "HTTP probes cannot run in the kernel here (the receiving driver leaves the SYN+ACK's \
                 frame no room for the request, or every request template is in use): every HTTP \
                 check goes through sockets from now on"
            );
            self.kernel_http_stop();
        }
        let budget = match settle {
            Settle::ResponseTimeout => timeout,
            Settle::Undecided(_) | Settle::Unsupported => timeout.saturating_sub(r.elapsed),
        };
        let lead = r.queued + r.elapsed;
        if self.settle(r.token, settle, budget, lead) {
            return Some(None);
        }
        Some(Some(ProbeReport {
            healthy: false,
            outcome: crate::outcome::Outcome::LocalError,
            elapsed: r.elapsed,
            reason: Arc::from(r.outcome.to_string()),
            cert_not_after: None,
        }))
    }

    /// Runs the probe `token` names through a socket within `budget`, its report counted from
    /// `lead` after the probe started; false when it cannot (the check is gone).
    fn settle(&mut self, token: u64, why: Settle, budget: std::time::Duration, lead: std::time::Duration) -> bool {
        let Some(key) = self.probe.sched.key(CheckId::from_u64(token)) else {
            return false;
        };
        let Some(mut job) = self.task_job(&key.spec, token) else {
            return false;
        };
        job.budget = Some(budget);
        job.lead_ns = u64::try_from(lead.as_nanos()).unwrap_or(u64::MAX);
        self.metrics.kernel_http_settled(why.reason());
        self.probe.settling.insert(token, why);
        self.probe
            .tasks
            .lanes
            .push_all(vec![job], &self.probe.tasks.workers, super::fire::TaskJob::run);
        true
    }

    /// A task's report: a probe of the L7 workers, or a kernel HTTP probe being settled.
    pub(super) fn on_task(&mut self, token: u64, report: ProbeReport, queued_ns: u64) {
        // Empty but for kernel HTTP probes being settled: no lookup for every other task.
        if !self.probe.settling.is_empty() {
            if let Some(why) = self.probe.settling.remove(&token) {
                self.guard_kernel_http(why, &report);
            }
        }
        self.on_result(token, report, queued_ns);
    }

    /// The run-time guard of the kernel HTTP path: a kernel response timeout that the socket
    /// contradicts (it got an answer in time) means requests may not be getting out. A few in
    /// a row and every HTTP check goes through sockets; the verdicts were the sockets' all
    /// along, so no backend was failed for it.
    fn guard_kernel_http(&mut self, why: Settle, socket: &ProbeReport) {
        if why != Settle::ResponseTimeout {
            return;
        }
        let now = self.now();
        if self.probe.kernel_http_guard.settled(socket.outcome, now) && !self.probe.kernel_http_off {
            log::warn!(
                "{} plain HTTP probes in a row got no response in the kernel path while a socket then got \
                 one ({}): requests sent by probe_rx are not arriving; every HTTP check goes through \
                 sockets from now on",
                self.probe.kernel_http_guard.in_row(),
                socket.reason
            );
            self.kernel_http_stop();
        }
    }

    /// Every plain HTTP check goes through sockets from now on.
    fn kernel_http_stop(&mut self) {
        self.probe.kernel_http_off = true;
        self.probe.epoch += 1;
        self.metrics.kernel_http_enabled(false);
    }

    fn inflight_of(&self, token: u64) -> Option<&Inflight> {
        let check = CheckId::from_u64(token);
        self.probe
            .slots
            .get(check.index())
            .and_then(|s| s.inflight.as_ref())
            .filter(|i| i.check == check)
    }
}

#[cfg(test)]
mod guard_tests {
    use super::KernelHttpGuard;
    use crate::outcome::Outcome;

    const S: u64 = 1_000_000_000;

    #[test]
    fn contradictions_give_the_path_up_only_when_the_kernel_answers_none_meanwhile() {
        // Requests that stop arriving: contradictions, no kernel answer, over a second.
        let mut g = KernelHttpGuard::default();
        assert!(!g.settled(Outcome::Status, 0));
        assert!(!g.settled(Outcome::Status, S / 3));
        assert!(!g.settled(Outcome::Status, 2 * S / 3), "three, but within a second");
        assert!(g.settled(Outcome::Status, S));
        // A busy server: contradictions now and then, the kernel answering others between
        // them, in bursts processed back to back. The path stays.
        let mut g = KernelHttpGuard::default();
        for i in 0..100 {
            let t = i * S / 10;
            assert!(!g.settled(Outcome::Status, t));
            assert!(!g.settled(Outcome::Status, t + 1));
            for _ in 0..20 {
                g.answered();
            }
        }
        // A socket that times out too says nothing about the path, and starts the count over.
        let mut g = KernelHttpGuard::default();
        assert!(!g.settled(Outcome::Status, 0));
        assert!(!g.settled(Outcome::Timeout, S));
        assert!(!g.settled(Outcome::BadStatus, 2 * S));
        assert!(!g.settled(Outcome::LocalError, 3 * S));
        assert_eq!(g.in_row(), 0);
    }
}
