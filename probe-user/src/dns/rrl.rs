//! Response rate limiting (RRL) of UDP answers, in the manner of BIND, Knot and NSD: each
//! source prefix has a token bucket per answer, so a spoofed source (the victim of a reflection
//! attack) gets at most `responses_per_second` copies of one answer, while other sources and
//! other answers are untouched. Of the answers held back, every `slip`-th goes out truncated
//! (TC set, no records): a real client behind that prefix retries over TCP, which a spoofer
//! cannot. Pure: the caller gives the time; one limiter per UDP thread, so no lock.
use std::{collections::HashMap, net::IpAddr};

use ipnet::IpNet;

use crate::config::DnsRateLimit;

/// Entries per generation of the table. When the current one is full it becomes the previous
/// one (entries found there move back), and the one before is dropped: memory stays bounded
/// under a flood of random sources, and a source that keeps asking keeps its bucket.
const GENERATION: usize = 1 << 16;
/// A bucket's tokens are counted in thousandths, refilled every millisecond.
const MILLI: u64 = 1000;

/// What an answer is, for rate limiting: positive answers are told apart by name and type;
/// all NXDOMAIN answers to a prefix share one bucket, as do all errors (REFUSED, FORMERR, ...):
/// random names cannot multiply a victim's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnswerClass {
    /// A hash of the lower-case name and the type asked for.
    Name(u64),
    NxDomain,
    Error,
}

impl AnswerClass {
    /// The class of a positive or NODATA answer to `name` (lower case) for `qtype`.
    pub fn of_name(name: &str, qtype: u16) -> AnswerClass {
        // Two names that collide only share a bucket: a weak hash is enough here (the
        // table itself is keyed with std's seeded hasher, as its keys come from the network).
        AnswerClass::Name(crate::hash::mix64(
            crate::hash::stable(name.as_bytes()) ^ u64::from(qtype),
        ))
    }
}

/// What to do with one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Send a truncated copy instead (`truncated`).
    Slip,
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    /// The source's prefix, IPv4 mapped into IPv6 so one integer holds both.
    prefix: u128,
    class: AnswerClass,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Thousandths of a response.
    tokens: u64,
    at_ms: u64,
    /// Answers held back since the last slip.
    held: u32,
}

pub struct RateLimiter {
    settings: DnsRateLimit,
    current: HashMap<Key, Bucket>,
    previous: HashMap<Key, Bucket>,
}

impl RateLimiter {
    pub fn new(settings: DnsRateLimit) -> RateLimiter {
        RateLimiter {
            settings,
            current: HashMap::new(),
            previous: HashMap::new(),
        }
    }

    /// Takes new settings (a reload); buckets start over when they changed.
    pub fn set(&mut self, settings: &DnsRateLimit) {
        if *settings != self.settings {
            *self = RateLimiter::new(settings.clone());
        }
    }

    /// Whether the answer of class `class` to `source` goes out at `now_ms` (any monotonic
    /// milliseconds).
    pub fn check(&mut self, source: IpAddr, class: AnswerClass, now_ms: u64) -> Verdict {
        // A dual-stack socket sees an IPv4 client as ::ffff:a.b.c.d: it is that IPv4 client,
        // for `exempt` as for its bucket.
        let source = source.to_canonical();
        let s = &self.settings;
        if s.responses_per_second == 0 || s.exempt.iter().any(|net| net.contains(&source)) {
            return Verdict::Send;
        }
        let key = Key {
            prefix: prefix_of(source, s.ipv4_prefix, s.ipv6_prefix),
            class,
        };
        let capacity = u64::from(s.responses_per_second) * MILLI;
        let bucket = match self.current.get_mut(&key) {
            Some(b) => b,
            None => {
                if self.current.len() >= GENERATION {
                    self.previous = std::mem::take(&mut self.current);
                }
                let b = self.previous.remove(&key).unwrap_or(Bucket {
                    tokens: capacity,
                    at_ms: now_ms,
                    held: 0,
                });
                self.current.entry(key).or_insert(b)
            }
        };
        // rate per second = rate thousandths per millisecond.
        let refill = now_ms.saturating_sub(bucket.at_ms) * u64::from(s.responses_per_second);
        bucket.tokens = (bucket.tokens + refill).min(capacity);
        bucket.at_ms = now_ms.max(bucket.at_ms);
        if bucket.tokens >= MILLI {
            bucket.tokens -= MILLI;
            return Verdict::Send;
        }
        bucket.held += 1;
        if s.slip > 0 && bucket.held >= s.slip {
            bucket.held = 0;
            return Verdict::Slip;
        }
        Verdict::Drop
    }

