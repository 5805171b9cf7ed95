//! `POST /v1/endpoints/{profile}/{endpoint}/{enable|disable|always-serve}`: the operator's
//! override of an endpoint's admin state. It survives reloads that leave the endpoint's
//! configured state alone, and restarts (through the state file).
use crate::{
    daemon::{changes::ChangeKind, control::RequestError, runner::Runner, views::EndpointView},
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
