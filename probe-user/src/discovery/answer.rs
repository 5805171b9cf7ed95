//! What a resolver's answer says, read from the decoded message: the addresses or service
//! records of the name asked (following the CNAMEs the answer holds), the addresses of an SRV
//! record's target given beside it, and how long the answer may be kept. Pure: no I/O.
use std::net::IpAddr;

use hickory_server::proto::{
    op::{Message, ResponseCode},
    rr::{Name, RData, Record, RecordType},
};

/// Follows at most this many CNAMEs: a loop or a long chain is the zone's mistake, not ours to
/// walk.
const MAX_CHAIN: usize = 8;

/// What one question got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// Records of the type asked (empty: the name has none; NXDOMAIN or no data), and the
    /// TTL to keep them for (the smallest of theirs, or the zone's negative TTL).
    Records { records: Vec<Found>, ttl: Option<u32> },
    /// Not an answer to go by: the resolver failed, refused or sent what does not answer the
    /// question. The caller tries the next resolver, then keeps what it had.
    Failed(String),
}

/// One record of the name asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    Address(IpAddr),
    Service {
        priority: u16,
        weight: u16,
        port: u16,
        target: Name,
    },
}

/// Reads `msg` as the answer to `name`, `rtype` (A, AAAA or SRV).
pub(super) fn read(msg: &Message, name: &Name, rtype: RecordType) -> Reply {
    let rcode = msg.metadata.response_code;
    if rcode != ResponseCode::NoError && rcode != ResponseCode::NXDomain {
        return Reply::Failed(format!("the resolver answered {rcode}"));
    }
    if msg.queries.len() != 1 || msg.queries[0].name() != name || msg.queries[0].query_type() != rtype {
        return Reply::Failed("the answer is for another question".into());
    }
    let Some(owner) = follow(&msg.answers, name) else {
        return Reply::Failed(format!("the CNAMEs of {name} go on past {MAX_CHAIN}"));
    };
    let mut ttl: Option<u32> = None;
    let mut records = Vec::new();
    for r in msg.answers.iter().filter(|r| r.name == owner) {
        let found = match (&r.data, rtype) {
            (RData::A(a), RecordType::A) => Found::Address(IpAddr::V4(a.0)),
            (RData::AAAA(a), RecordType::AAAA) => Found::Address(IpAddr::V6(a.0)),
            (RData::SRV(s), RecordType::SRV) => Found::Service {
                priority: s.priority,
                weight: s.weight,
                port: s.port,
                target: s.target.clone(),
            },
            _ => continue,
        };
        ttl = Some(ttl.map_or(r.ttl, |t| t.min(r.ttl)));
        records.push(found);
    }
    // Nothing found: the zone's SOA says how long that holds (RFC 2308), else the caller's
    // bounds do.
    if records.is_empty() {
        ttl = negative_ttl(&msg.authorities);
    }
    Reply::Records { records, ttl }
}

/// The name whose records answer for `name`: itself, or the end of its CNAME chain in
/// `answers`; None when the chain is longer than `MAX_CHAIN`.
fn follow(answers: &[Record], name: &Name) -> Option<Name> {
    let mut at = name.clone();
    for _ in 0..=MAX_CHAIN {
        let next = answers.iter().find_map(|r| match &r.data {
            RData::CNAME(c) if r.name == at => Some(c.0.clone()),
            _ => None,
        });
        match next {
            Some(n) => at = n,
            None => return Some(at),
        }
    }
    None
}

/// The TTL of a negative answer: the SOA record's own TTL or its minimum field, the smaller.
fn negative_ttl(authorities: &[Record]) -> Option<u32> {
    authorities.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
        _ => None,
    })
}

