//! The runner: one task on a thread of its own that owns the live table, probing (the
//! scheduler, the L4 port, the task probers: `Probing`), the change stream and the runner's
//! metrics, so none of it needs a lock. Each loop turn does one of: send what is due
//! (`fire.rs`), take results (`results.rs`), or serve a request (`../requests/`); then it
//! merges metrics and saves state when due. Endpoint state changes only through the table's
//! methods (`../table/restatus.rs`), whose changes `publish.rs` puts on the stream, and once
//! a second `rtts.rs` sends the round-trip times performance routing needs; applying a table
//! is `apply.rs`. What follows the stream (events file, sinks, DNS server, API feeds) is not
//! the runner's: it joins through `Control` (`../consumers/`).
mod agents;
mod apply;
mod cluster;
mod fire;
mod pace;
mod passive;
mod persist;
mod publish;
mod results;
mod rtts;

#[cfg(test)]
mod tests;
mod watchdog;
mod workers;

use crate::changes::{Bus, Rtts};
use persist::Persist;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::sync::{mpsc, oneshot, watch};

use super::{
    checks::{CheckSpec, ProbeKind, ProbeReport, Specs},
    metrics::RunnerMetrics,
    ports::{L4Port, Ports},
    protocol::Command,
    state,
    table::{self, OwnerId, Table},
    DaemonError,
};
use crate::{
    config::{Config, Protocol},
    engine::L4Result,
    rng::SplitMix64,
    schedule::{CheckId, Scheduler, SchedulerConfig},
};

/// The wheel's tick: the runner never wakes more often than this.
const TICK_NS: u64 = 1_000_000;
/// Task probes that hold a connection (HTTP(S), gRPC) in flight at once; more wait for a lane
/// (and show up as lateness).
const TASK_LANES: usize = 256;
/// L4 results fed to the threshold machines per batch: enough for their cache misses to
/// overlap (`Runner::warm`), few enough that the prefetched lines are still there when used.
const RESULT_BATCH: usize = 128;
/// How often the loop merges its per-profile counters into the registry. Every request (a
/// scrape, a reload) merges them first, so what it sees is exact either way; merging every
/// turn cost the runner ~15% at a million targets (a label lookup per profile touched).
const METRICS_FLUSH_NS: u64 = 100_000_000;
/// How often the runner hands the pages its objects left to the allocator back
/// (`crate::alloc::release_freed`, ~70 µs at 65k targets). Other threads free what the runner
/// made (the events writer a first round's changes, the saver its snapshot slices), and
/// mimalloc reclaims such frees only when the thread that owns the page allocates from it
/// again or collects: without this, 65k TCP targets ran ~9 MiB larger for good.
const COLLECT_NS: u64 = 1_000_000_000;

/// The scheduler's key: the spec of the check's first owner, compared and hashed by its key
/// alone, so identical checks share one entry. Sending reads the spec from the entry
/// `pop_due` has just touched, instead of hashing the key into a side map for every probe.
#[derive(Clone)]
pub(crate) struct SchedKey {
    spec: Arc<CheckSpec>,
}

impl PartialEq for SchedKey {
    fn eq(&self, other: &Self) -> bool {
        self.spec.key() == other.spec.key()
    }
}

impl Eq for SchedKey {}

impl std::hash::Hash for SchedKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.spec.key().hash(state);
    }
}

/// A probe on its way. Past `started_ns` plus its check's timeout and a grace, the watchdog
/// gives up on it (`watchdog.rs`).
struct Inflight {
    check: CheckId,
    started_ns: u64,
    /// How late it left after its due time, in whole microseconds (saturating at 71 minutes).
    late_us: u32,
    protocol: Protocol,
}

impl Inflight {
    fn late_ns(&self) -> u64 {
        u64::from(self.late_us) * 1000
    }
}

