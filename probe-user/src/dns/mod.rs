//! The authoritative DNS server of SPEC section 7: probed answers for `[dns].zone`, one name per
//! profile, with the endpoints the profile's routing method picks among the eligible ones now.
//!
//! - `zone.rs`: what a question gets, from the configuration and the change stream (pure);
//! - `regions.rs`: which region a source is in (pure; `/v1/select` asks it too);
//! - `rrl.rs`: response rate limiting of UDP answers (pure);
//! - `wire.rs`: requests and answers through hickory (EDNS, Client Subnet, error codes);
//! - `tcp.rs`: DNS over TCP with its caps and timeouts (RFC 7766);
//! - `shared.rs`: what the query paths and the threads share (zone, counters);
//! - `server.rs`: the threads, their sockets, and the task that follows the change stream.
pub mod regions;
mod rrl;
pub mod server;
pub mod shared;
mod tcp;
mod wire;
pub mod zone;

pub use server::{DnsError, DnsServer};
pub use zone::Zone;
