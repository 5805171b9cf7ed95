//! `POST /v1/endpoints/{profile}/{endpoint}/{enable|disable|always-serve|drain}` and
//! `POST /v1/profiles/{profile}/{enable|disable}`: the operator's override of an endpoint's
//! admin state or of a profile's `enabled`. Each survives reloads that leave the configured
//! value alone, and restarts (through the state file).
use crate::{
    daemon::{
        protocol::RequestError,
        runner::Runner,
        table::{Probed, Unsettled},
        views::{EndpointView, ProfileView},
    },
    status::AdminState,
};

impl Runner {
    /// After an admin change: each endpoint's check is registered or removed to match (a
    /// re-enabled endpoint starts over in CheckingEndpoint: `Table::set_admin`), then the
    /// table settles the statuses and what moved is published.
    fn reprobe(&mut self, unsettled: Unsettled, now: u64) {
        for &(id, Probed { was, is }) in &unsettled.probing {
            if was && !is {
                self.unregister(id);
            } else if !was && is {
                self.register(id, now);
            }
            // In a cluster: this node's vote follows (withdrawn while it does not probe).
            self.cluster_sync(id);
        }
        let changed = self.table.settle(unsettled, self.stamp(now));
        self.publish(changed);
    }

    pub(in crate::daemon) fn set_admin(
        &mut self,
        profile: &str,
        endpoint: &str,
        state: AdminState,
    ) -> Result<EndpointView, RequestError> {
        let id = self.locate(profile, endpoint)?;
        let now = self.now();
        let unsettled = self.table.set_admin(id, state);
        self.reprobe(unsettled, now);
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
        let unsettled = self.table.set_profile_enabled(ix, enabled);
        self.reprobe(unsettled, now);
        self.persist.dirty = true;
        super::status::profiles(&self.table, Some(profile), None, self.unix_now())?
            .pop()
            .ok_or_else(|| RequestError::NoProfile(profile.into()))
    }
}
