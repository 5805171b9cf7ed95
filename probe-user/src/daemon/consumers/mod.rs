//! What follows the change stream on the daemon's behalf: the events file, the `[[sink]]`s
//! and the DNS server (with the regions it and `/v1/select` place sources by). They are not
//! the runner's. `Daemon::start` prepares them and has them join the runner's first table;
//! `Control` re-follows them after each reload and stops them after the runner. Each joins as
//! a typed `Follower` (`changes::Join`). What can fail (a sink's structure, a new events file,
//! a GeoIP database, the DNS sockets) is done in `prepare`, before a configuration goes live:
//! a start or a reload that cannot use them changes nothing.
//!
//! A new consumer is a file here: how it is prepared, how it joins, how it starts, follows a
//! reload and stops.
mod dns;
pub mod events;
mod metrics;
mod sinks;

pub(super) use sinks::Announce;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use tokio::sync::watch;

use events::{EventSink, EventWriter, QUEUE_CAPACITY};

use super::{
    protocol::{ReloadRequest, Reloaded},
    views::ProfileView,
    DaemonError,
};
use crate::{
    changes::{Follower, Join, Joined, Rtts},
    config::Config,
    dns::{regions::Regions, server::Bound},
    sinks::{Running, SinkView},
};

/// The consumers running now.
#[derive(Default)]
pub(crate) struct Consumers {
    events: Option<EventWriter>,
    /// Each on its own thread, following its profile's changes.
    sinks: Vec<Running>,
    /// Where sources are, for geographic routing: `[[dns.region]]` and the GeoIP database.
    regions: Arc<Regions>,
    dns: Option<dns::Serving>,
    /// The sinks' and the DNS server's metrics, set when scraped.
    metrics: crate::metrics::Registry,
    /// What the route sinks announce, told to the runner for the cluster's gossip.
    route_report: Option<crate::sinks::RouteReport>,
}

/// What a configuration's consumers need that can fail, made before it goes live.
pub(crate) struct Prepared {
    sinks: sinks::PreparedSinks,
    /// The events file, at the start, or when a reload names another.
    events: Option<EventSink>,
    regions: Regions,
    /// The DNS server's sockets, at the start (a reload cannot move them).
    dns: Option<Bound>,
}

/// The joined start of `follower`, taken out of `joined`.
fn take_joined(joined: &mut Vec<Joined>, follower: &Follower) -> Option<Joined> {
    let at = joined.iter().position(|j| j.follower == *follower)?;
    Some(joined.swap_remove(at))
}

fn events_join() -> Join {
    Join {
        follower: Follower::Events,
        capacity: QUEUE_CAPACITY,
        profile: None,
        snapshot: false,
    }
}

impl Consumers {
    /// What `config`'s consumers need at the start: every sink, the events file, the regions
    /// and the DNS server's sockets.
    pub(crate) fn prepare_start(config: &Config) -> Result<Prepared, DaemonError> {
        let mut prepared = Consumers::default().prepare(config)?;
        prepared.dns = dns::bind(config)?;
        Ok(prepared)
    }

    /// How the prepared consumers join the first table: the sinks and the zone from its
    /// state, the events file from the changes after it (it records changes, not the
    /// starting state).
    pub(crate) fn start_joins(prepared: &Prepared) -> Vec<Join> {
        let events = prepared.events.as_ref().map(|_| events_join());
        let dns = prepared.dns.as_ref().map(|_| dns::join());
        events.into_iter().chain(dns).chain(prepared.sinks.joins()).collect()
    }

    /// Starts them from what they joined with.
    pub(crate) fn start(
        config: &Config,
        prepared: Prepared,
        mut joined: Vec<Joined>,
        (rtts, announce): (watch::Receiver<Rtts>, Announce),
    ) -> Result<Consumers, DaemonError> {
        let mut consumers = Consumers {
            regions: Arc::new(prepared.regions),
            route_report: Some(sinks::RouteBoard::report_to(announce)),
            ..Consumers::default()
        };
        if let Some(bound) = prepared.dns {
            consumers.dns = Some(dns::Serving::start(
                bound,
                config,
                &consumers.regions,
                &mut joined,
                rtts,
            )?);
        }
        if let (Some(sink), Some(j)) = (prepared.events, take_joined(&mut joined, &Follower::Events)) {
            consumers.events = Some(EventWriter::start(sink, j.changes)?);
        }
        prepared.sinks.start(
            &mut consumers.sinks,
            &mut joined,
            consumers.route_report.as_ref(),
            sinks::Handed::new(),
        );
        Ok(consumers)
    }

