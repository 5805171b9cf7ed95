//! probed: kernel-accelerated health checks for load-balancer backends.
//!
//! `kernel` is the thin, documented layer over the eBPF programs; everything above it is
//! plain Rust: `engine` (L4 probes), `probe` (HTTP/HTTPS and UDP request/response),
//! `health` (threshold state and windows), `schedule` (timer wheel), `config`, `rules` (the
//! dialects, thresholds and HTTP limits that `config` and `probe` share), `status`
//! (monitor status and selection), and the product on top: `daemon` (runner, events,
//! persistence), `api` (HTTP JSON), `metrics` (Prometheus).
pub(crate) mod accept;
pub mod alloc;
pub mod api;
pub mod changes;
pub mod clock;
pub(crate) mod cluster;
pub mod config;
pub mod daemon;
pub mod dns;
pub mod engine;
pub mod errors;
pub(crate) mod hash;
pub(crate) mod health;
pub mod kernel;
pub(crate) mod metrics;
pub mod outcome;
pub(crate) mod prefetch;
pub mod probe;
pub mod render;
pub(crate) mod rng;
pub mod rules;
pub mod schedule;
pub(crate) mod secret;
pub mod sinks;
pub mod status;
pub(crate) mod wire_enum;
