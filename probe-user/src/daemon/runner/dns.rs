//! The runner's DNS server: started with the first table (its sockets bound before probing
//! starts, so a taken port stops the start), handed a fresh zone and stream after every reload,
//! and sent the endpoints' round-trip times once a second when a profile routes by them.
use super::Runner;
use crate::{
    changes::Follower,
    config::{Config, Dns},
    daemon::DaemonError,
    dns::{
        regions::{load_db, Regions},
        DnsServer, Zone,
    },
};

/// The regions of `dns`, its GeoIP database read; the error names the file.
pub(in crate::daemon) fn regions(dns: Option<&Dns>) -> Result<Regions, crate::dns::regions::GeoDbError> {
    let Some(dns) = dns else {
        return Ok(Regions::default());
    };
    let db = dns.geoip_db.as_deref().map(load_db).transpose()?;
    Ok(Regions::new(&dns.regions, db))
}

/// Like a sink's queue: one change per endpoint at most, far beyond any zone.
const DNS_QUEUE: usize = 1 << 20;

impl Runner {
    /// Starts the server when the configuration has `[dns]`.
    pub(in crate::daemon) fn start_dns(&mut self) -> Result<(), DaemonError> {
        let Some(dns) = self.config.dns.clone() else {
            return Ok(());
        };
        // The zone is built from the running config's profiles, lent out for the call (which
        // needs the runner mutably) rather than copied: at a million endpoints a copy is
        // ~150 MB at the start, when memory peaks.
        let mut lent = self.config.without_profiles();
        lent.profiles = std::mem::take(&mut self.config.profiles);
        let (zone, changes) = self.zone_now(&lent, &dns);
        self.config.profiles = lent.profiles;
        let server = DnsServer::start(&dns.listen, zone, changes).map_err(DaemonError::Dns)?;
        self.consumers.dns = Some((server, dns));
        Ok(())
    }

    /// After a reload: the zone as `config` has it, following the stream from now. Listening
    /// addresses stay as they were (a restart applies them, and `[dns]` added or removed).
    pub(in crate::daemon) fn refollow_dns(&mut self, config: &Config) {
        let Some((_, running)) = &self.consumers.dns else {
            return;
        };
        let mut dns = config.dns.clone().unwrap_or_else(|| running.clone());
        dns.listen.clone_from(&running.listen);
        self.changes.close(&Follower::Dns);
        let (zone, changes) = self.zone_now(config, &dns);
        if let Some((server, settings)) = &mut self.consumers.dns {
            server.follow(zone, changes);
            *settings = dns;
        }
    }

    /// The zone now and the stream of every change after it.
    fn zone_now(&mut self, config: &Config, dns: &Dns) -> (Zone, crate::changes::Subscription) {
        let (snapshot, changes) = self.subscribe(Follower::Dns, DNS_QUEUE);
        let serial = u32::try_from(self.ports.clock.unix_ms() / 1000).unwrap_or(u32::MAX);
        let mut zone = Zone::build(config, dns, self.consumers.regions.clone(), &snapshot, serial);
        for p in &self.table.profiles {
            for t in p.owners.iter().filter_map(|id| self.table.targets.get(id)) {
                zone.set_rtt(&p.name, t.name(), t.last_rtt().get());
            }
        }
        (zone, changes)
    }

    /// Sends the round-trip times performance routing needs (called once a second).
    pub(super) fn push_dns_rtts(&self) {
        let Some((server, _)) = &self.consumers.dns else {
            return;
        };
        if !server.wants_rtts() {
            return;
        }
        let targets = &self.table.targets;
        let rtts = self
            .table
            .profiles
            .iter()
            .filter(|p| p.cfg.routing == crate::status::Routing::Performance)
            .flat_map(|p| p.owners.iter().filter_map(|id| targets.get(id)).map(move |t| (p, t)))
            .map(|(p, t)| (p.name.clone(), t.name().clone(), t.last_rtt().get()))
            .collect();
        server.set_rtts(rtts);
    }
}