    /// Opens what `config`'s consumers need: its sinks that are not running as they are, its
    /// events file when it is not the one written now, its regions.
    pub(crate) fn prepare(&self, config: &Config) -> Result<Prepared, DaemonError> {
        let writing = self.events.as_ref().map(EventWriter::target);
        let events = (writing != Some(&config.daemon.events))
            .then(|| EventSink::open(&config.daemon.events))
            .transpose()?;
        Ok(Prepared {
            regions: dns::regions(config.dns.as_ref())?,
            sinks: sinks::prepare(&self.sinks, &config.sinks, &config.daemon.pin_dir)?,
            events,
            dns: None,
        })
    }

    /// How they follow a reload to `config`: the events file it moves joins before its
    /// changes; the sinks it adds or changes and the zone join its table; the sinks it drops
    /// end with it.
    pub(crate) fn reload_joins(&self, config: &Arc<Config>, prepared: &Prepared) -> ReloadRequest {
        let moved = self.events.is_some() && prepared.events.is_some();
        ReloadRequest {
            config: config.clone(),
            before: moved.then(events_join).into_iter().collect(),
            after: prepared
                .sinks
                .joins()
                .chain(self.dns.as_ref().map(|_| dns::join()))
                .collect(),
            close: sinks::gone(&self.sinks, &config.sinks),
            fleet: Vec::new(),
        }
    }

    /// Before the runner applies a reload to `config` (`yes`), or after it refused it: the
    /// sinks it changes but whose structure stays hand over to their successors instead of
    /// clearing (`sinks::mark_handovers`).
    pub(crate) fn mark_handovers(&self, config: &Config, yes: bool) {
        sinks::mark_handovers(&self.sinks, &config.sinks, yes);
    }

    /// After the runner applied the reload: each consumer goes on from where it joined.
    pub(crate) fn refollow(&mut self, config: Arc<Config>, prepared: Prepared, reloaded: Reloaded) {
        let Reloaded {
            mut before, mut after, ..
        } = reloaded;
        if let Some(sink) = prepared.events {
            self.switch_events(sink, std::mem::take(&mut before));
        }
        let handed = sinks::stop_unwanted(&mut self.sinks, &config.sinks);
        prepared
            .sinks
            .start(&mut self.sinks, &mut after, self.route_report.as_ref(), handed);
        self.regions = Arc::new(prepared.regions);
        if let Some(dns) = &mut self.dns {
            dns.refollow(&config, &self.regions, &mut after);
        }
    }

    /// Whether a DNS zone is served (it is built from the configuration's endpoints).
    pub(crate) fn serves_dns(&self) -> bool {
        self.dns.is_some()
    }

    /// How the DNS zone joins the stream again, if one is served.
    pub(crate) fn dns_join(&self) -> Option<Join> {
        self.dns.as_ref().map(|_| dns::join())
    }

    /// The DNS zone rebuilt from `config` (a fleet batch changed its endpoints) and what it
    /// joined with.
    pub(crate) fn refollow_dns(&mut self, config: &Config, mut joined: Vec<Joined>) {
        if let Some(dns) = &mut self.dns {
            dns.refollow(config, &self.regions, &mut joined);
        }
    }

    /// SIGUSR1: the events file was moved away (logrotate). Opens it afresh at its path, and
    /// says how the writer joins again (None: there is no writer).
    pub(crate) fn reopen_events(&self) -> Result<Option<(EventSink, Join)>, DaemonError> {
        let Some(writer) = &self.events else {
            return Ok(None);
        };
        Ok(Some((EventSink::open(writer.target())?, events_join())))
    }

    /// The events go to `sink` from where the writer joined again; what was queued before
    /// that goes to the file it had.
    pub(crate) fn switch_events(&mut self, sink: EventSink, mut joined: Vec<Joined>) {
        if let (Some(writer), Some(j)) = (&mut self.events, take_joined(&mut joined, &Follower::Events)) {
            writer.switch(sink, j.changes);
        }
    }

    /// Adds to each profile's view the sinks that follow it.
    pub(crate) fn fill_sinks(&self, views: &mut [ProfileView]) {
        for view in views {
            view.sinks = self
                .sinks
                .iter()
                .filter(|s| s.cfg.profile == view.name)
                .map(Running::view)
                .collect();
        }
    }

    pub(crate) fn sink_views(&self) -> Vec<SinkView> {
        self.sinks.iter().map(Running::view).collect()
    }

    pub(crate) fn regions(&self) -> Arc<Regions> {
        self.regions.clone()
    }

    /// Ends them all, once the runner has stopped (so every stream has ended): each takes
    /// what is queued first (a sink with `on_stop = "clear"` empties its structure then).
    pub(crate) fn stop(&mut self) {
        if let Some(mut events) = self.events.take() {
            events.finish();
        }
        for sink in &mut self.sinks {
            sink.join();
        }
        self.sinks.clear();
        if let Some(mut dns) = self.dns.take() {
            dns.stop();
        }
    }
}
