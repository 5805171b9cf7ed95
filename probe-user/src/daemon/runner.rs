//! The runner: one task that owns the scheduler, the probers, every endpoint's tracker and the
//! metrics. It wakes at most once per 1 ms tick to send what is due, feeds results into the
//! trackers, writes transitions as events and answers `Control` requests between ticks.
use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use tokio::sync::{mpsc, oneshot, Semaphore};

use super::{
    checks::{http::HttpProber, CheckSpec, ProbeKind, ProbeReport},
    events::{Event, EventResult, EventSink},
    mono_ns, ms,
    state::{self, SavedTarget},
    unix_ms, unix_ms_at,
    view::{EndpointView, LastChange, LastResult, ProfileView, ReloadReport, SelectView, Windows},
    Command, DaemonError, Options, RequestError,
};
use crate::{
    config::{Config, Endpoint, Profile, Protocol},
    engine::{EngineConfig, L4Engine, L4Proto, L4Request, L4Result, TxPath},
    hash::FastMap,
    health::{fail_window, success_window, HealthState, Observation, ProbeTiming, Thresholds, Tracker},
    metrics::{Histogram, Registry, LATENESS_BUCKETS, RTT_BUCKETS},
    schedule::{Cadence, CheckId, CheckParams, Scheduler, SchedulerConfig},
    status::{self, AdminState, Candidate, EndpointInput, EndpointStatus, Health, Query, SplitMix64},
};

/// The wheel's tick: the runner never wakes more often than this.
const TICK_NS: u64 = 1_000_000;
/// The scheduler's parameters for a profile's check: its interval and optional pacing.
fn check_params(health: &crate::config::HealthCheck) -> CheckParams {
    let p = health.pacing;
    CheckParams {
        interval: health.interval,
        fastinter: p.fast_interval,
        downinter: p.down_interval,
        initial_jitter: p.initial_jitter,
        jitter_percent: p.jitter_percent,
    }
}

/// HTTP probes in flight at once; more wait for a slot (and show up as lateness).
const HTTP_CONCURRENCY: usize = 256;
/// The state file is rewritten at most this often while transitions happen.
const SAVE_EVERY_NS: u64 = 1_000_000_000;

type OwnerId = u64;

/// One endpoint of one profile.
struct Target {
    profile: String,
    /// Index of its profile in `Runner::profiles`, for per-profile metrics.
    profile_ix: u32,
    endpoint: Endpoint,
    profile_enabled: bool,
    /// The configured admin state, and the API's override of it.
    config_admin: AdminState,
    admin_override: Option<AdminState>,
    check_key: String,
    spec: Arc<CheckSpec>,
    params: CheckParams,
    /// Registered with the scheduler: only while probed.
    check: Option<CheckId>,
    tracker: Tracker,
    last: Option<LastResult>,
    last_rtt: Option<Duration>,
    last_change: Option<LastChange>,
}

impl Target {
    fn admin(&self) -> AdminState {
        self.admin_override.unwrap_or(self.config_admin)
    }

    fn should_probe(&self) -> bool {
        self.profile_enabled && self.admin() == AdminState::Enabled
    }

    fn health(&self) -> Health {
        match self.tracker.state() {
            HealthState::CheckingEndpoint => Health::CheckingEndpoint,
            HealthState::Healthy => Health::Healthy,
            HealthState::Unhealthy => Health::Unhealthy,
        }
    }

    fn status(&self) -> EndpointStatus {
        status::endpoint_view(EndpointInput {
            profile_enabled: self.profile_enabled,
            admin: self.admin(),
            stopped: false,
            health: self.health(),
        })
        .status
    }

    fn target_label(&self) -> String {
        format!("{}/{}", self.spec.target, self.spec.protocol.name())
    }
}

/// The scheduler's key: identical checks share one entry by `key` alone, and the spec of the
/// first owner rides along. Sending reads the spec from the entry `pop_due` has just touched,
/// instead of hashing the key string into a side map for every probe.
#[derive(Clone)]
struct SchedKey {
    key: String,
    spec: Arc<CheckSpec>,
}

