//! Datagrams in batches: recvmmsg(2) and sendmmsg(2) on a UDP socket, one system call for up to
//! `BATCH` datagrams each way (the DNS server's UDP path; gdnsd does the same). The libc FFI is
//! here alone, each call with its SAFETY.
use std::{
    io,
    mem::{size_of, zeroed},
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket},
    os::fd::AsRawFd,
};

/// Datagrams per system call.
pub const BATCH: usize = 32;
/// The longest datagram taken whole; a longer one is cut (and then fails to decode).
pub const MAX_DATAGRAM: usize = 4096;

/// Buffers for one recvmmsg: the datagrams and where they came from.
pub struct RecvBatch {
    data: Vec<u8>,
    lens: [usize; BATCH],
    addrs: [libc::sockaddr_storage; BATCH],
    count: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            data: vec![0; BATCH * MAX_DATAGRAM],
            lens: [0; BATCH],
            // SAFETY: sockaddr_storage is plain data; all zeroes is a valid (AF_UNSPEC) value.
            addrs: unsafe { zeroed() },
            count: 0,
        }
    }
}

impl RecvBatch {
    /// Waits for datagrams (at most the socket's read timeout) and takes every one queued, up
    /// to `BATCH`; returns how many.
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        // SAFETY: iovec and mmsghdr are plain data; the pointers are set below.
        let mut iovs: [libc::iovec; BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for (i, (iov, hdr)) in iovs.iter_mut().zip(hdrs.iter_mut()).enumerate() {
            iov.iov_base = self.data[i * MAX_DATAGRAM..].as_mut_ptr().cast();
            iov.iov_len = MAX_DATAGRAM;
            hdr.msg_hdr.msg_iov = iov;
            hdr.msg_hdr.msg_iovlen = 1;
            hdr.msg_hdr.msg_name = (&raw mut self.addrs[i]).cast();
            hdr.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        // SAFETY: every header points into `self.data` (a slot of MAX_DATAGRAM bytes each) and
        // `self.addrs`, which outlive the call; BATCH headers are valid; MSG_WAITFORONE makes the
        // call return once one datagram is in, with what else was already queued.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.count = 0;
            return Err(io::Error::last_os_error());
        }
        self.count = n as usize;
        for (len, hdr) in self.lens.iter_mut().zip(&hdrs).take(self.count) {
            *len = (hdr.msg_len as usize).min(MAX_DATAGRAM);
        }
        Ok(self.count)
    }

    /// Datagram `i` of the last batch and its sender (None for a family other than IP).
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        let start = i * MAX_DATAGRAM;
        (&self.data[start..start + self.lens[i]], from_storage(&self.addrs[i]))
    }
}

/// Sends each (datagram, destination); returns how many the kernel took. Datagrams it did not
/// take (a full socket buffer) are dropped, as a UDP server's answers may be.
pub fn send_batch(sock: &UdpSocket, out: &[(Vec<u8>, SocketAddr)]) -> io::Result<usize> {
    let mut sent = 0;
    for chunk in out.chunks(BATCH) {
        // SAFETY: plain data, filled below.
        let mut addrs: [libc::sockaddr_storage; BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut iovs: [libc::iovec; BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for (i, (data, to)) in chunk.iter().enumerate() {
            let len = to_storage(*to, &mut addrs[i]);
            iovs[i].iov_base = data.as_ptr().cast_mut().cast();
            iovs[i].iov_len = data.len();
            hdrs[i].msg_hdr.msg_iov = &raw mut iovs[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
            hdrs[i].msg_hdr.msg_name = (&raw mut addrs[i]).cast();
            hdrs[i].msg_hdr.msg_namelen = len;
        }
        // SAFETY: the first chunk.len() headers point at live buffers and addresses of this
        // frame; sendmmsg only reads them (the iovec's pointer is cast from a shared slice).
        let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), chunk.len() as libc::c_uint, 0) };
        if n < 0 {
            return if sent > 0 {
                Ok(sent)
            } else {
                Err(io::Error::last_os_error())
            };
        }
        sent += n as usize;
    }
    Ok(sent)
}

fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large and
            // aligned enough for.
            let a: &libc::sockaddr_in = unsafe { &*std::ptr::from_ref(s).cast() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*std::ptr::from_ref(s).cast() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn to_storage(addr: SocketAddr, s: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let a: &mut libc::sockaddr_in = unsafe { &mut *std::ptr::from_mut(s).cast() };
            a.sin_family = libc::AF_INET as libc::sa_family_t;
            a.sin_port = v4.port().to_be();
            a.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for a sockaddr_in6.
            let a: &mut libc::sockaddr_in6 = unsafe { &mut *std::ptr::from_mut(s).cast() };
            a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            a.sin6_port = v6.port().to_be();
            a.sin6_addr.s6_addr = v6.ip().octets();
            a.sin6_flowinfo = v6.flowinfo();
            a.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_goes_out_and_comes_back_with_its_senders() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = server.local_addr().unwrap();
        let out: Vec<(Vec<u8>, SocketAddr)> = (0..40u8).map(|i| (vec![i; usize::from(i) + 1], to)).collect();
        assert_eq!(send_batch(&client, &out).unwrap(), 40, "two system calls' worth");
        let mut batch = RecvBatch::default();
        let mut got = Vec::new();
        while got.len() < 40 {
            let n = batch.recv(&server).unwrap();
            for i in 0..n {
                let (data, from) = batch.get(i);
                assert_eq!(from, Some(client.local_addr().unwrap()));
                got.push(data.to_vec());
            }
        }
        assert_eq!(got, out.into_iter().map(|(d, _)| d).collect::<Vec<_>>());
        let v6 = SocketAddr::new("2001:2::9".parse().unwrap(), 53);
        // SAFETY: plain data.
        let mut s: libc::sockaddr_storage = unsafe { zeroed() };
        to_storage(v6, &mut s);
        assert_eq!(from_storage(&s), Some(v6));
    }
}
