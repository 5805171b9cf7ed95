//! The DNS wire, through hickory: a request becomes a zone `Question`, the zone's `Reply`
//! becomes records, rcode and EDNS (Client Subnet scope included). hickory decodes and encodes
//! every message (no wire format of ours), truncates UDP answers past the client's buffer at a
//! whole record (TC set, so the client retries over TCP), and serves TCP; UDP datagrams come
//! here in batches from `server.rs` (`answer_udp`), which answers what hickory cannot decode
//! with FORMERR and drops what is not a query, as hickory's own server does. This file refuses
//! what the zone must not see.
use std::{
    net::{IpAddr, SocketAddr},
    str::FromStr,
    sync::atomic::Ordering,
};

use hickory_server::{
    net::xfer::Protocol,
    proto::{
        op::{Edns, Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode},
        rr::{
            rdata::{
                opt::{ClientSubnet, EdnsCode, EdnsOption},
                A, AAAA, NS, SOA,
            },
            DNSClass, Name, RData, Record, RecordType,
        },
        serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder},
    },
    server::Request,
    zone_handler::{MessageResponse, MessageResponseBuilder, Queries},
};

use super::{
    rrl::{truncated, AnswerClass, RateLimiter, Verdict},
    shared::{Counters, Shared},
    zone::{Client, QType, Question, Reply, Zone},
};

/// The largest UDP answer probed sends, whatever the client offers: the DNS flag day 2020
/// size, which avoids IP fragmentation on any usual path.
const MAX_UDP_PAYLOAD: u16 = 1232;

/// A request's answer, ready for either transport.
struct Prepared {
    parts: Parts,
    /// What the answer is, for rate limiting.
    class: AnswerClass,
    edns: Option<Edns>,
    meta: Metadata,
}

impl Prepared {
    /// The answer as hickory sends it: the request's question, then the prepared sections.
    fn message<'a>(
        &'a self,
        queries: &'a Queries,
    ) -> MessageResponse<
        'a,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    > {
        MessageResponseBuilder::new(queries, self.edns.as_ref()).build(
            self.meta,
            self.parts.answers.iter(),
            self.parts.authority.iter(),
            std::iter::empty(),
            self.parts.additional.iter(),
        )
    }
}

/// Asks the zone (unless the request is refused first) and counts the answer.
fn prepare(shared: &Shared, request: &Request) -> Prepared {
    let mut edns = response_edns(request);
    let mut class = AnswerClass::Error;
    let parts = match check(request) {
        Err(code) => Parts::only(code),
        Ok((qname, qtype, rtype)) => {
            let client = Client {
                address: edns
                    .as_ref()
                    .and_then(|(_, ecs)| ecs.as_ref())
                    .filter(|ecs| ecs.source_prefix() > 0)
                    .map_or(request.src().ip(), ClientSubnet::addr),
            };
            let question = Question {
                name: &qname,
                qtype,
                client,
            };
            let zone = shared.zone();
            let reply = super::shared::with_rng(|rng| zone.answer(&question, rng));
            let mut parts = render(&zone, &qname, &reply);
            // The source address decides nothing here, so identical bytes, identical answer.
            parts.deterministic = zone.deterministic(&qname);
            class = match parts.code {
                ResponseCode::NoError => AnswerClass::of_name(&qname, rtype),
                ResponseCode::NXDomain => AnswerClass::NxDomain,
                _ => AnswerClass::Error,
            };
            parts
        }
    };
    count(&shared.counters, parts.code, request.protocol());
    let mut meta = Metadata::response_from_request(&request.metadata);
    meta.response_code = parts.code;
    meta.authoritative = matches!(parts.code, ResponseCode::NoError | ResponseCode::NXDomain);
    if let Some((e, Some(ecs))) = edns.as_mut() {
        let scope = if parts.by_location { ecs.source_prefix() } else { 0 };
        let mut echoed = ClientSubnet::new(ecs.addr(), ecs.source_prefix(), 0);
        echoed.set_scope_prefix(scope);
        e.options_mut().insert(EdnsOption::Subnet(echoed));
    }
    Prepared {
        parts,
        class,
        edns: edns.map(|(e, _)| e),
        meta,
    }
}

