//! `kind = "route"`: a route to each of a VIP's prefixes in a kernel routing table, through a
//! TUN device of probed's own, while the profile can serve (`decide.rs`). The node's routing
//! daemon learns the table's routes of probed's route protocol and announces them by BGP
//! (docs/operations/sinks.md has the BIRD and FRR configurations).
//!
//! - Dead-man: the device exists only while it is held open (`kernel::tun`), so however
//!   probed ends, the kernel removes the routes and the routing daemon withdraws them.
//! - Restart: under a service manager with a file descriptor store (systemd's
//!   FileDescriptorStoreMax=), the device's descriptor is handed to the store
//!   (`crate::service`). A stop then leaves the routes to the manager: a restart passes the
//!   device to the new probed, which takes it over with its routes (no withdraw); a stop
//!   that is not a restart has the manager close it, and the kernel withdraws.
//! - Demote: below `min_eligible`, optionally keep the routes with `demote_metric`, which
//!   the routing daemon's export filter maps to worse BGP attributes.
//! - Damping: `decide::Damper`. A sync that has to wait says when to come back
//!   (`SyncReport::again_at`).
//! - Changing a route's metric adds the new route before it deletes the old one: the prefix
//!   is never without a route in between.
pub mod config;

pub use config::KEYS;
pub mod decide;

use std::{collections::BTreeSet, time::Instant};

use serde::{Deserialize, Serialize};

use self::config::RouteSink as RouteConfig;
use super::{model::ProfileModel, Sink, SinkError, SinkFault, SyncReport};
use crate::kernel::{
    route::{Route, RouteSocket},
    tun::Tun,
};
use decide::{wanted, Announce, Count, Damper, Step};

/// What `/v1/sinks` and the metrics show of one prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteView {
    pub prefix: String,
    pub state: Announce,
    /// The metric of the route in the table, when there is one.
    pub metric: Option<u32>,
    pub changes: u64,
    /// When the announcement last changed (Unix milliseconds; 0: not since the start).
    pub last_change_unix_ms: u64,
    /// What it was decided on: "2 of 3 endpoints serve (at least 1 needed)".
    pub cause: String,
}

/// What a route sink hands its successor when a reload changes its settings
/// (`super::Handover`): its device with the routes through it, and its damping, so that the
/// successor changes at the router only the prefixes and metrics that differ.
pub struct Held {
    cfg: RouteConfig,
    tun: Option<Tun>,
    stored: bool,
    damper: Damper,
    count: Option<Count>,
    held_back: Option<Announce>,
    changes: u64,
    last_change_unix_ms: u64,
}

/// A predecessor's routes in another table or of another protocol, to delete once the
/// successor's own are in place.
struct Retired {
    table: u32,
    protocol: u8,
    /// The device they go through.
    oif: u32,
}

pub struct RouteSink {
    cfg: RouteConfig,
    /// What a predecessor left to let go of after the first write.
    retired: Option<Retired>,
    /// Made by the first sync, not by `open`: a reload that changes the sink opens the new
    /// one while the old one still holds the device.
    tun: Option<Tun>,
    sock: RouteSocket,
    damper: Damper,
    /// The figures of the last decision.
    count: Option<Count>,
    /// What the last decision wanted while damping held the announcement back.
    held_back: Option<Announce>,
    changes: u64,
    last_change_unix_ms: u64,
    /// The device's descriptor is in the service manager's store.
    stored: bool,
}

/// The device's name in the service manager's store: the device, the table and the route
/// protocol, so that a restart that changes either knows where the kept routes are.
fn store_name(cfg: &RouteConfig) -> String {
    format!("route-{}.{}.{}", cfg.device, cfg.kernel_table, cfg.route_protocol)
}

/// The table and protocol a stored name says (None for the name releases before 2026-12-07
/// stored, `route-DEVICE`, which says neither), if it is `device`'s.
fn stored_as(name: &str, device: &str) -> Option<Option<(u32, u8)>> {
    let rest = name.strip_prefix("route-")?.strip_prefix(device)?;
    if rest.is_empty() {
        return Some(None);
    }
    let (table, protocol) = rest.strip_prefix('.')?.split_once('.')?;
    Some(Some((table.parse().ok()?, protocol.parse().ok()?)))
}

impl RouteSink {
    fn store_name(&self) -> String {
        store_name(&self.cfg)
    }

