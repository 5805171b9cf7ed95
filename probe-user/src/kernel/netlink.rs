//! Just enough netlink for two questions: which XDP features a device advertises (generic
//! netlink, the `netdev` family, Linux 6.3+), and which XDP programs are attached to it now
//! (rtnetlink RTM_GETLINK, IFLA_XDP). Request/reply round trips; no multipart dumps.
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

/// The attributes (type, payload) of one generic-netlink reply, or None for an error reply or
/// a short one.
fn attributes(buf: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    attributes_after(buf, HEADERS_LEN)
}

/// The attributes of one reply whose fixed headers take `headers` bytes.
fn attributes_after(buf: &[u8], headers: usize) -> Option<Vec<(u16, Vec<u8>)>> {
    if buf.len() < headers || buf.len() < 16 {
        return None;
    }
    let msg_type = u16::from_ne_bytes([buf[4], buf[5]]);
    if msg_type == libc::NLMSG_ERROR as u16 {
        return None;
    }
    let len = (u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize).min(buf.len());
    Some(attr_list(buf.get(headers..len)?))
}

/// A run of attributes (type, payload), as found after the headers or inside a nested one.
pub(super) fn attr_list(buf: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let len = buf.len();
    let mut attrs = Vec::new();
    let mut off = 0;
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
    attrs
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

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
/// ifinfomsg: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
const IFLA_EXT_MASK: u16 = 29;
const IFLA_XDP: u16 = 43;
const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;

/// RTM_GETLINK for one device, without its statistics.
fn getlink_request(ifindex: u32) -> Vec<u8> {
    let total = 16 + IFINFOMSG_LEN + 8;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    m.extend_from_slice(&ifindex.to_ne_bytes());
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(&8u16.to_ne_bytes());
    m.extend_from_slice(&IFLA_EXT_MASK.to_ne_bytes());
    m.extend_from_slice(&RTEXT_FILTER_SKIP_STATS.to_ne_bytes());
    m
}

/// The XDP program ids in an RTM_NEWLINK reply's IFLA_XDP (one per attach mode in use; the
/// kernel names a single one IFLA_XDP_PROG_ID), or None when the reply is not one.
fn xdp_prog_ids(reply: &[u8]) -> Option<Vec<u32>> {
    if reply.len() < 16 || u16::from_ne_bytes([reply[4], reply[5]]) != RTM_NEWLINK {
        return None;
    }
    let attrs = attributes_after(reply, 16 + IFINFOMSG_LEN)?;
    let mut ids = Vec::new();
    for (_, nested) in attrs.iter().filter(|(t, _)| *t == IFLA_XDP) {
        for (t, v) in attr_list(nested) {
            let per_mode = [IFLA_XDP_DRV_PROG_ID, IFLA_XDP_SKB_PROG_ID, IFLA_XDP_HW_PROG_ID];
            if (t == IFLA_XDP_PROG_ID || per_mode.contains(&t)) && v.len() >= 4 {
                let id = u32::from_ne_bytes([v[0], v[1], v[2], v[3]]);
                if id != 0 && !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
    }
    Some(ids)
}

/// The ids of the XDP programs attached to device `ifindex` right now (any mode), read from
/// rtnetlink; an error when the kernel cannot be asked.
pub fn attached_xdp_programs(ifindex: u32) -> std::io::Result<Vec<u32>> {
    let sock = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::RAW,
        Some(Protocol::from(libc::NETLINK_ROUTE)),
    )?;
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    sock.send(&getlink_request(ifindex))?;
    // A link message without statistics is a few KiB; devices with many VFs list them all.
    let mut buf = vec![0u8; 1 << 16];
    let n = (&sock).read(&mut buf)?;
    xdp_prog_ids(&buf[..n])
        .ok_or_else(|| std::io::Error::other(format!("RTM_GETLINK for ifindex {ifindex} got no link message back")))
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

    /// A reply as the kernel lays it out: headers, an unrelated attribute, then IFLA_XDP with
    /// IFLA_XDP_ATTACHED and IFLA_XDP_PROG_ID nested.
    #[test]
    fn xdp_prog_id_is_found_in_a_link_reply() {
        let mut m = vec![0u8; 16 + IFINFOMSG_LEN];
        m[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&3u16.to_ne_bytes()); // IFLA_IFNAME
        m.extend_from_slice(b"lo\0\0");
        m.extend_from_slice(&20u16.to_ne_bytes());
        m.extend_from_slice(&(IFLA_XDP | 0x8000).to_ne_bytes()); // NLA_F_NESTED
        m.extend_from_slice(&5u16.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes()); // IFLA_XDP_ATTACHED
        m.extend_from_slice(&[1, 0, 0, 0]);
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&IFLA_XDP_PROG_ID.to_ne_bytes());
        m.extend_from_slice(&42u32.to_ne_bytes());
        let total = m.len() as u32;
        m[..4].copy_from_slice(&total.to_ne_bytes());
        assert_eq!(xdp_prog_ids(&m), Some(vec![42]));
        // Without IFLA_XDP: nothing attached.
        let mut bare = m[..16 + IFINFOMSG_LEN + 8].to_vec();
        let bare_len = bare.len() as u32;
        bare[..4].copy_from_slice(&bare_len.to_ne_bytes());
        assert_eq!(xdp_prog_ids(&bare), Some(vec![]));
        // An error reply is not a link message.
        let mut err = m.clone();
        err[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        assert_eq!(xdp_prog_ids(&err), None);
    }

    #[test]
    fn loopback_has_no_xdp_program() {
        // Unprivileged and harmless: a read of lo's link attributes.
        assert_eq!(attached_xdp_programs(1).unwrap(), Vec::<u32>::new());
    }
}
