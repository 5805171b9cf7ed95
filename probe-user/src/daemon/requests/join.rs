//! A consumer joins the change stream: it gets the state of everything now (if it asks) and,
//! from the same instant, every later change. Both are taken on the runner's thread between
//! two changes, so nothing falls between the snapshot and the queue.
use crate::{
    changes::{Join, Joined, Snapshot},
    daemon::{
        runner::Runner,
        table::{ProfileEntry, Table},
    },
};

impl Runner {
    /// Subscribes each of `joins`, in order, at this one point of the stream.
    pub(in crate::daemon) fn join(&mut self, joins: Vec<Join>) -> Vec<Joined> {
        let table = &self.table;
        self.changes.join(joins, |profile| state_of(table, profile))
    }

    /// Every change from now on, with the state now (the runner's unit tests).
    #[cfg(test)]
    pub(in crate::daemon) fn subscribe(
        &mut self,
        follower: impl Into<crate::changes::Follower>,
        capacity: usize,
    ) -> (Snapshot, crate::changes::Subscription) {
        let snapshot = Snapshot {
            seq: self.changes.seq(),
            ..state_of(&self.table, None)
        };
        (snapshot, self.changes.subscribe_to(follower, capacity, None))
    }
}

/// The state of every profile (or the one named) and its endpoints in `table`, for a snapshot.
fn state_of(table: &Table, profile: Option<&str>) -> Snapshot {
    let wanted = |p: &&ProfileEntry| profile.is_none_or(|want| want == &*p.name);
    let plain = table.profiles().iter().filter(wanted).flat_map(|p| {
        p.owners.iter().map(move |id| {
            let t = &table.targets()[id];
            (p.name.clone(), t.name().clone(), t.state())
        })
    });
    let nested = table.profiles().iter().filter(wanted).flat_map(|p| {
        let protocol = p.cfg.health.protocol();
        p.nested
            .iter()
            .map(move |n| (p.name.clone(), n.name.clone(), n.state(protocol)))
    });
    Snapshot {
        seq: 0,
        profiles: table
            .profiles()
            .iter()
            .filter(wanted)
            .map(|p| (p.name.clone(), p.status, p.fail_open))
            .collect(),
        endpoints: plain.chain(nested).collect(),
    }
}
