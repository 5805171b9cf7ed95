//! Where the changes the table returns enter the stream. The table (`table/restatus.rs`)
//! keeps each endpoint's status, eligibility and last change, its profile's aggregate and
//! fail-open, and the nested endpoints in step; the runner stamps the time, publishes, and
//! marks the state file dirty when a status moved.
use std::sync::Arc;

use super::Runner;
use crate::{
    changes::{ChangeKind, TransitionDetail},
    daemon::table::{Changed, OwnerId, Probed, Stamp, Unsettled},
};

impl Runner {
    /// The stamp of a change at `at_ns` (the runner's clock).
    pub(in crate::daemon) fn stamp(&self, at_ns: u64) -> Stamp {
        Stamp {
            ns: at_ns,
            unix_ms: self.ports.clock.unix_ms_at(at_ns),
        }
    }

    /// Publishes what the table says changed, in its order.
    pub(in crate::daemon) fn publish(&mut self, changed: Changed) {
        if changed.moved {
            self.persist.dirty = true;
        }
        if changed.changes.is_empty() {
            return;
        }
        let now = self.now();
        for change in changed.changes {
            self.changes.publish_next(change, now);
        }
    }

    /// Finishes an admin, profile or share change the table made: each endpoint's check is
    /// registered or removed to match (one probed again starts over, or from the cluster's
    /// verdict when it was taken over), this node's vote follows (withdrawn while it does not
    /// probe), then the table settles the statuses and what moved is published.
    pub(in crate::daemon) fn follow_table(&mut self, unsettled: Unsettled, now: u64) {
        for &(id, Probed { was, is }) in &unsettled.probing {
            if was && !is {
                self.unregister(id);
            } else if !was && is {
                self.register(id, now);
            }
            self.cluster_sync(id);
        }
        let changed = self.table.settle(unsettled, self.stamp(now));
        self.publish(changed);
    }

    /// Brings endpoint `id` up to date after its health, admin state or share changed (at
    /// `at_ns`), and publishes what changed (`Table::restatus`).
    pub(in crate::daemon) fn restatus(
        &mut self,
        id: OwnerId,
        kind: ChangeKind,
        at_ns: u64,
        detail: Option<Arc<TransitionDetail>>,
    ) {
        let changed = self.table.restatus(id, kind, self.stamp(at_ns), detail);
        self.publish(changed);
    }
}