/// The addresses the message gives for `target` beside the answer (the additional section
/// of an SRV answer, RFC 2782), with their smallest TTL.
pub(super) fn glue(msg: &Message, target: &Name) -> (Vec<IpAddr>, Option<u32>) {
    let mut ttl: Option<u32> = None;
    let addresses = msg
        .additionals
        .iter()
        .filter(|r| r.name == *target)
        .filter_map(|r| {
            let ip = match &r.data {
                RData::A(a) => IpAddr::V4(a.0),
                RData::AAAA(a) => IpAddr::V6(a.0),
                _ => return None,
            };
            ttl = Some(ttl.map_or(r.ttl, |t| t.min(r.ttl)));
            Some(ip)
        })
        .collect();
    (addresses, ttl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_server::proto::{
        op::{MessageType, OpCode, Query},
        rr::rdata::{A, AAAA, CNAME, SOA, SRV},
    };
    use std::str::FromStr;

    fn name(s: &str) -> Name {
        Name::from_str(s).unwrap()
    }

    fn answer(q: &str, rtype: RecordType, rcode: ResponseCode) -> Message {
        let mut m = Message::new(7, MessageType::Response, OpCode::Query);
        m.metadata.response_code = rcode;
        m.add_query(Query::query(name(q), rtype));
        m
    }

    fn rec(owner: &str, ttl: u32, data: RData) -> Record {
        Record::from_rdata(name(owner), ttl, data)
    }

    #[test]
    fn addresses_follow_cnames_and_take_the_smallest_ttl() {
        let mut m = answer("web.svc.example.", RecordType::A, ResponseCode::NoError);
        m.answers = vec![
            rec("web.svc.example.", 300, RData::CNAME(CNAME(name("pool.svc.example.")))),
            rec("pool.svc.example.", 30, RData::A(A::new(198, 18, 0, 2))),
            rec("pool.svc.example.", 20, RData::A(A::new(198, 18, 0, 3))),
            // Not of the chain: left alone.
            rec("other.svc.example.", 1, RData::A(A::new(198, 18, 0, 9))),
        ];
        assert_eq!(
            read(&m, &name("web.svc.example."), RecordType::A),
            Reply::Records {
                records: vec![
                    Found::Address("198.18.0.2".parse().unwrap()),
                    Found::Address("198.18.0.3".parse().unwrap())
                ],
                ttl: Some(20)
            }
        );
        // An AAAA in an answer to A is not taken.
        m.answers.push(rec(
            "pool.svc.example.",
            5,
            RData::AAAA(AAAA::from_str("2001:2::2").unwrap()),
        ));
        let Reply::Records { records, ttl } = read(&m, &name("web.svc.example."), RecordType::A) else {
            panic!()
        };
        assert_eq!((records.len(), ttl), (2, Some(20)));
    }

    #[test]
    fn no_records_is_an_answer_with_the_zones_negative_ttl_and_failures_are_not() {
        let mut m = answer("gone.svc.example.", RecordType::AAAA, ResponseCode::NXDomain);
        let soa = SOA::new(
            name("ns1.svc.example."),
            name("admin.svc.example."),
            1,
            3600,
            600,
            86400,
            15,
        );
        m.authorities = vec![rec("svc.example.", 60, RData::SOA(soa))];
        assert_eq!(
            read(&m, &name("gone.svc.example."), RecordType::AAAA),
            Reply::Records {
                records: vec![],
                ttl: Some(15)
            }
        );
        for rcode in [ResponseCode::ServFail, ResponseCode::Refused, ResponseCode::FormErr] {
            let m = answer("web.svc.example.", RecordType::A, rcode);
            assert!(matches!(
                read(&m, &name("web.svc.example."), RecordType::A),
                Reply::Failed(_)
            ));
        }
        let m = answer("other.svc.example.", RecordType::A, ResponseCode::NoError);
        assert!(matches!(
            read(&m, &name("web.svc.example."), RecordType::A),
            Reply::Failed(_)
        ));
    }

    #[test]
    fn a_cname_loop_is_a_failure() {
        let mut m = answer("a.example.", RecordType::A, ResponseCode::NoError);
        m.answers = vec![
            rec("a.example.", 5, RData::CNAME(CNAME(name("b.example.")))),
            rec("b.example.", 5, RData::CNAME(CNAME(name("a.example.")))),
        ];
        assert!(matches!(read(&m, &name("a.example."), RecordType::A), Reply::Failed(_)));
    }

    #[test]
    fn services_and_their_glue() {
        let mut m = answer("_http._tcp.web.example.", RecordType::SRV, ResponseCode::NoError);
        m.answers = vec![
            rec(
                "_http._tcp.web.example.",
                10,
                RData::SRV(SRV::new(1, 30, 8080, name("b1.web.example."))),
            ),
            rec(
                "_http._tcp.web.example.",
                10,
                RData::SRV(SRV::new(2, 0, 8081, name("b2.web.example."))),
            ),
        ];
        m.additionals = vec![
            rec("b1.web.example.", 4, RData::A(A::new(198, 18, 0, 2))),
            rec("b1.web.example.", 6, RData::AAAA(AAAA::from_str("2001:2::2").unwrap())),
        ];
        let Reply::Records { records, ttl } = read(&m, &name("_http._tcp.web.example."), RecordType::SRV) else {
            panic!()
        };
        assert_eq!(ttl, Some(10));
        assert_eq!(
            records[0],
            Found::Service {
                priority: 1,
                weight: 30,
                port: 8080,
                target: name("b1.web.example.")
            }
        );
        assert_eq!(
            glue(&m, &name("b1.web.example.")),
            (
                vec!["198.18.0.2".parse().unwrap(), "2001:2::2".parse().unwrap()],
                Some(4)
            )
        );
        assert_eq!(glue(&m, &name("b2.web.example.")), (vec![], None));
    }
}
