//! The DNS server: its sockets bound before the daemon probes (a taken port stops the start),
//! its zone built from the first table, rebuilt from a fresh snapshot after every reload, and
//! kept current by the change stream and the runner's round-trip times.
use tokio::sync::watch;

use super::take_joined;
use crate::{
    changes::{Follower, Join, Joined, Rtts, Snapshot},
    config::{Config, Dns},
    daemon::DaemonError,
    dns::{
        regions::{load_db, GeoDbError, Regions},
        server::{set_rtts, Bound},
        shared::Counters,
        DnsServer, Zone,
    },
};

/// Like a sink's queue: one change per endpoint at most, far beyond any zone.
const DNS_QUEUE: usize = 1 << 20;

/// The regions of `dns`, its GeoIP database read; the error names the file.
pub(super) fn regions(dns: Option<&Dns>) -> Result<Regions, GeoDbError> {
    let Some(dns) = dns else {
        return Ok(Regions::default());
    };
    let db = dns.geoip_db.as_deref().map(load_db).transpose()?;
    Ok(Regions::new(&dns.regions, db))
}

/// Binds the server's sockets when the configuration has `[dns]`.
pub(super) fn bind(config: &Config) -> Result<Option<Bound>, DaemonError> {
    config
        .dns
        .as_ref()
        .map(|dns| DnsServer::bind(&dns.listen).map_err(DaemonError::Dns))
        .transpose()
}

/// How the zone joins the stream: from the state of every profile.
pub(super) fn join() -> Join {
    Join {
        follower: Follower::Dns,
        capacity: DNS_QUEUE,
        profile: None,
        snapshot: true,
    }
}

/// The running server and what it answers with.
pub(super) struct Serving {
    server: DnsServer,
    /// The `[dns]` settings in use (its listening addresses are the start's).
    settings: Dns,
    rtts: watch::Receiver<Rtts>,
}

impl Serving {
    /// Starts answering on `bound` from `config`'s zone as `joined` found it.
    pub(super) fn start(
        bound: Bound,
        config: &Config,
        regions: &Regions,
        joined: &mut Vec<Joined>,
        rtts: watch::Receiver<Rtts>,
    ) -> Result<Serving, DaemonError> {
        let settings = config.dns.clone().expect("bound only for a [dns]");
        let joined = take_joined(joined, &Follower::Dns).ok_or(DaemonError::Stopped)?;
        let zone = zone(config, &settings, regions, &joined.snapshot, &rtts);
        let server = DnsServer::start(bound, zone, joined.changes, rtts.clone()).map_err(DaemonError::Dns)?;
        Ok(Serving { server, settings, rtts })
    }

    /// After a reload: the zone as `config` has it, from `joined`. Listening addresses stay as
    /// they were (a restart applies them, and `[dns]` added or removed).
    pub(super) fn refollow(&mut self, config: &Config, regions: &Regions, joined: &mut Vec<Joined>) {
        let Some(joined) = take_joined(joined, &Follower::Dns) else {
            return;
        };
        let mut settings = config.dns.clone().unwrap_or_else(|| self.settings.clone());
        settings.listen.clone_from(&self.settings.listen);
        let zone = zone(config, &settings, regions, &joined.snapshot, &self.rtts);
        self.server.follow(zone, joined.changes);
        self.settings = settings;
    }

    pub(super) fn counters(&self) -> &Counters {
        self.server.counters()
    }

    pub(super) fn stop(&mut self) {
        self.server.stop();
    }
}

/// The zone of `config` at `snapshot`, with the latest round-trip times.
fn zone(config: &Config, dns: &Dns, regions: &Regions, snapshot: &Snapshot, rtts: &watch::Receiver<Rtts>) -> Zone {
    let serial = u32::try_from(crate::clock::unix_ms() / 1000).unwrap_or(u32::MAX);
    let mut zone = Zone::build(config, dns, regions.clone(), snapshot, serial);
    set_rtts(&mut zone, &rtts.borrow());
    zone
}
