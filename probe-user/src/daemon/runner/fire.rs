//! Sending what is due: L4 checks in one batch to the L4 port, the others as tasks of their
//! kind (`probe::TaskProbe`) whose reports come back on the runner's channel.
use std::{net::SocketAddr, sync::Arc};

use super::{CheckSlot, Inflight, Runner, SlotCache, NO_PROFILE};
use crate::{
    config::HttpProbes,
    daemon::checks::{CheckSpec, ProbeKind, ProbeReport},
    engine::{L4Proto, L4Request},
    probe::{Probers, TaskProbe},
    schedule::CheckId,
};

impl Runner {
    /// Sends every check due at `now`.
    pub(super) fn fire(&mut self, now: u64) {
        let mut due = std::mem::take(&mut self.probe.due_buf);
        due.clear();
        self.probe.sched.pop_due_with(now, |id, due_ns| due.push((id, due_ns)));
        // Room for every check at once, not by doubling as higher ids show up (a slot is about
        // 200 bytes; doubling held three of them per check at the last step).
        if let Some(more) = self
            .probe
            .sched
            .len()
            .checked_sub(self.probe.slots.len())
            .filter(|&n| n > 0)
        {
            self.probe.slots.reserve_exact(more);
        }
        let mut batch = Vec::with_capacity(due.len());
        let mut connections = Vec::new();
        let mut datagrams = Vec::new();
        for &(id, due_ns) in &due {
            let fresh = self
                .probe
                .slots
                .get(id.index())
                .and_then(|s| s.cache.as_ref())
                .is_some_and(|c| c.check == id && c.epoch == self.probe.epoch as u32);
            if !fresh {
                let Some(cache) = self.slot_cache(id) else {
                    continue;
                };
                if self.probe.slots.len() <= id.index() {
                    self.probe.slots.resize_with(id.index() + 1, CheckSlot::default);
                }
                self.probe.slots[id.index()].cache = Some(cache);
            }
            let token = id.to_u64();
            // `pop_due` has just handed the check out, so its entry, and the spec behind it,
            // is there.
            let Some(key) = self.probe.sched.key(id) else {
                continue;
            };
            let slot = &mut self.probe.slots[id.index()];
            let cache = slot.cache.as_ref().expect("filled above");
            let late_ns = now.saturating_sub(due_ns);
            self.metrics.sent(cache.protocol, cache.profiles());
            slot.inflight = Some(Inflight {
                check: id,
                started_ns: now,
                late_us: u32::try_from(late_ns / 1000).unwrap_or(u32::MAX),
                protocol: cache.protocol,
            });
            match &cache.l4 {
                Some(proto) => {
                    let (target, tunnel) = key.spec.l4_road();
                    batch.push(L4Request {
                        token,
                        target,
                        proto: proto.clone(),
                        timeout: cache.timeout(),
                        tunnel,
                    });
                }
                None => match self.task_job(&key.spec, token) {
                    Some(j) if j.probe.datagram() => datagrams.push(j),
                    Some(j) => connections.push(j),
                    None => {}
                },
            }
        }
        self.probe.due_buf = due;
        // One hand-over to the workers per tick, however many probes it holds. Probes that hold
        // a connection wait for one of the lanes as jobs (a few words each), never as parked
        // tasks; datagram probes start at once, bounded by their prober.
        self.probe
            .tasks
            .lanes
            .push_all(connections, &self.probe.tasks.workers, TaskJob::run);
        self.probe.tasks.workers.spawn_all(datagrams, |job: TaskJob| job.run(0));
        if batch.is_empty() {
            return;
        }
        let failed = match &self.probe.l4.port {
            Some(port) => port.submit(batch).err().map(|e| e.to_string()),
            None => Some("the L4 engine is not running".to_string()),
        };
        if let Some(why) = failed {
            log::error!("cannot send probes: {why}");
        }
    }

    /// Fills a check's send cache from its spec and its owners' targets.
    fn slot_cache(&self, id: CheckId) -> Option<SlotCache> {
        let spec = &self.probe.sched.key(id)?.spec;
        let mut profiles = self
            .probe
            .sched
            .owners(id)
            .iter()
            .filter_map(|o| self.table.targets().get(o))
            .map(|t| t.profile_ix());
        let l4 = match &spec.kind {
            ProbeKind::L4(proto) => Some(proto.clone()),
            ProbeKind::L4Tunnel(_) => Some(L4Proto::Tcp),
            // Through a tunnel, the kernel runs it whenever the engine runs (a socket cannot
            // take the tunnel: without the engine, the task says so and gives no verdict).
            ProbeKind::Task(probe) if probe.tunnel().is_some() => self
                .probe
                .l4
                .port
                .as_ref()
                .and_then(|_| probe.kernel_request(spec.l4_road().0))
                .map(|request| L4Proto::Http { request }),
            ProbeKind::Task(probe) if self.kernel_http() => probe
                .kernel_request(spec.target())
                .map(|request| L4Proto::Http { request }),
            ProbeKind::Task(_) => None,
        };
        let first_profile = profiles.next().unwrap_or(NO_PROFILE);
        let more: Vec<u32> = profiles.collect();
        Some(SlotCache {
            check: id,
            epoch: self.probe.epoch as u32,
            protocol: spec.protocol,
            first_profile,
            more_profiles: (!more.is_empty()).then(|| Box::new(more)),
            timeout_us: spec.timeout_us(),
            l4,
        })
    }

    /// Whether plain HTTP checks go to probe_rx: so configured, the L4 engine runs, and it
    /// has not said it cannot.
    fn kernel_http(&self) -> bool {
        self.config.daemon.http_probes == HttpProbes::Kernel
            && self.probe.l4.port.is_some()
            && !self.probe.kernel_http_off
    }

    /// The job of a check with `spec` that runs as a task on the L7 workers, with the check's
    /// own timeout; its report comes back on `tasks.rx` under `token`.
    pub(super) fn task_job(&self, spec: &CheckSpec, token: u64) -> Option<TaskJob> {
        let ProbeKind::Task(probe) = &spec.kind else {
            return None;
        };
        Some(TaskJob {
            probers: self.probe.tasks.probers.clone(),
            probe: probe.clone(),
            target: spec.target(),
            token,
            tx: self.probe.tasks.tx.clone(),
            budget: None,
            lead_ns: 0,
        })
    }
}

type Reports = tokio::sync::mpsc::UnboundedSender<(u64, ProbeReport, u64)>;

/// A probe that runs as a task on the L7 workers.
pub(super) struct TaskJob {
    probers: Arc<Probers>,
    probe: Arc<dyn TaskProbe>,
    target: SocketAddr,
    token: u64,
    tx: Reports,
    /// The time it has, when less than the check's timeout: a kernel probe being settled
    /// through a socket has what the kernel left it.
    pub(super) budget: Option<std::time::Duration>,
    /// Nanoseconds of the probe that passed before this job was made (the kernel's part).
    pub(super) lead_ns: u64,
}

impl TaskJob {
    /// Runs the probe; `queued_ns` is how long it waited for a lane (its lateness grows by
    /// as much, and the pace report says so).
    pub(super) async fn run(self, queued_ns: u64) {
        let report = self.probe.run(&self.probers, self.target, self.budget).await;
        let _ = self
            .tx
            .send((self.token, report, queued_ns.saturating_add(self.lead_ns)));
    }
}
