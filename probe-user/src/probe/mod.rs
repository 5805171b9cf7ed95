//! Probe kinds that run in userspace. The L4 probes live in the kernel engine; HTTP(S) needs
//! a real TCP stack and a TLS library, and UDP request/response needs the reply's content.
pub mod http;
pub mod udp;
