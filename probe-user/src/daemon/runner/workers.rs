//! The L7 workers: HTTP(S) and UDP request/response probes run on a runtime of their own, with
//! one worker thread per core by default, so that TLS handshakes and response parsing use
//! every core and never delay the runner's loop (which owns all state and sends the L4 probes).
//! Results come back to the runner over its channel; how many run at once stays bounded by
//! the runner's semaphores.
use std::{
    collections::VecDeque,
    future::Future,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

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
    pub(super) fn spawn_all<T, F, R>(&self, items: Vec<T>, run: R)
    where
        T: Send + 'static,
        F: Future<Output = ()> + Send + 'static,
        R: Fn(T) -> F + Send + 'static,
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

/// Jobs that run on at most `limit` lanes at once: a lane is a task that takes jobs one after
/// another until none is left. A job that waits is its own small value in the queue, not a
/// parked task holding a probe's whole future: at 65k HTTP targets and a core that keeps up with
/// a fraction, waiting tasks had held over half a gigabyte.
pub(super) struct Lanes<J> {
    state: Mutex<LaneState<J>>,
    limit: usize,
}

struct LaneState<J> {
    queue: VecDeque<(J, Instant)>,
    running: usize,
}

impl<J: Send + 'static> Lanes<J> {
    pub(super) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(LaneState {
                queue: VecDeque::new(),
                running: 0,
            }),
            limit: limit.max(1),
        })
    }

    /// Queues `jobs` and starts as many lanes as they need, within the limit; `run(job,
    /// queued_ns)` runs each, told how long it waited.
    pub(super) fn push_all<F>(self: &Arc<Self>, jobs: Vec<J>, workers: &Workers, run: fn(J, u64) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if jobs.is_empty() {
            return;
        }
        let now = Instant::now();
        let start = {
            let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            s.queue.extend(jobs.into_iter().map(|j| (j, now)));
            let start = (self.limit - s.running).min(s.queue.len());
            s.running += start;
            start
        };
        let lanes: Vec<Arc<Self>> = (0..start).map(|_| self.clone()).collect();
        workers.spawn_all(lanes, move |lane| lane.drain(run));
    }

    async fn drain<F>(self: Arc<Self>, run: fn(J, u64) -> F)
    where
        F: Future<Output = ()>,
    {
        loop {
            let (job, queued_at) = {
                let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                match s.queue.pop_front() {
                    Some(next) => next,
                    None => {
                        // Under the lock that `push_all` counts lanes with: a job queued after
                        // this finds the lane gone and starts another.
                        s.running -= 1;
                        return;
                    }
                }
            };
            let queued_ns = u64::try_from(queued_at.elapsed().as_nanos()).unwrap_or(u64::MAX);
            run(job, queued_ns).await;
        }
    }

    /// Jobs waiting for a lane.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).queue.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    static RUNNING: AtomicUsize = AtomicUsize::new(0);
    static MOST: AtomicUsize = AtomicUsize::new(0);
    static DONE: AtomicUsize = AtomicUsize::new(0);
    static WAITED: AtomicUsize = AtomicUsize::new(0);

    async fn job(_: u32, queued_ns: u64) {
        let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
        MOST.fetch_max(now, Ordering::SeqCst);
        if queued_ns > 1_000_000 {
            WAITED.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        DONE.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn lanes_run_every_job_and_never_more_than_the_limit_at_once() {
        let workers = Workers::start(2).unwrap();
        let lanes = Lanes::new(3);
        lanes.push_all((0..20).collect(), &workers, job);
        lanes.push_all((20..30).collect(), &workers, job);
        let deadline = Instant::now() + Duration::from_secs(10);
        while DONE.load(Ordering::SeqCst) < 30 {
            assert!(
                Instant::now() < deadline,
                "only {} of 30 jobs ran",
                DONE.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(MOST.load(Ordering::SeqCst), 3, "three lanes, no more");
        assert_eq!(lanes.waiting(), 0);
        assert!(WAITED.load(Ordering::SeqCst) >= 20, "later jobs were told they waited");
        // Lanes end when the queue is empty, and new jobs start new ones.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(lanes.state.lock().unwrap().running, 0);
        lanes.push_all(vec![99], &workers, job);
        let deadline = Instant::now() + Duration::from_secs(5);
        while DONE.load(Ordering::SeqCst) < 31 {
            assert!(Instant::now() < deadline, "a job after the lanes ended never ran");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
