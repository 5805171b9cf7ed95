//! Routes in a kernel routing table, over rtnetlink: add (or replace), delete, and list the
//! ones of one table and route protocol. Only what the route sink needs: unicast routes
//! through a device, with a metric, in a table of their own. Requests and replies are built
//! and read by pure functions; the socket part is thin.
use std::{
    io::{self, Read},
    net::IpAddr,
    time::Duration,
};

use socket2::{Domain, Protocol, Socket, Type};

const NLMSG_HDR: usize = 16;
/// struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32).
const RTMSG_LEN: usize = 12;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_MULTI: u16 = 0x2;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_PRIORITY: u16 = 6;
const RTA_TABLE: u16 = 15;
const RTN_UNICAST: u8 = 1;
const RT_SCOPE_UNIVERSE: u8 = 0;
/// rtm_table for a table whose id does not fit the byte: RTA_TABLE holds it.
const RT_TABLE_COMPAT: u8 = 252;
/// The socket option that has the kernel filter a dump by the request's header (4.20+).
const NETLINK_GET_STRICT_CHK: libc::c_int = 12;

/// One route as the sink writes and reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    pub dst: IpAddr,
    pub prefix_len: u8,
    pub table: u32,
    /// The route protocol number (`proto` in `ip route`), which routing daemons select by.
    pub protocol: u8,
    pub metric: u32,
    /// The device's index.
    pub oif: u32,
}