    /// Buckets held (for tests and the bound).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

/// A source's prefix as one integer (IPv4 mapped into IPv6), the key rate limiting and the
/// TCP caps group sources by. An IPv4-mapped source (a dual-stack socket's IPv4 client) takes
/// the IPv4 length: cut at the IPv6 one, every IPv4 client would be the same prefix.
pub(super) fn prefix_of(source: IpAddr, v4: u8, v6: u8) -> u128 {
    let net = match source.to_canonical() {
        IpAddr::V4(a) => IpNet::new(IpAddr::V4(a), v4),
        IpAddr::V6(a) => IpNet::new(IpAddr::V6(a), v6),
    };
    match net.map(|n| n.trunc().network()) {
        Ok(IpAddr::V4(a)) => u128::from(a.to_ipv6_mapped()),
        Ok(IpAddr::V6(a)) => u128::from(a),
        Err(_) => 0,
    }
}

/// The truncated stand-in for an answer: the answer's header with TC set and no records, and
/// the query's question. None when the question cannot be found (the answer is dropped).
pub fn truncated(query: &[u8], answer: &[u8]) -> Option<Vec<u8>> {
    if answer.len() < 12 || query.len() < 12 {
        return None;
    }
    let questions = u16::from_be_bytes([query[4], query[5]]);
    let end = if questions == 1 { question_end(query)? } else { 12 };
    let mut out = Vec::with_capacity(end);
    out.extend_from_slice(&answer[..4]);
    out[2] |= 0x02; // TC
    out.extend_from_slice(&[0, u8::from(questions == 1), 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&query[12..end]);
    Some(out)
}

/// Where a query's one question ends: its name (labels, no compression) and type and class.
fn question_end(query: &[u8]) -> Option<usize> {
    let mut at = 12;
    loop {
        let len = usize::from(*query.get(at)?);
        if len == 0 {
            at += 1;
            break;
        }
        if len > 63 {
            return None;
        }
        at += 1 + len;
    }
    let end = at + 4;
    (end <= query.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rate: u32, slip: u32) -> RateLimiter {
        RateLimiter::new(DnsRateLimit {
            responses_per_second: rate,
            slip,
            exempt: vec!["198.18.9.0/24".parse().unwrap()],
            ..DnsRateLimit::default()
        })
    }

    fn run(l: &mut RateLimiter, source: &str, class: AnswerClass, n: usize, now: u64) -> [usize; 3] {
        let mut counts = [0; 3];
        for _ in 0..n {
            match l.check(source.parse().unwrap(), class, now) {
                Verdict::Send => counts[0] += 1,
                Verdict::Slip => counts[1] += 1,
                Verdict::Drop => counts[2] += 1,
            }
        }
        counts
    }

    #[test]
    fn one_prefix_gets_the_rate_per_answer_and_half_the_rest_truncated() {
        let mut l = limiter(10, 2);
        let www = AnswerClass::of_name("www.tm.example.", 1);
        assert_eq!(
            run(&mut l, "198.18.1.1", www, 30, 0),
            [10, 10, 10],
            "a second's worth, then slips"
        );
        // Another address in the same /24 shares the bucket; another /24 has its own.
        assert_eq!(run(&mut l, "198.18.1.200", www, 2, 0), [0, 1, 1]);
        assert_eq!(run(&mut l, "198.18.2.1", www, 10, 0), [10, 0, 0]);
        // Another answer to the same prefix has its own bucket.
        assert_eq!(
            run(&mut l, "198.18.1.1", AnswerClass::of_name("api.tm.example.", 1), 10, 0),
            [10, 0, 0]
        );
        // Refilled at the rate: 100 ms later, one more.
        assert_eq!(run(&mut l, "198.18.1.1", www, 2, 100), [1, 0, 1]);
        assert_eq!(
            run(&mut l, "198.18.1.1", www, 20, 5_000),
            [10, 5, 5],
            "a full bucket, no more"
        );
        // Exempt sources and a rate of 0 are never limited.
        assert_eq!(run(&mut l, "198.18.9.9", www, 100, 5_000), [100, 0, 0]);
        assert_eq!(run(&mut limiter(0, 2), "198.18.1.1", www, 100, 0), [100, 0, 0]);
    }

    #[test]
    fn an_ipv4_client_on_a_dual_stack_socket_is_that_ipv4_client() {
        // Review H1: cut at the IPv6 length, every mapped IPv4 source was prefix 0.
        let mapped = |s: &str| prefix_of(s.parse().unwrap(), 24, 56);
        assert_ne!(mapped("::ffff:198.51.100.7"), mapped("::ffff:203.0.113.9"));
        assert_eq!(mapped("::ffff:198.51.100.7"), mapped("198.51.100.200"));
        let mut l = limiter(10, 2);
        let www = AnswerClass::of_name("www.tm.example.", 1);
        assert_eq!(run(&mut l, "::ffff:198.18.1.1", www, 12, 0), [10, 1, 1]);
        // Another /24 has its own bucket; the plain IPv4 form of the first shares its.
        assert_eq!(run(&mut l, "::ffff:198.18.2.1", www, 10, 0), [10, 0, 0]);
        assert_eq!(run(&mut l, "198.18.1.9", www, 2, 0), [0, 1, 1]);
        // `exempt` holds for the mapped form.
        assert_eq!(run(&mut l, "::ffff:198.18.9.9", www, 50, 0), [50, 0, 0]);
    }

    #[test]
    fn random_names_share_one_bucket_and_slip_zero_drops_all() {
        let mut l = limiter(5, 0);
        let nx = run(&mut l, "2001:2::1", AnswerClass::NxDomain, 50, 0);
        assert_eq!(nx, [5, 0, 45]);
        // The same /56 shares it.
        assert_eq!(run(&mut l, "2001:2:0:ff::1", AnswerClass::NxDomain, 1, 0), [0, 0, 1]);
        assert_eq!(run(&mut l, "2001:2:0:100::1", AnswerClass::NxDomain, 1, 0), [1, 0, 0]);
        let mut every = limiter(1, 1);
        assert_eq!(run(&mut every, "198.18.1.1", AnswerClass::Error, 4, 0), [1, 3, 0]);
    }

    #[test]
    fn the_table_stays_bounded_under_random_sources() {
        let mut l = limiter(1, 2);
        for i in 0..(GENERATION as u32 * 3) {
            let source = IpAddr::V4((0xc612_0000 + (i << 8)).into());
            l.check(source, AnswerClass::Error, 0);
            assert!(l.len() <= 2 * GENERATION);
        }
        // A source that keeps asking keeps its bucket through the turnover.
        let victim: IpAddr = "198.18.77.1".parse().unwrap();
        assert_eq!(l.check(victim, AnswerClass::Error, 0), Verdict::Send);
        for i in 0..(GENERATION as u32 * 2) {
            l.check(IpAddr::V4((0x0a00_0000 + (i << 8)).into()), AnswerClass::Error, 0);
            if i % 1000 == 0 {
                assert_ne!(l.check(victim, AnswerClass::Error, 0), Verdict::Send, "at {i}");
            }
        }
    }

    #[test]
    fn a_truncated_answer_is_the_header_with_tc_and_the_question() {
        // id 0x1234, RD, one question www.tm.example. A IN, then an OPT record.
        let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
        for label in ["www", "tm", "example"] {
            query.push(u8::try_from(label.len()).unwrap());
            query.extend_from_slice(label.as_bytes());
        }
        query.extend_from_slice(&[0, 0, 1, 0, 1]);
        let question_end = query.len();
        query.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        let mut answer = vec![0x12, 0x34, 0x85, 0x00, 0, 1, 0, 2, 0, 0, 0, 1];
        answer.extend_from_slice(&[0xaa; 40]);
        let t = truncated(&query, &answer).unwrap();
        assert_eq!(&t[..4], &[0x12, 0x34, 0x87, 0x00], "QR AA TC RD kept and TC set");
        assert_eq!(&t[4..12], &[0, 1, 0, 0, 0, 0, 0, 0], "the question and no records");
        assert_eq!(&t[12..], &query[12..question_end]);
        assert!(truncated(&query[..20], &answer).is_none(), "a question cut short");
    }
}
