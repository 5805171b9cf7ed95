//! The authoritative DNS server of SPEC section 7: probed answers for `[dns].zone`, one name per
//! profile, with the endpoints the profile's routing method picks among the eligible ones now.
//!
//! - `zone.rs`: what a question gets, from the configuration and the change stream (pure);
//! - `regions.rs`: which region a source is in (pure; `/v1/select` asks it too);
//! - `wire.rs`: requests and answers through hickory (EDNS, Client Subnet, error codes);
//! - `server.rs`: the thread, its sockets, and the task that follows the change stream.
pub mod regions;
pub mod server;
mod wire;
pub mod zone;

pub use server::{DnsError, DnsServer};
pub use zone::Zone;