/// Answers already encoded, by the query's bytes after its id: a query identical to an earlier
/// one, while the zone has not changed since, gets the same bytes under its own id. Only
/// answers that follow from the question alone are kept (`Zone::deterministic`: not subnet,
/// geographic or weighted), so the cache can never answer differently from the zone; any
/// change of the zone (a verdict, a reload, new round-trip times) empties it. Names outside
/// the zone (REFUSED) are never kept: random names nobody asks twice would fill it. One per
/// UDP thread, so no lock.
#[derive(Default)]
pub(super) struct AnswerCache {
    generation: u64,
    answers: std::collections::HashMap<Vec<u8>, Cached>,
    /// Bytes of the keys and answers held.
    bytes: usize,
}

/// One answer as the cache holds it.
struct Cached {
    answer: Vec<u8>,
    code: ResponseCode,
    class: AnswerClass,
}

impl AnswerCache {
    /// At most this many bytes of keys and answers (about 8,000 typical answers); then it
    /// starts over.
    const CAPACITY_BYTES: usize = 4 << 20;

    /// Whether an answer may be kept: one that follows from the question alone, for a name
    /// in the zone.
    fn keeps(deterministic: bool, code: ResponseCode) -> bool {
        deterministic && code != ResponseCode::Refused
    }

    fn get(&mut self, generation: u64, key: &[u8]) -> Option<&Cached> {
        if generation != self.generation {
            self.answers.clear();
            self.bytes = 0;
            self.generation = generation;
        }
        self.answers.get(key)
    }

    fn put(&mut self, generation: u64, key: &[u8], answer: &[u8], code: ResponseCode, class: AnswerClass) {
        if generation != self.generation {
            return;
        }
        let size = key.len() + answer.len();
        if self.bytes + size > Self::CAPACITY_BYTES {
            self.answers.clear();
            self.bytes = 0;
        }
        let cached = Cached {
            answer: answer.to_vec(),
            code,
            class,
        };
        if self.answers.insert(key.to_vec(), cached).is_none() {
            self.bytes += size;
        }
    }
}

/// One answer, encoded.
struct Encoded {
    bytes: Vec<u8>,
    code: ResponseCode,
    /// It may be kept (`AnswerCache::keeps`).
    cacheable: bool,
    class: AnswerClass,
}

/// The answer to one message, encoded in at most `max` bytes; None for a message that gets
/// none (shorter than a header, or a response rather than a query), as hickory's own server
/// decides.
fn answer_message(shared: &Shared, message: &[u8], src: SocketAddr, protocol: Protocol, max: u16) -> Option<Encoded> {
    let header = Header::read(&mut BinDecoder::new(message)).ok()?;
    if header.metadata.message_type == MessageType::Response {
        return None;
    }
    let Ok(request) = Request::from_bytes(message.to_vec(), src, protocol) else {
        count(&shared.counters, ResponseCode::FormErr, protocol);
        // No question can be read back: the answer carries none, as hickory's server does.
        let empty = Queries::read(&mut BinDecoder::new(&[]), 0).ok()?;
        let error = MessageResponseBuilder::new(&empty, None).error_msg(&header.metadata, ResponseCode::FormErr);
        return Some(Encoded {
            bytes: encode(error, 512),
            code: ResponseCode::FormErr,
            cacheable: false,
            class: AnswerClass::Error,
        });
    };
    let p = prepare(shared, &request);
    // Over UDP, at most the client's buffer: hickory cuts at the last whole record that fits
    // and sets TC.
    let max = p.edns.as_ref().map_or(max, |e| e.max_payload().max(max));
    Some(Encoded {
        bytes: encode(p.message(&request.queries), max),
        code: p.parts.code,
        cacheable: AnswerCache::keeps(p.parts.deterministic, p.parts.code),
        class: p.class,
    })
}

