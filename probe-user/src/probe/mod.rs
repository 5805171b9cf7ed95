//! Probe kinds that run in userspace. The L4 probes live in the kernel engine; the L7 ones
//! need a real TCP stack and a TLS library, so they are plain async Rust.
pub mod http;