impl PartialEq for SchedKey {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for SchedKey {}

impl Hash for SchedKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

struct ProfileEntry {
    cfg: Profile,
    owners: Vec<OwnerId>,
}

/// Per-probe metrics gathered between loop turns and merged into the registry once per turn.
/// Updating the registry per probe (label vectors, string keys, tree lookups) was most of
/// the runner's cost per result at 100k probes/s. Scrapes go through `command`, which
/// flushes first, so none sees a partial turn.
#[derive(Default)]
struct PendingMetrics {
    /// Results by kind, profile index and reason (the outcome label is its first word).
    results: FastMap<(Protocol, u32, Arc<str>), u64>,
    /// Round-trip times of successful probes, by kind and profile index.
    rtt: FastMap<(Protocol, u32), Histogram>,
    /// Scheduler lateness (due time to send).
    lateness: Option<Histogram>,
    /// Probes sent, by kind and profile index.
    sent: FastMap<(Protocol, u32), u64>,
}

/// A probe on its way.
struct Inflight {
    check: CheckId,
    started_ns: u64,
    protocol: Protocol,
}

/// What sending a check needs, by check index, so that the send path reads one dense slot
/// instead of the check's spec and every owner's target (each a cache miss at 100k probes/s).
/// Filled the first time a check fires after any registration change (`Runner::epoch`).
struct SlotCache {
    check: CheckId,
    epoch: u64,
    protocol: Protocol,
    /// The owners' profile indices, for the per-profile sent counter: the first inline.
    first_profile: Option<u32>,
    more_profiles: Vec<u32>,
    /// The request for the L4 engine; None for checks that run as tasks (HTTP, UDP exchange).
    l4: Option<(SocketAddr, L4Proto, Duration)>,
}

/// One check's slot: its send cache and its probe in flight (a check has at most one).
#[derive(Default)]
struct CheckSlot {
    cache: Option<SlotCache>,
    inflight: Option<Inflight>,
}

/// The target table a configuration resolves to, before it is applied.
struct Table {
    profiles: Vec<ProfileEntry>,
    targets: FastMap<OwnerId, Target>,
    kept: usize,
    added: usize,
}

pub(crate) struct Runner {
    config: Config,
    options: Options,
    sched: Scheduler<SchedKey, OwnerId>,
    profiles: Vec<ProfileEntry>,
    targets: FastMap<OwnerId, Target>,
    next_owner: OwnerId,
    /// Per check index. A probe's token is its check id, so a result finds its probe without
    /// a hash lookup, and a result for a check removed meanwhile finds a different generation
    /// and is dropped.
    slots: Vec<CheckSlot>,
    /// Bumped by every registration change: slot caches of older epochs are refilled.
    epoch: u64,
    /// Shared only with a metrics scrape in progress, which reads its counters off this thread.
    engine: Option<Arc<L4Engine>>,
    l4_rx: Option<mpsc::UnboundedReceiver<L4Result>>,
    http: HttpProber,
    http_slots: Arc<Semaphore>,
    udp: crate::probe::udp::UdpProber,
    http_tx: mpsc::UnboundedSender<(u64, ProbeReport)>,
    http_rx: mpsc::UnboundedReceiver<(u64, ProbeReport)>,
    events: EventSink,
    metrics: Registry,
    rng: SplitMix64,
    state_dirty: bool,
    last_save_ns: u64,
    saver: state::Saver,
    due_buf: Vec<(CheckId, u64)>,
    pending: PendingMetrics,
}

impl Runner {
    /// Resolves `config`, resumes saved health and starts the L4 engine if any check needs it.
    pub(crate) fn new(config: Config, options: Options) -> Result<Self, DaemonError> {
        let events = EventSink::open(&config.daemon.events)?;
        let (http_tx, http_rx) = mpsc::unbounded_channel();
        let mut runner = Runner {
            sched: Scheduler::new(SchedulerConfig::default()),
            profiles: Vec::new(),
            targets: FastMap::default(),
            next_owner: 1,
            slots: Vec::new(),
            epoch: 0,
            engine: None,
            l4_rx: None,
            http: HttpProber::new(),
            http_slots: Arc::new(Semaphore::new(HTTP_CONCURRENCY)),
            udp: crate::probe::udp::UdpProber::default(),
            http_tx,
            http_rx,
            events,
            metrics: Registry::new(),
            rng: SplitMix64(mono_ns()),
            state_dirty: false,
            last_save_ns: 0,
            saver: state::Saver::new(),
            due_buf: Vec::new(),
            pending: PendingMetrics::default(),
            options,
            config: config.clone(),
        };
        let saved = state::load(&config.daemon.state_file, unix_ms());
        let table = runner.build(&config, &saved).map_err(DaemonError::Unsupported)?;
        runner.ensure_engine(&config, first_l4(&table.targets))?;
        runner.apply(table);
        Ok(runner)
    }

    /// The loop; ends on `stop` (after saving state and dropping the engine) or on an error.
    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut stop: oneshot::Receiver<()>,
    ) -> Result<(), DaemonError> {
        let mut last_wake = 0u64;
        loop {
            let now = mono_ns();
            // Wake at most once per tick and pop the whole tick (see schedule::next_due).
            let wake_ns = self.sched.next_due().map(|d| d.max(last_wake + TICK_NS));
            let sleep = async {
                match wake_ns {
                    Some(w) => tokio::time::sleep(Duration::from_nanos(w.saturating_sub(now))).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = &mut stop => break,
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.command(cmd),
                    None => break,
                },
                Some(r) = recv_l4(&mut self.l4_rx) => {
                    self.on_l4(r);
                    while let Some(r) = self.l4_rx.as_mut().and_then(|rx| rx.try_recv().ok()) {
                        self.on_l4(r);
                    }
                }
                Some((token, report)) = self.http_rx.recv() => self.on_result(token, report),
                _ = sleep => {
                    last_wake = mono_ns();
                    self.fire(last_wake);
                }
            }
            self.flush_metrics();
            self.events.flush();
            self.save_if_due(false);
        }
        self.flush_metrics();
        self.events.flush();
        self.save_if_due(true);
        self.saver.finish();
        // Dropping the engine joins its thread, detaches probe_rx and removes the pins.
        drop(self.engine.take());
        Ok(())
    }

    // ---- building and applying a configuration ----

