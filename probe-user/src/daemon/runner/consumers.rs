//! The change stream's consumers the runner starts with its first table, re-follows after
//! every reload and stops when it ends: the events file, the `[[sink]]`s and the DNS server
//! (with the regions it and `/v1/select` read). Each follows the stream as a typed
//! `Follower`. What can fail (a sink's structure, a new events file, a GeoIP database) is
//! done in `prepare_consumers`, before a configuration goes live: a reload that cannot use
//! them changes nothing.
use super::{sinks::PreparedSinks, Runner};
use crate::{
    changes::Follower,
    config::{Config, Dns},
    daemon::{
        events::{EventSink, EventWriter, QUEUE_CAPACITY},
        DaemonError,
    },
    dns::{regions::Regions, DnsServer},
};

/// The consumers running now.
#[derive(Default)]
pub(in crate::daemon) struct Consumers {
    pub(in crate::daemon) events: Option<EventWriter>,
    /// The `[[sink]]`s, each on its own thread, following its profile's changes.
    pub(in crate::daemon) sinks: Vec<crate::sinks::Running>,
    /// Where sources are, for geographic routing: `[[dns.region]]` and the GeoIP database;
    /// the DNS server and `/v1/select` share it.
    pub(in crate::daemon) regions: Regions,
    /// The DNS server and the `[dns]` settings it answers with (`dns.rs`).
    pub(in crate::daemon) dns: Option<(DnsServer, Dns)>,
}

/// What a configuration's consumers need that can fail, made before it goes live.
pub(in crate::daemon) struct Prepared {
    sinks: PreparedSinks,
    /// The events file, at the start, or when a reload names another.
    events: Option<EventSink>,
    regions: Regions,
}

impl Consumers {
    /// Ends them all, once the bus is gone (each takes what is queued first: a sink with
    /// `on_stop = "clear"` empties its structure then).
    pub(super) fn stop(&mut self) {
        if let Some(mut events) = self.events.take() {
            events.finish();
        }
        for sink in &mut self.sinks {
            sink.join();
        }
        if let Some((mut dns, _)) = self.dns.take() {
            dns.stop();
        }
    }
}

impl Runner {
    /// Opens what `config`'s consumers need: its sinks that are not running as they are, its
    /// events file when it is not the one written now, its regions.
    pub(in crate::daemon) fn prepare_consumers(&self, config: &Config) -> Result<Prepared, DaemonError> {
        let writing = self.consumers.events.as_ref().map(EventWriter::target);
        let events = (writing != Some(&config.daemon.events))
            .then(|| EventSink::open(&config.daemon.events))
            .transpose()?;
        Ok(Prepared {
            regions: super::dns::regions(config.dns.as_ref())?,
            sinks: self.prepare_sinks(&config.sinks)?,
            events,
        })
    }

    /// Starts the consumers of the first table: the sinks and the DNS server from a snapshot
    /// of it, the events file from the changes after it (it records changes, not the
    /// starting state).
    pub(super) fn start_consumers(&mut self, mut prepared: Prepared) -> Result<(), DaemonError> {
        self.consumers.regions = std::mem::take(&mut prepared.regions);
        let sinks = self.config.sinks.clone();
        self.start_sinks(&sinks, prepared.sinks);
        self.start_dns()?;
        if let Some(sink) = prepared.events {
            let events = self.changes.subscribe(Follower::Events, QUEUE_CAPACITY);
            self.consumers.events = Some(EventWriter::start(sink, events)?);
        }
        Ok(())
    }

    /// Before a reload's table goes live: the events file it names takes the changes from
    /// here on (the reload's own among them).
    pub(in crate::daemon) fn switch_events(&mut self, prepared: &mut Prepared) {
        if let (Some(sink), Some(writer)) = (prepared.events.take(), self.consumers.events.as_mut()) {
            writer.switch(sink, self.changes.seq());
        }
    }

    /// After a reload's table went live: the sinks it drops or changes stop, its new ones
    /// start, and the DNS server follows its zone from a fresh snapshot.
    pub(in crate::daemon) fn refollow_consumers(&mut self, config: &Config, prepared: Prepared) {
        self.start_sinks(&config.sinks, prepared.sinks);
        self.consumers.regions = prepared.regions;
        self.refollow_dns(config);
    }
}
