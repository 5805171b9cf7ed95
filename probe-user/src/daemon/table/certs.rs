//! TLS checks' server certificates: when each endpoint's expires, as its probes last saw it,
//! and the one notice per certificate when it comes within the profile's `cert_warn_days`.
//! A certificate nearing its end changes no verdict; a renewed one (a new expiry, past the
//! warning) arms the notice again. Kept beside the targets, for TLS endpoints only: a fleet
//! of TCP checks carries nothing for it.
use std::sync::Arc;

use super::{OwnerId, Stamp, Table};
use crate::changes::{Change, ChangeKind, Notice};

/// An endpoint's certificate as last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CertSeen {
    /// Its `notAfter`, Unix seconds.
    pub not_after: i64,
    /// The expiries a notice went out for, newest first (`i64::MIN`: an empty place). An
    /// endpoint whose certificate flips between two (two servers behind one address, a staged
    /// renewal) is warned once for each, not at every flip (issue 46, L3).
    warned_for: [i64; WARNED_KEPT],
}

/// Expiries remembered per endpoint as warned for.
const WARNED_KEPT: usize = 4;

const DAY: i64 = 86_400;

/// Whether a certificate expiring at `not_after` is within `warn_days` of `now` (both Unix
/// seconds); `warn_days` 0 never warns.
pub(crate) fn within_warning(not_after: i64, now: i64, warn_days: u16) -> bool {
    warn_days > 0 && not_after - now < i64::from(warn_days) * DAY
}

/// Whole days from `now` to `not_after`, rounded down (negative once expired).
pub(crate) fn days_left(not_after: i64, now: i64) -> i64 {
    (not_after - now).div_euclid(DAY)
}

impl Table {
    /// Records that endpoint `id`'s probe saw a certificate expiring at `not_after`; returns
    /// the notice to publish when it has just come within its profile's `cert_warn_days`.
    pub fn record_cert(&mut self, id: OwnerId, not_after: i64, at: Stamp) -> Option<Change> {
        let t = self.targets.get(&id)?;
        let profile = &self.profiles[t.profile_ix as usize];
        let warn_days = profile.cfg.health.http().map_or(0, |h| h.cert_warn_days);
        let now = i64::try_from(at.unix_ms / 1000).unwrap_or(i64::MAX);
        let seen = self.certs.entry(id).or_insert(CertSeen {
            not_after,
            warned_for: [i64::MIN; WARNED_KEPT],
        });
        seen.not_after = not_after;
        if seen.warned_for.contains(&not_after) || !within_warning(not_after, now, warn_days) {
            return None;
        }
        seen.warned_for.rotate_right(1);
        seen.warned_for[0] = not_after;
        Some(Change::Notice(Notice {
            seq: 0,
            at_unix_ms: at.unix_ms,
            at_ns: at.ns,
            kind: ChangeKind::CertExpiring,
            profile: Arc::clone(&profile.name),
            endpoint: Arc::clone(t.name()),
            state: t.state(),
            cert_not_after: Some(not_after),
        }))
    }

    /// Endpoint `id`'s certificate as last seen, if it is a TLS check that got that far.
    pub fn cert_of(&self, id: OwnerId) -> Option<CertSeen> {
        self.certs.get(&id).copied()
    }

    /// Forgets the certificates of endpoints no longer in the table.
    pub(super) fn prune_certs(&mut self) {
        let targets = &self.targets;
        self.certs.retain(|id, _| targets.contains_key(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_starts_inside_the_window_and_zero_days_never_warn() {
        let now = 1_800_000_000;
        assert!(!within_warning(now + 15 * DAY, now, 14));
        assert!(!within_warning(now + 14 * DAY, now, 14));
        assert!(within_warning(now + 14 * DAY - 1, now, 14));
        assert!(within_warning(now - DAY, now, 14), "expired");
        assert!(!within_warning(now - DAY, now, 0));
        assert_eq!(days_left(now + 10 * DAY + 5, now), 10);
        assert_eq!(days_left(now - 1, now), -1);
    }
}