/// What sending a check needs, by check index, so that the send path reads one dense slot
/// and the check's spec (behind the scheduler entry `pop_due` has just touched) instead of
/// every owner's target (each a cache miss at 100k probes/s). Filled the first time a check
/// fires after any registration change (`Runner::epoch`).
struct SlotCache {
    check: CheckId,
    /// The low half of the epoch it was filled in: a cache 2^32 registration changes old
    /// would pass for fresh, which no daemon lives to see.
    epoch: u32,
    /// The first owner's profile index (`NO_PROFILE` for none), for the per-profile sent
    /// counter; the other owners' follow (a shared check's only: boxed, a thin pointer).
    first_profile: u32,
    #[expect(clippy::box_collection, reason = "a thin pointer: most checks have one owner")]
    more_profiles: Option<Box<Vec<u32>>>,
    /// The check's timeout in microseconds (at most a minute, `rules::limits`): the L4
    /// engine's for its request, and a probe not back by then plus `watchdog::GRACE_NS` is
    /// lost.
    timeout_us: u32,
    protocol: Protocol,
    /// What the L4 engine sends (to the spec's address); None for checks that run as tasks
    /// (HTTP, UDP exchange). A copy of the address here took 24 bytes of every slot.
    l4: Option<crate::engine::L4Proto>,
}

/// `SlotCache::first_profile` of a check with no owner left.
const NO_PROFILE: u32 = u32::MAX;

impl SlotCache {
    fn timeout(&self) -> Duration {
        Duration::from_micros(u64::from(self.timeout_us))
    }

    fn profiles(&self) -> impl Iterator<Item = &u32> {
        std::iter::once(&self.first_profile)
            .filter(|&&p| p != NO_PROFILE)
            .chain(self.more_profiles.iter().flat_map(|more| more.iter()))
    }
}

/// One check's slot: its send cache and its probe in flight (a check has at most one).
#[derive(Default)]
struct CheckSlot {
    cache: Option<SlotCache>,
    inflight: Option<Inflight>,
}

// One per check: 160 bytes before the compact address, timeout and epoch, 112 with a copy of
// the address and room for a shared check's profiles.
const _: () = assert!(std::mem::size_of::<CheckSlot>() <= 80);

/// Probes that run as tasks on the L7 workers (`probe::TaskProbe`); their reports come back on
/// `rx` under the check's token.
struct Tasks {
    workers: workers::Workers,
    /// What the probes of each kind share.
    probers: Arc<crate::probe::Probers>,
    /// Probes that hold a connection run on at most TASK_LANES lanes; the rest wait as jobs.
    lanes: Arc<workers::Lanes<fire::TaskJob>>,
    /// (token, report, nanoseconds the task waited for an HTTP slot before it could start)
    tx: mpsc::UnboundedSender<(u64, ProbeReport, u64)>,
    rx: mpsc::UnboundedReceiver<(u64, ProbeReport, u64)>,
}

/// The L4 port once started, and its results.
#[derive(Default)]
pub(super) struct L4 {
    pub(super) port: Option<Arc<dyn L4Port>>,
    rx: Option<mpsc::UnboundedReceiver<L4Result>>,
}

/// Sending probes and taking their results: the scheduler, each check's slot, the L4 port
/// and the task probers, and how well probing keeps time.
pub(super) struct Probing {
    pub(super) sched: Scheduler<SchedKey, OwnerId>,
    /// Per check index. A probe's token is its check id, so a result finds its probe without
    /// a hash lookup, and a result for a check removed meanwhile finds a different generation
    /// and is dropped.
    slots: Vec<CheckSlot>,
    /// Where the watchdog's next look over the slots starts (`watchdog::reap_lost`).
    reap_from: usize,
    /// When the watchdog last looked.
    reaped_ns: u64,
    /// Set by `new` to when its table was registered: `run` moves the first probes as much
    /// later as it started after that, so they spread over the interval from the moment
    /// probing starts (at a million checks, registering alone takes seconds).
    registered_ns: Option<u64>,
    /// Bumped by every registration change: slot caches of older epochs are refilled.
    epoch: u64,
    /// The kernel said it cannot run HTTP probes on this node: they all use sockets.
    kernel_http_off: bool,
    /// Kernel HTTP probes being settled through a socket (`results.rs`), by token.
    settling: crate::hash::FastMap<u64, results::Settle>,
    /// The run-time guard of the kernel HTTP path (`results.rs`).
    kernel_http_guard: results::KernelHttpGuard,
    /// What each L4 outcome (UDP's or not) says, made once (`results.rs`).
    l4_words: crate::hash::FastMap<(bool, crate::engine::L4Outcome), results::Words>,
    /// L4 results taken off the channel and not yet fed (`drain_results`), kept for its buffer.
    l4_batch: Vec<crate::engine::L4Result>,
    due_buf: Vec<(CheckId, u64)>,
    pub(super) l4: L4,
    tasks: Tasks,
    /// When the last probe result came (start time before any): its age is a metric, so a
    /// checker that has stopped learning anything shows it.
    pub(super) last_result_ns: u64,
    /// Results that were no verdict for want of a local resource, and when that was last
    /// logged (`results.rs`): at most one warning per `LOCAL_WARN_EVERY_NS`.
    local_errors: u64,
    local_warned_ns: Option<u64>,
    /// Whether probes start on time (`pace.rs`).
    pace: pace::Pace,
    /// The worst lateness of the probes that ended since the last `assess_pace`.
    worst_late_ns: u64,
    /// When the once-a-second work (pace, DNS RTTs) is next due; the loop wakes for it.
    next_watchdog_ns: u64,
    /// The endpoints' agents (`agents.rs`).
    agents: agents::Agents,
}

