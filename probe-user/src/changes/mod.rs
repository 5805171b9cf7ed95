//! The change stream: every change of an endpoint's or a profile's state, published once by
//! the runner as a typed value, delivered to each subscriber through a queue of its own.
//!
//! A subscriber's queue holds at most one pending change per endpoint or profile: a newer
//! change for the same key is merged into the waiting one (the newest state wins, the oldest
//! `from` is kept), so a slow consumer sees fewer, later states, never stale ones, and the
//! queue never grows past the number of keys. Past `capacity` distinct keys, new keys are
//! dropped and the consumer is told how many on its next batch: it then reconciles from a
//! fresh snapshot. Publishing never blocks and never waits for a consumer; it runs only on
//! state changes, not per probe.
mod bus;
mod model;

pub use bus::*;
pub use model::*;

#[cfg(test)]
mod tests;