    /// Resolves every endpoint of `config`, carrying over the state of endpoints that stay
    /// (same profile, endpoint and check key) or, failing that, their saved state.
    fn build(&mut self, config: &Config, saved: &state::Saved) -> Result<Table, String> {
        let mut errors = Vec::new();
        let mut table = Table {
            profiles: Vec::new(),
            targets: FastMap::default(),
            kept: 0,
            added: 0,
        };
        let mut old_by_name: HashMap<(&str, &str), OwnerId> = HashMap::new();
        for (&id, t) in &self.targets {
            old_by_name.insert((t.profile.as_str(), t.endpoint.name.as_str()), id);
        }
        for profile in &config.profiles {
            let h = profile.health.thresholds;
            let thresholds = match Thresholds::lb(h.healthy(), h.unhealthy()) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(format!("profile {:?}: {e}", profile.name));
                    continue;
                }
            };
            let timing = ProbeTiming {
                interval: profile.health.interval,
                timeout: profile.health.timeout,
            };
            let mut entry = ProfileEntry {
                cfg: profile.clone(),
                owners: Vec::new(),
            };
            for endpoint in &profile.endpoints {
                let (check_key, spec) = match CheckSpec::resolve(profile, endpoint).map_err(|e| e.to_string()) {
                    Ok(r) => r,
                    Err(e) => {
                        if !errors.contains(&e) {
                            errors.push(e);
                        }
                        continue;
                    }
                };
                let old = old_by_name
                    .get(&(profile.name.as_str(), endpoint.name.as_str()))
                    .and_then(|id| self.targets.get(id).map(|t| (*id, t)))
                    .filter(|(_, t)| t.check_key == check_key);
                let (owner, tracker, last, last_rtt, last_change, admin_override) = match old {
                    Some((id, t)) => {
                        table.kept += 1;
                        let tracker = if t.tracker.thresholds() == thresholds && t.tracker.timing() == timing {
                            t.tracker.clone()
                        } else {
                            Tracker::resume(thresholds, timing, t.tracker.state())
                        };
                        // The operator's API override stands unless the file changed that
                        // endpoint's admin state itself.
                        let admin_override = t.admin_override.filter(|_| t.config_admin == endpoint.state);
                        (
                            id,
                            tracker,
                            t.last.clone(),
                            t.last_rtt,
                            t.last_change.clone(),
                            admin_override,
                        )
                    }
                    None => {
                        table.added += 1;
                        let id = self.next_owner;
                        self.next_owner += 1;
                        let saved = saved
                            .get(&(profile.name.clone(), endpoint.name.clone()))
                            .filter(|s| s.check == check_key);
                        let state = saved.map_or(HealthState::CheckingEndpoint, |s| parse_health(&s.health));
                        let admin_override = saved.and_then(|s| s.admin_override.as_deref()).and_then(parse_admin);
                        let last_change = saved.and_then(|s| s.last_change.clone());
                        (
                            id,
                            Tracker::resume(thresholds, timing, state),
                            None,
                            None,
                            last_change,
                            admin_override,
                        )
                    }
                };
                entry.owners.push(owner);
                table.targets.insert(
                    owner,
                    Target {
                        profile: profile.name.clone(),
                        profile_ix: table.profiles.len() as u32,
                        endpoint: endpoint.clone(),
                        profile_enabled: profile.enabled,
                        config_admin: endpoint.state,
                        admin_override,
                        check_key,
                        spec: Arc::new(spec),
                        params: check_params(&profile.health),
                        check: None,
                        tracker,
                        last,
                        last_rtt,
                        last_change,
                    },
                );
            }
            table.profiles.push(entry);
        }
        if errors.is_empty() {
            Ok(table)
        } else {
            Err(errors.join("\n"))
        }
    }

    /// Swaps in a built table: checks of endpoints that stay keep their schedule, the rest are
    /// registered or removed.
    fn apply(&mut self, mut table: Table) {
        // Profile indices may change even for targets whose checks stay.
        self.epoch += 1;
        let now = mono_ns();
        let old: Vec<OwnerId> = self.targets.keys().copied().collect();
        for id in old {
            let keep = table.targets.get(&id).is_some_and(|t| t.should_probe());
            let old_target = self.targets.get(&id).expect("listed above");
            match (old_target.check, table.targets.get_mut(&id)) {
                (Some(check), Some(new)) if keep => new.check = Some(check),
                (Some(_), new) => {
                    self.unregister(id);
                    if let Some(new) = new {
                        new.check = None;
                    }
                }
                (None, _) => {}
            }
        }
        let was_probed: HashMap<OwnerId, bool> = self.targets.iter().map(|(id, t)| (*id, t.should_probe())).collect();
        self.targets = table.targets;
        self.profiles = table.profiles;
        let ids: Vec<OwnerId> = self.targets.keys().copied().collect();
        for id in ids {
            let t = &self.targets[&id];
            if t.should_probe() && t.check.is_none() {
                // A target that was known but not probed comes back: SPEC "re-enabled starts in
                // CheckingEndpoint". A new or resumed one keeps what `build` gave it.
                if was_probed.get(&id) == Some(&false) {
                    self.targets.get_mut(&id).expect("listed").tracker.reset();
                }
                self.register(id, now);
            }
        }
        self.state_dirty = true;
    }

    fn register(&mut self, owner: OwnerId, now: u64) {
        self.epoch += 1;
        let t = self.targets.get_mut(&owner).expect("registered targets exist");
        let key = SchedKey {
            key: t.check_key.clone(),
            spec: t.spec.clone(),
        };
        match self.sched.add(owner, key, t.params, now) {
            Ok(id) => t.check = Some(id),
            Err(e) => log::error!("cannot schedule {}: {e}", t.check_key),
        }
    }

    fn unregister(&mut self, owner: OwnerId) {
        self.epoch += 1;
        let Some(t) = self.targets.get_mut(&owner) else {
            return;
        };
        let Some(id) = t.check.take() else {
            return;
        };
        let _ = self.sched.remove(&owner, id);
    }

    /// Starts the L4 engine the first time a configuration has TCP or UDP checks.
    fn ensure_engine(&mut self, config: &Config, first_l4: Option<SocketAddr>) -> Result<(), DaemonError> {
        if self.engine.is_some() {
            return Ok(());
        }
        let Some(first) = first_l4 else {
            return Ok(());
        };
        let iface = match config.source.interfaces.first() {
            Some(i) => i.clone(),
            None => crate::engine::source::route_source(first.ip())
                .and_then(crate::engine::source::iface_of)
                .ok_or(DaemonError::NoInterface { target: first })?,
        };
        let mut ec = EngineConfig::new(&iface, &config.daemon.pin_dir);
        ec.more_ifaces = config.source.interfaces.iter().skip(1).cloned().collect();
        ec.source_v4 = config.source.ipv4().find_map(|a| match a {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(_) => None,
        });
        ec.source_v6 = config.source.ipv6().find_map(|a| match a {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        });
        ec.mode = config.source.xdp_mode;
        ec.sport_min = config.source.ports.first;
        ec.sport_max = config.source.ports.last;
        let (engine, rx) = L4Engine::start(ec).map_err(|source| DaemonError::Engine {
            iface: iface.clone(),
            source: Box::new(source),
        })?;
        log::info!(
            "L4 engine on {iface}: probe_rx in {} mode, sending via {} ({})",
            engine.rx_mode(),
            engine.tx_path(),
            engine.tx_path_reason()
        );
        self.engine = Some(Arc::new(engine));
        self.l4_rx = Some(rx);
        Ok(())
    }

    // ---- probing ----

    /// Sends every check due at `now`: L4 ones in one batch, HTTP ones as tasks.
    fn fire(&mut self, now: u64) {
        let mut due = std::mem::take(&mut self.due_buf);
        due.clear();
        self.sched.pop_due_with(now, |id, due_ns| due.push((id, due_ns)));
        let mut batch = Vec::new();
        for &(id, due_ns) in &due {
            let fresh = self
                .slots
                .get(id.index())
                .and_then(|s| s.cache.as_ref())
                .is_some_and(|c| c.check == id && c.epoch == self.epoch);
            if !fresh {
                let Some(cache) = self.slot_cache(id) else {
                    continue;
                };
                if self.slots.len() <= id.index() {
                    self.slots.resize_with(id.index() + 1, CheckSlot::default);
                }
                self.slots[id.index()].cache = Some(cache);
            }
            let token = id.to_u64();
            self.pending
                .lateness
                .get_or_insert_with(|| Histogram::new(LATENESS_BUCKETS))
                .observe(Duration::from_nanos(now.saturating_sub(due_ns)).as_secs_f64());
            let slot = &mut self.slots[id.index()];
            let cache = slot.cache.as_ref().expect("filled above");
            for &p in cache.first_profile.iter().chain(&cache.more_profiles) {
                *self.pending.sent.entry((cache.protocol, p)).or_default() += 1;
            }
            slot.inflight = Some(Inflight {
                check: id,
                started_ns: now,
                protocol: cache.protocol,
            });
            match &cache.l4 {
                Some((target, proto, timeout)) => batch.push(L4Request {
                    token,
                    target: *target,
                    proto: proto.clone(),
                    timeout: *timeout,
                }),
                None => self.spawn_task(id, token),
            }
        }
        self.due_buf = due;
        if batch.is_empty() {
            return;
        }
        let failed = match &self.engine {
            Some(engine) => engine.submit(batch).err().map(|e| e.to_string()),
            None => Some("the L4 engine is not running".to_string()),
        };
        if let Some(why) = failed {
            log::error!("cannot send probes: {why}");
        }
    }

    /// Fills a check's send cache from its spec and its owners' targets.
    fn slot_cache(&self, id: CheckId) -> Option<SlotCache> {
        let spec = &self.sched.key(id)?.spec;
        let mut profiles = self
            .sched
            .owners(id)
            .iter()
            .filter_map(|o| self.targets.get(o))
            .map(|t| t.profile_ix);
        let l4 = match &spec.kind {
            ProbeKind::L4(proto) => Some((spec.target, proto.clone(), spec.timeout)),
            ProbeKind::Http(_) | ProbeKind::UdpExchange(_) => None,
        };
        Some(SlotCache {
            check: id,
            epoch: self.epoch,
            protocol: spec.protocol,
            first_profile: profiles.next(),
            more_profiles: profiles.collect(),
            l4,
        })
    }

    /// Starts a check that runs as a task (HTTP, UDP exchange); its report comes back on
    /// `http_rx` under `token`.
    fn spawn_task(&self, id: CheckId, token: u64) {
        let Some(spec) = self.sched.key(id).map(|k| &k.spec) else {
            return;
        };
        match &spec.kind {
            ProbeKind::L4(_) => {}
            ProbeKind::Http(probe) => {
                let (prober, slots, tx, probe, target) = (
                    self.http.clone(),
                    self.http_slots.clone(),
                    self.http_tx.clone(),
                    probe.clone(),
                    spec.target,
                );
                tokio::spawn(async move {
                    let Ok(_permit) = slots.acquire_owned().await else {
                        return;
                    };
                    let report = prober.probe(target, &probe).await;
                    let _ = tx.send((token, report));
                });
            }
            ProbeKind::UdpExchange(req) => {
                // Results come back on the same channel as HTTP's: both are tasks.
                let (prober, tx, req) = (self.udp.clone(), self.http_tx.clone(), req.clone());
                tokio::spawn(async move {
                    let r = prober.probe(&req).await;
                    let report = ProbeReport {
                        healthy: r.outcome.healthy(),
                        elapsed: r.elapsed,
                        reason: Arc::from(r.outcome.to_string()),
                    };
                    let _ = tx.send((token, report));
                });
            }
        }
    }

    fn on_l4(&mut self, r: L4Result) {
        // UDP results speak UDP's words ("port unreachable"), as `probed check udp://` does.
        let udp = self
            .inflight_of(r.token)
            .is_some_and(|i| i.protocol == crate::config::Protocol::Udp);
        let reason = match crate::probe::udp::UdpOutcome::try_from(r.outcome) {
            Ok(u) if udp => u.to_string(),
            _ => r.outcome.to_string(),
        };
        let report = ProbeReport {
            healthy: r.outcome.healthy(),
            elapsed: r.elapsed,
            reason: Arc::from(reason),
        };
        self.on_result(r.token, report);
    }

    /// Feeds one result to every owner of its check, then reschedules the check.
    fn on_result(&mut self, token: u64, report: ProbeReport) {
        let check = CheckId::from_u64(token);
        let Some(inflight) = self
            .slots
            .get_mut(check.index())
            .and_then(|slot| slot.inflight.take_if(|i| i.check == check))
        else {
            return;
        };
        let finished = mono_ns();
        let obs = Observation {
            success: report.healthy,
            started_ns: inflight.started_ns,
            finished_ns: finished,
            response_time: report.elapsed,
            reason: report.reason.clone(),
        };
        let proto = inflight.protocol;
        let owners = self.sched.owners(inflight.check);
        let at_unix_ms = unix_ms_at(finished);
        // Shared checks follow the most urgent owner's cadence (Cadence::combine).
        let mut cadence: Option<Cadence> = None;
        for owner in owners {
            let Some(t) = self.targets.get_mut(owner) else {
                continue;
            };
            *self
                .pending
                .results
                .entry((proto, t.profile_ix, report.reason.clone()))
                .or_default() += 1;
            if report.healthy {
                self.pending
                    .rtt
                    .entry((proto, t.profile_ix))
                    .or_insert_with(|| Histogram::new(RTT_BUCKETS))
                    .observe(report.elapsed.as_secs_f64());
                t.last_rtt = Some(report.elapsed);
            }
            match &mut t.last {
                // The same reason as last time, as it mostly is: no new string.
                Some(last) if *last.reason == *report.reason => {
                    last.ok = report.healthy;
                    last.rtt_ms = ms(report.elapsed);
                    last.at_unix_ms = at_unix_ms;
                }
                last => {
                    *last = Some(LastResult {
                        ok: report.healthy,
                        reason: report.reason.to_string(),
                        rtt_ms: ms(report.elapsed),
                        at_unix_ms,
                    })
                }
            }
            if let Some(tr) = t.tracker.observe(obs.clone()) {
                let event = Event {
                    at_unix_ms: unix_ms_at(tr.at_ns),
                    at_ns: tr.at_ns,
                    target: t.target_label(),
                    profile: t.profile.clone(),
                    endpoint: t.endpoint.name.clone(),
                    from: health_name(tr.from).into(),
                    to: health_name(tr.to).into(),
                    results: tr
                        .run
                        .iter()
                        .map(|o| EventResult {
                            ok: o.success,
                            reason: o.reason.to_string(),
                            rtt_ms: ms(o.response_time),
                            started_ns: o.started_ns,
                            finished_ns: o.finished_ns,
                        })
                        .collect(),
                    measured_window_ms: ms(tr.measured_window),
                    formula_window_ms: ms(tr.formula_window),
                };
                t.last_change = Some(LastChange {
                    at_unix_ms: event.at_unix_ms,
                    from: event.from.clone(),
                    to: event.to.clone(),
                    measured_window_ms: event.measured_window_ms,
                    formula_window_ms: event.formula_window_ms,
                });
                self.metrics.inc(
                    "probed_transitions_total",
                    "Health state transitions, by profile and new state",
                    vec![("profile", t.profile.clone()), ("to", event.to.clone())],
                    1,
                );
                self.events.emit(&event);
                self.state_dirty = true;
            }
            cadence = Some(Cadence::combine(cadence.into_iter().chain([t.tracker.cadence()])));
        }
        let cadence = cadence.unwrap_or(Cadence::Steady);
        // None or an error: disabled, always-serve or removed meanwhile, nothing to schedule.
        let _ = self.sched.completed(inflight.check, finished, cadence);
    }

    /// The probe a result's token names, if it is still the one in flight.
    fn inflight_of(&self, token: u64) -> Option<&Inflight> {
        let check = CheckId::from_u64(token);
        self.slots
            .get(check.index())
            .and_then(|s| s.inflight.as_ref())
            .filter(|i| i.check == check)
    }

    /// Merges the metrics gathered since the last turn into the registry.
    fn flush_metrics(&mut self) {
        let pending = &mut self.pending;
        if let Some(h) = pending.lateness.take().filter(|h| !h.is_empty()) {
            self.metrics.merge(
                "probed_schedule_lateness_seconds",
                "Time from a probe's due time to its send",
                vec![],
                &h,
            );
        }
        let profile = |ix: u32| {
            self.profiles
                .get(ix as usize)
                .map(|p| p.cfg.name.clone())
                .unwrap_or_default()
        };
        for ((proto, ix), n) in pending.sent.drain() {
            self.metrics.inc(
                "probed_probes_sent_total",
                "Probes sent, by kind and profile",
                vec![("kind", proto.name().into()), ("profile", profile(ix))],
                n,
            );
        }
        for ((proto, ix, reason), n) in pending.results.drain() {
            let outcome = reason.split_whitespace().next().unwrap_or("unknown").to_string();
            self.metrics.inc(
                "probed_probe_results_total",
                "Probe results, by kind, profile and outcome",
                vec![
                    ("kind", proto.name().into()),
                    ("profile", profile(ix)),
                    ("outcome", outcome),
                ],
                n,
            );
        }
        for ((proto, ix), h) in pending.rtt.drain() {
            self.metrics.merge(
                "probed_probe_rtt_seconds",
                "Round-trip time of successful probes",
                vec![("kind", proto.name().into()), ("profile", profile(ix))],
                &h,
            );
        }
    }

    // ---- requests ----

    fn command(&mut self, cmd: Command) {
        // Scrapes and reloads see every result so far, under the profile indices they had.
        self.flush_metrics();
        match cmd {
            Command::Status(profile, reply) => {
                let _ = reply.send(self.status(profile.as_deref()));
            }
            Command::Endpoint(p, e, reply) => {
                let r = self.find(&p, &e).map(|id| self.endpoint_view(id, None));
                let _ = reply.send(r);
            }
            Command::Select(p, source, region, reply) => {
                let _ = reply.send(self.select(&p, source, region));
            }
            Command::SetAdmin(p, e, state, reply) => {
                let _ = reply.send(self.set_admin(&p, &e, state));
            }
            Command::Reload(config, reply) => {
                let _ = reply.send(self.reload(config.map(|c| *c)));
            }
            Command::Metrics(reply) => {
                let _ = reply.send(Ok((self.render_metrics(), self.engine.clone())));
            }
        }
    }

    fn find(&self, profile: &str, endpoint: &str) -> Result<OwnerId, RequestError> {
        let entry = self
            .profiles
            .iter()
            .find(|p| p.cfg.name == profile)
            .ok_or_else(|| RequestError::NoProfile(profile.into()))?;
        entry
            .owners
            .iter()
            .copied()
            .find(|id| self.targets[id].endpoint.name == endpoint)
            .ok_or_else(|| RequestError::NoEndpoint {
                profile: profile.into(),
                endpoint: endpoint.into(),
            })
    }

    fn status(&self, profile: Option<&str>) -> Result<Vec<ProfileView>, RequestError> {
        let views: Vec<ProfileView> = self
            .profiles
            .iter()
            .filter(|p| profile.is_none_or(|n| n == p.cfg.name))
            .map(|p| self.profile_view(p))
            .collect();
        match profile {
            Some(name) if views.is_empty() => Err(RequestError::NoProfile(name.into())),
            _ => Ok(views),
        }
    }

    fn profile_view(&self, p: &ProfileEntry) -> ProfileView {
        let statuses: Vec<EndpointStatus> = p.owners.iter().map(|id| self.targets[id].status()).collect();
        let eligible = status::effective_eligibility(&statuses);
        ProfileView {
            name: p.cfg.name.clone(),
            enabled: p.cfg.enabled,
            dialect: p.cfg.dialect.name().into(),
            routing: routing_name(p.cfg.routing),
            status: format!("{:?}", status::profile_status(p.cfg.enabled, &statuses)),
            fail_open: status::fail_open(&statuses),
            endpoints: p
                .owners
                .iter()
                .zip(eligible)
                .map(|(id, e)| self.endpoint_view(*id, Some(e)))
                .collect(),
        }
    }

    /// `eligible` comes from the profile (fail-open needs every endpoint); None computes it.
    fn endpoint_view(&self, id: OwnerId, eligible: Option<bool>) -> EndpointView {
        let t = &self.targets[&id];
        let eligible = eligible.unwrap_or_else(|| {
            let entry = self.profiles.iter().find(|p| p.owners.contains(&id)).expect("owned");
            let statuses: Vec<EndpointStatus> = entry.owners.iter().map(|o| self.targets[o].status()).collect();
            let pos = entry.owners.iter().position(|o| *o == id).expect("owned");
            status::effective_eligibility(&statuses)[pos]
        });
        let timing = t.tracker.timing();
        let th = t.tracker.thresholds();
        EndpointView {
            profile: t.profile.clone(),
            name: t.endpoint.name.clone(),
            address: t.endpoint.address.to_string(),
            port: t.endpoint.port,
            protocol: t.spec.protocol.name().into(),
            admin: admin_name(t.admin()).into(),
            admin_from_api: t.admin_override.is_some(),
            status: format!("{:?}", t.status()),
            health: health_name(t.tracker.state()).into(),
            probed: t.should_probe(),
            eligible,
            pending: t.tracker.pending(),
            last_result: t.last.clone(),
            last_change: t.last_change.clone(),
            windows: Windows {
                interval_ms: ms(timing.interval),
                timeout_ms: ms(timing.timeout),
                healthy_threshold: th.healthy(),
                unhealthy_threshold: th.unhealthy(),
                fail_window_ms: ms(fail_window(timing.timeout, timing.interval, th.unhealthy())),
                success_window_ms: ms(success_window(
                    t.last_rtt.unwrap_or_default(),
                    timing.interval,
                    th.healthy(),
                )),
            },
        }
    }

    fn select(&mut self, profile: &str, source: IpAddr, region: Option<String>) -> Result<SelectView, RequestError> {
        let entry = self
            .profiles
            .iter()
            .find(|p| p.cfg.name == profile)
            .ok_or_else(|| RequestError::NoProfile(profile.into()))?;
        let targets: Vec<&Target> = entry.owners.iter().map(|id| &self.targets[id]).collect();
        let candidates: Vec<Candidate<'_>> = targets
            .iter()
            .map(|t| Candidate {
                status: t.status(),
                priority: t.endpoint.priority,
                weight: t.endpoint.weight,
                subnets: &t.endpoint.subnets,
                region: t.endpoint.region.as_deref(),
                rtt: t.last_rtt,
            })
            .collect();
        let answer = status::select(
            entry.cfg.enabled,
            entry.cfg.routing,
            &candidates,
            &Query {
                source,
                region: region.as_deref(),
            },
            &mut self.rng,
        );
        let picked = match &answer {
            status::Answer::NxDomain => Vec::new(),
            status::Answer::Endpoints(v) => v.clone(),
        };
        Ok(SelectView {
            profile: profile.into(),
            source: source.to_string(),
            region,
            nxdomain: answer == status::Answer::NxDomain,
            endpoints: picked.iter().map(|&i| targets[i].endpoint.name.clone()).collect(),
            addresses: picked
                .iter()
                .map(|&i| targets[i].endpoint.address.to_string())
                .collect(),
        })
    }

    fn set_admin(&mut self, profile: &str, endpoint: &str, state: AdminState) -> Result<EndpointView, RequestError> {
        let id = self.find(profile, endpoint)?;
        let now = mono_ns();
        let t = self.targets.get_mut(&id).expect("found");
        let (was, before) = (t.should_probe(), t.status());
        t.admin_override = (state != t.config_admin).then_some(state);
        let is = t.should_probe();
        if was && !is {
            self.unregister(id);
        } else if !was && is {
            self.targets.get_mut(&id).expect("found").tracker.reset();
            self.register(id, now);
        }
        let t = self.targets.get_mut(&id).expect("found");
        let after = t.status();
        if before != after {
            t.last_change = Some(LastChange {
                at_unix_ms: unix_ms(),
                from: format!("{before:?}"),
                to: format!("{after:?}"),
                measured_window_ms: 0.0,
                formula_window_ms: 0.0,
            });
        }
        self.state_dirty = true;
        Ok(self.endpoint_view(id, None))
    }

    /// Applies a new configuration whole, or nothing of it.
    fn reload(&mut self, config: Option<Config>) -> Result<ReloadReport, RequestError> {
        let config = match config {
            Some(c) => c,
            None => {
                let path = self.options.config_path.clone().ok_or_else(|| {
                    RequestError::Refused("the daemon was started without a config file to re-read".into())
                })?;
                Config::load(&path)?
            }
        };
        let mut restart_needed = Vec::new();
        if config.daemon.api != self.config.daemon.api {
            restart_needed.push("daemon.api_listen".to_string());
        }
        if config.daemon.pin_dir != self.config.daemon.pin_dir {
            restart_needed.push("daemon.pin_dir".to_string());
        }
        if config.daemon.state_file != self.config.daemon.state_file {
            restart_needed.push("daemon.state_file".to_string());
        }
        if config.source != self.config.source && self.engine.is_some() {
            restart_needed.push("source".to_string());
        }
        let table = self
            .build(&config, &state::Saved::new())
            .map_err(RequestError::Refused)?;
        let events = if config.daemon.events != self.events.target {
            Some(EventSink::open(&config.daemon.events).map_err(|e| RequestError::Refused(e.to_string()))?)
        } else {
            None
        };
        let removed = self.targets.keys().filter(|id| !table.targets.contains_key(id)).count();
        let report = ReloadReport {
            kept: table.kept,
            added: table.added,
            removed,
            restart_needed,
        };
        // The engine must run before the table goes live; if it cannot start, nothing changes.
        self.ensure_engine(&config, first_l4(&table.targets))
            .map_err(|e| RequestError::Refused(error_chain(&e)))?;
        if let Some(ev) = events {
            self.events = ev;
        }
        self.apply(table);
        self.config = config;
        log::info!(
            "configuration reloaded: {} kept, {} added, {} removed",
            report.kept,
            report.added,
            report.removed
        );
        Ok(report)
    }

    // ---- metrics and persistence ----

    /// Per-status endpoint counts; computed when scraped, since it walks every endpoint.
    fn update_gauges(&mut self) {
        self.metrics.clear_gauge("probed_endpoints");
        let mut counts: HashMap<(String, String), u64> = HashMap::new();
        for p in &self.profiles {
            for id in &p.owners {
                *counts
                    .entry((p.cfg.name.clone(), format!("{:?}", self.targets[id].status())))
                    .or_default() += 1;
            }
        }
        for ((profile, status), n) in counts {
            self.metrics.set(
                "probed_endpoints",
                "Endpoints by profile and monitor status",
                vec![("profile", profile), ("status", status)],
                n as f64,
            );
        }
    }

    /// The runner's own metrics. Kernel counters are read by the caller off this thread
    /// (`render_kernel`): a snapshot waits for the engine thread, and probes must not.
    fn render_metrics(&mut self) -> String {
        self.update_gauges();
        self.metrics.set(
            "probed_checks",
            "Distinct checks scheduled (identical checks are shared)",
            vec![],
            self.sched.len() as f64,
        );
        self.metrics.render()
    }

    fn save_if_due(&mut self, force: bool) {
        let now = mono_ns();
        if !self.state_dirty || (!force && now.saturating_sub(self.last_save_ns) < SAVE_EVERY_NS) {
            return;
        }
        // Sorting and serialising happen on the saver's thread: at 100k targets the sort
        // alone held this loop up for tens of milliseconds.
        let targets: Vec<SavedTarget> = self
            .targets
            .values()
            .map(|t| SavedTarget {
                profile: t.profile.clone(),
                endpoint: t.endpoint.name.clone(),
                check: t.check_key.clone(),
                health: health_name(t.tracker.state()).into(),
                admin_override: t.admin_override.map(|a| admin_name(a).to_string()),
                last_change: t.last_change.clone(),
            })
            .collect();
        self.saver.save(&self.config.daemon.state_file, targets);
        self.state_dirty = false;
        self.last_save_ns = now;
    }
}

