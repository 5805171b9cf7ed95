//! Gossip over UDP, authenticated with the cluster's shared key. chitchat itself trusts every
//! datagram: anyone who can reach its port could add nodes, forge any node's verdicts, or use
//! the nodes to amplify traffic at a third party. Here every datagram carries an HMAC-SHA256
//! tag over all of it, checked (in constant time) before a byte of it is decoded, a send
//! time, and a message id; a datagram with a wrong tag, sent more than `MAX_SKEW` ago (or
//! ahead), or seen before (from any address) is dropped without an answer, so a captured
//! datagram replayed with a victim's source address draws nothing: no reflection. What an attacker on the cluster's
//! network can still do: drop or delay datagrams (partition a node), and read them: verdicts
//! and node names travel in clear (use a private network, WireGuard or IPsec if that matters).
//!
//! chitchat fills a message up to the largest UDP payload, so with the header and tag a
//! message may not fit one datagram: it is cut into parts of at most `PART_BYTES`, each
//! authenticated on its own, and put back together on arrival (a message whose parts do not
//! all arrive within `REASSEMBLY_WAIT` is dropped, as a lost datagram would be).
//!
//! Each datagram also names, under the tag, the address it was sent to; a node takes only
//! those sent to its own address (`cluster.advertise`, or `listen` when it is specific). So a
//! datagram captured on the way can be replayed only to the node it was meant for, which has
//! seen its id and drops it: sent again from a victim's address, to any node, it draws no
//! answer. (A node listed by another of its addresses in a seed list refuses what is sent
//! there, and says so in the log.)
//!
//! Datagram: `PRBG` | version 2 | part | parts | 0 | send time (unix ms, u64) | message id
//! (u64) | destination (IPv6 or IPv4-mapped address, 16 bytes; port, 2) | payload part | tag
//! (32 bytes, over everything before it).
use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use async_trait::async_trait;
use chitchat::{
    transport::{Socket, Transport},
    ChitchatMessage, Deserializable, Serializable,
};
use ring::hmac;

const MAGIC: &[u8; 4] = b"PRBG";
/// 3 since 2026-12-06: endpoints are named by their check's question (`checks::identity`), not
/// its whole key; nodes on either side of that change name them differently.
const VERSION: u8 = 3;
const HEADER: usize = 42;
const TAG: usize = 32;
/// The most payload bytes in one datagram: with the header and tag, well under UDP's 65,507.
pub const PART_BYTES: usize = 32 * 1024;
/// More parts than any chitchat message needs (it is at most 65,507 bytes).
const MAX_PARTS: usize = 4;
/// How far a datagram's send time may be from ours: the nodes' clocks must agree this well.
pub const MAX_SKEW: Duration = Duration::from_secs(30);
/// How long the first part of a message waits for the others.
const REASSEMBLY_WAIT: Duration = Duration::from_secs(2);
/// Messages being put together at once, from all peers.
const MAX_PARTIAL: usize = 64;
/// How long a message id is remembered: a datagram taken is at most `MAX_SKEW` off this node's
/// clock, so it passes the clock check until up to twice that after it came (review L7: kept
/// for `MAX_SKEW` alone, a datagram from a node whose clock leads could be replayed once its
/// id was forgotten).
const SEEN_FOR: Duration = Duration::from_secs(2 * MAX_SKEW.as_secs());
/// Message ids remembered to refuse replays: enough for `SEEN_FOR` of a busy cluster's traffic.
const MAX_SEEN: usize = 400_000;
/// The shortest key: 32 bytes (256 bits, HMAC-SHA256's strength).
pub const MIN_KEY_BYTES: usize = 32;

/// What the transport turned away, for the metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes of gossip sent and received (whole datagrams, header and tag included; every
    /// datagram received, dropped or not).
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub accepted: AtomicU64,
    /// Wrong tag (no key, another key, or altered on the way), or too short to carry one.
    pub forged: AtomicU64,
    /// Sent longer ago (or further ahead) than `MAX_SKEW`.
    pub stale: AtomicU64,
    /// A message id already seen.
    pub replayed: AtomicU64,
    /// Authentic but not a message this version understands.
    pub malformed: AtomicU64,
    /// Authentic but sent to another address than this node's (a replay aimed elsewhere, or
    /// a seed list naming this node by another address).
    pub misdirected: AtomicU64,
}

/// The shared key, ready to sign and verify.
#[derive(Clone)]
pub struct Key(hmac::Key);

