//! Real listeners (the namespace's own kernel TCP/UDP stack) and nftables port rules.
use std::{
    net::{SocketAddr, TcpListener, UdpSocket},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::Netns;

impl Netns {
    /// A TCP listener bound inside this namespace. The kernel completes handshakes for it
    /// whether or not anything accepts.
    pub fn tcp_listen(&self, addr: &str) -> TcpListener {
        let addr: SocketAddr = addr.parse().unwrap_or_else(|e| panic!("bad address {addr}: {e}"));
        self.enter(|| TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind tcp {addr}: {e}")))
    }

    /// A UDP socket bound inside this namespace.
    pub fn udp_bind(&self, addr: &str) -> UdpSocket {
        let addr: SocketAddr = addr.parse().unwrap_or_else(|e| panic!("bad address {addr}: {e}"));
        self.enter(|| UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind udp {addr}: {e}")))
    }

    /// Silently drops inbound traffic to `port` (`proto` is "tcp" or "udp").
    pub fn nft_drop(&self, proto: &str, port: u16) {
        self.nft_input_rule(&format!("{proto} dport {port} drop"));
    }

    /// Answers inbound traffic to `port` with an ICMP/ICMPv6 error of the given type name
    /// (e.g. v4 "admin-prohibited", v6 "admin-prohibited").
    pub fn nft_reject_icmp(&self, proto: &str, port: u16, icmp_v4: &str, icmp_v6: &str) {
        self.nft_input_rule(&format!(
            "meta nfproto ipv4 {proto} dport {port} counter reject with icmp type {icmp_v4}"
        ));
        self.nft_input_rule(&format!(
            "meta nfproto ipv6 {proto} dport {port} counter reject with icmpv6 type {icmp_v6}"
        ));
    }

    /// Packets matched so far by the counters of this namespace's rules that mention `port`.
    pub fn nft_packets(&self, port: u16) -> u64 {
        self.nft_rule_packets(&format!("dport {port} "))
    }

    /// Packets matched so far by the counters of the input rules whose text contains `needle`.
    pub fn nft_rule_packets(&self, needle: &str) -> u64 {
        let listing = self.exec("nft", &["list", "chain", "inet", "probed_test", "input"]);
        counted_packets(&listing, needle)
    }

    /// Adds one rule to an input chain of this namespace's own table.
    pub fn nft_input_rule(&self, rule: &str) {
        self.nft(&format!(
            "table inet probed_test {{\n chain input {{\n type filter hook input priority 0; policy accept;\n }}\n}}\n\
             add rule inet probed_test input {rule}\n"
        ));
    }
}

/// A UDP service in the backend namespace that answers every datagram with `answer`
/// followed by the request, until dropped.
pub struct Responder {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Responder {
    pub fn start(ns: &Netns, addr: &str, answer: &'static [u8]) -> Self {
        let sock = ns.udp_bind(addr);
        sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // The socket belongs to the backend namespace; the thread serving it need not.
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !flag.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let mut reply = answer.to_vec();
                    reply.extend_from_slice(&buf[..n]);
                    let _ = sock.send_to(&reply, from);
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sums the `counter packets N` of the rules in an `nft list` listing whose text contains `needle`.
pub fn counted_packets(listing: &str, needle: &str) -> u64 {
    listing
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| {
            l.split("counter packets ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