/// When the loop's periodic chores were last done (`Runner::end_turn`).
#[derive(Default)]
struct Chores {
    /// `metrics` merged its pending counts.
    metrics_flushed_ns: u64,
    /// The runner's freed pages were handed back.
    collected_ns: u64,
    /// The service manager's watchdog (`service::watchdog_every`): how often the loop says
    /// it is alive, and when it last did. From the loop itself, so that a runner stuck in a
    /// turn stops the pings even while the process's other threads live, and the manager
    /// kills it.
    watchdog_every_ns: Option<u64>,
    pinged_ns: u64,
}

/// The runner: the fleet (config, table, owner ids), probing, what it publishes (the change
/// stream, the round-trip times), the cluster link, metrics and persistence.
pub(crate) struct Runner {
    /// Shared with the consumers, which build from it too (the DNS zone): one copy of a
    /// million endpoints, not two.
    pub(super) config: Arc<Config>,
    pub(super) ports: Ports,
    /// The live table: profiles, endpoints and their state.
    pub(super) table: Table,
    pub(super) next_owner: OwnerId,
    pub(super) probe: Probing,
    /// Every change of state, to whoever joined (`../requests/join.rs`).
    pub(super) changes: Bus,
    /// The latest round-trip times, for performance routing (`rtts.rs`).
    rtts: watch::Sender<Rtts>,
    /// `[cluster]`: this node's share, its gossip and the other nodes' verdicts (`cluster.rs`).
    pub(super) cluster: Option<cluster::Link>,
    pub(super) metrics: RunnerMetrics,
    chores: Chores,
    pub(super) persist: Persist,
    /// The profiles whose endpoints the fleet API owns: their generations and name indexes.
    pub(super) fleet: FleetBook,
    pub(super) rng: SplitMix64,
    /// Passive detection (`passive.rs`).
    passive: passive::Passive,
    /// The state file's and the pin directory's locks, held for the runner's lifetime.
    _locks: Vec<super::lock::Lock>,
}

/// What the runner keeps of a profile whose endpoints the API owns.
#[derive(Default)]
pub(crate) struct FleetProfile {
    pub generation: u64,
    /// Its endpoints' places in the config (and in its owners), by name: made at its first
    /// batch after a start or a reload, then kept in step.
    pub(in crate::daemon) index: Option<crate::hash::FastMap<Arc<str>, u32>>,
}

/// Every profile the API owns, by name.
pub(crate) type FleetBook = crate::hash::FastMap<Arc<str>, FleetProfile>;