/// Where the first TCP/UDP check of a table goes: the route to it names the interface when
/// the config names none.
fn first_l4(targets: &FastMap<OwnerId, Target>) -> Option<SocketAddr> {
    targets
        .values()
        .find(|t| matches!(t.spec.kind, ProbeKind::L4(_)))
        .map(|t| t.spec.target)
}

async fn recv_l4(rx: &mut Option<mpsc::UnboundedReceiver<L4Result>>) -> Option<L4Result> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

pub(crate) fn health_name(h: HealthState) -> &'static str {
    match h {
        HealthState::CheckingEndpoint => "CheckingEndpoint",
        HealthState::Healthy => "Healthy",
        HealthState::Unhealthy => "Unhealthy",
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

fn parse_health(s: &str) -> HealthState {
    match s {
        "Healthy" => HealthState::Healthy,
        "Unhealthy" => HealthState::Unhealthy,
        _ => HealthState::CheckingEndpoint,
    }
}

pub(crate) fn admin_name(a: AdminState) -> &'static str {
    match a {
        AdminState::Enabled => "enabled",
        AdminState::Disabled => "disabled",
        AdminState::AlwaysServe => "always-serve",
    }
}

pub(crate) fn parse_admin(s: &str) -> Option<AdminState> {
    match s {
        "enabled" => Some(AdminState::Enabled),
        "disabled" => Some(AdminState::Disabled),
        "always-serve" => Some(AdminState::AlwaysServe),
        _ => None,
    }
}

