//! The runner's requests, one file per kind; the dispatch is the match below. Status and
//! selection are pure functions over the live table; the others change it.
mod admin;
mod fleet;
mod join;
mod metrics;
mod reload;
mod select;
mod status;

use super::{protocol::Command, runner::Runner};

impl Runner {
    /// The wall-clock time now, in Unix seconds, by the runner's clock.
    pub(crate) fn unix_now(&self) -> i64 {
        i64::try_from(self.ports.clock.unix_ms_at(self.now()) / 1000).unwrap_or(i64::MAX)
    }

    pub(crate) fn command(&mut self, cmd: Command) {
        // Scrapes and reloads see every result so far, under the profile indices they had.
        self.metrics.flush(self.table.profiles());
        match cmd {
            Command::Status(profile, page, reply) => {
                let mut views = status::profiles(&self.table, profile.as_deref(), page, self.unix_now());
                self.fill_cluster(views.iter_mut().flatten().flat_map(|p| p.endpoints.iter_mut()));
                self.fill_passive(views.iter_mut().flatten().flat_map(|p| p.endpoints.iter_mut()));
                let _ = reply.send(views);
            }
            Command::Endpoint(p, e, reply) => {
                let now = self.unix_now();
                let mut view = self
                    .locate(&p, &e)
                    .map(|id| status::endpoint_view(&self.table, id, now));
                self.fill_cluster(view.iter_mut());
                self.fill_passive(view.iter_mut());
                let _ = reply.send(view);
            }
            Command::Cluster(reply) => {
                let _ = reply.send(self.cluster_view().ok_or(super::protocol::RequestError::NoCluster));
            }
            Command::Select(p, query, regions, reply) => {
                let _ = reply.send(select::select(
                    &self.table,
                    &self.config,
                    &regions,
                    &mut self.rng,
                    &p,
                    query,
                ));
            }
            Command::SetAdmin(p, e, state, reply) => {
                let _ = reply.send(self.set_admin(&p, &e, state));
            }
            Command::SetProfileEnabled(p, enabled, reply) => {
                let _ = reply.send(self.set_profile_enabled(&p, enabled));
            }
            Command::Reload(request, reply) => {
                let _ = reply.send(self.reload(*request));
            }
            Command::Metrics(reply) => {
                let _ = reply.send(Ok(self.render_metrics()));
            }
            Command::Join(joins, reply) => {
                let _ = reply.send(Ok(self.join(joins)));
            }
            Command::Routes(routes) => self.cluster_routes(routes),
            Command::FleetLookup(profile, names, reply) => {
                let _ = reply.send(self.fleet_lookup(&profile, &names));
            }
            Command::Fleet(request, reply) => {
                let _ = reply.send(self.fleet_apply(*request));
            }
            Command::FleetCarry(reply) => {
                let _ = reply.send(Ok(self.fleet_carry()));
            }
            Command::FleetPage(profile, (offset, limit), reply) => {
                let _ = reply.send(self.fleet_page(&profile, offset, limit));
            }
        }
    }
}

/// The view of endpoint `endpoint` of profile "web", for the runner's unit tests.
#[cfg(test)]
pub(crate) fn status_view(runner: &Runner, endpoint: &str) -> super::views::EndpointView {
    status::endpoint(&runner.table, "web", endpoint, runner.unix_now()).expect("the endpoint exists")
}

#[cfg(test)]
pub(crate) fn profile_view_of(runner: &Runner, profile: &str) -> super::views::ProfileView {
    status::profiles(&runner.table, Some(profile), None, runner.unix_now())
        .expect("the profile exists")
        .remove(0)
}
