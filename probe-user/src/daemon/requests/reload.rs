//! `POST /v1/reload` and SIGHUP: a new configuration applies whole or not at all. Everything
//! that can fail (the file, building the table, opening a new events file, starting the L4
//! engine) happens before anything changes.
use crate::{
    config::Config,
    daemon::{
        control::RequestError,
        events::EventSink,
        runner::{first_l4, FirstL4, Runner},
        state::Saved,
        table,
        views::ReloadReport,
    },
};

impl Runner {
    pub(in crate::daemon) fn reload(&mut self, config: Option<Config>) -> Result<ReloadReport, RequestError> {
        let config = match config {
            Some(c) => c,
            None => {
                let path = self.options.config_path.clone().ok_or_else(|| {
                    RequestError::Refused("the daemon was started without a config file to re-read".into())
                })?;
                Config::load(&path)?
            }
        };
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
        // The engine must run and the consumers must find what they need (a sink its
        // structure, the events file its place) before the table goes live; if either fails,
        // nothing changes.
        let mut consumers = self
            .prepare_consumers(&config)
            .map_err(|e| RequestError::Refused(crate::errors::chain(&e)))?;
        let first = match self.probe.l4.port {
            Some(_) => FirstL4::None,
            None => first_l4(
                plan.built()
                    .chain(self.table.targets.values().map(|t| &**t))
                    .map(|t| &**t.spec()),
                &config,
            ),
        };
        self.ensure_l4(&config, first)
            .map_err(|e| RequestError::Refused(crate::errors::chain(&e)))?;
        self.switch_events(&mut consumers);
        self.next_owner = next_owner;
        self.apply(plan);
        self.table.share_names(&config);
        self.refollow_consumers(&config, consumers);
        self.config = config;
        log::info!(
            "configuration reloaded: {} kept, {} added, {} removed",
            report.kept,
            report.added,
            report.removed
        );
        Ok(report)
    }
}

impl Runner {
    /// SIGUSR1: the events file was moved away (logrotate); open it afresh at its path.
    pub(in crate::daemon) fn reopen_events(&mut self) -> Result<(), RequestError> {
        let sink =
            EventSink::open(&self.config.daemon.events).map_err(|e| RequestError::Refused(crate::errors::chain(&e)))?;
        if let Some(writer) = self.consumers.events.as_mut() {
            writer.switch(sink, self.changes.seq());
        }
        Ok(())
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