/// A key file whose secret is too short to be a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes long: the cluster key needs at least {MIN_KEY_BYTES}, e.g. `head -c 32 /dev/urandom | base64`")]
pub struct ShortKey {
    pub len: usize,
}

impl Key {
    /// A key from the key file's content (surrounding whitespace ignored).
    pub fn new(secret: &[u8]) -> Result<Key, ShortKey> {
        let secret = secret.trim_ascii();
        if secret.len() < MIN_KEY_BYTES {
            return Err(ShortKey { len: secret.len() });
        }
        Ok(Key(hmac::Key::new(hmac::HMAC_SHA256, secret)))
    }
}

/// chitchat's transport: UDP with the cluster key.
pub struct AuthTransport {
    key: Key,
    counters: Arc<Counters>,
    /// The address other nodes send to (`cluster.advertise`).
    advertise: SocketAddr,
}

impl AuthTransport {
    pub fn new(key: Key, counters: Arc<Counters>, advertise: SocketAddr) -> AuthTransport {
        AuthTransport {
            key,
            counters,
            advertise,
        }
    }
}

#[async_trait]
impl Transport for AuthTransport {
    async fn open(&self, listen: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = tokio::net::UdpSocket::bind(listen)
            .await
            .with_context(|| format!("bind the gossip socket {listen}/udp (cluster.listen)"))?;
        let mut first = [0u8; 8];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut first)
            .map_err(|_| anyhow::anyhow!("no random numbers for gossip message ids"))?;
        let mut mine = vec![canonical(self.advertise)];
        if let Ok(local) = socket.local_addr().map(canonical) {
            if !local.ip().is_unspecified() && !mine.contains(&local) {
                mine.push(local);
            }
        }
        Ok(Box::new(AuthSocket {
            socket,
            mine,
            last_misdirected_log: None,
            key: self.key.clone(),
            counters: self.counters.clone(),
            next_id: u64::from_le_bytes(first),
            recv_buf: vec![0; 65_536],
            partial: HashMap::new(),
            seen: Seen::default(),
        }))
    }
}

struct AuthSocket {
    socket: tokio::net::UdpSocket,
    /// The destinations this node takes datagrams for.
    mine: Vec<SocketAddr>,
    last_misdirected_log: Option<Instant>,
    key: Key,
    counters: Arc<Counters>,
    next_id: u64,
    recv_buf: Vec<u8>,
    partial: HashMap<(SocketAddr, u64), Partial>,
    seen: Seen,
}

/// The parts of one message received so far.
struct Partial {
    parts: Vec<Option<Vec<u8>>>,
    since: Instant,
}

/// Recently seen (message id, part) pairs, oldest first, bounded. The sender's address is not
/// part of the key: the tag does not cover it, so a datagram captured on the way and sent
/// again from any other address is the same datagram, and refused. (Ids start at a random
/// 64-bit number on each node and count up, so two nodes' ids do not meet.)
#[derive(Default)]
struct Seen {
    order: VecDeque<((u64, u8), Instant)>,
    set: std::collections::HashSet<(u64, u8)>,
}

impl Seen {
    /// False when `id` was seen within `SEEN_FOR` (a replay).
    fn insert(&mut self, id: (u64, u8), now: Instant) -> bool {
        while let Some(&(old, at)) = self.order.front() {
            if now.duration_since(at) <= SEEN_FOR && self.order.len() < MAX_SEEN {
                break;
            }
            self.order.pop_front();
            self.set.remove(&old);
        }
        if !self.set.insert(id) {
            return false;
        }
        self.order.push_back((id, now));
        true
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `a` with an IPv4-mapped IPv6 address written as IPv4, so both spellings compare equal.
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

fn put_addr(d: &mut Vec<u8>, a: SocketAddr) {
    let ip = match a.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    };
    d.extend_from_slice(&ip.octets());
    d.extend_from_slice(&a.port().to_be_bytes());
}

/// The datagrams that carry `payload` as message `id` to `to`, sent at `now_ms`.
pub fn seal(key: &Key, payload: &[u8], id: u64, now_ms: u64, to: SocketAddr) -> Vec<Vec<u8>> {
    let chunks: Vec<&[u8]> = if payload.is_empty() {
        vec![&[][..]]
    } else {
        payload.chunks(PART_BYTES).collect()
    };
    let parts = chunks.len() as u8;
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let mut d = Vec::with_capacity(HEADER + chunk.len() + TAG);
            d.extend_from_slice(MAGIC);
            d.extend_from_slice(&[VERSION, i as u8, parts, 0]);
            d.extend_from_slice(&now_ms.to_be_bytes());
            d.extend_from_slice(&id.to_be_bytes());
            put_addr(&mut d, to);
            d.extend_from_slice(chunk);
            let tag = hmac::sign(&key.0, &d);
            d.extend_from_slice(tag.as_ref());
            d
        })
        .collect()
}

