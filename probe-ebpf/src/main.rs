//! probed's kernel program `probe_rx`: the XDP reply matcher on the probe interface, which is
//! also the probe generator for the frames userspace runs through it (see tx.rs). This is the
//! object the daemon embeds; test fixtures live in their own (src/fixtures/).
#![no_std]
#![no_main]

mod maps;
mod rx;
mod tx;

// The parsers are shared with the fixtures' object; imported here so `crate::parse` names them.
use probe_ebpf::parse;
