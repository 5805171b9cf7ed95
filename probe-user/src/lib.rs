//! probed: kernel-accelerated health checks for load-balancer backends.
//!
//! `kernel` is the thin, documented layer over the eBPF programs; everything above it is
//! plain Rust: `engine` (L4 probes), `probe` (HTTP/HTTPS and UDP request/response),
//! `health` (threshold state and windows), `schedule` (timer wheel), `config`, `status`
//! (monitor status and selection).
pub mod config;
pub mod engine;
pub mod health;
pub mod kernel;
pub mod probe;
pub mod schedule;
pub mod status;
