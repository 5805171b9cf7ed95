//! Accept loops (the API's, DNS over TCP) retry a failed accept (EMFILE, ENFILE, ENOBUFS,
//! ECONNABORTED...) after a delay that doubles from `BACKOFF_MIN` to `BACKOFF_MAX`, and say so
//! at most once per `LOG_EVERY`: a loop that retried at once would spin on a full descriptor
//! table and flood the log.
use std::{io, time::Duration};

use tokio::time::Instant;

pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The delay before the next accept after an error, and the rate limit on saying so.
pub struct Backoff {
    who: &'static str,
    delay: Option<Duration>,
    last_log: Option<Instant>,
    suppressed: u64,
}

impl Backoff {
    /// `who` names the listener in the log ("API", "DNS over TCP").
    pub fn new(who: &'static str) -> Self {
        Backoff {
            who,
            delay: None,
            last_log: None,
            suppressed: 0,
        }
    }

    pub fn succeeded(&mut self) {
        self.delay = None;
    }

    /// Records a failed accept and returns how long to wait before the next one.
    pub fn failed(&mut self, e: &io::Error) -> Duration {
        let delay = self.delay.map_or(BACKOFF_MIN, |d| (d * 2).min(BACKOFF_MAX));
        self.delay = Some(delay);
        let now = Instant::now();
        if self.last_log.is_none_or(|t| now.duration_since(t) >= LOG_EVERY) {
            let more = std::mem::take(&mut self.suppressed);
            log::warn!(
                "{}: accepting a connection failed: {e} ({more} more since the last message); \
                 retrying in {delay:?} (too many open files? raise LimitNOFILE)",
                self.who
            );
            self.last_log = Some(now);
        } else {
            self.suppressed += 1;
        }
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_ceiling_and_resets() {
        let mut b = Backoff::new("test");
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        let delays: Vec<_> = (0..10).map(|_| b.failed(&e)).collect();
        assert_eq!(delays[0], BACKOFF_MIN);
        assert_eq!(delays[1], BACKOFF_MIN * 2);
        assert_eq!(*delays.last().unwrap(), BACKOFF_MAX);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        assert!(b.suppressed > 0, "repeated errors within a second are not all logged");
        b.succeeded();
        assert_eq!(b.failed(&e), BACKOFF_MIN);
    }
}