/// One authentic datagram's fields.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened<'a> {
    pub part: u8,
    pub parts: u8,
    pub sent_ms: u64,
    pub id: u64,
    /// Where the sender sent it (IPv4 written as such).
    pub to: SocketAddr,
    pub payload: &'a [u8],
}

/// Why a datagram was dropped.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    Forged,
    Stale,
    Malformed,
}

/// Checks `datagram`'s tag first, then its header and send time against `now_ms`.
pub fn open<'a>(key: &Key, datagram: &'a [u8], now_ms: u64) -> Result<Opened<'a>, Refused> {
    if datagram.len() < HEADER + TAG {
        return Err(Refused::Forged);
    }
    let (body, tag) = datagram.split_at(datagram.len() - TAG);
    hmac::verify(&key.0, body, tag).map_err(|_| Refused::Forged)?;
    let (part, parts) = (body[5], body[6]);
    if &body[..4] != MAGIC || body[4] != VERSION || parts == 0 || usize::from(parts) > MAX_PARTS || part >= parts {
        return Err(Refused::Malformed);
    }
    let sent_ms = u64::from_be_bytes(body[8..16].try_into().expect("8 bytes"));
    if sent_ms.abs_diff(now_ms) > MAX_SKEW.as_millis() as u64 {
        return Err(Refused::Stale);
    }
    let ip: [u8; 16] = body[24..40].try_into().expect("16 bytes");
    let port = u16::from_be_bytes([body[40], body[41]]);
    Ok(Opened {
        part,
        parts,
        sent_ms,
        id: u64::from_be_bytes(body[16..24].try_into().expect("8 bytes")),
        to: canonical(SocketAddr::new(std::net::Ipv6Addr::from(ip).into(), port)),
        payload: &body[HEADER..],
    })
}

#[async_trait]
impl Socket for AuthSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let payload = msg.serialize_to_vec();
        self.next_id = self.next_id.wrapping_add(1);
        for d in seal(&self.key, &payload, self.next_id, unix_ms(), to) {
            // Like chitchat's own UDP transport: a datagram that cannot go is a lost one.
            match self.socket.send_to(&d, to).await {
                Ok(n) => {
                    self.counters.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => log::debug!("gossip: send to {to}: {e}"),
            }
        }
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        loop {
            let (len, from) = match self.socket.recv_from(&mut self.recv_buf).await {
                Ok(r) => r,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e).context("receive gossip"),
            };
            self.counters.bytes_received.fetch_add(len as u64, Ordering::Relaxed);
            if let Some(message) = self.take(from, len) {
                return Ok((from, message));
            }
        }
    }
}

