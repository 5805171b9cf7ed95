//! `POST /v1/endpoints/{profile}/{endpoint}/{enable|disable|always-serve}` and
//! `POST /v1/profiles/{profile}/{enable|disable}`: the operator's override of an endpoint's
//! admin state or of a profile's `enabled`. Each survives reloads that leave the configured
//! value alone, and restarts (through the state file).
use crate::{
    daemon::{
        changes::{Change, ChangeKind, ProfileChange},
        control::RequestError,
        runner::Runner,
        views::{EndpointView, ProfileView},
    },
    status::AdminState,
};

impl Runner {
    pub(in crate::daemon) fn set_admin(
        &mut self,
        profile: &str,
        endpoint: &str,
        state: AdminState,
    ) -> Result<EndpointView, RequestError> {
        let id = super::status::find(&self.table, profile, endpoint)?;
        let now = self.now();
        let t = self.table.targets.get_mut(&id).expect("found");
        let was = t.should_probe();
        t.set_admin(state);
        let is = t.should_probe();
        if was && !is {
            self.unregister(id);
        } else if !was && is {
            // SPEC: a re-enabled endpoint starts over in CheckingEndpoint.
            self.table.targets.get_mut(&id).expect("found").tracker.reset();
            self.register(id, now);
        }
        self.restatus(id, ChangeKind::Admin, now, None);
        self.persist.dirty = true;
        Ok(super::status::endpoint_view(&self.table, id))
    }
}

impl Runner {
    /// Enables or disables a whole profile: a disabled one probes nothing, its endpoints are
    /// Inactive and its name answers NXDOMAIN (SPEC 4); enabled again, they start over in
    /// CheckingEndpoint.
    pub(in crate::daemon) fn set_profile_enabled(
        &mut self,
        profile: &str,
        enabled: bool,
    ) -> Result<ProfileView, RequestError> {
        let (ix, _) = self
            .table
            .profile(profile)
            .ok_or_else(|| RequestError::NoProfile(profile.into()))?;
        let now = self.now();
        let entry = &mut self.table.profiles[ix];
        let before = (entry.status, entry.fail_open);
        entry.set_enabled(enabled);
        let owners = entry.owners.clone();
        for &id in &owners {
            let t = self.table.targets.get_mut(&id).expect("owners are targets");
            let was = t.should_probe();
            t.profile_enabled = enabled;
            let is = t.should_probe();
            if was && !is {
                self.unregister(id);
            } else if !was && is {
                self.table.targets.get_mut(&id).expect("found").tracker.reset();
                self.register(id, now);
            }
            self.restatus(id, ChangeKind::Admin, now, None);
        }
        for nix in 0..self.table.profiles[ix].nested.len() {
            self.renest(ix, nix, now);
        }
        // A profile without endpoints has no endpoint change to carry its own.
        let entry = &mut self.table.profiles[ix];
        if owners.is_empty() && entry.nested.is_empty() {
            entry.recount();
            if (entry.status, entry.fail_open) != before {
                let change = Change::Profile(ProfileChange {
                    seq: 0,
                    at_unix_ms: self.ports.clock.unix_ms(),
                    profile: entry.name.clone(),
                    from: Some(before.0),
                    to: Some(entry.status),
                    fail_open: entry.fail_open,
                });
                self.publish(change, now);
            }
        }
        // Its status stands for it in the profiles it is nested in.
        self.cascade(ix, now);
        self.persist.dirty = true;
        let sinks: Vec<_> = self.sinks.iter().map(crate::sinks::Running::view).collect();
        super::status::profiles(&self.table, &sinks, Some(profile))?
            .pop()
            .ok_or_else(|| RequestError::NoProfile(profile.into()))
    }
}
