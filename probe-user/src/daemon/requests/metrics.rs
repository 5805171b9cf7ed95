//! `GET /metrics`: the runner's own metrics now; the caller adds the kernel's counters and
//! the consumers' (sinks, DNS server).
use crate::daemon::{protocol::MetricsReply, runner::Runner};

impl Runner {
    pub(in crate::daemon) fn render_metrics(&mut self) -> MetricsReply {
        let now = self.now();
        self.metrics.flush(self.table.profiles());
        if let Some(view) = self.cluster_view() {
            self.metrics.cluster(&view);
        }
        let text = self.metrics.render(
            &self.table,
            self.probe.sched.len(),
            &self.changes,
            self.probe.last_result_ns,
            now,
        );
        (text, self.probe.l4.port.as_ref().and_then(|p| p.kernel()))
    }
}