fn family(addr: &IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn push_attr(m: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    m.extend_from_slice(&(len as u16).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(payload);
    m.resize(m.len().div_ceil(4) * 4, 0);
}

fn header(m: &mut Vec<u8>, kind: u16, flags: u16, seq: u32) {
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
}

fn rtmsg(m: &mut Vec<u8>, family: u8, dst_len: u8, table: u32, protocol: u8, kind: u8) {
    let table = u8::try_from(table)
        .ok()
        .filter(|&t| t != RT_TABLE_COMPAT)
        .unwrap_or(RT_TABLE_COMPAT);
    m.extend_from_slice(&[family, dst_len, 0, 0, table, protocol, RT_SCOPE_UNIVERSE, kind]);
    m.extend_from_slice(&0u32.to_ne_bytes());
}

fn finish(mut m: Vec<u8>) -> Vec<u8> {
    let len = m.len() as u32;
    m[..4].copy_from_slice(&len.to_ne_bytes());
    m
}

/// RTM_NEWROUTE (replacing a route of the same table, destination and metric) or
/// RTM_DELROUTE for `r`, asking for an acknowledgement.
pub fn change_request(add: bool, r: &Route, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(80);
    let (kind, flags) = if add {
        (RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE)
    } else {
        (RTM_DELROUTE, NLM_F_REQUEST | NLM_F_ACK)
    };
    header(&mut m, kind, flags, seq);
    rtmsg(&mut m, family(&r.dst), r.prefix_len, r.table, r.protocol, RTN_UNICAST);
    let dst = match r.dst {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    push_attr(&mut m, RTA_DST, &dst);
    push_attr(&mut m, RTA_TABLE, &r.table.to_ne_bytes());
    push_attr(&mut m, RTA_PRIORITY, &r.metric.to_ne_bytes());
    push_attr(&mut m, RTA_OIF, &r.oif.to_ne_bytes());
    finish(m)
}

/// A dump of `family`'s routes in `table` made by `protocol` (the kernel filters them when
/// the socket asks for strict checking; `parse_route` filters again for older kernels).
pub fn dump_request(family: u8, table: u32, protocol: u8, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(40);
    header(&mut m, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq);
    rtmsg(&mut m, family, 0, table, protocol, 0);
    push_attr(&mut m, RTA_TABLE, &table.to_ne_bytes());
    finish(m)
}

/// The route one RTM_NEWROUTE message (of a dump) describes, when it is a unicast route of
/// `table` and `protocol` with a destination.
pub fn parse_route(msg: &[u8], table: u32, protocol: u8) -> Option<Route> {
    let body = msg.get(NLMSG_HDR..)?;
    if body.len() < RTMSG_LEN {
        return None;
    }
    let (fam, dst_len, rtm_table, rtm_protocol, kind) = (body[0], body[1], body[4], body[5], body[7]);
    if rtm_protocol != protocol || kind != RTN_UNICAST {
        return None;
    }
    let mut route = Route {
        dst: IpAddr::from([0u8; 4]),
        prefix_len: dst_len,
        table: u32::from(rtm_table),
        protocol,
        metric: 0,
        oif: 0,
    };
    let mut dst = None;
    for (kind, v) in super::netlink::attr_list(&body[RTMSG_LEN..]) {
        match (kind, v.len()) {
            (RTA_DST, 4) if fam == libc::AF_INET as u8 => dst = Some(IpAddr::from(<[u8; 4]>::try_from(&v[..]).ok()?)),
            (RTA_DST, 16) if fam == libc::AF_INET6 as u8 => {
                dst = Some(IpAddr::from(<[u8; 16]>::try_from(&v[..]).ok()?));
            }
            (RTA_TABLE, 4) => route.table = u32::from_ne_bytes(v[..4].try_into().ok()?),
            (RTA_PRIORITY, 4) => route.metric = u32::from_ne_bytes(v[..4].try_into().ok()?),
            (RTA_OIF, 4) => route.oif = u32::from_ne_bytes(v[..4].try_into().ok()?),
            _ => {}
        }
    }
    route.dst = dst?;
    (route.table == table).then_some(route)
}

/// One reply message: its type, flags and whole bytes.
fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let rest = buf.get(off..)?;
        if rest.len() < NLMSG_HDR {
            return None;
        }
        let len = u32::from_ne_bytes(rest[..4].try_into().ok()?) as usize;
        if len < NLMSG_HDR || len > rest.len() {
            return None;
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        off += len.div_ceil(4) * 4;
        Some((kind, &rest[..len]))
    })
}

fn seq_of(msg: &[u8]) -> u32 {
    u32::from_ne_bytes([msg[8], msg[9], msg[10], msg[11]])
}

/// The error an NLMSG_ERROR message carries (0: an acknowledgement).
fn error_of(msg: &[u8]) -> i32 {
    msg.get(NLMSG_HDR..NLMSG_HDR + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(-libc::EIO, i32::from_ne_bytes)
}

/// An rtnetlink socket for one caller (a sink's thread).
pub struct RouteSocket {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl RouteSocket {
    pub fn open() -> io::Result<RouteSocket> {
        let sock = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(libc::NETLINK_ROUTE)),
        )?;
        // A kernel that does not answer must not hang the sink's thread for good.
        sock.set_read_timeout(Some(Duration::from_secs(2)))?;
        let on: libc::c_int = 1;
        // SAFETY: setsockopt reads an int from a pointer valid for the call. Failing is fine:
        // a kernel without strict checking dumps the whole family, filtered here instead.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                libc::SOL_NETLINK,
                NETLINK_GET_STRICT_CHK,
                std::ptr::from_ref(&on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Ok(RouteSocket {
            sock,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Adds `r`, or replaces the route of the same table, destination and metric.
    pub fn add(&mut self, r: &Route) -> io::Result<()> {
        let seq = self.next_seq();
        self.acked(&change_request(true, r, seq))
    }

    /// Deletes `r`; one that is not there is not an error.
    pub fn delete(&mut self, r: &Route) -> io::Result<()> {
        let seq = self.next_seq();
        match self.acked(&change_request(false, r, seq)) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH | libc::ENODEV)) => Ok(()),
            other => other,
        }
    }

    fn acked(&mut self, msg: &[u8]) -> io::Result<()> {
        self.sock.send(msg)?;
        let seq = seq_of(msg);
        loop {
            let n = (&self.sock).read(&mut self.buf)?;
            // What a dump cut short by a timeout left behind answers another request.
            for (kind, m) in messages(&self.buf[..n]).filter(|(_, m)| seq_of(m) == seq) {
                if kind == NLMSG_ERROR {
                    return match error_of(m) {
                        0 => Ok(()),
                        e => Err(io::Error::from_raw_os_error(-e)),
                    };
                }
            }
        }
    }

    /// The unicast routes of `table` made by `protocol`, both families.
    pub fn list(&mut self, table: u32, protocol: u8) -> io::Result<Vec<Route>> {
        let mut out = Vec::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            let seq = self.next_seq();
            self.sock.send(&dump_request(family, table, protocol, seq))?;
            'dump: loop {
                let n = (&self.sock).read(&mut self.buf)?;
                for (kind, m) in messages(&self.buf[..n]).filter(|(_, m)| seq_of(m) == seq) {
                    match kind {
                        NLMSG_DONE => break 'dump,
                        NLMSG_ERROR => match error_of(m) {
                            0 => break 'dump,
                            e => return Err(io::Error::from_raw_os_error(-e)),
                        },
                        RTM_NEWROUTE => out.extend(parse_route(m, table, protocol)),
                        _ => {}
                    }
                    let flags = u16::from_ne_bytes([m[6], m[7]]);
                    if flags & NLM_F_MULTI == 0 {
                        break 'dump;
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(dst: &str, len: u8, table: u32) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            prefix_len: len,
            table,
            protocol: 201,
            metric: 100,
            oif: 7,
        }
    }

    /// What the kernel sends back for a route, made from a request (the layouts agree).
    fn as_reply(request: &[u8]) -> Vec<u8> {
        let mut m = request.to_vec();
        m[4..6].copy_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        m[6..8].copy_from_slice(&NLM_F_MULTI.to_ne_bytes());
        m
    }

    #[test]
    fn a_route_reads_back_as_it_was_written_for_both_families_and_any_table() {
        for r in [
            route("198.18.200.10", 32, 200),
            route("2001:2:0:200::10", 128, 200),
            route("198.18.0.0", 24, 70_000),
        ] {
            let req = change_request(true, &r, 1);
            assert_eq!(req.len() % 4, 0);
            assert_eq!(u32::from_ne_bytes(req[..4].try_into().unwrap()) as usize, req.len());
            let table_byte = req[NLMSG_HDR + 4];
            assert_eq!(table_byte, if r.table < 256 { r.table as u8 } else { RT_TABLE_COMPAT });
            assert_eq!(parse_route(&as_reply(&req), r.table, 201), Some(r));
            assert_eq!(parse_route(&as_reply(&req), r.table + 1, 201), None, "another table");
            assert_eq!(parse_route(&as_reply(&req), r.table, 202), None, "another protocol");
        }
    }

    #[test]
    fn a_reply_buffer_splits_into_its_messages_and_an_error_reads_as_errno() {
        let a = as_reply(&change_request(true, &route("198.18.200.10", 32, 200), 1));
        let mut err = Vec::new();
        header(&mut err, NLMSG_ERROR, 0, 2);
        err.extend_from_slice(&(-libc::EEXIST).to_ne_bytes());
        let err = finish(err);
        let both: Vec<u8> = a.iter().chain(err.iter()).copied().collect();
        let got: Vec<(u16, usize)> = messages(&both).map(|(k, m)| (k, m.len())).collect();
        assert_eq!(got, [(RTM_NEWROUTE, a.len()), (NLMSG_ERROR, err.len())]);
        assert_eq!(error_of(&err), -libc::EEXIST);
        assert_eq!(messages(&both[..a.len() - 1]).count(), 0, "a cut message is not read");
    }
}
