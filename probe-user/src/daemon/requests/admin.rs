//! `POST /v1/endpoints/{profile}/{endpoint}/{enable|disable|always-serve}` and
//! `POST /v1/profiles/{profile}/{enable|disable}`: the operator's override of an endpoint's
//! admin state or of a profile's `enabled`. Each survives reloads that leave the configured
//! value alone, and restarts (through the state file).
use crate::changes::ChangeKind;
use crate::{
    daemon::{
        control::RequestError,
        runner::Runner,
        views::{EndpointView, ProfileView},
    },
    status::AdminState,
};

impl Runner {
    /// After an admin change of endpoint `id`, which was probed or not (`was`): its check is
    /// registered or removed to match; a re-enabled endpoint starts over in CheckingEndpoint
    /// (SPEC 4).
    fn reprobe(&mut self, id: crate::daemon::table::OwnerId, was: bool, now: u64) {
        let is = self.table.targets[&id].should_probe();
        if was && !is {
            self.unregister(id);
        } else if !was && is {
            self.table.targets.get_mut(&id).expect("found").tracker.reset();
            self.register(id, now);
        }
        // In a cluster: this node's vote follows (withdrawn while it does not probe).
        self.cluster_sync(id);
    }

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
        self.reprobe(id, was, now);
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
            self.reprobe(id, was, now);
            self.restatus(id, ChangeKind::Admin, now, None);
        }
        for nix in 0..self.table.profiles[ix].nested.len() {
            self.renest(ix, nix, now);
        }
        // A profile without endpoints has no endpoint change to carry its own.
        if owners.is_empty() && self.table.profiles[ix].nested.is_empty() {
            self.table.profiles[ix].recount();
            self.publish_profile(ix, before, now);
        }
        // Its status stands for it in the profiles it is nested in.
        self.cascade(ix, now);
        self.persist.dirty = true;
        let sinks: Vec<_> = self.sinks.iter().map(crate::sinks::Running::view).collect();
        super::status::profiles(&self.table, &sinks, Some(profile), None)?
            .pop()
            .ok_or_else(|| RequestError::NoProfile(profile.into()))
    }
}