impl AuthSocket {
    /// The message the datagram of `len` bytes in the buffer completes, if any.
    fn take(&mut self, from: SocketAddr, len: usize) -> Option<ChitchatMessage> {
        let c = &self.counters;
        let opened = match open(&self.key, &self.recv_buf[..len], unix_ms()) {
            Ok(o) => o,
            Err(why) => {
                let counter = match why {
                    Refused::Forged => &c.forged,
                    Refused::Stale => &c.stale,
                    Refused::Malformed => &c.malformed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let now = Instant::now();
        if !self.mine.contains(&opened.to) {
            c.misdirected.fetch_add(1, Ordering::Relaxed);
            if self
                .last_misdirected_log
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
            {
                self.last_misdirected_log = Some(now);
                log::warn!(
                    "gossip: an authentic datagram from {from} was sent to {}, not to this node's {:?}: \
                     dropped (a replay aimed here, or a seed list naming this node by another address: \
                     seeds must name cluster.advertise)",
                    opened.to,
                    self.mine
                );
            }
            return None;
        }
        if !self.seen.insert((opened.id, opened.part), now) {
            c.replayed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let whole = if opened.parts == 1 {
            opened.payload.to_vec()
        } else {
            self.partial
                .retain(|_, p| now.duration_since(p.since) < REASSEMBLY_WAIT);
            if self.partial.len() >= MAX_PARTIAL && !self.partial.contains_key(&(from, opened.id)) {
                // Full of messages whose other parts have not come: the oldest is lost.
                let oldest = self.partial.iter().min_by_key(|(_, p)| p.since).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    self.partial.remove(&k);
                }
            }
            let entry = self.partial.entry((from, opened.id)).or_insert_with(|| Partial {
                parts: vec![None; usize::from(opened.parts)],
                since: now,
            });
            if entry.parts.len() != usize::from(opened.parts) {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            entry.parts[usize::from(opened.part)] = Some(opened.payload.to_vec());
            if entry.parts.iter().any(Option::is_none) {
                return None;
            }
            let done = self.partial.remove(&(from, opened.id))?;
            done.parts.into_iter().flatten().flatten().collect()
        };
        match ChitchatMessage::deserialize(&mut &whole[..]) {
            Ok(m) => {
                c.accepted.fetch_add(1, Ordering::Relaxed);
                Some(m)
            }
            Err(e) => {
                log::debug!("gossip from {from}: an authentic message that does not decode: {e}");
                c.malformed.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fill: u8) -> Key {
        Key::new(&[fill; 32]).unwrap()
    }

    const NOW: u64 = 1_796_173_323_456;
    const TO: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 1)), 7946);

    #[test]
    fn a_sealed_message_opens_with_the_same_key_only() {
        let k = key(1);
        let d = seal(&k, b"hello", 7, NOW, TO);
        assert_eq!(d.len(), 1);
        let o = open(&k, &d[0], NOW + 10).unwrap();
        assert_eq!(
            o,
            Opened {
                part: 0,
                parts: 1,
                sent_ms: NOW,
                id: 7,
                to: TO,
                payload: b"hello"
            }
        );
        assert_eq!(open(&key(2), &d[0], NOW), Err(Refused::Forged));
    }

    #[test]
    fn any_changed_byte_is_a_forgery() {
        let k = key(1);
        let d = seal(&k, b"verdicts", 1, NOW, TO).remove(0);
        for i in 0..d.len() {
            let mut bad = d.clone();
            bad[i] ^= 0x40;
            assert_eq!(open(&k, &bad, NOW), Err(Refused::Forged), "byte {i}");
        }
        assert_eq!(open(&k, &d[..HEADER + TAG - 1], NOW), Err(Refused::Forged));
        assert_eq!(open(&k, &[], NOW), Err(Refused::Forged));
    }

    #[test]
    fn old_or_future_datagrams_are_stale() {
        let k = key(1);
        let skew = MAX_SKEW.as_millis() as u64;
        let d = seal(&k, b"x", 1, NOW, TO).remove(0);
        assert!(open(&k, &d, NOW + skew).is_ok());
        assert_eq!(open(&k, &d, NOW + skew + 1), Err(Refused::Stale));
        assert_eq!(open(&k, &d, NOW - skew - 1), Err(Refused::Stale));
    }

    #[test]
    fn big_messages_are_cut_into_parts_that_each_fit_a_datagram() {
        let k = key(1);
        let payload: Vec<u8> = (0..65_507u32).map(|i| (i % 251) as u8).collect();
        let d = seal(&k, &payload, 9, NOW, TO);
        assert_eq!(d.len(), 2);
        assert!(d
            .iter()
            .all(|d| d.len() <= HEADER + PART_BYTES + TAG && d.len() <= 65_507));
        let mut back = Vec::new();
        for (i, dg) in d.iter().enumerate() {
            let o = open(&k, dg, NOW).unwrap();
            assert_eq!((o.part as usize, o.parts, o.id), (i, 2, 9));
            back.extend_from_slice(o.payload);
        }
        assert_eq!(back, payload);
    }

    #[test]
    fn short_keys_are_refused() {
        let e = Key::new(b"  short secret \n").err().unwrap().to_string();
        assert!(e.contains("12 bytes") && e.contains("at least 32"), "{e}");
        assert!(Key::new(&[b'k'; 32]).is_ok());
    }

    #[test]
    fn replays_are_refused_while_they_could_still_pass_the_clock() {
        let mut seen = Seen::default();
        let t0 = Instant::now();
        assert!(seen.insert((1, 0), t0));
        assert!(!seen.insert((1, 0), t0 + Duration::from_secs(1)));
        assert!(seen.insert((1, 1), t0), "another part of the message");
        assert!(seen.insert((2, 0), t0));
        // Still refused after MAX_SKEW: sent by a node whose clock leads by up to MAX_SKEW,
        // it would pass the clock check until 2 x MAX_SKEW after it came.
        assert!(!seen.insert((1, 0), t0 + MAX_SKEW + Duration::from_secs(1)));
        // Forgotten once the clock check alone refuses it, whatever the sender's skew.
        assert!(seen.insert((1, 0), t0 + SEEN_FOR + Duration::from_secs(1)));
    }

    /// Two real sockets on loopback: a message passes; a forged datagram and a replay of a
    /// genuine one are dropped and counted; a two-part message comes back whole.
    #[tokio::test]
    async fn over_loopback() {
        use chitchat::ChitchatMessage;
        let counters = Arc::new(Counters::default());
        let t = AuthTransport::new(key(3), counters.clone(), "127.0.0.1:1".parse().unwrap());
        let mut a = t.open("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let raw = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // Find a's port by sending it a message from b and reading the source on a.
        let mut b = t.open("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let probe = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let probe_addr = probe.local_addr().unwrap();
        b.send(probe_addr, ChitchatMessage::BadCluster).await.unwrap();
        let mut buf = vec![0u8; 65_536];
        let (n, b_addr) = probe.recv_from(&mut buf).await.unwrap();
        let genuine = buf[..n].to_vec();
        assert!(open(&key(3), &genuine, unix_ms()).is_ok());
        // a's address: a sends to the probe too.
        a.send(probe_addr, ChitchatMessage::BadCluster).await.unwrap();
        let (_, a_addr) = probe.recv_from(&mut buf).await.unwrap();

        // Forged (another key), then a genuine message: only the genuine one comes out.
        let forged = seal(
            &key(4),
            &ChitchatMessage::BadCluster.serialize_to_vec(),
            5,
            unix_ms(),
            a_addr,
        );
        raw.send_to(&forged[0], a_addr).unwrap();
        b.send(a_addr, ChitchatMessage::BadCluster).await.unwrap();
        let (from, m) = tokio::time::timeout(Duration::from_secs(2), a.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((from, m), (b_addr, ChitchatMessage::BadCluster));
        assert_eq!(counters.forged.load(Ordering::Relaxed), 1);

        // A replay of b's genuine datagram from its own address is dropped (its id was seen
        // by the probe, not by a: so replay one a has seen).
        let again = seal(
            &key(3),
            &ChitchatMessage::BadCluster.serialize_to_vec(),
            77,
            unix_ms(),
            a_addr,
        );
        raw.send_to(&again[0], a_addr).unwrap();
        let (from, _) = tokio::time::timeout(Duration::from_secs(2), a.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(from, raw.local_addr().unwrap());
        raw.send_to(&again[0], a_addr).unwrap();
        // The same datagram from another address (a spoofed victim, drawing chitchat's answer)
        // is the same replay.
        let elsewhere = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        elsewhere.send_to(&again[0], a_addr).unwrap();
        // The replays are refused; a marker message after them shows they were read.
        // chitchat's Digest type cannot be named outside it.
        #[allow(clippy::default_trait_access)]
        let big = || ChitchatMessage::Syn {
            cluster_id: "c".repeat(40_000),
            digest: Default::default(),
        };
        b.send(a_addr, big()).await.unwrap();
        let (from, m) = tokio::time::timeout(Duration::from_secs(2), a.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((from, m), (b_addr, big()), "a two-part message, whole");
        assert_eq!(
            counters.replayed.load(Ordering::Relaxed),
            2,
            "the replay from elsewhere too"
        );
        // A genuine datagram meant for b, replayed to a (which never saw its id) from a
        // victim's address: dropped for its destination, so nothing answers the victim.
        let meant_for_b = seal(
            &key(3),
            &ChitchatMessage::BadCluster.serialize_to_vec(),
            99,
            unix_ms(),
            b_addr,
        );
        elsewhere.send_to(&meant_for_b[0], a_addr).unwrap();
        b.send(a_addr, ChitchatMessage::BadCluster).await.unwrap();
        let (from, _) = tokio::time::timeout(Duration::from_secs(2), a.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(from, b_addr, "the marker after it, not the misdirected datagram");
        assert_eq!(counters.misdirected.load(Ordering::Relaxed), 1);
    }
}
