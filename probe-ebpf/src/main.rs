//! probed's kernel programs: `probe_rx`, the reply matcher on the probe interface (`probe_rx`
//! at XDP, or `probe_rx_tc` at tcx ingress), which is also the probe generator for the frames
//! userspace runs through it (see tx.rs), and `probe_fib_src`, a start-up check of the
//! kernel. This is the object the daemon embeds; test fixtures live in their own
//! (src/fixtures/).
#![no_std]
#![no_main]

mod maps;
mod rx;
mod tx;

// The parsers and the packet abstraction are shared with the fixtures' object; imported
// here so `crate::parse` and `crate::ctx` name them.
use probe_ebpf::{ctx, parse};
