//! `POST /v1/endpoints/{profile}/{endpoint}/{enable|disable|always-serve|drain}` and
//! `POST /v1/profiles/{profile}/{enable|disable}`: the operator's override of an endpoint's
//! admin state or of a profile's `enabled`. Each survives reloads that leave the configured
//! value alone, and restarts (through the state file).
use crate::{
    daemon::{
        protocol::RequestError,
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
        let id = self.locate(profile, endpoint)?;
        let now = self.now();
        let unsettled = self.table.set_admin(id, state);
        self.follow_table(unsettled, now);
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
        self.follow_table(unsettled, now);
        self.persist.dirty = true;
        super::status::profiles(&self.table, Some(profile), None, self.unix_now())?
            .pop()
            .ok_or_else(|| RequestError::NoProfile(profile.into()))
    }
}
