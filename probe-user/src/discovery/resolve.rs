//! Asking the resolvers: one question over UDP (EDNS, 1232 bytes), again over TCP when the
//! answer comes truncated, each resolver in turn until one answers (`ask`); and the questions
//! a discovery needs, put together into its endpoints (`lookup`). Each exchange is bounded by
//! the discovery's `timeout`; an answer is taken only from the resolver asked, with the id and
//! question of the query.
use std::{net::SocketAddr, str::FromStr, time::Duration};

use hickory_server::proto::{
    op::{Edns, Message, MessageType, Query},
    rr::{Name, RecordType},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpStream, UdpSocket},
};

use super::{
    answer::{self, Found, Reply},
    diff::Wanted,
};
use crate::config::{Discovery, DiscoveryRecords};

/// The UDP payload offered (the DNS flag day 2020 size).
const PAYLOAD: u16 = 1232;
/// At most this many endpoints from one name: more is taken for a mistake, and changes nothing.
pub(super) const MAX_ENDPOINTS: usize = 4096;
/// At most this many SRV targets asked for their addresses when the answer gives none.
const MAX_TARGETS: usize = 64;

/// What a lookup found: the endpoints, and when to ask again (the smallest TTL seen).
#[derive(Debug)]
pub(super) struct Lookup {
    pub wanted: Vec<Wanted>,
    pub ttl: Option<u32>,
}

/// Asks what `d` needs and makes the endpoints. Err when any question failed at every
/// resolver: a partial answer (the A records, but not the AAAA) would drop endpoints that are
/// still there.
pub(super) async fn lookup(d: &Discovery) -> Result<Lookup, String> {
    let name = Name::from_str(&d.name).map_err(|e| format!("{}: {e}", d.name))?;
    let mut ttl = Ttl::default();
    let mut wanted = Vec::new();
    let port = d.port.unwrap_or(0);
    let families: &[RecordType] = match d.records {
        DiscoveryRecords::A => &[RecordType::A],
        DiscoveryRecords::Aaaa => &[RecordType::AAAA],
        DiscoveryRecords::Both => &[RecordType::A, RecordType::AAAA],
        DiscoveryRecords::Srv => &[],
    };
    for &rtype in families {
        let (records, t, _) = ask_records(d, &name, rtype).await?;
        ttl.take(t);
        for f in records {
            if let Found::Address(ip) = f {
                wanted.push(Wanted::new(ip, port, 1, None));
            }
        }
    }
    if d.records == DiscoveryRecords::Srv {
        let (records, t, msg) = ask_records(d, &name, RecordType::SRV).await?;
        ttl.take(t);
        let mut services: Vec<(u16, u16, u16, Name)> = records
            .into_iter()
            .filter_map(|f| match f {
                // A target of "." says the service is not offered (RFC 2782).
                Found::Service {
                    priority,
                    weight,
                    port,
                    target,
                } if !target.is_root() => Some((priority, weight, port, target)),
                _ => None,
            })
            .collect();
        services.sort_by_key(|s| s.0);
        let mut asked = 0;
        for (priority, weight, port, target) in services {
            let (mut addresses, t) = answer::glue(&msg, &target);
            ttl.take(t);
            if addresses.is_empty() {
                asked += 1;
                if asked > MAX_TARGETS {
                    return Err(format!(
                        "more than {MAX_TARGETS} SRV targets without addresses in the answer"
                    ));
                }
                for rtype in [RecordType::A, RecordType::AAAA] {
                    let (records, t, _) = ask_records(d, &target, rtype).await?;
                    ttl.take(t);
                    addresses.extend(records.into_iter().filter_map(|f| match f {
                        Found::Address(ip) => Some(ip),
                        Found::Service { .. } => None,
                    }));
                }
            }
            wanted.extend(
                addresses
                    .into_iter()
                    .map(|ip| Wanted::of_service(ip, port, weight, priority)),
            );
        }
    }
    if wanted.len() > MAX_ENDPOINTS {
        return Err(format!(
            "{} records, more than the {MAX_ENDPOINTS} a discovery takes",
            wanted.len()
        ));
    }
    Ok(Lookup {
        wanted: super::diff::dedup(wanted),
        ttl: ttl.0,
    })
}

