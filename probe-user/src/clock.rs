//! The daemon's clocks, once: CLOCK_MONOTONIC (what the scheduler, the trackers and the
//! kernel's `bpf_ktime_get_ns` read) and the wall clock, for times shown to people.
use std::time::Duration;

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds since the Unix epoch now.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds as a float with microsecond precision, for JSON.
pub fn ms(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}
