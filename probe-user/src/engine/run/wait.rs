//! Sleeping between turns: the eventfd that wakes the engine thread for commands, and the
//! poll on it and on the ring buffer.
use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
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
    fd: OwnedFd,
}

impl Waker {
    pub(crate) fn new() -> Result<Self, EngineError> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(EngineError::Io {
                op: "eventfd",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    pub(super) fn reset(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN when not signalled is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut v).cast(), 8) };
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
        let mut fds = [
            libc::pollfd {
                fd: self.wake.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.kernel.events_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let nfds = if events { 2 } else { 1 };
        // Round up so a deadline 0.4 ms away does not turn into a busy loop.
        let ms = wait.as_micros().div_ceil(1000) as i32;
        // SAFETY: `fds` is a valid array of at least `nfds` pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        Woke {
            command: fds[0].revents & libc::POLLIN != 0,
            events: events && fds[1].revents & libc::POLLIN != 0,
        }
    }
}
