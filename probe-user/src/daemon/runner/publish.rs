//! Where the changes the table returns enter the stream. The table (`table/restatus.rs`)
//! keeps each endpoint's status, eligibility and last change, its profile's aggregate and
//! fail-open, and the nested endpoints in step; the runner stamps the time, publishes, and
//! marks the state file dirty when a status moved.
use std::sync::Arc;

use super::Runner;
use crate::{
    changes::{ChangeKind, TransitionDetail},
    daemon::table::{Changed, OwnerId, Stamp},
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