fn routing_name(r: status::Routing) -> String {
    match r {
        status::Routing::Priority => "priority".into(),
        status::Routing::Weighted => "weighted".into(),
        status::Routing::Multivalue { max_answers } => format!("multivalue({max_answers})"),
        status::Routing::Subnet => "subnet".into(),
        status::Routing::Geographic => "geographic".into(),
        status::Routing::Performance => "performance".into(),
    }
}

/// Kernel and engine counters in exposition format, from a snapshot of a running engine.
pub(crate) fn render_kernel(engine: &L4Engine) -> String {
    let mut m = Registry::new();
    let path = engine.tx_path();
    for p in [TxPath::Xdp, TxPath::Raw] {
        let name = match p {
            TxPath::Xdp => "xdp",
            TxPath::Raw => "raw",
        };
        m.set(
            "probed_tx_path",
            "Transmit path in use (1) for L4 probes: xdp live frames, or the raw-socket fallback",
            vec![("path", name.into())],
            if p == path { 1.0 } else { 0.0 },
        );
    }
    let s = match engine.snapshot() {
        Ok(s) => s,
        Err(e) => {
            log::warn!("engine snapshot failed: {e}");
            return m.render();
        }
    };
    let rx = [
        ("matched_open", s.rx.matched_open),
        ("matched_refused", s.rx.matched_refused),
        ("matched_unreach", s.rx.matched_unreach),
        ("forged", s.rx.forged),
        ("stale", s.rx.stale),
        ("rst_sent", s.rx.rst_sent),
        ("ringbuf_full", s.rx.ringbuf_full),
        ("passed_other", s.rx.other),
    ];
    for (name, v) in rx {
        m.set(
            "probed_kernel_rx",
            "probe_rx counters: matched replies, forged and stale replies, RSTs sent",
            vec![("counter", name.into())],
            v as f64,
        );
    }
    let tx = [
        ("sent", s.tx.sent),
        ("no_route", s.tx.no_route),
        ("no_neigh", s.tx.no_neigh),
        ("inflight_full", s.tx.inflight_full),
        ("ringbuf_full", s.tx.ringbuf_full),
    ];
    for (name, v) in tx {
        m.set(
            "probed_kernel_tx",
            "The generator's counters (probe_rx's live-frames runs)",
            vec![("counter", name.into())],
            v as f64,
        );
    }
    m.set(
        "probed_engine_stack_fallbacks",
        "L4 probes handed to the raw socket because XDP could not route them",
        vec![],
        s.engine.stack_fallbacks as f64,
    );
    m.set(
        "probed_engine_inflight",
        "L4 probes in flight",
        vec![],
        s.inflight as f64,
    );
    m.render()
}
