//! Just enough generic netlink to ask the `netdev` family (Linux 6.3+) which XDP features a
//! device advertises. Two request/reply round trips on one socket; no multipart dumps.
use std::{io::Read, time::Duration};

use socket2::{Domain, Protocol, Socket, Type};

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
/// NETDEV_XDP_ACT_NDO_XMIT: the driver takes redirected frames, which live-frames XDP_TX needs.
pub const XDP_ACT_NDO_XMIT: u64 = 1 << 2;
/// nlmsghdr (16 bytes) + genlmsghdr (4 bytes): where the attributes start.
const HEADERS_LEN: usize = 20;

/// A request with one attribute, as the generic-netlink wire format lays it out.
fn request(family: u16, cmd: u8, attr_type: u16, attr: &[u8]) -> Vec<u8> {
    let attr_len = 4 + attr.len();
    let padded = attr_len.div_ceil(4) * 4;
    let total = HEADERS_LEN + padded;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[cmd, 1, 0, 0]);
    m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    m.extend_from_slice(&attr_type.to_ne_bytes());
    m.extend_from_slice(attr);
    m.resize(total, 0);
    m
}

/// The attributes (type, payload) of one reply, or None for an error reply or a short one.
fn attributes(buf: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    if buf.len() < HEADERS_LEN {
        return None;
    }
    let msg_type = u16::from_ne_bytes([buf[4], buf[5]]);
    if msg_type == libc::NLMSG_ERROR as u16 {
        return None;
    }
    let len = (u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize).min(buf.len());
    let mut attrs = Vec::new();
    let mut off = HEADERS_LEN;
    while off + 4 <= len {
        let alen = u16::from_ne_bytes([buf[off], buf[off + 1]]) as usize;
        // The top two bits are the nested / byte-order flags, not part of the type.
        let atype = u16::from_ne_bytes([buf[off + 2], buf[off + 3]]) & 0x3fff;
        if alen < 4 || off + alen > len {
            break;
        }
        attrs.push((atype, buf[off + 4..off + alen].to_vec()));
        off += alen.div_ceil(4) * 4;
    }
    Some(attrs)
}

/// Sends one request and returns the attributes of its reply.
fn ask(sock: &Socket, msg: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    sock.send(msg).ok()?;
    let mut buf = vec![0u8; 8192];
    let n = (&*sock).read(&mut buf).ok()?;
    attributes(&buf[..n])
}

/// The XDP feature bits (NETDEV_XDP_ACT_*) of the device with index `ifindex`, or None when
/// the kernel cannot be asked (no `netdev` family before 6.3) or has no answer.
pub fn xdp_features(ifindex: u32) -> Option<u64> {
    let sock = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::RAW,
        Some(Protocol::from(libc::NETLINK_GENERIC)),
    )
    .ok()?;
    // A kernel that never answers must not hang the engine's start.
    sock.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let fam = ask(
        &sock,
        &request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, b"netdev\0"),
    )?;
    let id = fam
        .iter()
        .find(|(t, v)| *t == CTRL_ATTR_FAMILY_ID && v.len() >= 2)
        .map(|(_, v)| u16::from_ne_bytes([v[0], v[1]]))?;
    let dev = ask(
        &sock,
        &request(id, NETDEV_CMD_DEV_GET, NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()),
    )?;
    let (_, v) = dev
        .iter()
        .find(|(t, v)| *t == NETDEV_A_DEV_XDP_FEATURES && v.len() >= 8)?;
    Some(u64::from_ne_bytes(v[..8].try_into().ok()?))
}

/// Whether `iface` advertises XDP transmit of redirected frames. When the question cannot be
/// asked the answer is no: the caller then takes a path that always works.
pub fn can_xmit_xdp(iface: &str) -> bool {
    let Ok(index) = super::if_index(iface) else {
        return false;
    };
    xdp_features(index).is_some_and(|f| f & XDP_ACT_NDO_XMIT != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_is_padded_and_sized() {
        let m = request(0x10, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, b"netdev\0");
        assert_eq!(m.len(), 20 + 12);
        assert_eq!(u32::from_ne_bytes(m[..4].try_into().unwrap()) as usize, m.len());
        assert_eq!(u16::from_ne_bytes([m[20], m[21]]), 11);
    }

    #[test]
    fn attributes_are_read_back() {
        let m = request(0x20, 1, NETDEV_A_DEV_IFINDEX, &7u32.to_ne_bytes());
        let attrs = attributes(&m).unwrap();
        assert_eq!(attrs, vec![(NETDEV_A_DEV_IFINDEX, 7u32.to_ne_bytes().to_vec())]);
        assert!(attributes(&m[..10]).is_none());
    }
}
