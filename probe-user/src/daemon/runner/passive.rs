//! Passive detection in the runner: the observers loaded while a profile has
//! `[profile.passive]`, the backends they watch kept in step with the table, their counters
//! read every `passive::POLL_NS`, and the ejections they call for, within each profile's cap.
//! The rules are `crate::passive`'s; the kernel side is `kernel::passive`.
use std::{collections::HashSet, net::SocketAddr, sync::Arc};

use probe_common::passive::{BackendKey, BackendRule, PassiveStats, DEFAULT_PASSIVE_FLOWS, MAX_PASSIVE_BACKENDS};

use super::Runner;
use crate::{
    changes::ChangeKind,
    daemon::table::OwnerId,
    hash::FastMap,
    health::{HealthState, Observation},
    kernel::passive::PassiveKernel,
    passive::{Trip, Watch, POLL_NS},
};

/// What the runner keeps for passive detection.
#[derive(Default)]
pub(super) struct Passive {
    kernel: Option<PassiveKernel>,
    /// The interfaces the observers watch (sorted).
    interfaces: Vec<String>,
    backends: FastMap<BackendKey, Watched>,
    /// Slots of backends no longer watched, for the next to take.
    free: Vec<u32>,
    next_id: u32,
    /// Endpoints passive detection ejected that are not back yet.
    ejected: HashSet<OwnerId>,
    /// The table changed: the watched set follows at the next turn's end.
    pub(super) dirty: bool,
    next_poll_ns: u64,
    /// The observers could not start (or lost an interface): when to try again.
    retry_ns: Option<u64>,
    /// That failure was logged (once until the observers start).
    failure_logged: bool,
}

/// How often the observers are tried again after they could not start.
const RETRY_NS: u64 = 1_000_000_000;

struct Watched {
    id: u32,
    /// The handshake timeout the kernel has for it.
    timeout_ms: u32,
    /// The counters at the last read (for the metrics' deltas).
    last: PassiveStats,
    /// Its endpoints (one per profile that has it): each with its profile's index in the
    /// table, judged by that profile's rule.
    owners: Vec<Owner>,
}

struct Owner {
    id: OwnerId,
    pix: usize,
    watch: Watch,
}

/// (started, completed, refused, unreachable, timed out).
fn counts(s: &PassiveStats) -> [u64; 5] {
    [s.started, s.completed, s.refused, s.unreachable, s.timed_out]
}

/// Field by field, what `now` has more than `before` (a slot zeroed meanwhile: nothing).
fn since(now: &PassiveStats, before: &PassiveStats) -> [u64; 5] {
    let (a, b) = (counts(now), counts(before));
    std::array::from_fn(|i| a[i].saturating_sub(b[i]))
}

impl Passive {
    /// When the loop should wake to read the counters (never while nothing is watched).
    pub(super) fn next_due(&self) -> Option<u64> {
        match &self.kernel {
            Some(_) => Some(self.next_poll_ns),
            None => self.retry_ns,
        }
    }
}