/// TCP: the answer to one message.
pub(super) fn answer_tcp(shared: &Shared, message: Vec<u8>, src: SocketAddr) -> Option<Vec<u8>> {
    answer_message(shared, &message, src, Protocol::Tcp, u16::MAX).map(|e| e.bytes)
}

/// What a UDP thread keeps between datagrams.
#[derive(Default)]
pub(super) struct UdpState {
    pub cache: AnswerCache,
    pub limiter: Option<RateLimiter>,
}

/// UDP: the answer to one datagram, encoded, or None when it gets none (`answer_message`, or
/// held back by rate limiting). `now_ms` is the monotonic time, for rate limiting.
pub(super) fn answer_udp(
    shared: &Shared,
    state: &mut UdpState,
    datagram: &[u8],
    src: SocketAddr,
    now_ms: u64,
) -> Option<Vec<u8>> {
    let generation = shared.generation();
    let key = datagram.get(2..)?;
    let (answer, class) = if let Some(c) = state.cache.get(generation, key) {
        count(&shared.counters, c.code, Protocol::Udp);
        let mut answer = c.answer.clone();
        answer[..2].copy_from_slice(&datagram[..2]);
        (answer, c.class)
    } else {
        let e = answer_message(shared, datagram, src, Protocol::Udp, 512)?;
        if e.cacheable {
            state.cache.put(generation, key, &e.bytes, e.code, e.class);
        }
        (e.bytes, e.class)
    };
    let Some(limiter) = state.limiter.as_mut() else {
        return Some(answer);
    };
    match limiter.check(src.ip(), class, now_ms) {
        Verdict::Send => Some(answer),
        Verdict::Slip => {
            shared.counters.rrl_slipped.fetch_add(1, Ordering::Relaxed);
            truncated(datagram, &answer)
        }
        Verdict::Drop => {
            shared.counters.rrl_dropped.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// A message as bytes of at most `max`; SERVFAIL if it cannot be encoded at all.
fn encode<'a>(
    message: MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    max: u16,
) -> Vec<u8> {
    let id = message.metadata().id;
    let mut bytes = Vec::with_capacity(512);
    let mut encoder = BinEncoder::new(&mut bytes);
    encoder.set_max_size(max);
    if message.destructive_emit(&mut encoder).is_ok() {
        return bytes;
    }
    bytes.clear();
    let mut encoder = BinEncoder::new(&mut bytes);
    let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
    metadata.response_code = ResponseCode::ServFail;
    let header = Header {
        metadata,
        counts: HeaderCounts::default(),
    };
    let _ = header.emit(&mut encoder);
    bytes
}

/// The question the zone is asked, or the code a request gets without asking it.
/// The question is also given by its type's number (rate limiting tells answers apart by it).
fn check(request: &Request) -> Result<(String, QType, u16), ResponseCode> {
    if request.metadata.op_code != OpCode::Query {
        return Err(ResponseCode::NotImp);
    }
    if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
        return Err(ResponseCode::BADVERS);
    }
    let info = request.request_info().map_err(|_| ResponseCode::FormErr)?;
    if let Some(EdnsOption::Subnet(ecs)) = request.edns.as_ref().and_then(|e| e.option(EdnsCode::Subnet)) {
        if !valid_ecs(ecs) {
            return Err(ResponseCode::FormErr);
        }
    }
    let query = info.query;
    if !matches!(query.query_class(), DNSClass::IN | DNSClass::ANY) {
        return Err(ResponseCode::Refused);
    }
    let qtype = match query.query_type() {
        RecordType::A => QType::A,
        RecordType::AAAA => QType::Aaaa,
        RecordType::SOA => QType::Soa,
        RecordType::NS => QType::Ns,
        RecordType::ANY => QType::Any,
        // No transfers: the zone is made from health, not kept as records to copy.
        RecordType::AXFR | RecordType::IXFR => return Err(ResponseCode::Refused),
        _ => QType::Other,
    };
    let mut name = query.name().to_string().to_ascii_lowercase();
    if !name.ends_with('.') {
        name.push('.');
    }
    Ok((name, qtype, u16::from(query.query_type())))
}

/// RFC 7871 section 6: a query's scope is 0 and its address has no bits past the source
/// prefix.
fn valid_ecs(ecs: &ClientSubnet) -> bool {
    if ecs.scope_prefix() != 0 {
        return false;
    }
    let (bits, width) = match ecs.addr() {
        IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    };
    let prefix = u32::from(ecs.source_prefix());
    if prefix > width {
        return false;
    }
    prefix >= 128 || bits << prefix == 0
}

/// The answer's EDNS when the query had EDNS (our buffer size, at most the client's), and the
/// query's Client Subnet option.
fn response_edns(request: &Request) -> Option<(Edns, Option<ClientSubnet>)> {
    let asked = request.edns.as_ref()?;
    let mut e = Edns::new();
    e.set_version(0);
    // RFC 3225 3: the DO bit of the query is copied into the response (the zone is not
    // signed, so nothing else changes).
    e.set_dnssec_ok(asked.flags().dnssec_ok);
    let payload = if request.protocol() == Protocol::Udp {
        asked.max_payload().clamp(512, MAX_UDP_PAYLOAD)
    } else {
        MAX_UDP_PAYLOAD
    };
    e.set_max_payload(payload);
    let ecs = match asked.option(EdnsCode::Subnet) {
        Some(EdnsOption::Subnet(cs)) => Some(*cs),
        _ => None,
    };
    Some((e, ecs))
}

/// A reply as the sections of a message.
struct Parts {
    code: ResponseCode,
    answers: Vec<Record>,
    authority: Vec<Record>,
    /// The addresses of the name servers inside the zone, with NS records (glue).
    additional: Vec<Record>,
    by_location: bool,
    /// The same query bytes get the same answer until the zone changes (`AnswerCache`).
    deterministic: bool,
}

impl Parts {
    fn only(code: ResponseCode) -> Parts {
        Parts {
            code,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            by_location: false,
            deterministic: false,
        }
    }
}

fn render(zone: &Zone, qname: &str, reply: &Reply) -> Parts {
    let mut parts = Parts::only(ResponseCode::NoError);
    let owner = || name(qname);
    match reply {
        Reply::Refused => parts.code = ResponseCode::Refused,
        Reply::NxDomain { by_location } => {
            parts.code = ResponseCode::NXDomain;
            parts.by_location = *by_location;
            parts.authority.push(negative_soa(zone));
        }
        Reply::NoData { by_location } => {
            parts.by_location = *by_location;
            parts.authority.push(negative_soa(zone));
        }
        Reply::Addresses {
            ttl,
            addresses,
            by_location,
        } => {
            parts.by_location = *by_location;
            let owner = owner();
            parts.answers = addresses.iter().map(|a| address_record(&owner, *ttl, *a)).collect();
        }
        Reply::Apex { soa, ns } => {
            if *soa {
                parts.answers.push(soa_record(zone, zone.ttl()));
            }
            if *ns {
                parts.answers.extend(ns_records(zone));
                parts.additional.extend(glue(zone));
            }
        }
    }
    parts
}

/// The SOA that goes with a negative answer: its TTL is the lesser of the SOA's own TTL and its
/// minimum field, the negative TTL (RFC 2308 section 3).
fn negative_soa(zone: &Zone) -> Record {
    soa_record(zone, zone.soa().minimum.min(zone.ttl()))
}

fn soa_record(zone: &Zone, ttl: u32) -> Record {
    let s = zone.soa();
    let clamp = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
    let data = SOA::new(
        name(&s.mname),
        name(&s.rname),
        s.serial,
        clamp(s.refresh),
        clamp(s.retry),
        clamp(s.expire),
        s.minimum,
    );
    Record::from_rdata(name(zone.origin()), ttl, RData::SOA(data))
}

fn ns_records(zone: &Zone) -> impl Iterator<Item = Record> + '_ {
    let apex = name(zone.origin());
    zone.nameservers()
        .iter()
        .map(move |ns| Record::from_rdata(apex.clone(), zone.ttl(), RData::NS(NS(name(ns)))))
}

