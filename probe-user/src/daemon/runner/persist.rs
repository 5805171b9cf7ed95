//! The state file: a snapshot of every endpoint's health, admin override and last change,
//! taken by the runner and written by the saver's thread. At large tables the snapshot is
//! taken a slice per loop turn: copying 500k endpoints at once held the runner up for a
//! tenth of a second, and every probe due meanwhile left late.
use super::Runner;
use crate::daemon::{
    state::{self, SavedTarget},
    table::{Table, Target},
};

/// The state file is rewritten at most this often while changes happen...
const SAVE_EVERY_NS: u64 = 1_000_000_000;
/// ...and at most once per this much time per target: a rewrite costs the runner a snapshot
/// and the saver's thread a serialisation of every target, which at a million targets once a
/// second was 15% of the daemon's CPU (`cargo xtask bench million --perf`).
const SAVE_GAP_PER_TARGET_NS: u64 = 10_000;
/// Endpoints copied into a snapshot per loop turn (about a millisecond of the runner's time,
/// and ~0.5 MB while it waits for the saver).
const SNAPSHOT_SLICE: usize = 4096;

/// The shortest time between two rewrites of the state file for a table of `targets`: one
/// second up to 100k targets, then growing with the table (10 s at 1M). The file serves
/// restarts; what a crash loses in between is health the next probes find again.
pub(super) fn save_gap_ns(targets: usize) -> u64 {
    SAVE_EVERY_NS.max((targets as u64).saturating_mul(SAVE_GAP_PER_TARGET_NS))
}

/// The state file: rewritten by the saver's thread at most once per `save_gap_ns`.
pub(in crate::daemon) struct Persist {
    /// Something the file holds changed since the snapshot being taken (or the last one).
    pub(in crate::daemon) dirty: bool,
    last_save_ns: u64,
    pub(super) saver: state::Saver,
    /// The snapshot being taken, when one is.
    taking: Option<Snapshot>,
    /// The number of the last snapshot started.
    snapshots: u64,
}

impl Persist {
    pub(super) fn new() -> Self {
        Self {
            dirty: false,
            last_save_ns: 0,
            saver: state::Saver::new(),
            taking: None,
            snapshots: 0,
        }
    }

    /// The table was replaced: a snapshot half taken from the old one is dropped (the saver
    /// drops its file when the next begins), and the new one is saved.
    pub(super) fn table_replaced(&mut self) {
        self.taking = None;
        self.dirty = true;
    }
}

/// A snapshot in progress: where the next slice starts in the table's profile order, and a
/// part the saver had no room for yet.
#[derive(Default)]
pub(super) struct Snapshot {
    id: u64,
    profile: usize,
    pos: usize,
    /// Nothing handed over yet: the next part opens the file.
    first: bool,
    held: Option<state::Part>,
}

impl Snapshot {
    pub(super) fn new(id: u64) -> Self {
        Self {
            id,
            first: true,
            ..Self::default()
        }
    }

    /// Copies up to `most` more endpoints into `into`; true when every endpoint of `table`
    /// is in.
    pub(super) fn take(&mut self, table: &Table, most: usize, into: &mut Vec<SavedTarget>) -> bool {
        let mut n = 0;
        while let Some(p) = table.profiles().get(self.profile) {
            while let Some(id) = p.owners.get(self.pos) {
                if n == most {
                    return false;
                }
                n += 1;
                self.pos += 1;
                if let Some(t) = table.targets().get(id) {
                    into.push(saved(&p.name, t));
                }
            }
            self.profile += 1;
            self.pos = 0;
        }
        true
    }
}

fn saved(profile: &std::sync::Arc<str>, t: &Target) -> SavedTarget {
    SavedTarget {
        profile: profile.clone(),
        endpoint: t.name().clone(),
        check: t.spec().key().fingerprint(),
        subject: Some(t.spec().subject().fingerprint()),
        health: t.health(),
        admin_override: t.admin_override(),
        last_change: t.last_change().cloned(),
    }
}

impl Runner {
    /// Starts a snapshot when something changed and the gap since the last has passed, then
    /// copies its next slice and hands it to the saver, which streams it into the file (a
    /// slice per loop turn; none while the saver has no room). `force` (at shutdown) starts
    /// over and takes everything unsaved whole, now.
    pub(super) fn save_if_due(&mut self, force: bool) {
        let now = self.now();
        let p = &mut self.persist;
        if force && p.taking.take().is_some() {
            p.dirty = true;
        }
        if p.taking.is_none() {
            let gap = save_gap_ns(self.table.targets().len());
            if !p.dirty || (!force && now.saturating_sub(p.last_save_ns) < gap) {
                return;
            }
            // A change from here on may miss the copy: it marks the next snapshot due.
            p.dirty = false;
            p.last_save_ns = now;
            p.snapshots += 1;
            p.taking = Some(Snapshot::new(p.snapshots));
        }
        let snapshot = p.taking.as_mut().expect("set above");
        let part = match snapshot.held.take() {
            Some(part) => part,
            None => {
                let most = if force { usize::MAX } else { SNAPSHOT_SLICE };
                let mut targets = Vec::with_capacity(most.min(self.table.targets().len()));
                let done = snapshot.take(&self.table, most, &mut targets);
                let open = std::mem::take(&mut snapshot.first)
                    .then(|| (self.config.daemon.state_file.clone(), self.ports.clock.unix_ms()));
                let close = done.then(|| {
                    self.table
                        .profiles()
                        .iter()
                        .filter_map(|p| {
                            p.enabled_override.map(|enabled| state::SavedProfile {
                                profile: p.name.to_string(),
                                enabled,
                            })
                        })
                        .collect()
                });
                state::Part {
                    snapshot: snapshot.id,
                    open,
                    targets,
                    close,
                }
            }
        };
        let last = part.close.is_some();
        if force {
            p.saver.send(part);
        } else if let Err(part) = p.saver.offer(part) {
            snapshot.held = Some(part);
            return;
        }
        if last {
            p.taking = None;
        }
    }
}
