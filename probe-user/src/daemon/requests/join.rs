//! A consumer joins the change stream: it gets the state of everything now (if it asks) and,
//! from the same instant, every later change. Both are taken on the runner's thread between
//! two changes, so nothing falls between the snapshot and the queue.
use crate::changes::{Follower, Snapshot, Subscription};
use crate::daemon::{
    control::{Join, Joined},
    runner::Runner,
};

impl Runner {
    /// Subscribes each of `joins`, in order, at this one point of the stream.
    pub(in crate::daemon) fn join(&mut self, joins: Vec<Join>) -> Vec<Joined> {
        joins
            .into_iter()
            .map(|join| {
                let profile = join.profile.as_deref();
                let (snapshot, changes) = if join.snapshot {
                    self.subscribe_to(join.follower.clone(), join.capacity, profile)
                } else {
                    let snapshot = Snapshot {
                        seq: self.changes.seq(),
                        ..Snapshot::default()
                    };
                    (
                        snapshot,
                        self.changes.subscribe_to(join.follower.clone(), join.capacity, profile),
                    )
                };
                Joined {
                    follower: join.follower,
                    snapshot,
                    changes,
                }
            })
            .collect()
    }

    /// Every change from now on, with the state now (the runner's unit tests).
    #[cfg(test)]
    pub(in crate::daemon) fn subscribe(
        &mut self,
        follower: impl Into<Follower>,
        capacity: usize,
    ) -> (Snapshot, Subscription) {
        self.subscribe_to(follower, capacity, None)
    }

    /// As `subscribe`, for one profile's changes only (the snapshot then holds that profile).
    pub(in crate::daemon) fn subscribe_to(
        &mut self,
        follower: impl Into<Follower>,
        capacity: usize,
        profile: Option<&str>,
    ) -> (Snapshot, Subscription) {
        let wanted = |p: &str| profile.is_none_or(|want| want == p);
        let snapshot = Snapshot {
            seq: self.changes.seq(),
            profiles: self
                .table
                .profiles
                .iter()
                .filter(|p| wanted(&p.name))
                .map(|p| (p.name.clone(), p.status, p.fail_open))
                .collect(),
            endpoints: self
                .table
                .profiles
                .iter()
                .filter(|p| wanted(&p.name))
                .flat_map(|p| p.owners.iter().map(move |id| (p, id)))
                .map(|(p, id)| {
                    let t = &self.table.targets[id];
                    (p.name.clone(), t.name().clone(), t.state())
                })
                .chain(self.table.profiles.iter().filter(|p| wanted(&p.name)).flat_map(|p| {
                    let protocol = p.cfg.health.protocol();
                    p.nested
                        .iter()
                        .map(move |n| (p.name.clone(), n.name.clone(), n.state(protocol)))
                }))
                .collect(),
        };
        (snapshot, self.changes.subscribe_to(follower, capacity, profile))
    }
}