impl Runner {
    /// Resolves `config`, resumes saved health, starts the L4 port if any check needs it and
    /// the cluster's gossip. Consumers join before `run` (`join`), from the first table.
    pub(crate) fn new(config: impl Into<Arc<Config>>, ports: Ports) -> Result<Self, DaemonError> {
        let config = config.into();
        let locks = take_locks(&config)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let now = ports.clock.mono_ns();
        let saved = state::load(&config.daemon.state_file, ports.clock.unix_ms());
        let mut runner = Runner {
            table: Table::default(),
            next_owner: 1,
            probe: Probing {
                sched: Scheduler::new(SchedulerConfig::default()),
                slots: Vec::new(),
                reap_from: 0,
                reaped_ns: now,
                registered_ns: None,
                epoch: 0,
                kernel_http_off: false,
                settling: crate::hash::FastMap::default(),
                kernel_http_guard: results::KernelHttpGuard::default(),
                l4_words: crate::hash::FastMap::default(),
                l4_batch: Vec::with_capacity(RESULT_BATCH),
                due_buf: Vec::new(),
                l4: L4::default(),
                tasks: Tasks {
                    workers: workers::Workers::start(
                        config
                            .daemon
                            .l7_workers
                            .map_or_else(workers::Workers::default_threads, usize::from),
                    )?,
                    probers: Arc::default(),
                    lanes: workers::Lanes::new(TASK_LANES),
                    tx,
                    rx,
                },
                last_result_ns: now,
                local_errors: 0,
                local_warned_ns: None,
                pace: pace::Pace::default(),
                worst_late_ns: 0,
                next_watchdog_ns: now + watchdog::EVERY_NS,
                agents: agents::Agents::default(),
            },
            changes: Bus::default(),
            rtts: watch::Sender::new(Rtts::default()),
            cluster: config.cluster.as_ref().map(cluster::Link::new),
            metrics: RunnerMetrics::default(),
            chores: Chores {
                watchdog_every_ns: crate::service::watchdog_every()
                    .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
                ..Chores::default()
            },
            persist: Persist::new(),
            fleet: FleetBook::default(),
            rng: SplitMix64(now),
            passive: passive::Passive::default(),
            _locks: locks,
            ports,
            config,
        };
        let settings = runner.config.without_profiles();
        // The engine first, the table after: loading probe_rx parses the kernel's whole BTF
        // (aya, ~15 MB for a moment), which should not come on top of a built fleet.
        runner.ensure_l4(&settings, first_l4(config_specs(&runner.config), &settings))?;
        let plan = table::plan(&runner.config, None, &Table::default(), &saved, &mut runner.next_owner)?;
        runner.probe.registered_ns = Some(runner.now());
        runner.apply(plan);
        runner.start_cluster()?;
        Ok(runner)
    }

