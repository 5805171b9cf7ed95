//! The runner's sinks: opened (and so checked) before a configuration goes live, started from
//! a snapshot taken right after it did, stopped when a reload drops or changes them.
use super::Runner;
use crate::{
    changes::Follower,
    config::Sink as SinkConfig,
    daemon::DaemonError,
    sinks::{self, Running, Sink},
};

/// A sink's queue holds at most one change per endpoint of its profile; this bounds it far
/// beyond any profile, so that it never loses a change.
const SINK_QUEUE: usize = 1 << 20;

/// Sinks a new configuration needs that are not running as they are: opened and checked, not
/// yet started.
pub(in crate::daemon) struct PreparedSinks(Vec<(SinkConfig, Box<dyn Sink>)>);

impl Runner {
    /// Opens every sink of `wanted` that is not already running with the same settings. Fails
    /// on the first that cannot be used (missing table or map, wrong type): nothing changes.
    pub(in crate::daemon) fn prepare_sinks(&self, wanted: &[SinkConfig]) -> Result<PreparedSinks, DaemonError> {
        let mut out = Vec::new();
        for cfg in wanted {
            if self.consumers.sinks.iter().any(|r| r.cfg == *cfg) {
                continue;
            }
            let sink = sinks::open(cfg, &self.config.daemon.pin_dir).map_err(|source| DaemonError::Sink {
                name: cfg.name.clone(),
                source,
            })?;
            out.push((cfg.clone(), sink));
        }
        Ok(PreparedSinks(out))
    }

    /// Stops the sinks `wanted` no longer has as they are and starts the prepared ones, each
    /// from the live table's state now.
    pub(in crate::daemon) fn start_sinks(&mut self, wanted: &[SinkConfig], prepared: PreparedSinks) {
        let (keep, mut stop): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.consumers.sinks)
            .into_iter()
            .partition(|r| wanted.contains(&r.cfg));
        for r in &mut stop {
            self.changes.close(&Follower::Sink(r.cfg.name.as_str().into()));
            r.join();
        }
        self.consumers.sinks = keep;
        for (cfg, sink) in prepared.0 {
            let follower = Follower::Sink(cfg.name.as_str().into());
            let (snapshot, changes) = self.subscribe_to(follower, SINK_QUEUE, Some(&cfg.profile));
            log::info!("sink {}: {} follows profile {}", cfg.name, sink.describe(), cfg.profile);
            self.consumers.sinks.push(Running::start(cfg, sink, &snapshot, changes));
        }
    }
}
