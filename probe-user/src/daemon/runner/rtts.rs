//! The round-trip times performance routing answers by, sent once a second on a watch channel
//! beside the change stream (a new time for every probe would flood it): only the latest
//! matters to the DNS server, which is the one that watches.
use super::Runner;
use crate::changes::Rtts;

impl Runner {
    /// Sends every performance-routed endpoint's last round-trip time, when anyone watches.
    pub(super) fn publish_rtts(&self) {
        if self.rtts.receiver_count() == 0 {
            return;
        }
        let targets = &self.table.targets();
        let rtts: Vec<_> = self
            .table
            .profiles()
            .iter()
            .filter(|p| p.cfg.routing.needs().rtts)
            .flat_map(|p| p.owners.iter().filter_map(|id| targets.get(id)).map(move |t| (p, t)))
            .map(|(p, t)| (p.name.clone(), t.name().clone(), t.last_rtt().get()))
            .collect();
        // None routes by them: nothing to send, and nothing to wake the watcher for.
        if rtts.is_empty() && self.rtts.borrow().is_empty() {
            return;
        }
        self.rtts.send_replace(Rtts::new(rtts));
    }

    /// The channel the round-trip times come on (the latest first).
    pub(in crate::daemon) fn watch_rtts(&self) -> tokio::sync::watch::Receiver<Rtts> {
        self.rtts.subscribe()
    }
}
