//! `POST /v1/endpoints/{profile}/{endpoint}/{enable|disable|always-serve|drain}` and
//! `POST /v1/profiles/{profile}/{enable|disable}`: the operator's override of an endpoint's
//! admin state or of a profile's `enabled`. Each survives reloads that leave the configured
//! value alone, and restarts (through the state file).
use crate::changes::ChangeKind;
use crate::{
    daemon::{
        protocol::RequestError,
        runner::Runner,
        table::{OwnerId, Probed},
        views::{EndpointView, ProfileView},
    },
    status::AdminState,
};

impl Runner {
    /// After an admin change of endpoint `id`: its check is registered or removed to match
    /// (a re-enabled endpoint starts over in CheckingEndpoint: `Table::set_admin`).
    fn reprobe(&mut self, id: OwnerId, Probed { was, is }: Probed, now: u64) {
        if was && !is {
            self.unregister(id);
        } else if !was && is {
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
        let id = self.locate(profile, endpoint)?;
        let now = self.now();
        let probing = self.table.set_admin(id, state);
        self.reprobe(id, probing, now);
        self.restatus(id, ChangeKind::Admin, now, None);
        self.persist.dirty = true;
        Ok(super::status::endpoint_view(&self.table, id, self.unix_now()))
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
        let entry = &self.table.profiles[ix];
        let before = (entry.status, entry.fail_open);
        let owners = self.table.set_profile_enabled(ix, enabled);
        let no_owners = owners.is_empty();
        for (id, probing) in owners {
            self.reprobe(id, probing, now);
            self.restatus(id, ChangeKind::Admin, now, None);
        }
        for nix in 0..self.table.profiles[ix].nested.len() {
            self.renest(ix, nix, now);
        }
        // A profile without endpoints has no endpoint change to carry its own.
        if no_owners && self.table.profiles[ix].nested.is_empty() {
            self.publish_profile(ix, before, now);
        }
        // Its status stands for it in the profiles it is nested in.
        self.cascade(ix, now);
        self.persist.dirty = true;
        super::status::profiles(&self.table, Some(profile), None, self.unix_now())?
            .pop()
            .ok_or_else(|| RequestError::NoProfile(profile.into()))
    }
}
