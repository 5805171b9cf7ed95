//! The scheduler's own CPU cost per probe at a million checks, on a virtual clock.
//!
//! `cargo run --release -p probed-bench --bin schedule-virtual -- [checks] [intervals] [exact]`
//! (`cargo xtask bench schedule` runs it, then `schedule-live`)
//!
//! By default the driver wakes at most once per wheel tick (1 ms), as an engine on a real
//! timer does, and pops every check due by the end of that tick. `exact` wakes at every
//! distinct due time instead: the worst case, where each wakeup pays a walk of one slot.
use std::time::Duration;

use probed::schedule::{Cadence, CheckParams, Scheduler, SchedulerConfig};

const MS: u64 = 1_000_000;

fn main() {
    let exact = std::env::args().any(|a| a == "exact");
    let mut args = std::env::args()
        .skip(1)
        .filter(|a| a != "exact")
        .map(|a| a.parse::<u64>().expect("arguments are numbers, or the word exact"));
    let checks = args.next().unwrap_or(1_000_000);
    let intervals = args.next().unwrap_or(5);
    let interval = Duration::from_secs(1);
    let config = SchedulerConfig::default();
    let tick_ns = config.tick.as_nanos() as u64;

    let mut sched: Scheduler<u64, u32> = Scheduler::new(config);
    let cpu = process_cpu_ns();
    for key in 0..checks {
        sched
            .add(0, key, CheckParams::new(interval), 0)
            .expect("valid parameters");
    }
    let add_ns = process_cpu_ns() - cpu;

    // The driver a real engine would run: sleep until next_due (rounded up to the end of its
    // tick unless exact), pop, and complete each probe after a response time of 0-4 ms
    // (derived from the key, so finishing order varies).
    let end = intervals * 1_000 * MS;
    let mut due = Vec::with_capacity(8_192);
    let mut probes = 0u64;
    let mut wakeups = 0u64;
    let cpu = process_cpu_ns();
    while let Some(due_at) = sched.next_due().filter(|&t| t <= end) {
        let now = if exact {
            due_at
        } else {
            (due_at / tick_ns + 1) * tick_ns - 1
        };
        due.clear();
        sched.pop_due(now, &mut due);
        wakeups += 1;
        for &id in &due {
            let rt = (id_hash(sched.key(id).copied().unwrap_or(0)) % 5) * MS;
            sched
                .completed(id, now + rt, Cadence::Steady)
                .expect("handed out by pop_due");
        }
        probes += due.len() as u64;
    }
    let run_ns = process_cpu_ns() - cpu;

    println!(
        "schedule-virtual: {checks} checks, {intervals} x 1 s virtual, {} wakeups: {probes} probes in {wakeups} wakeups, \
         {:.1} ns CPU per scheduled probe (pop + complete + next_due), {:.1} ns per add, {:.0} ms CPU total",
        if exact { "exact" } else { "per-tick" },
        run_ns as f64 / probes.max(1) as f64,
        add_ns as f64 / checks.max(1) as f64,
        (run_ns + add_ns) as f64 / 1e6,
    );
}

fn id_hash(key: u64) -> u64 {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32
}

/// CPU time used by this process, in nanoseconds.
fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and
    // CLOCK_PROCESS_CPUTIME_ID is supported by every Linux kernel probed runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
