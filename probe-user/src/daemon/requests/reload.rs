//! `POST /v1/reload` and SIGHUP, on the runner's side: a new configuration applies whole or not
//! at all. Everything that can fail here (building the table, starting the L4 engine) happens
//! before anything changes; what the consumers need was made by `Control` before it asked.
use crate::{
    config::Config,
    daemon::{
        protocol::{ReloadRequest, Reloaded, RequestError},
        runner::{first_l4, FirstL4, Runner},
        state::Saved,
        table,
        views::ReloadReport,
    },
};

impl Runner {
    pub(in crate::daemon) fn reload(&mut self, request: ReloadRequest) -> Result<Reloaded, RequestError> {
        let ReloadRequest {
            config,
            before,
            after,
            close,
            fleet,
        } = request;
        let restart_needed = restart_needed(&self.config, &config, self.probe.l4.port.is_some());
        let mut next_owner = self.next_owner;
        let plan = table::plan(
            &config,
            Some(&self.config),
            &self.table,
            &Saved::default(),
            &mut next_owner,
        )
        .map_err(|e| RequestError::Refused(e.to_string()))?;
        let report = ReloadReport {
            kept: plan.kept,
            added: plan.added,
            removed: plan.removed,
            restart_needed,
        };
        // The engine must run before the table goes live; if it cannot, nothing changes.
        let first = match self.probe.l4.port {
            Some(_) => FirstL4::None,
            None => first_l4(
                plan.built()
                    .chain(self.table.targets().values().map(|t| &**t))
                    .map(|t| &**t.spec()),
                &config,
            ),
        };
        self.ensure_l4(&config, first)
            .map_err(|e| RequestError::Refused(crate::errors::chain(&e)))?;
        let before = self.join(before);
        self.next_owner = next_owner;
        self.apply(plan);
        self.fleet_rebook(&config, &fleet);
        self.table.share_names(&config);
        for follower in &close {
            self.changes.close(follower);
        }
        let after = self.join(after);
        self.config = config;
        log::info!(
            "configuration reloaded: {} kept, {} added, {} removed",
            report.kept,
            report.added,
            report.removed
        );
        Ok(Reloaded { report, before, after })
    }

    /// A reload with no consumer to follow it: the runner's unit tests.
    #[cfg(test)]
    pub(in crate::daemon) fn reload_only(&mut self, config: Config) -> Result<ReloadReport, RequestError> {
        let request = ReloadRequest {
            config: std::sync::Arc::new(config),
            before: Vec::new(),
            after: Vec::new(),
            close: Vec::new(),
            fleet: Vec::new(),
        };
        self.reload(request).map(|r| r.report)
    }
}

/// Settings that only a restart applies, by their config names.
fn restart_needed(old: &Config, new: &Config, engine_running: bool) -> Vec<String> {
    let mut out = Vec::new();
    // The API keeps every one of its settings until a restart: never a mix of old and new.
    out.extend(
        old.daemon
            .api
            .changed_keys(&new.daemon.api)
            .map(|k| format!("daemon.{k}")),
    );
    if new.daemon.pin_dir != old.daemon.pin_dir {
        out.push("daemon.pin_dir".to_string());
    }
    if new.daemon.state_file != old.daemon.state_file {
        out.push("daemon.state_file".to_string());
    }
    if new.daemon.l7_workers != old.daemon.l7_workers {
        out.push("daemon.l7_workers".to_string());
    }
    if new.daemon.http_probes != old.daemon.http_probes {
        out.push("daemon.http_probes".to_string());
    }
    if new.source != old.source && engine_running {
        out.push("source".to_string());
    }
    match (&old.dns, &new.dns) {
        (Some(o), Some(n)) => out.extend(o.changed_keys(n).map(str::to_string)),
        (None, Some(_)) | (Some(_), None) => out.push("dns".to_string()),
        (None, None) => {}
    }
    // The running node keeps its name, address, key and share until it restarts.
    if new.cluster != old.cluster {
        out.push("cluster".to_string());
    }
    out
}

#[cfg(test)]
mod tests;
