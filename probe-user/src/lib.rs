//! probed: kernel-accelerated health checks for load-balancer backends.
//!
//! `kernel` is the thin, documented layer over the eBPF programs; everything above it is
//! plain Rust.
pub mod kernel;
pub mod probe;
