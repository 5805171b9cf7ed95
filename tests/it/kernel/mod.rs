//! probe_rx and the L4 engine loaded in a prober namespace, against the backend namespace's own
//! stacks: TCP, UDP and HTTP probes in the kernel, the hook beside another XDP owner, strict
//! parsing, the conntrack exemption, and forged replies. `cargo xtask test` runs the suites
//! whose engine follows `PROBED_XDP_MODE` and `PROBED_HOOK` twice more, in generic XDP and at tcx
//! (xtask/src/test.rs).
mod flood;
mod harness_cleanup;
mod hooks;
mod http;
mod l4_engine;
mod node_trust;
mod notrack;
mod passive;
mod rx_counters;
mod tunnel;
mod udp;
mod vlan;