    /// Checks that the sink can work here: TUN devices can be made (/dev/net/tun, and
    /// CAP_NET_ADMIN for the routes) and the table can be read.
    pub fn open(cfg: &RouteConfig) -> Result<RouteSink, SinkError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .map_err(|e| SinkError::new(SinkFault::Setup, "open /dev/net/tun").because(e))?;
        let sock =
            RouteSocket::open().map_err(|e| SinkError::new(SinkFault::Setup, "open an rtnetlink socket").because(e))?;
        let mut sink = RouteSink {
            cfg: cfg.clone(),
            retired: None,
            tun: None,
            stored: false,
            held_back: None,
            sock,
            damper: Damper::new(cfg.hold_down),
            count: None,
            changes: 0,
            last_change_unix_ms: 0,
        };
        // A restart under a service manager: the device, with its routes, was kept for us
        // (under the name of the table and protocol it had, which this start may change).
        if let Some((name, fd)) = crate::service::claim_matching(|n| stored_as(n, &cfg.device).is_some()) {
            sink.adopt(&name, fd);
        }
        sink.check()?;
        Ok(sink)
    }

    /// Takes over the device a predecessor left in the store under `name`: its routes stay;
    /// those of another table or protocol than this start's go after the first write. A
    /// descriptor that cannot be used leaves the store too (closed here, its device and routes
    /// go with it).
    fn adopt(&mut self, name: &str, fd: std::os::fd::OwnedFd) {
        let device = self.cfg.device.clone();
        match Tun::adopt(fd, &device) {
            Ok(tun) => {
                log::info!("route sink: took over {device} from the service manager, with its routes");
                let oif = tun.index();
                let before = stored_as(name, &device).flatten();
                if let Some((table, protocol)) =
                    before.filter(|b| *b != (self.cfg.kernel_table, self.cfg.route_protocol))
                {
                    let retired = Retired { table, protocol, oif };
                    if table == self.cfg.kernel_table {
                        // The same table: the old protocol's route holds the place its
                        // successor takes, so it goes first, as on a reload.
                        if let Err(e) = self.let_go(&retired) {
                            log::warn!("route sink {device}: {}", crate::errors::chain(&e));
                        }
                    } else {
                        // Added in the new table first, then deleted from the old one.
                        self.retired = Some(retired);
                    }
                }
                if name != self.store_name() {
                    crate::service::store_fd(&self.store_name(), tun.fd());
                    crate::service::remove_fd(name);
                }
                self.tun = Some(tun);
                self.stored = true;
            }
            Err(e) => {
                log::warn!(
                    "route sink: the kept {device} cannot be used ({e}); it leaves the store, and a new one is made"
                );
                crate::service::remove_fd(name);
            }
        }
    }

    /// The device's index, made first if it is not there (at the first sync, or after
    /// someone deleted it, which took its routes).
    fn device(&mut self) -> Result<u32, SinkError> {
        match &self.tun {
            Some(t) if t.alive() => return Ok(t.index()),
            Some(_) => log::warn!("route sink: device {} was removed; making it again", self.cfg.device),
            None => {}
        }
        self.tun = None;
        if self.stored {
            crate::service::remove_fd(&self.store_name());
            self.stored = false;
        }
        let tun = Tun::create(&self.cfg.device).map_err(|e| {
            SinkError::new(SinkFault::Setup, format!("make the TUN device {}", self.cfg.device)).because(e)
        })?;
        let index = tun.index();
        self.stored = crate::service::store_fd(&self.store_name(), tun.fd());
        self.tun = Some(tun);
        Ok(index)
    }

    /// The routes `announce` asks for, through device `oif`.
    fn desired(&self, announce: Announce, oif: u32) -> BTreeSet<Route> {
        let metric = match announce {
            Announce::Announced => self.cfg.metric,
            Announce::Demoted => self.cfg.demote_metric.unwrap_or(self.cfg.metric),
            Announce::Withdrawn => return BTreeSet::new(),
        };
        self.cfg
            .prefixes
            .iter()
            .map(|p| Route {
                dst: p.addr(),
                prefix_len: p.prefix_len(),
                table: self.cfg.kernel_table,
                protocol: self.cfg.route_protocol,
                metric,
                oif,
            })
            .collect()
    }

    /// The routes through device `oif` now (other routes of the table and protocol, another
    /// sink's or the operator's, are not this sink's).
    fn held(&mut self, oif: u32) -> Result<BTreeSet<Route>, SinkError> {
        let routes = self
            .sock
            .list(self.cfg.kernel_table, self.cfg.route_protocol)
            .map_err(|e| {
                SinkError::new(SinkFault::Data, format!("list kernel table {}", self.cfg.kernel_table)).because(e)
            })?;
        Ok(routes.into_iter().filter(|r| r.oif == oif).collect())
    }

    /// Makes the table hold, through the device, what the held announcement asks for: new
    /// routes first, then the ones no longer wanted. Returns how many it wrote and holds.
    fn write(&mut self) -> Result<(usize, usize), SinkError> {
        let oif = self.device()?;
        let want = self.desired(self.damper.held().unwrap_or(Announce::Withdrawn), oif);
        let held = self.held(oif)?;
        let mut written = 0;
        for r in want.difference(&held) {
            self.sock.add(r).map_err(|e| write_error("add", r, e))?;
            written += 1;
        }
        for r in held.difference(&want) {
            self.sock.delete(r).map_err(|e| write_error("delete", r, e))?;
            written += 1;
        }
        if let Some(retired) = self.retired.take() {
            written += self.let_go(&retired)?;
        }
        Ok((written, want.len()))
    }

    /// Deletes a predecessor's routes of another table or protocol through the device.
    fn let_go(&mut self, retired: &Retired) -> Result<usize, SinkError> {
        let old = self
            .sock
            .list(retired.table, retired.protocol)
            .map_err(|e| SinkError::new(SinkFault::Data, format!("list kernel table {}", retired.table)).because(e))?;
        let mut written = 0;
        for r in old.iter().filter(|r| r.oif == retired.oif) {
            self.sock.delete(r).map_err(|e| write_error("delete", r, e))?;
            written += 1;
        }
        Ok(written)
    }
}