/// The A and AAAA records of the name servers inside the zone, in the order of the NS records.
fn glue(zone: &Zone) -> impl Iterator<Item = Record> + '_ {
    zone.nameservers().iter().flat_map(move |ns| {
        let owner = name(ns);
        zone.nameserver_addresses(ns)
            .iter()
            .map(move |a| address_record(&owner, zone.ttl(), *a))
    })
}

/// An A or AAAA record.
fn address_record(owner: &Name, ttl: u32, address: IpAddr) -> Record {
    let data = match address {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(owner.clone(), ttl, data)
}

/// A name the configuration already checked, or the question's own.
fn name(s: &str) -> Name {
    Name::from_str(s).unwrap_or_else(|_| Name::root())
}

fn count(c: &Counters, code: ResponseCode, protocol: Protocol) {
    let by_code = match code {
        ResponseCode::NoError => &c.noerror,
        ResponseCode::NXDomain => &c.nxdomain,
        ResponseCode::Refused => &c.refused,
        ResponseCode::FormErr => &c.formerr,
        _ => &c.other,
    };
    by_code.fetch_add(1, Ordering::Relaxed);
    if protocol == Protocol::Tcp {
        c.tcp.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_subnets_must_be_clean() {
        let ok = |a: &str, p: u8| valid_ecs(&ClientSubnet::new(a.parse().unwrap(), p, 0));
        assert!(ok("198.18.10.0", 24));
        assert!(ok("198.18.10.7", 32));
        assert!(ok("0.0.0.0", 0));
        assert!(ok("2001:2:10::", 48));
        assert!(!ok("198.18.10.7", 24), "bits past the prefix");
        assert!(!ok("2001:2:10::1", 48), "bits past the prefix");
        let mut scoped = ClientSubnet::new("198.18.10.0".parse().unwrap(), 24, 0);
        scoped.set_scope_prefix(24);
        assert!(!valid_ecs(&scoped), "a query's scope is 0");
    }

    #[test]
    fn the_cache_keeps_in_zone_answers_within_its_bytes() {
        assert!(AnswerCache::keeps(true, ResponseCode::NoError));
        assert!(AnswerCache::keeps(true, ResponseCode::NXDomain));
        assert!(!AnswerCache::keeps(true, ResponseCode::Refused), "outside the zone");
        assert!(
            !AnswerCache::keeps(false, ResponseCode::NoError),
            "by location or weight"
        );
        let mut c = AnswerCache::default();
        let answer = vec![0u8; 1000];
        let mut held_most = 0;
        for i in 0u32..10_000 {
            let key = i.to_be_bytes();
            assert!(c.get(1, &key).is_none());
            c.put(1, &key, &answer, ResponseCode::NoError, AnswerClass::Error);
            assert!(c.bytes <= AnswerCache::CAPACITY_BYTES, "{} bytes", c.bytes);
            held_most = held_most.max(c.answers.len());
        }
        assert!(held_most >= AnswerCache::CAPACITY_BYTES / 1004 - 1, "{held_most}");
        let key = 9_999u32.to_be_bytes();
        assert!(c.get(1, &key).is_some(), "the latest answer is held");
        assert!(c.get(2, &key).is_none(), "a zone change empties it");
        assert_eq!(c.bytes, 0);
    }
}