/// The smallest TTL of several answers.
#[derive(Default)]
struct Ttl(Option<u32>);

impl Ttl {
    fn take(&mut self, t: Option<u32>) {
        if let Some(t) = t {
            self.0 = Some(self.0.map_or(t, |m| m.min(t)));
        }
    }
}

/// The records of one question, their TTL and the message they came in.
async fn ask_records(
    d: &Discovery,
    name: &Name,
    rtype: RecordType,
) -> Result<(Vec<Found>, Option<u32>, Message), String> {
    let (msg, reply) = ask(d, name, rtype).await?;
    match reply {
        Reply::Records { records, ttl } => Ok((records, ttl, msg)),
        Reply::Failed(why) => Err(why),
    }
}

/// Asks each resolver in turn; the first answer to go by, or why none was.
async fn ask(d: &Discovery, name: &Name, rtype: RecordType) -> Result<(Message, Reply), String> {
    let mut why = String::new();
    for &resolver in &d.resolvers {
        match exchange(resolver, name, rtype, d.timeout).await {
            Ok(msg) => match answer::read(&msg, name, rtype) {
                Reply::Failed(w) => why = format!("{resolver}: {name} {rtype}: {w}"),
                reply => return Ok((msg, reply)),
            },
            Err(w) => why = format!("{resolver}: {name} {rtype}: {w}"),
        }
    }
    Err(why)
}

/// One question to one resolver: over UDP, then over TCP if the answer was truncated.
async fn exchange(resolver: SocketAddr, name: &Name, rtype: RecordType, timeout: Duration) -> Result<Message, String> {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(name.clone(), rtype));
    let mut edns = Edns::new();
    edns.set_max_payload(PAYLOAD);
    query.set_edns(edns);
    let wire = query.to_vec().map_err(|e| e.to_string())?;
    let id = query.metadata.id;
    let udp = tokio::time::timeout(timeout, over_udp(resolver, &wire, id))
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))??;
    if !udp.metadata.truncation {
        return Ok(udp);
    }
    tokio::time::timeout(timeout, over_tcp(resolver, &wire, id))
        .await
        .map_err(|_| format!("no answer over TCP within {timeout:?}"))?
}

/// Sends `wire` and waits for the datagram from `resolver` that answers query `id`; others are
/// dropped (a late answer to an earlier query, a stray).
async fn over_udp(resolver: SocketAddr, wire: &[u8], id: u16) -> Result<Message, String> {
    let local: SocketAddr = if resolver.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await.map_err(|e| format!("a UDP socket: {e}"))?;
    socket.connect(resolver).await.map_err(|e| format!("connect: {e}"))?;
    socket.send(wire).await.map_err(|e| format!("send: {e}"))?;
    let mut buf = vec![0u8; usize::from(PAYLOAD).max(4096)];
    loop {
        let n = socket.recv(&mut buf).await.map_err(|e| format!("receive: {e}"))?;
        if let Some(msg) = answer_to(&buf[..n], id) {
            return Ok(msg);
        }
    }
}

/// The same over TCP: a two-byte length before each message.
async fn over_tcp(resolver: SocketAddr, wire: &[u8], id: u16) -> Result<Message, String> {
    let mut s = TcpStream::connect(resolver)
        .await
        .map_err(|e| format!("connect over TCP: {e}"))?;
    let len = u16::try_from(wire.len()).map_err(|_| "the query is too long".to_string())?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(wire);
    s.write_all(&out).await.map_err(|e| format!("send over TCP: {e}"))?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len)
        .await
        .map_err(|e| format!("receive over TCP: {e}"))?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf)
        .await
        .map_err(|e| format!("receive over TCP: {e}"))?;
    answer_to(&buf, id).ok_or_else(|| "the answer over TCP is not for our query".to_string())
}

/// `bytes` decoded, if it is a response to query `id`.
fn answer_to(bytes: &[u8], id: u16) -> Option<Message> {
    let msg = Message::from_vec(bytes).ok()?;
    (msg.metadata.id == id && msg.metadata.message_type == MessageType::Response).then_some(msg)
}
