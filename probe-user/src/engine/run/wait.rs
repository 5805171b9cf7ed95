//! Sleeping between turns: the eventfd that wakes the engine thread for commands, and the
//! poll on it and on the ring buffer.
use std::{
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use super::EngineState;
use crate::engine::EngineError;

/// How often the ring buffer is read while probes are on the wire.
const EVENT_TICK: Duration = Duration::from_millis(1);
/// Longest sleep between loop turns when nothing is due.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// An eventfd that wakes the engine thread when commands arrive.
pub(crate) struct Waker {
    fd: crate::kernel::event::EventFd,
}

impl Waker {
    pub(crate) fn new() -> Result<Self, EngineError> {
        let fd = crate::kernel::event::EventFd::new().map_err(|source| EngineError::Io { op: "eventfd", source })?;
        Ok(Self { fd })
    }

    pub(crate) fn wake(&self) {
        self.fd.signal();
    }

    pub(super) fn reset(&self) {
        self.fd.clear();
    }
}

/// What ended a poll.
struct Woke {
    command: bool,
    events: bool,
}

impl EngineState {
    /// Sleeps until a command, reply events or the next deadline.
    ///
    /// At most one turn per tick reads the ring buffer: at fleet rates a wake-up per reply
    /// would cost more than the probe. So when replies wake the thread less than a tick after
    /// the last turn, it lets the rest of the tick pass first (a command still cuts it
    /// short). RTTs are stamped in the kernel, so the tick delays results by up to a
    /// millisecond without making them less exact. With nothing arriving the thread sleeps
    /// until the next deadline: an idle engine wakes a few times a second, not once a tick.
    pub(super) fn wait(&mut self) {
        let wait = match self.deadlines.next() {
            Some(due) => due.saturating_duration_since(Instant::now()).min(IDLE_WAIT),
            None => IDLE_WAIT,
        };
        let woke = self.poll(true, wait);
        if woke.events && !woke.command {
            let since = Instant::now().saturating_duration_since(self.last_turn);
            if since < EVENT_TICK {
                self.poll(false, EVENT_TICK - since);
            }
        }
    }

    /// One poll on the command eventfd and, when `events`, the ring buffer; says which fired.
    fn poll(&self, events: bool, wait: Duration) -> Woke {
        use crate::kernel::event::poll_readable;
        let command = self.wake.fd.as_raw_fd();
        if events {
            let [command, events] = poll_readable([command, self.kernel.events_fd()], wait);
            Woke { command, events }
        } else {
            let [command] = poll_readable([command], wait);
            Woke { command, events: false }
        }
    }
}
