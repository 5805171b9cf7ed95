//! Who holds the other end of a loopback TCP connection: the uid that owns the client's
//! socket, asked of the kernel (`kernel::sockdiag::owner`). Over loopback every address of
//! 127.0.0.0/8 reaches the listener, so an address says nothing about who connects: one local
//! user binding 127.0.0.2, .3, ... would otherwise count as many peers. A uid is what the unix
//! socket's peers are counted by, and now loopback TCP's too.
use std::{io, net::IpAddr, net::SocketAddr};

/// Whether `ip` is a loopback address, v4-mapped ones included.
pub(super) fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// The uid owning the client socket of the connection from `peer` to `local`.
pub(super) fn uid_of(peer: SocketAddr, local: SocketAddr) -> io::Result<u32> {
    crate::kernel::sockdiag::owner(peer, local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_127_8_and_colon_colon_1_mapped_or_not() {
        for a in ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.2"] {
            assert!(is_loopback(a.parse().unwrap()), "{a}");
        }
        for a in ["198.18.0.1", "::ffff:198.18.0.1", "2001:2::1", "0.0.0.0"] {
            assert!(!is_loopback(a.parse().unwrap()), "{a}");
        }
    }
}
