//! A new consumer joins the change stream: it gets the state of everything now and, from the
//! same instant, every later change. Both are taken on the runner's thread between two
//! changes, so nothing falls between the snapshot and the queue.
use crate::daemon::{
    changes::{Snapshot, Subscription},
    runner::Runner,
};

impl Runner {
    pub(in crate::daemon) fn subscribe(&mut self, name: &str, capacity: usize) -> (Snapshot, Subscription) {
        let snapshot = Snapshot {
            seq: self.changes.seq(),
            profiles: self
                .table
                .profiles
                .iter()
                .map(|p| (p.name.clone(), p.status, p.fail_open))
                .collect(),
            endpoints: self
                .table
                .profiles
                .iter()
                .flat_map(|p| p.owners.iter())
                .map(|id| {
                    let t = &self.table.targets[id];
                    (t.profile.clone(), t.name.clone(), t.state())
                })
                .collect(),
        };
        (snapshot, self.changes.subscribe(name, capacity))
    }
}