impl Runner {
    /// Brings the observers and the watched backends in step with the table: loads the
    /// observers when a profile asks for them (or the interfaces change), drops them when
    /// none does.
    pub(super) fn sync_passive(&mut self) {
        self.passive.dirty = false;
        let now = self.now();
        let mut want: FastMap<BackendKey, (u32, Vec<(OwnerId, usize)>)> = FastMap::default();
        let mut interfaces: Vec<String> = Vec::new();
        for (pix, p) in self.table.profiles().iter().enumerate() {
            let Some(rule) = &p.cfg.passive else { continue };
            interfaces.extend(rule.interfaces.iter().cloned());
            let timeout_ms = u32::try_from(rule.timeout.as_millis()).unwrap_or(u32::MAX);
            for id in &p.owners {
                let key = BackendKey::of(self.table.targets()[id].spec().target());
                let e = want.entry(key).or_insert((timeout_ms, Vec::new()));
                e.0 = e.0.min(timeout_ms);
                e.1.push((*id, pix));
            }
        }
        interfaces.sort();
        interfaces.dedup();
        let p = &mut self.passive;
        if want.is_empty() {
            if p.kernel.take().is_some() {
                log::info!("passive detection off: no profile asks for it");
            }
            *p = Passive::default();
            return;
        }
        if p.kernel.is_none() || p.interfaces != interfaces {
            p.kernel = None;
            p.backends.clear();
            p.free.clear();
            p.next_id = 0;
            match PassiveKernel::load(&interfaces, DEFAULT_PASSIVE_FLOWS) {
                Ok(k) => {
                    if p.failure_logged {
                        log::info!("passive detection on again, on {}", interfaces.join(", "));
                    }
                    p.kernel = Some(k);
                    p.retry_ns = None;
                    p.failure_logged = false;
                }
                Err(e) => {
                    // A missing interface may come: tried again every second, said once. Any
                    // other failure (no tcx, a verifier refusal) stays until a reload.
                    let missing = interfaces.iter().any(|i| crate::kernel::if_index(i).is_err());
                    if !p.failure_logged {
                        log::error!(
                            "passive detection is off: the observers could not start on {}: {}{}",
                            interfaces.join(", "),
                            crate::errors::chain(&e),
                            if missing { "; trying again every second" } else { "" }
                        );
                        p.failure_logged = true;
                    }
                    p.retry_ns = missing.then_some(now + RETRY_NS);
                    p.interfaces = interfaces;
                    return;
                }
            }
            p.interfaces = interfaces;
        }
        let Some(kernel) = p.kernel.as_mut() else { return };
        p.backends.retain(|key, w| {
            if want.contains_key(key) {
                true
            } else {
                kernel.unwatch(key);
                p.free.push(w.id);
                false
            }
        });
        for (key, (timeout_ms, owners)) in want {
            if let Some(w) = p.backends.get_mut(&key) {
                // Each endpoint that stays keeps what its rule has seen.
                let mut kept = std::mem::take(&mut w.owners);
                w.owners = owners
                    .into_iter()
                    .map(|(id, pix)| {
                        let watch = kept
                            .iter()
                            .position(|o| o.id == id)
                            .map_or_else(|| Watch::seeded(&w.last), |i| kept.swap_remove(i).watch);
                        Owner { id, pix, watch }
                    })
                    .collect();
                // A fleet batch or a reload resyncs every backend: the kernel hears only of a
                // timeout that changed.
                if w.timeout_ms != timeout_ms && kernel.watch(&key, BackendRule { id: w.id, timeout_ms }).is_ok() {
                    w.timeout_ms = timeout_ms;
                }
                continue;
            }
            let id = match p.free.pop() {
                Some(id) => id,
                None if p.next_id < MAX_PASSIVE_BACKENDS => {
                    p.next_id += 1;
                    p.next_id - 1
                }
                None => {
                    log::warn!("passive detection watches at most {MAX_PASSIVE_BACKENDS} backends");
                    break;
                }
            };
            kernel.zero(id);
            if let Err(e) = kernel.watch(&key, BackendRule { id, timeout_ms }) {
                log::warn!("passive detection cannot watch a backend: {}", crate::errors::chain(&e));
                p.free.push(id);
                continue;
            }
            p.backends.insert(
                key,
                Watched {
                    id,
                    timeout_ms,
                    last: PassiveStats::default(),
                    owners: owners
                        .into_iter()
                        .map(|(id, pix)| Owner {
                            id,
                            pix,
                            watch: Watch::default(),
                        })
                        .collect(),
                },
            );
        }
    }

    /// Reads every watched backend's counters when due, and ejects what they call for.
    pub(super) fn poll_passive(&mut self, now: u64) {
        if self.passive.dirty || self.passive.kernel.is_none() && self.passive.retry_ns.is_some_and(|t| t <= now) {
            self.sync_passive();
        }
        if self.passive.kernel.is_none() || self.passive.next_poll_ns > now {
            return;
        }
        self.passive.next_poll_ns = now + POLL_NS;
        // An interface deleted or replaced took the observers' links with it: start them
        // again (now, and every second until it is back).
        if let Some(lost) = self
            .passive
            .kernel
            .as_ref()
            .and_then(|k| k.lost_interface().map(str::to_string))
        {
            log::warn!("passive detection: interface {lost} is gone or was replaced; starting the observers again");
            self.passive.kernel = None;
            self.passive.interfaces.clear();
            self.passive.retry_ns = Some(now);
            return;
        }
        // Back through their active checks (this node's own verdict, not an agent's or the
        // cluster's view): no longer counted against the cap.
        let targets = self.table.targets();
        self.passive.ejected.retain(|id| {
            targets
                .get(id)
                .is_some_and(|t| t.tracker().state() == HealthState::Unhealthy)
        });
        let mut trips: Vec<(OwnerId, usize, Trip, PassiveStats)> = Vec::new();
        let Some(kernel) = self.passive.kernel.as_ref() else {
            return;
        };
        for w in self.passive.backends.values_mut() {
            let stats = kernel.read(w.id);
            // The next read's peak is the longest run from now.
            kernel.take_peak(w.id);
            let delta = since(&stats, &w.last);
            w.last = stats;
            for o in &mut w.owners {
                let Some(p) = self.table.profiles().get(o.pix) else {
                    continue;
                };
                if delta.iter().any(|n| *n > 0) {
                    self.metrics.passive_handshakes(&p.name, delta);
                }
                let Some(rule) = &p.cfg.passive else { continue };
                if let Some(trip) = o.watch.judge(rule, &stats, now) {
                    trips.push((o.id, o.pix, trip, stats));
                }
            }
        }
        for (id, pix, trip, stats) in trips {
            self.eject(id, pix, trip, &stats, now);
        }
    }

