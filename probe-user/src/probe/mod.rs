//! Probes that need more than the kernel engine's one-packet exchange.
pub mod udp;
