//! The L7 workers: HTTP(S) and UDP request/response probes run on a runtime of their own, with
//! one worker thread per core by default, so that TLS handshakes and response parsing use
//! every core and never delay the runner's loop (which owns all state and sends the L4 probes).
//! Results come back to the runner over its channel; how many run at once stays bounded by
//! the runner's semaphores.
use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};

use crate::daemon::DaemonError;

pub(super) struct Workers {
    /// Always Some until drop.
    rt: Option<Runtime>,
    handle: Handle,
}

impl Workers {
    /// Starts `threads` workers (at least one). Call it on a thread in the probing network
    /// namespace: the workers are spawned from it and inherit it.
    pub(super) fn start(threads: usize) -> Result<Self, DaemonError> {
        let rt = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("probed-l7")
            .enable_all()
            .build()
            .map_err(|source| DaemonError::Io {
                op: "start the L7 probe workers",
                path: None,
                source,
            })?;
        let handle = rt.handle().clone();
        Ok(Self { rt: Some(rt), handle })
    }

    /// The default: one worker per core the process may run on.
    pub(super) fn default_threads() -> usize {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }

    /// Starts a task per item, `run(item)` each, with one hand-over from the calling thread:
    /// the tasks are spawned from a worker (its own queue, shared with the others by work
    /// stealing), so a tick's probes cost one wake-up of the workers, not one each.
    pub(super) fn spawn_all<T, F>(&self, items: Vec<T>, run: fn(T) -> F)
    where
        T: Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        if items.is_empty() {
            return;
        }
        drop(self.handle.spawn(async move {
            for item in items {
                drop(tokio::spawn(run(item)));
            }
        }));
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // The runner is dropped inside its own runtime, where a blocking shutdown would panic;
        // probes still in flight are abandoned (their results have nowhere to go).
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