    /// What the observers counted for the endpoints `views` show, where their profile has
    /// passive detection.
    pub(in crate::daemon) fn fill_passive<'a>(
        &self,
        views: impl Iterator<Item = &'a mut crate::daemon::views::EndpointView>,
    ) {
        let Some(kernel) = &self.passive.kernel else { return };
        for view in views {
            let Ok(ip) = view.address.parse() else { continue };
            let Some(w) = self
                .passive
                .backends
                .get(&BackendKey::of(SocketAddr::new(ip, view.port)))
            else {
                continue;
            };
            // Only where its own profile has passive detection.
            let Some(id) = self
                .table
                .find(&view.profile, &view.name)
                .filter(|id| w.owners.iter().any(|o| o.id == *id))
            else {
                continue;
            };
            let s = kernel.read(w.id);
            let ejected = self.passive.ejected.contains(&id);
            view.passive = Some(crate::daemon::views::PassiveView {
                started: s.started,
                completed: s.completed,
                refused: s.refused,
                unreachable: s.unreachable,
                timed_out: s.timed_out,
                failing_in_a_row: s.consecutive,
                mean_rtt_ms: if s.completed == 0 {
                    0.0
                } else {
                    s.rtt_sum_ns as f64 / s.completed as f64 / 1e6
                },
                ejected,
            });
        }
    }

    /// Ejects endpoint `id` of profile `pix` on `trip`, unless its own check is not running
    /// (always-serve, disabled: nothing would bring it back), it is down already, or the
    /// profile's cap is reached.
    fn eject(&mut self, id: OwnerId, pix: usize, trip: Trip, stats: &PassiveStats, now: u64) {
        let Some(t) = self.table.targets().get(&id) else { return };
        if !t.should_probe() || t.tracker().state() == HealthState::Unhealthy {
            return;
        }
        let Some(p) = self.table.profiles().get(pix) else {
            return;
        };
        let Some(rule) = &p.cfg.passive else { return };
        let cap = crate::passive::cap(p.owners.len(), rule.max_ejection_percent);
        let out = p.owners.iter().filter(|o| self.passive.ejected.contains(o)).count();
        let name = p.name.clone();
        if out >= cap {
            self.metrics.passive_ejection(&name, false);
            log::warn!(
                "passive detection would eject an endpoint of profile {name}, but {out} of its {} are \
                 out by passive detection already (max_ejection_percent {}): left in",
                p.owners.len(),
                rule.max_ejection_percent
            );
            return;
        }
        let started_ns = match trip {
            Trip::Consecutive { since_ns, .. } if since_ns > 0 && since_ns <= now => since_ns,
            _ => now,
        };
        let obs = Observation {
            success: false,
            started_ns,
            finished_ns: now,
            response_us: 0,
            outcome: crate::passive::outcome(stats),
            reason: Arc::from(crate::passive::reason(trip, stats)),
        };
        let Some(tr) = self.table.eject(id, obs, self.ports.clock.unix_ms_at(now)) else {
            return;
        };
        log::info!("{name}: endpoint ejected by passive detection ({})", tr.run[0].reason);
        self.passive.ejected.insert(id);
        self.metrics.passive_ejection(&name, true);
        self.on_verdict_of(id, tr, ChangeKind::Passive);
    }
}
