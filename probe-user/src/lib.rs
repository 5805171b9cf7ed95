//! probed: kernel-accelerated health checks for load-balancer backends. "SPEC N" in the
//! comments is section N of docs/spec.md.
//!
//! - The kernel side: `kernel` is the thin, documented layer over the eBPF programs, netlink,
//!   nftables and the few libc calls; `engine` drives L4 probes through it.
//! - The pure cores: `probe` (a folder per kind that runs as a task: its prober, settings,
//!   keys, reader and identity), `health` (thresholds and windows), `schedule` (the timer
//!   wheel), `status` (monitor status and the routing methods), `rules` (dialects,
//!   thresholds and limits that `config` and the probers share), `schema` (how the file's
//!   tables and keys are described and read, below `config` and the kinds), `config`.
//! - The daemon: `daemon` (the runner, its table, requests, events, persistence) and the
//!   change stream it publishes (`changes`).
//! - What follows the stream: `sinks` (nftables, BPF slot tables, HAProxy, exec), `dns` (the
//!   authoritative server), `cluster` (gossip between nodes), `api` (HTTP JSON), `metrics`
//!   (Prometheus), `render` (what a terminal shows).
pub(crate) mod accept;
pub mod alloc;
pub mod api;
pub mod calendar;
pub mod changes;
#[cfg(feature = "testing")]
pub mod clock;
#[cfg(not(feature = "testing"))]
pub(crate) mod clock;
pub(crate) mod cluster;
pub mod config;
pub mod daemon;
pub(crate) mod discovery;
pub mod dns;
pub mod engine;
#[cfg(feature = "testing")]
pub mod errors;
#[cfg(not(feature = "testing"))]
pub(crate) mod errors;
pub mod fleet;
pub(crate) mod hash;
pub(crate) mod health;
pub mod kernel;
pub(crate) mod metrics;
pub mod outcome;
/// Passive detection's rules: what the node's forwarded handshakes say of a backend.
pub mod passive;
pub(crate) mod prefetch;
pub mod probe;
pub mod render;
pub(crate) mod rng;
pub mod rules;
#[cfg(feature = "testing")]
pub mod schedule;
#[cfg(not(feature = "testing"))]
pub(crate) mod schedule;
pub mod schema;
pub(crate) mod secret;
pub mod service;
pub mod sinks;
pub mod status;
pub(crate) mod wire_enum;
