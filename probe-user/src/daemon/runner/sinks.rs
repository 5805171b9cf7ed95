//! The runner's sinks: opened (and so checked) before a configuration goes live, started from
//! a snapshot taken right after it did, stopped when a reload drops or changes them.
use super::Runner;
use crate::{
    config::Sink as SinkConfig,
    daemon::DaemonError,
    sinks::{self, Running, Sink},
};

/// A sink's queue holds at most one change per endpoint of its profile; this bounds it far
/// beyond any profile, so that it never loses a change.
const SINK_QUEUE: usize = 1 << 20;

/// Sinks a new configuration needs that are not running as they are: opened and checked, not
/// yet started.
pub(in crate::daemon) struct Prepared(Vec<(SinkConfig, Box<dyn Sink>)>);

impl Runner {
    /// Opens every sink of `wanted` that is not already running with the same settings. Fails
    /// on the first that cannot be used (missing table or map, wrong type): nothing changes.
    pub(in crate::daemon) fn prepare_sinks(&self, wanted: &[SinkConfig]) -> Result<Prepared, DaemonError> {
        let mut out = Vec::new();
        for cfg in wanted {
            if self.sinks.iter().any(|r| r.cfg == *cfg) {
                continue;
            }
            let sink = sinks::open(cfg, &self.config.daemon.pin_dir).map_err(|e| DaemonError::Sink {
                name: cfg.name.clone(),
                reason: e.to_string(),
            })?;
            out.push((cfg.clone(), sink));
        }
        Ok(Prepared(out))
    }

    /// Stops the sinks `wanted` no longer has as they are and starts the prepared ones, each
    /// from the live table's state now.
    pub(in crate::daemon) fn start_sinks(&mut self, wanted: &[SinkConfig], prepared: Prepared) {
        let (keep, mut stop): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.sinks)
            .into_iter()
            .partition(|r| wanted.contains(&r.cfg));
        for r in &mut stop {
            self.changes.close(&format!("sink:{}", r.cfg.name));
            r.join();
        }
        self.sinks = keep;
        for (cfg, sink) in prepared.0 {
            let (snapshot, changes) = self.subscribe_to(&format!("sink:{}", cfg.name), SINK_QUEUE, Some(&cfg.profile));
            log::info!("sink {}: {} follows profile {}", cfg.name, sink.describe(), cfg.profile);
            self.sinks.push(Running::start(cfg, sink, &snapshot, changes));
        }
    }
}