    /// The loop; ends on `stop` (after saving state and dropping the engine) or on an error.
    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut stop: oneshot::Receiver<super::Stop>,
    ) -> Result<(), DaemonError> {
        let mut last_wake = 0u64;
        let mut failure = None;
        // Stopped on request (not by a failure, a dropped daemon or a closed channel).
        let mut asked = false;
        // Results (L4 and task) are taken in batches, at most one per tick, and with each tick's
        // firing: a wake-up per result would cost a thread switch each at thousands of checks a
        // second.
        let mut results_after_ns = 0u64;
        if let Some(at) = self.probe.registered_ns.take() {
            self.probe.sched.postpone_all(self.now().saturating_sub(at));
        }
        loop {
            let now = self.now();
            // Wake at most once per tick and pop the whole tick (see schedule::next_due), and
            // for the once-a-second work (and a watchdog slice) even when nothing is due.
            let fire_ns = self
                .probe
                .sched
                .next_due()
                .map(|d| d.max(last_wake + TICK_NS))
                .map_or(self.probe.next_watchdog_ns, |w| w.min(self.probe.next_watchdog_ns));
            let results_open = now >= results_after_ns;
            // A slow start's next step and an agent's next ask wake the loop too (`end_turn`
            // takes them).
            let ramp_ns = self
                .table
                .ramps()
                .next_due()
                .unwrap_or(u64::MAX)
                .min(self.probe.agents.next_due().unwrap_or(u64::MAX))
                .min(self.passive.next_due().unwrap_or(u64::MAX));
            let wake_ns = Some(if results_open {
                fire_ns.min(ramp_ns)
            } else {
                fire_ns.min(results_after_ns).min(ramp_ns)
            });
            let sleep = async {
                match wake_ns {
                    Some(w) => tokio::time::sleep(Duration::from_nanos(w.saturating_sub(now))).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                why = &mut stop => {
                    asked = why == Ok(super::Stop::Asked);
                    break;
                }
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.command(cmd),
                    None => break,
                },
                r = recv_l4(&mut self.probe.l4.rx), if results_open => match r {
                    Some(r) => {
                        self.on_l4(r);
                        if self.drain_results().is_err() {
                            failure = Some(engine_stopped());
                            break;
                        }
                        results_after_ns = self.now() + TICK_NS;
                    }
                    // The engine's thread is gone (it panicked or its interface vanished): no
                    // L4 check will get a result again. Stop, so that the service manager
                    // restarts the daemon, rather than freezing every L4 endpoint's health.
                    None => {
                        failure = Some(engine_stopped());
                        break;
                    }
                },
                Some(update) = cluster::recv(&mut self.cluster) => self.on_cluster(update),
                Some((id, asked)) = self.probe.agents.rx.recv() => self.on_agent(id, asked),
                Some((token, report, queued_ns)) = self.probe.tasks.rx.recv(), if results_open => {
                    self.on_task(token, report, queued_ns);
                    if self.drain_results().is_err() {
                        failure = Some(engine_stopped());
                        break;
                    }
                    results_after_ns = self.now() + TICK_NS;
                }
                _ = sleep => {
                    let woke = self.now();
                    if woke >= fire_ns {
                        // What came back since the last batch goes first (it reschedules those
                        // checks), in this wake-up rather than one of its own: one thread
                        // switch per tick, not one per tick and per result batch.
                        if self.drain_results().is_err() {
                            failure = Some(engine_stopped());
                            break;
                        }
                        results_after_ns = woke + TICK_NS;
                        last_wake = woke;
                        self.fire(last_wake);
                        let slice = watchdog::slice(self.probe.slots.len(), last_wake.saturating_sub(self.probe.reaped_ns));
                        self.reap_lost(last_wake, slice);
                        self.probe.reaped_ns = last_wake;
                        if last_wake >= self.probe.next_watchdog_ns {
                            self.assess_pace(last_wake);
                            self.publish_rtts();
                            self.probe.next_watchdog_ns = last_wake + watchdog::EVERY_NS;
                        }
                    }
                }
            }
            self.end_turn(false);
        }
        self.end_turn(true);
        self.persist.saver.finish();
        // Every subscription ends: the consumers take what is queued, then see the end, and
        // whether the stop was asked (sinks may leave what the service manager keeps) or not.
        self.changes.stop_asked(asked && failure.is_none());
        drop(std::mem::take(&mut self.changes));
        if let Some(mut node) = self.cluster.take().and_then(|l| l.node) {
            node.stop();
        }
        // Dropping the engine joins its thread, detaches probe_rx and removes the pins.
        drop(self.probe.l4.port.take());
        // The pin directory goes too when nothing is left in it (sinks' pins stay, on purpose).
        let _ = std::fs::remove_dir(&self.config.daemon.pin_dir);
        failure.map_or(Ok(()), Err)
    }

    pub(super) fn now(&self) -> u64 {
        self.ports.clock.mono_ns()
    }

    /// Takes every L4 and task result waiting; Err when the L4 engine's thread is gone. L4
    /// results are taken `RESULT_BATCH` at a time, the lines each one needs prefetched first
    /// (`Runner::warm`).
    fn drain_results(&mut self) -> Result<(), ()> {
        let mut batch = std::mem::take(&mut self.probe.l4_batch);
        let mut gone = false;
        while let Some(rx) = self.probe.l4.rx.as_mut() {
            while batch.len() < RESULT_BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        gone = true;
                        break;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                }
            }
            let full = batch.len() == RESULT_BATCH;
            self.warm(&batch);
            for r in batch.drain(..) {
                self.on_l4(r);
            }
            if gone || !full {
                break;
            }
        }
        self.probe.l4_batch = batch;
        if gone {
            return Err(());
        }
        while let Ok((token, report, queued_ns)) = self.probe.tasks.rx.try_recv() {
            self.on_task(token, report, queued_ns);
        }
        Ok(())
    }

    /// What every loop turn ends with: slow starts stepped, metrics merged, state saved when
    /// due.
    pub(super) fn end_turn(&mut self, force_save: bool) {
        let now = self.now();
        if let Some(every) = self.chores.watchdog_every_ns {
            if now.saturating_sub(self.chores.pinged_ns) >= every {
                crate::service::notify("WATCHDOG=1");
                self.chores.pinged_ns = now;
            }
        }
        self.step_ramps(now);
        self.ask_agents(now);
        self.poll_passive(now);
        if force_save || now.saturating_sub(self.chores.metrics_flushed_ns) >= METRICS_FLUSH_NS {
            self.metrics.flush(self.table.profiles());
            self.chores.metrics_flushed_ns = now;
        }
        if now.saturating_sub(self.chores.collected_ns) >= COLLECT_NS {
            crate::alloc::release_freed();
            self.chores.collected_ns = now;
        }
        self.save_if_due(force_save);
    }

    /// Takes the slow starts' steps due by `now` and publishes them.
    pub(super) fn step_ramps(&mut self, now: u64) {
        if self.table.ramps().next_due().is_some_and(|due| due <= now) {
            let changed = self.table.step_ramps(self.stamp(now));
            self.publish(changed);
        }
    }

    /// Starts the L4 port the first time a configuration has TCP or UDP checks (it must
    /// start), or HTTP checks the kernel can run (when it cannot start, they use sockets).
    pub(super) fn ensure_l4(&mut self, config: &Config, first: FirstL4) -> Result<(), DaemonError> {
        if self.probe.l4.port.is_some() {
            return Ok(());
        }
        let started = match first {
            FirstL4::None => return Ok(()),
            FirstL4::Required(first) => (self.ports.start_l4)(config, first)?,
            FirstL4::Http(first) => match (self.ports.start_l4)(config, first) {
                Ok(started) => started,
                Err(e) => {
                    log::warn!(
                        "the L4 engine did not start ({e}); HTTP checks go through sockets (set [daemon] \
                         http_probes = \"sockets\" to say so and silence this)"
                    );
                    return Ok(());
                }
            },
        };
        let (port, rx) = started;
        let kernel_http = config.daemon.http_probes == crate::config::HttpProbes::Kernel;
        if let (true, Err(why)) = (kernel_http, port.kernel_http()) {
            log::warn!("plain HTTP checks go through sockets: {why}");
            self.probe.kernel_http_off = true;
            self.probe.epoch += 1;
        }
        self.metrics
            .kernel_http_enabled(kernel_http && !self.probe.kernel_http_off);
        self.probe.l4 = L4 {
            port: Some(port),
            rx: Some(rx),
        };
        Ok(())
    }
}

