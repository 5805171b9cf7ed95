//! Where the changes the table returns enter the stream. The table (`table/restatus.rs`)
//! keeps each endpoint's status, eligibility and last change, its profile's aggregate and
//! fail-open, and the nested endpoints in step; the runner stamps the time, publishes, and
//! marks the state file dirty when a status moved.
use std::sync::Arc;

use super::Runner;
use crate::{
    changes::{ChangeKind, TransitionDetail},
    daemon::table::{Changed, OwnerId, Stamp},
    status::ProfileStatus,
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

    /// Profile `child`'s endpoints changed: the nested endpoints that stand for it catch up.
    pub(in crate::daemon) fn cascade(&mut self, child: usize, at_ns: u64) {
        let changed = self.table.cascade(child, self.stamp(at_ns));
        self.publish(changed);
    }

    /// Brings nested endpoint `nix` of profile `pix` up to date and publishes what changed.
    pub(in crate::daemon) fn renest(&mut self, pix: usize, nix: usize, at_ns: u64) {
        let changed = self.table.renest(pix, nix, self.stamp(at_ns));
        self.publish(changed);
    }

    /// Publishes profile `pix`'s status and fail-open if they differ from `before`.
    pub(in crate::daemon) fn publish_profile(&mut self, pix: usize, before: (ProfileStatus, bool), at_ns: u64) {
        if let Some(change) = self.table.profile_change(pix, before, self.stamp(at_ns)) {
            self.publish(Changed {
                changes: vec![change],
                moved: false,
            });
        }
    }
}