fn write_error(op: &str, r: &Route, e: std::io::Error) -> SinkError {
    SinkError::new(
        SinkFault::Write,
        format!("{op} the route to {}/{} in table {}", r.dst, r.prefix_len, r.table),
    )
    .because(e)
}

impl Sink for RouteSink {
    fn describe(&self) -> String {
        let prefixes: Vec<String> = self.cfg.prefixes.iter().map(ToString::to_string).collect();
        format!(
            "routes to {} in kernel table {} (proto {}) through {}",
            prefixes.join(", "),
            self.cfg.kernel_table,
            self.cfg.route_protocol,
            self.cfg.device
        )
    }

    fn check(&mut self) -> Result<(), SinkError> {
        let oif = self.tun.as_ref().map_or(0, Tun::index);
        self.held(oif).map(|_| ())
    }

    fn sync(&mut self, model: &ProfileModel) -> Result<SyncReport, SinkError> {
        let (want, count) = wanted(model, self.cfg.min_eligible, self.cfg.demote_metric.is_some());
        let was = self.damper.held();
        let step = self.damper.step(want, Instant::now());
        self.count = Some(count);
        self.held_back = matches!(step, Step::Wait(_)).then_some(want);
        if let Step::Change(to) = step {
            if was.is_some() {
                self.changes += 1;
                self.last_change_unix_ms = crate::clock::unix_ms();
            }
            let from = was.map_or("(start)", Announce::as_str);
            log::info!(
                "route sink {}: {} {from} -> {to}: {count}",
                self.cfg.device,
                self.cfg
                    .prefixes
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let (written, entries) = self.write()?;
        Ok(SyncReport {
            written,
            entries,
            again_at: match step {
                Step::Wait(at) => Some(at),
                Step::Change(_) | Step::Stay => None,
            },
        })
    }

    fn verify(&mut self, _model: &ProfileModel) -> Result<bool, SinkError> {
        let Some(oif) = self.tun.as_ref().filter(|t| t.alive()).map(Tun::index) else {
            return Ok(false);
        };
        let want = self.desired(self.damper.held().unwrap_or(Announce::Withdrawn), oif);
        Ok(self.held(oif)? == want)
    }

    fn clear(&mut self) -> Result<(), SinkError> {
        // The device takes its routes when it goes; deleting them first makes a stop's
        // withdrawal not wait for the handle to be dropped.
        if let Some(oif) = self.tun.as_ref().filter(|t| t.alive()).map(Tun::index) {
            for r in self.held(oif)? {
                self.sock.delete(&r).map_err(|e| write_error("delete", &r, e))?;
            }
        }
        // The store's copy goes even when the device is gone (someone deleted it).
        if self.stored {
            crate::service::remove_fd(&self.store_name());
            self.stored = false;
        }
        self.tun = None;
        Ok(())
    }

    fn clear_at_stop(&mut self) -> Result<(), SinkError> {
        if !self.stored {
            return self.clear();
        }
        // The store's entry is the manager's now: dropping the sink leaves it.
        self.stored = false;
        // The manager holds the device: a restart hands it to the next probed with its routes;
        // a stop has the manager close it, and the kernel withdraws them. A manager that took
        // the message but keeps no store (FileDescriptorStoreMax=0) holds no copy: the device
        // goes with this process a moment later, and its routes with it.
        log::info!(
            "route sink: leaving {} and its routes to the service manager",
            self.cfg.device
        );
        Ok(())
    }

    fn hand_over(&mut self) -> super::Handover {
        super::Handover::Route(Box::new(Held {
            cfg: self.cfg.clone(),
            tun: self.tun.take(),
            stored: std::mem::take(&mut self.stored),
            damper: self.damper.clone(),
            count: self.count,
            held_back: self.held_back,
            changes: self.changes,
            last_change_unix_ms: self.last_change_unix_ms,
        }))
    }

    fn take_over(&mut self, from: super::Handover) {
        let super::Handover::Route(held) = from else {
            return;
        };
        let Held {
            cfg: was,
            tun,
            stored,
            damper,
            count,
            held_back,
            changes,
            last_change_unix_ms,
        } = *held;
        self.damper = damper.with_hold_down(self.cfg.hold_down);
        (self.count, self.held_back) = (count, held_back);
        (self.changes, self.last_change_unix_ms) = (changes, last_change_unix_ms);
        if was.device != self.cfg.device {
            // Another device: the old one goes now, with its routes (the kernel keeps one
            // route per prefix, table and metric, so the new device's could not be added
            // beside them); the first sync makes the new one.
            if stored {
                crate::service::remove_fd(&store_name(&was));
            }
            drop(tun);
            return;
        }
        let oif = tun.as_ref().map_or(0, Tun::index);
        // Stored under the table and protocol it has now.
        let stored = match (&tun, stored) {
            (Some(t), true) if store_name(&was) != self.store_name() => {
                let kept = crate::service::store_fd(&self.store_name(), t.fd());
                crate::service::remove_fd(&store_name(&was));
                kept
            }
            (_, stored) => stored,
        };
        (self.tun, self.stored) = (tun, stored);
        if was.kernel_table != self.cfg.kernel_table {
            // Added in the new table first, then deleted from the old one.
            self.retired = Some(Retired {
                table: was.kernel_table,
                protocol: was.route_protocol,
                oif,
            });
        } else if was.route_protocol != self.cfg.route_protocol {
            // The same table: the route of the old protocol holds the place its successor
            // takes, so it goes first (the router sees a withdraw and an update).
            let retired = Retired {
                table: was.kernel_table,
                protocol: was.route_protocol,
                oif,
            };
            if let Err(e) = self.let_go(&retired) {
                log::warn!("route sink {}: {}", self.cfg.device, crate::errors::chain(&e));
            }
        }
    }

    fn routes(&self) -> Vec<super::RouteView> {
        let state = self.damper.held().unwrap_or(Announce::Withdrawn);
        let metric = match state {
            Announce::Announced => Some(self.cfg.metric),
            Announce::Demoted => self.cfg.demote_metric,
            Announce::Withdrawn => None,
        };
        let mut cause = self.count.map(|c| c.to_string()).unwrap_or_default();
        if let Some(want) = self.held_back {
            cause += &format!(
                "; {want} once that has held for the hold-down ({:?})",
                self.cfg.hold_down
            );
        }
        self.cfg
            .prefixes
            .iter()
            .map(|p| RouteView {
                prefix: p.to_string(),
                state,
                metric,
                changes: self.changes,
                last_change_unix_ms: self.last_change_unix_ms,
                cause: cause.clone(),
            })
            .collect()
    }
}

/// A sink dropped while the service manager keeps its device for it (a start that failed
/// after it took the device over, a daemon dropped without a stop) takes the device out of
/// the store: the routes go with this process rather than outlive it in the manager.
impl Drop for RouteSink {
    fn drop(&mut self) {
        if self.stored {
            crate::service::remove_fd(&self.store_name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stored_as;

    #[test]
    fn a_stored_name_says_its_device_table_and_protocol() {
        assert_eq!(
            stored_as("route-probed-vip.201.44", "probed-vip"),
            Some(Some((201, 44)))
        );
        // The name releases before 2026-12-07 stored: the device's, table and protocol unsaid.
        assert_eq!(stored_as("route-probed-vip", "probed-vip"), Some(None));
        for other in [
            "route-probed-vip2.201.44",
            "route-probed",
            "route-probed-vip.x.44",
            "nft-probed-vip",
        ] {
            assert_eq!(stored_as(other, "probed-vip"), None, "{other}");
        }
    }
}