/// The locks that keep a second daemon off this one's state file and pin directory.
fn take_locks(config: &Config) -> Result<Vec<super::lock::Lock>, DaemonError> {
    use super::lock::{state_lock_path, Lock};
    let pins = &config.daemon.pin_dir;
    // Under `ip netns exec` /sys is a fresh sysfs without bpffs: mounted before the directory
    // is made, or it would land on sysfs (and the engine's bpffs check refuse it later).
    crate::kernel::pin::ensure_bpffs_mounted(pins);
    std::fs::create_dir_all(pins).map_err(|source| DaemonError::Io {
        op: "create the pin directory",
        path: Some(pins.clone()),
        source,
    })?;
    Ok(vec![
        Lock::take(&state_lock_path(&config.daemon.state_file), "the state file")?,
        Lock::take(pins, "the pin directory")?,
    ])
}

/// Whether a table needs the L4 engine, and the target whose route names its interface
/// when the config names none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FirstL4 {
    None,
    /// A TCP or UDP check: the engine must run.
    Required(SocketAddr),
    /// Only HTTP checks the kernel could run: without the engine they use sockets.
    Http(SocketAddr),
}

pub(super) fn first_l4<S: std::borrow::Borrow<CheckSpec>>(specs: impl Iterator<Item = S>, config: &Config) -> FirstL4 {
    let kernel_http = config.daemon.http_probes == crate::config::HttpProbes::Kernel;
    let mut http = None;
    for spec in specs {
        let spec = spec.borrow();
        match &spec.kind {
            ProbeKind::L4(_) | ProbeKind::L4Tunnel(_) => return FirstL4::Required(spec.target()),
            // Only the kernel can take an HTTP check through a tunnel (a UDP one sends its
            // request by a raw socket of its own).
            ProbeKind::Task(p) if p.tunnel().is_some() && p.kernel_request(spec.l4_road().0).is_some() => {
                return FirstL4::Required(spec.target())
            }
            ProbeKind::Task(p) if kernel_http && http.is_none() && p.kernel_request(spec.target()).is_some() => {
                http = Some(spec.target());
            }
            _ => {}
        }
    }
    http.map_or(FirstL4::None, FirstL4::Http)
}

/// The checks `config`'s endpoints resolve to, in the order its table is built, one at a
/// time: what `first_l4` needs before there is a table. Endpoints whose check does not
/// resolve are left out (building the table reports them).
fn config_specs(config: &Config) -> impl Iterator<Item = CheckSpec> + '_ {
    config.profiles.iter().flat_map(|profile| {
        let mut specs = Specs::new(profile);
        profile
            .endpoints
            .iter()
            .filter_map(move |e| specs.resolve(e).ok().map(|r| r.spec))
    })
}

/// Says that the L4 engine's thread is gone, and the error the daemon stops with.
fn engine_stopped() -> DaemonError {
    log::error!("the L4 engine has stopped; probed stops so that it can be restarted");
    DaemonError::EngineStopped
}

async fn recv_l4(rx: &mut Option<mpsc::UnboundedReceiver<L4Result>>) -> Option<L4Result> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
