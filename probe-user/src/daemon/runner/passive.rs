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
}

struct Watched {
    id: u32,
    watch: Watch,
    /// Its endpoints (one per profile that has it), with their profile's index in the table.
    owners: Vec<(OwnerId, usize)>,
}

fn key_of(addr: SocketAddr) -> BackendKey {
    let mut k = BackendKey {
        port: addr.port(),
        ..BackendKey::default()
    };
    match addr.ip() {
        std::net::IpAddr::V4(a) => {
            k.addr[..4].copy_from_slice(&a.octets());
            k.family = probe_common::l4::FAMILY_V4;
        }
        std::net::IpAddr::V6(a) => {
            k.addr = a.octets();
            k.family = probe_common::l4::FAMILY_V6;
        }
    }
    k
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
        self.kernel.as_ref().map(|_| self.next_poll_ns)
    }
}

impl Runner {
    /// Brings the observers and the watched backends in step with the table: loads the
    /// observers when a profile asks for them (or the interfaces change), drops them when
    /// none does.
    pub(super) fn sync_passive(&mut self) {
        self.passive.dirty = false;
        let mut want: FastMap<BackendKey, (u32, Vec<(OwnerId, usize)>)> = FastMap::default();
        let mut interfaces: Vec<String> = Vec::new();
        for (pix, p) in self.table.profiles().iter().enumerate() {
            let Some(rule) = &p.cfg.passive else { continue };
            interfaces.extend(rule.interfaces.iter().cloned());
            let timeout_ms = u32::try_from(rule.timeout.as_millis()).unwrap_or(u32::MAX);
            for id in &p.owners {
                let key = key_of(self.table.targets()[id].spec().target());
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
                Ok(k) => p.kernel = Some(k),
                Err(e) => {
                    log::error!(
                        "passive detection is off: the observers could not start on {}: {}",
                        interfaces.join(", "),
                        crate::errors::chain(&e)
                    );
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
                w.owners = owners;
                let _ = kernel.watch(&key, BackendRule { id: w.id, timeout_ms });
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
                    watch: Watch::default(),
                    owners,
                },
            );
        }
    }

    /// Reads every watched backend's counters when due, and ejects what they call for.
    pub(super) fn poll_passive(&mut self, now: u64) {
        if self.passive.dirty {
            self.sync_passive();
        }
        if self.passive.next_due().is_none_or(|due| due > now) {
            return;
        }
        self.passive.next_poll_ns = now + POLL_NS;
        // Back through their active checks: no longer counted against the cap.
        let targets = self.table.targets();
        self.passive
            .ejected
            .retain(|id| targets.get(id).is_some_and(|t| t.health() == HealthState::Unhealthy));
        let mut trips: Vec<(OwnerId, usize, Trip, PassiveStats)> = Vec::new();
        let Some(kernel) = self.passive.kernel.as_ref() else {
            return;
        };
        for w in self.passive.backends.values_mut() {
            let stats = kernel.read(w.id);
            let delta = since(&stats, &w.watch.last);
            if delta.iter().any(|n| *n > 0) {
                for (_, pix) in &w.owners {
                    if let Some(p) = self.table.profiles().get(*pix) {
                        self.metrics.passive_handshakes(&p.name, delta);
                    }
                }
            }
            let Some(rule) = w
                .owners
                .first()
                .and_then(|(_, pix)| self.table.profiles().get(*pix))
                .and_then(|p| p.cfg.passive.as_ref())
            else {
                continue;
            };
            if let Some(trip) = w.watch.judge(rule, &stats, now) {
                kernel.clear_run(w.id);
                w.watch.forget();
                trips.extend(w.owners.iter().map(|(id, pix)| (*id, *pix, trip, stats)));
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
            let Some(w) = self.passive.backends.get(&key_of(SocketAddr::new(ip, view.port))) else {
                continue;
            };
            // Only where its own profile has passive detection.
            let Some(id) = self
                .table
                .find(&view.profile, &view.name)
                .filter(|id| w.owners.iter().any(|(o, _)| o == id))
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

    /// Ejects endpoint `id` of profile `pix` on `trip`, unless it is down already or the
    /// profile's cap is reached.
    fn eject(&mut self, id: OwnerId, pix: usize, trip: Trip, stats: &PassiveStats, now: u64) {
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
