//! probed's DNS answers against a reference: Knot DNS serves the same zone, written from
//! probed's own state (its SOA and NS answers, and the endpoints `/v1/status` shows eligible),
//! and a battery of questions goes to both with `dig`. Rcode, opcode, header flags, the
//! question count, the three sections (as multisets: record order is free) and the EDNS
//! record and options must be equal, except for the differences listed in `EXPECTED`, each
//! with its reason; an expected difference that no longer happens fails the test too, so the
//! list stays true. Names compare case-insensitively: Knot copies the query's case into the
//! answer (a side effect of name compression), probed answers in the zone's lower case; both
//! are legal (RFC 4343). The table of every question is printed (`--nocapture`) and written
//! to /tmp/dnsref/differential.md.
use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    io::{Read, Write},
    net::{TcpStream, UdpSocket},
    process::Command,
    time::{Duration, Instant},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    dig::{parse, Dig},
    knot::{Knot, KnotZone},
    lb::add_backends,
    topo::*,
    Netns,
};

const ZONE: &str = "tm.example.";
const DNS_V4: &str = PROBER_V4;
const DNS_V6: &str = PROBER_V6;
/// probed's and Knot's ports on the same addresses of the prober's namespace (a namespace of
/// this test's own, so no clash with any other test).
const PROBED_PORT: u16 = 5353;
const KNOT_PORT: u16 = 5300;

/// Fast checks: Online 200 ms after the start.
const HEALTH: &str = "[profile.health]\nprotocol = \"tcp\"\nport = 80\ninterval = \"100ms\"\ntimeout = \"100ms\"\n\
                      healthy_threshold = 2\nunhealthy_threshold = 2\n";

/// The profiles: (name, dns_name, dns_ttl in seconds if its own, endpoint addresses). Every
/// one routes `multivalue` with room for all its endpoints, so once they are Online the
/// answer set is fixed: the zone Knot serves.
fn profiles() -> Vec<(&'static str, &'static str, Option<u32>, Vec<String>)> {
    let own = |a: &[&str]| a.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    vec![
        ("www", "www", Some(10), own(&["198.18.0.2", "198.18.0.3", "2001:2::2"])),
        // eu.tm.example. is then an empty non-terminal.
        ("api", "api.eu", None, own(&["198.18.0.4"])),
        ("v6only", "v6only", None, own(&["2001:2::3"])),
        // 20 AAAA records (28 bytes each) do not fit in 512 bytes: truncation.
        (
            "big",
            "big",
            None,
            (1..=20).map(|i| format!("2001:2::1:{i:x}")).collect(),
        ),
    ]
}

fn config(negative_ttl: u32) -> String {
    let mut s = format!(
        "[dns]\nlisten = [\"{DNS_V4}:{PROBED_PORT}\", \"[{DNS_V6}]:{PROBED_PORT}\"]\nzone = \"{ZONE}\"\n\
         ttl = \"30s\"\nnegative_ttl = \"{negative_ttl}s\"\n\n\
         [[dns.nameserver]]\nname = \"ns1.tm.example.\"\naddresses = [\"198.18.0.53\", \"2001:2::53\"]\n\n\
         [[dns.nameserver]]\nname = \"ns2.tm.example.\"\naddresses = [\"198.18.0.54\"]\n\n\
         # The battery asks fast from one source: response rate limiting (on by default, 20 answers\n\
         # a second per /24 and answer) would hold answers back or send them truncated.\n\
         [dns.rate_limit]\nresponses_per_second = 0\n"
    );
    for (name, dns_name, ttl, endpoints) in profiles() {
        s += &format!(
            "\n[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\nrouting = \"multivalue\"\nmax_answers = 32\n\
             dns_name = \"{dns_name}\"\n"
        );
        if let Some(t) = ttl {
            s += &format!("dns_ttl = \"{t}s\"\n");
        }
        s += HEALTH;
        for (i, a) in endpoints.iter().enumerate() {
            s += &format!("\n[[profile.endpoint]]\nname = \"e{i}\"\naddress = \"{a}\"\n");
        }
    }
    s
}

/// Why a difference is legal; one reason serves several questions.
const ANY_ONE_RRSET: &str = "ANY: Knot 3.2 answers one RRset, the node's lowest type (RFC 8482 4.1, not \
                             configurable); probed answers all the name has (RFC 8482 4.3, operations/dns.md): the A \
                             and AAAA picks together, the apex SOA and NS (the NS glue in both)";
const EDE_20: &str = "Knot adds EDE 20 (Not Authoritative, RFC 8914) to REFUSED for names outside its zones, \
                      hard-coded; probed sends no EDE, which RFC 8914 leaves optional";
const CD_COPIED: &str = "probed (hickory) copies the query's CD bit into the answer, as RFC 4035 3 says a \
                         security-aware server must; Knot clears it; the zone is unsigned, CD changes nothing else";
const XFR: &str = "no transfers from either: Knot answers NOTAUTH (no ACL allows it), probed REFUSED \
                   (operations/dns.md), the usual rcode of a transfer refused by policy";
const XFR_UDP: &str = "AXFR over UDP: Knot NOTIMP (RFC 5936 4.2: AXFR over UDP is not defined), probed REFUSED as \
                       for every transfer; both tell the client no";
const NOTIFY: &str = "NOTIFY: Knot NOTAUTH (no ACL lets anyone notify it), probed NOTIMP: it implements no opcode \
                      but QUERY, and NOTIMP is that rcode (RFC 1035 4.1.1)";
const UPDATE: &str = "UPDATE: Knot FORMERR (dig's UPDATE carries an A question where the zone's SOA belongs, \
                      RFC 2136 2.3), probed NOTIMP (no dynamic update, RFC 2136 2.2): both refuse it";
const TC_EMPTY: &str = "a truncated UDP answer: Knot sends TC with no records, probed (hickory) the records that \
                        fit, cut at a whole record; RFC 2181 9 allows both, the client retries over TCP (the \
                        same questions without +ignore get the same full answer from both)";
const UDP_SIZE: &str = "the EDNS buffer size probed advertises is the query's, clamped to 512..1232 (wire.rs \
                        response_edns); Knot always advertises its own 1232. RFC 6891 6.2.3/6.2.5 make it what the \
                        responder can take; advertising less is conservative, not wrong";
const ECS: &str = "probed echoes EDNS Client Subnet with scope 0 for a location-free answer (RFC 7871 7.2.1); \
                   Knot runs with ECS off and ignores the option";
const EXPIRE: &str = "Knot answers the EDNS EXPIRE option (RFC 7314) as a primary, not configurable; probed has \
                      no secondaries and ignores it like any unknown option (RFC 6891 6.1.2)";
const TYPE0: &str = "QTYPE 0 (reserved, RFC 6895 3.1): Knot NOTIMP, probed NODATA like any type the name lacks; \
                     no RFC says how a server answers it";
const TWO_OPT: &str = "two OPT records: both FORMERR (RFC 6891 6.1.1); Knot echoes the question, probed answers \
                       the bare header because hickory cannot decode the message (wire.rs answer_message); an \
                       error answer need not repeat the question";
const TWO_QUESTIONS: &str = "two questions: probed FORMERR as RFC 9619 asks; Knot 3.2 (older than RFC 9619) sends \
                             nothing";

/// Differences that are allowed: (question, field, why). Anything else that differs fails.
const EXPECTED: &[(&str, &str, &str)] = &[
    ("tm.example. ANY", "answer", ANY_ONE_RRSET),
    ("www.tm.example. ANY", "answer", ANY_ONE_RRSET),
    ("ns1.tm.example. ANY", "answer", ANY_ONE_RRSET),
    ("tm.example. ANY +tcp", "answer", ANY_ONE_RRSET),
    ("tm.example. ANY +noedns", "answer", ANY_ONE_RRSET),
    ("other.example. A", "options", EDE_20),
    ("other.example. A +tcp", "options", EDE_20),
    ("Other.Example. A", "options", EDE_20),
    ("example. SOA", "options", EDE_20),
    ("xtm.example. A", "options", EDE_20),
    (". NS", "options", EDE_20),
    ("www.tm.example. A +cdflag", "flags", CD_COPIED),
    ("www.tm.example. A +adflag +cdflag", "flags", CD_COPIED),
    ("raw-tcp tm.example. AXFR", "status", XFR),
    ("raw-tcp tm.example. IXFR", "status", XFR),
    ("raw-udp tm.example. AXFR", "status", XFR_UDP),
    ("raw-udp www.tm.example. A +opt2", "qdcount", TWO_OPT),
    ("raw-udp www.tm.example. A +qd2", "status", TWO_QUESTIONS),
    ("raw-udp www.tm.example. A +qd2", "opcode", TWO_QUESTIONS),
    ("raw-udp www.tm.example. A +qd2", "flags", TWO_QUESTIONS),
    ("raw-udp www.tm.example. A +qd2", "qdcount", TWO_QUESTIONS),
    ("raw-udp www.tm.example. A +qd2", "edns", TWO_QUESTIONS),
    ("raw-tcp www.tm.example. A +qd2", "status", TWO_QUESTIONS),
    ("raw-tcp www.tm.example. A +qd2", "opcode", TWO_QUESTIONS),
    ("raw-tcp www.tm.example. A +qd2", "flags", TWO_QUESTIONS),
    ("raw-tcp www.tm.example. A +qd2", "qdcount", TWO_QUESTIONS),
    ("raw-tcp www.tm.example. A +qd2", "edns", TWO_QUESTIONS),
    ("www.tm.example. A +opcode=4", "status", NOTIFY),
    ("www.tm.example. A +opcode=5", "status", UPDATE),
    ("big.tm.example. AAAA +bufsize=512 +ignore", "answer", TC_EMPTY),
    ("big.tm.example. AAAA +noedns +ignore", "answer", TC_EMPTY),
    ("www.tm.example. A +bufsize=512", "edns", UDP_SIZE),
    ("big.tm.example. AAAA +bufsize=512 +ignore", "edns", UDP_SIZE),
    ("www.tm.example. A +bufsize=0", "edns", UDP_SIZE),
    ("www.tm.example. A +bufsize=100", "edns", UDP_SIZE),
    ("www.tm.example. A +subnet=198.18.0.0/24", "options", ECS),
    ("www.tm.example. A +expire", "options", EXPIRE),
    ("www.tm.example. TYPE0", "status", TYPE0),
    ("www.tm.example. TYPE0", "flags", TYPE0),
    ("www.tm.example. TYPE0", "authority", TYPE0),
];

/// The battery: `NAME TYPE [dig options]` asked over IPv4 UDP unless the options say more;
/// `@6 ...` over IPv6; `raw-tcp NAME TYPE [variant]` / `raw-udp ...` as one hand-made query
/// (`raw_query`: dig prints only "Transfer failed." for a refused transfer, without the rcode,
/// and cannot make some malformed queries).
const BATTERY: &[&str] = &[
    // Profile names, every type the zone holds and some it does not.
    "www.tm.example. A",
    "www.tm.example. AAAA",
    "www.tm.example. MX",
    "www.tm.example. TXT",
    "www.tm.example. CNAME",
    "www.tm.example. SOA",
    "www.tm.example. NS",
    "www.tm.example. ANY",
    "WwW.Tm.ExAmPlE. A",
    "WWW.TM.EXAMPLE. MX",
    "api.eu.tm.example. A",
    "api.eu.tm.example. AAAA",
    "API.EU.TM.EXAMPLE. ANY",
    "v6only.tm.example. A",
    "v6only.tm.example. AAAA",
    "v6only.tm.example. ANY",
    // The apex.
    "tm.example. SOA",
    "tm.example. NS",
    "tm.example. A",
    "tm.example. AAAA",
    "tm.example. MX",
    "tm.example. TXT",
    "tm.example. ANY",
    "tm.example. DS",
    "tm.example. TYPE65535",
    "TM.EXAMPLE. NS",
    "tM.eXaMpLe. SOA",
    // The name servers' own names.
    "ns1.tm.example. A",
    "ns1.tm.example. AAAA",
    "ns1.tm.example. ANY",
    "ns1.tm.example. MX",
    "NS1.TM.EXAMPLE. A",
    "ns2.tm.example. A",
    "ns2.tm.example. AAAA",
    "ns2.tm.example. ANY",
    // The empty non-terminal, and names that do not exist.
    "eu.tm.example. A",
    "eu.tm.example. AAAA",
    "eu.tm.example. ANY",
    "Eu.Tm.Example. A",
    "sub.eu.tm.example. A",
    "nothing.tm.example. A",
    "nothing.tm.example. ANY",
    "NoThInG.Tm.ExAmPlE. A",
    "x.www.tm.example. A",
    "x.www.tm.example. AAAA",
    "x.ns1.tm.example. A",
    // Outside the zone.
    "other.example. A",
    "Other.Example. A",
    "example. SOA",
    "xtm.example. A",
    ". NS",
    // EDNS on and off, DO, version 1, recursion desired or not.
    "www.tm.example. A +noedns",
    "www.tm.example. A +dnssec",
    "www.tm.example. A +edns=1",
    "www.tm.example. A +edns=1 +noednsneg",
    "www.tm.example. A +norec",
    "ns1.tm.example. A +noedns",
    "ns1.tm.example. A +dnssec",
    "ns1.tm.example. A +edns=1 +noednsneg",
    "ns1.tm.example. A +norec",
    "tm.example. NS +noedns",
    "tm.example. NS +dnssec",
    "tm.example. NS +edns=1 +noednsneg +dnssec",
    "tm.example. NS +norec",
    "tm.example. SOA +dnssec",
    "tm.example. ANY +noedns",
    "nothing.tm.example. A +noedns",
    "nothing.tm.example. A +dnssec",
    "nothing.tm.example. A +edns=1 +noednsneg",
    "eu.tm.example. A +noedns",
    "other.example. A +noedns",
    "other.example. A +edns=1 +noednsneg",
    // EDNS options and sizes.
    "www.tm.example. A +bufsize=512",
    "www.tm.example. A +bufsize=4096",
    "www.tm.example. A +bufsize=0",
    "www.tm.example. A +bufsize=100",
    "www.tm.example. A +nsid",
    "www.tm.example. A +expire",
    "www.tm.example. A +ednsopt=65001:abcd",
    "www.tm.example. A +ednsflags=0x4000",
    "www.tm.example. A +cookie=0102030405060708",
    "www.tm.example. A +subnet=198.18.0.0/24",
    // Header flags.
    "www.tm.example. A +adflag",
    "www.tm.example. A +noadflag",
    "www.tm.example. A +cdflag",
    "www.tm.example. A +adflag +cdflag",
    "www.tm.example. A +zflag",
    // DNSSEC types of an unsigned zone.
    "www.tm.example. RRSIG +dnssec",
    "www.tm.example. NSEC +dnssec",
    "tm.example. DNSKEY +dnssec",
    // Truncation and the retry over TCP, and TCP itself.
    "big.tm.example. AAAA",
    "big.tm.example. AAAA +bufsize=512 +ignore",
    "big.tm.example. AAAA +bufsize=512",
    "big.tm.example. AAAA +noedns +ignore",
    "big.tm.example. AAAA +noedns",
    "big.tm.example. AAAA +tcp",
    "big.tm.example. ANY",
    "www.tm.example. A +tcp",
    "www.tm.example. A +tcp +noedns",
    "tm.example. NS +tcp",
    "tm.example. ANY +tcp",
    "tm.example. SOA +tcp +dnssec",
    "nothing.tm.example. A +tcp",
    "other.example. A +tcp",
    // The IPv6 listener.
    "@6 www.tm.example. AAAA",
    "@6 tm.example. NS",
    "@6 nothing.tm.example. A",
    "@6 www.tm.example. A +tcp",
    // Classes.
    "www.tm.example. A -c ANY",
    "tm.example. SOA -c CH",
    "tm.example. NS -c CH +noedns",
    "www.tm.example. A -c HS",
    "www.tm.example. A -c NONE",
    "version.bind. TXT -c CH",
    "id.server. TXT -c CH",
    // Other opcodes, malformed and odd questions, transfers.
    "www.tm.example. A +opcode=1",
    "www.tm.example. A +opcode=2",
    "www.tm.example. A +opcode=4",
    "www.tm.example. A +opcode=5",
    "www.tm.example. A +opcode=15",
    "www.tm.example. A +header-only",
    "www.tm.example. TYPE0",
    "raw-tcp tm.example. AXFR",
    "raw-tcp tm.example. IXFR",
    "raw-udp tm.example. AXFR",
    "raw-udp www.tm.example. A",
    "raw-udp www.tm.example. A +opt2",
    "raw-udp www.tm.example. A +qd2",
    "raw-tcp www.tm.example. A +qd2",
    "raw-udp www.tm.example. A +qr",
];

/// Asked again with other negative TTLs: the negative answers' SOA TTL is min(SOA TTL,
/// minimum) (RFC 2308 3), so 10 when the minimum is 10, and 30 (the SOA's TTL) when it is 60.
const NEGATIVE: &[&str] = &[
    "tm.example. SOA",
    "tm.example. NS",
    "tm.example. A",
    "www.tm.example. MX",
    "eu.tm.example. A",
    "ns2.tm.example. AAAA",
    "nothing.tm.example. A",
    "x.www.tm.example. A",
    "nothing.tm.example. A +noedns",
    "nothing.tm.example. A +tcp",
];

/// A reply as compared: every field as text.
#[derive(Debug, Clone, Default)]
struct View {
    status: String,
    opcode: String,
    flags: String,
    qdcount: String,
    answer: Vec<String>,
    authority: Vec<String>,
    additional: Vec<String>,
    edns: String,
    options: Vec<String>,
    raw: String,
}

const NO_ANSWER: &str = "(no answer)";

const FIELDS: [&str; 9] = [
    "status",
    "opcode",
    "flags",
    "qdcount",
    "answer",
    "authority",
    "additional",
    "edns",
    "options",
];

impl View {
    fn none(why: String) -> View {
        View {
            status: NO_ANSWER.into(),
            raw: why,
            ..View::default()
        }
    }

    fn field(&self, f: &str) -> String {
        let list = |v: &[String]| if v.is_empty() { "-".to_string() } else { v.join("; ") };
        match f {
            "status" => self.status.clone(),
            "opcode" => self.opcode.clone(),
            "flags" => self.flags.clone(),
            "qdcount" => self.qdcount.clone(),
            "answer" => list(&self.answer),
            "authority" => list(&self.authority),
            "additional" => list(&self.additional),
            "edns" => self.edns.clone(),
            "options" => list(&self.options),
            _ => unreachable!("{f}"),
        }
    }

    /// One line: rcode, flags, section counts, EDNS version/size/DO.
    fn summary(&self) -> String {
        if self.status == NO_ANSWER {
            return self.status.clone();
        }
        let edns = if self.edns == "none" {
            "no EDNS".to_string()
        } else {
            self.edns
                .replace("EDNS: version: ", "v")
                .replace(", flags:", "")
                .replace("; udp: ", "/")
        };
        format!(
            "{} {} {}/{}/{} {edns}",
            self.status,
            self.flags,
            self.answer.len(),
            self.authority.len(),
            self.additional.len(),
        )
    }
}

/// Lower-cased owner and data (names compare case-insensitively), sorted (a multiset).
fn records(rrs: &[probed_tests::dig::Rr]) -> Vec<String> {
    let mut v: Vec<String> = rrs
        .iter()
        .map(|(owner, ttl, t, data)| format!("{} {ttl} {t} {}", owner.to_lowercase(), data.to_lowercase()))
        .collect();
    v.sort();
    v
}

fn view_of(d: &Dig) -> View {
    let header = d.raw.lines().find(|l| l.contains("->>HEADER<<-")).unwrap_or("");
    let opcode = header
        .split("opcode: ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or("?")
        .to_string();
    let flags_line = d.raw.lines().find(|l| l.starts_with(";; flags: ")).unwrap_or("");
    let mut flags: BTreeSet<String> = d.flags.iter().cloned().collect();
    // dig shows the header's reserved Z bit as MBZ, between the flags and the counts.
    if let Some(mbz) = flags_line.split("MBZ: ").nth(1) {
        flags.insert(format!(
            "mbz={}",
            mbz.split(',').next().unwrap_or("").trim_end_matches(';')
        ));
    }
    let qdcount = flags_line
        .split("QUERY: ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or("?")
        .to_string();
    let mut options: Vec<String> = d.options.clone();
    if let Some(s) = &d.subnet {
        options.push(format!("CLIENT-SUBNET: {s}"));
    }
    options.sort();
    View {
        status: d.status.clone(),
        opcode,
        flags: flags.into_iter().collect::<Vec<_>>().join(" "),
        qdcount,
        answer: records(&d.answers),
        authority: records(&d.authority),
        additional: records(&d.additional),
        edns: d.edns.clone().unwrap_or_else(|| "none".into()),
        options,
        raw: d.raw.clone(),
    }
}

/// `dig` from `ns`, as `probed_tests::dig::dig` runs it (one try of 2 s, no cookie unless
/// asked), but a question that gets no answer is an outcome, not a panic.
fn dig(ns: &Netns, server: &str, port: u16, args: &[&str]) -> View {
    let at = format!("@{server}");
    let port = port.to_string();
    let mut all = vec![
        "netns",
        "exec",
        &ns.name,
        "dig",
        &at,
        "-p",
        &port,
        "+tries=1",
        "+time=2",
        "+nocookie",
    ];
    all.extend_from_slice(args);
    let out = Command::new("ip").args(&all).output().expect("run dig");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || !text.contains("->>HEADER<<-") {
        return View::none(format!("dig exited {}: {text}", out.status));
    }
    view_of(&parse(text))
}

/// One query made by hand (RD clear), over TCP or UDP: rcode, flags and counts. `variant`
/// makes it odd: `+opt2` two OPT records (RFC 6891 6.1.1: FORMERR), `+qd2` the question
/// twice, `+qr` the QR bit set (a response: no answer is due).
fn raw_query(ns: &Netns, server: &str, port: u16, name: &str, qtype: &str, variant: &str, tcp: bool) -> View {
    let mut m = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    let encode = |m: &mut Vec<u8>, name: &str| {
        for label in name.split('.').filter(|l| !l.is_empty()) {
            m.push(u8::try_from(label.len()).unwrap());
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
    };
    let code: u16 = match qtype {
        "A" => 1,
        "AXFR" => 252,
        "IXFR" => 251,
        _ => panic!("raw {qtype}"),
    };
    let questions = if variant == "+qd2" { 2 } else { 1 };
    m[5] = questions;
    for _ in 0..questions {
        encode(&mut m, name);
        m.extend_from_slice(&code.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
    }
    if qtype == "IXFR" {
        // RFC 1995 3: the client's SOA (serial 0) in the authority section.
        m[9] = 1;
        encode(&mut m, name);
        m.extend_from_slice(&[0, 6, 0, 1, 0, 0, 0, 0]);
        let mut rdata = Vec::new();
        encode(&mut rdata, &format!("ns1.{name}"));
        encode(&mut rdata, &format!("hostmaster.{name}"));
        rdata.extend_from_slice(&[0; 20]);
        m.extend_from_slice(&u16::try_from(rdata.len()).unwrap().to_be_bytes());
        m.extend_from_slice(&rdata);
    }
    match variant {
        "" | "+qd2" => {}
        "+opt2" => {
            // Two OPT records: root owner, type 41, size 1232, version 0, no options.
            m[11] = 2;
            for _ in 0..2 {
                m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
            }
        }
        "+qr" => m[2] |= 0x80,
        _ => panic!("raw variant {variant}"),
    }
    let target = if server.contains(':') {
        format!("[{server}]:{port}")
    } else {
        format!("{server}:{port}")
    };
    let reply: std::io::Result<Vec<u8>> = ns.enter(|| {
        // A second at most: the one question no server answers (+qr) waits it out.
        let timeout = Some(Duration::from_secs(1));
        if tcp {
            let mut s = TcpStream::connect_timeout(&target.parse().unwrap(), Duration::from_secs(2))?;
            s.set_read_timeout(timeout)?;
            let len = u16::try_from(m.len()).unwrap().to_be_bytes();
            s.write_all(&[&len[..], &m].concat())?;
            let mut len = [0u8; 2];
            s.read_exact(&mut len)?;
            let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut buf)?;
            Ok(buf)
        } else {
            let s = UdpSocket::bind(if server.contains(':') { "[::]:0" } else { "0.0.0.0:0" })?;
            s.set_read_timeout(timeout)?;
            s.send_to(&m, &target)?;
            let mut buf = vec![0u8; 65535];
            let n = s.recv(&mut buf)?;
            buf.truncate(n);
            Ok(buf)
        }
    });
    let b = match reply {
        Ok(b) if b.len() >= 12 => b,
        Ok(b) => return View::none(format!("a {}-byte reply", b.len())),
        Err(e) => return View::none(e.to_string()),
    };
    let status = match b[3] & 0x0f {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        9 => "NOTAUTH",
        other => return View::none(format!("rcode {other}")),
    };
    let mut flags = Vec::new();
    for (bit, f) in [
        (0x8000u16, "qr"),
        (0x0400, "aa"),
        (0x0200, "tc"),
        (0x0100, "rd"),
        (0x0080, "ra"),
    ] {
        if u16::from_be_bytes([b[2], b[3]]) & bit != 0 {
            flags.push(f);
        }
    }
    flags.sort_unstable();
    let count = |i: usize| u16::from_be_bytes([b[4 + 2 * i], b[5 + 2 * i]]);
    // The sections as counts only: a refused transfer carries no records.
    let section = |i: usize| match count(i) {
        0 => Vec::new(),
        n => vec![format!("<{n} records, not decoded>")],
    };
    View {
        status: status.into(),
        opcode: if b[2] & 0x78 == 0 {
            "QUERY".into()
        } else {
            format!("{}", (b[2] >> 3) & 0x0f)
        },
        flags: flags.join(" "),
        qdcount: count(0).to_string(),
        answer: section(1),
        authority: section(2),
        additional: section(3),
        edns: "none".into(),
        options: Vec::new(),
        raw: format!("{b:02x?}"),
    }
}

/// Asks `question` (a `BATTERY` line) of the server at `port`, from `client`.
fn ask(client: &Netns, port: u16, question: &str) -> View {
    let words: Vec<&str> = question.split_whitespace().collect();
    match words[0] {
        "raw-tcp" | "raw-udp" => {
            let variant = words.get(3).copied().unwrap_or("");
            raw_query(client, DNS_V4, port, words[1], words[2], variant, words[0] == "raw-tcp")
        }
        "@6" => dig(client, DNS_V6, port, &words[1..]),
        _ => dig(client, DNS_V4, port, &words),
    }
}

/// Knot in the prober's namespace on `KNOT_PORT`, serving `zone`; ready once it answers an
/// authoritative SOA of `serial`.
fn start_knot(prober: &Netns, client: &Netns, zone: &str, serial: u32) -> Knot {
    let spec = KnotZone {
        name: ZONE,
        text: zone,
        listen: &[DNS_V4, DNS_V6],
        port: KNOT_PORT,
        updates_from: None,
    };
    Knot::start(prober, &spec, || {
        let v = dig(client, DNS_V4, KNOT_PORT, &[ZONE, "SOA", "+norec", "+time=1"]);
        v.flags.split(' ').any(|f| f == "aa") && v.answer.iter().any(|a| a.contains(&format!(" {serial} ")))
    })
}

/// The zone file from probed's state: its SOA and NS answers (with the glue) verbatim, and
/// for each profile the addresses of the endpoints `/v1/status` shows eligible, under the
/// profile's name with its TTL. Returns the file and the SOA serial.
fn zone_from_probed(client: &Netns, daemon: &RunningDaemon) -> (String, u32) {
    let soa = dig(client, DNS_V4, PROBED_PORT, &[ZONE, "SOA"]);
    let ns = dig(client, DNS_V4, PROBED_PORT, &[ZONE, "NS"]);
    assert_eq!(soa.answer.len(), 1, "probed's SOA: {}", soa.raw);
    assert_eq!(ns.answer.len(), 2, "probed's NS: {}", ns.raw);
    let serial: u32 = soa.answer[0].split_whitespace().nth(5).unwrap().parse().unwrap();
    let mut zone = format!("$ORIGIN {ZONE}\n");
    for rr in soa.answer.iter().chain(&ns.answer).chain(&ns.additional) {
        let f: Vec<&str> = rr.splitn(4, ' ').collect();
        zone += &format!("{} {} IN {} {}\n", f[0], f[1], f[2], f[3]);
    }
    let status = daemon.get("/v1/status");
    let by_name: BTreeMap<&str, &serde_json::Value> = status
        .as_array()
        .expect("/v1/status is a list")
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p))
        .collect();
    for (name, dns_name, ttl, configured) in profiles() {
        let p = by_name.get(name).unwrap_or_else(|| panic!("no {name} in {status}"));
        let eligible: Vec<&str> = p["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["eligible"] == true)
            .map(|e| e["address"].as_str().unwrap())
            .collect();
        assert_eq!(
            eligible.len(),
            configured.len(),
            "every endpoint of {name} is eligible: {p}"
        );
        for a in eligible {
            let t = if a.contains(':') { "AAAA" } else { "A" };
            zone += &format!("{dns_name}.{ZONE} {} IN {t} {a}\n", ttl.unwrap_or(30));
        }
    }
    (zone, serial)
}

/// One question's outcome.
struct Row {
    phase: &'static str,
    question: &'static str,
    probed: View,
    knot: View,
    /// (field, why) of each difference; why is None when it is not an expected one.
    diffs: Vec<(&'static str, Option<&'static str>)>,
}

fn compare(phase: &'static str, question: &'static str, probed: View, knot: View) -> Row {
    let diffs = FIELDS
        .iter()
        .filter(|f| probed.field(f) != knot.field(f))
        .map(|f| {
            let why = EXPECTED
                .iter()
                .find(|(q, field, _)| *q == question && field == f)
                .map(|e| e.2);
            (*f, why)
        })
        .collect();
    Row {
        phase,
        question,
        probed,
        knot,
        diffs,
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from("| question | probed | reference (Knot 3.2) | verdict |\n|---|---|---|---|\n");
    for r in rows {
        let q = if r.phase.is_empty() {
            format!("`{}`", r.question)
        } else {
            format!("`{}` ({})", r.question, r.phase)
        };
        let (mut p, mut k) = (r.probed.summary(), r.knot.summary());
        let verdict = if r.diffs.is_empty() {
            "same".to_string()
        } else {
            let answered = r.probed.status != NO_ANSWER && r.knot.status != NO_ANSWER;
            for (f, _) in &r.diffs {
                if answered && !matches!(*f, "status" | "flags") {
                    let _ = write!(p, "; {f}: {}", r.probed.field(f));
                    let _ = write!(k, "; {f}: {}", r.knot.field(f));
                }
            }
            let expected: Vec<&str> = r.diffs.iter().filter(|d| d.1.is_some()).map(|d| d.0).collect();
            let unexpected: Vec<&str> = r.diffs.iter().filter(|d| d.1.is_none()).map(|d| d.0).collect();
            let mut v = String::new();
            if !expected.is_empty() {
                v += &format!("expected: {}", expected.join(", "));
            }
            if !unexpected.is_empty() {
                v += &format!(
                    "{}**UNEXPECTED**: {}",
                    if v.is_empty() { "" } else { "; " },
                    unexpected.join(", ")
                );
            }
            v
        };
        let _ = writeln!(t, "| {q} | {} | {} | {verdict} |", cell(&p), cell(&k));
    }
    t += "\nExpected differences:\n\n";
    let mut reasons: Vec<&str> = Vec::new();
    for e in EXPECTED {
        if !reasons.contains(&e.2) {
            reasons.push(e.2);
        }
    }
    for why in reasons {
        let which: Vec<String> = EXPECTED
            .iter()
            .filter(|e| e.2 == why)
            .map(|e| format!("`{}` ({})", e.0, e.1))
            .collect();
        let _ = writeln!(t, "- {}: {why}", which.join(", "));
    }
    t
}

/// Starts Knot on the zone probed holds now, and asks both every question of `battery`.
fn run_phase(
    topo: &Topology,
    daemon: &RunningDaemon,
    phase: &'static str,
    battery: &[&'static str],
    rows: &mut Vec<Row>,
) {
    let client = &topo.backend;
    let (zone, serial) = zone_from_probed(client, daemon);
    let knot = start_knot(&topo.prober, client, &zone, serial);
    for q in battery {
        let probed = ask(client, PROBED_PORT, q);
        let reference = ask(client, KNOT_PORT, q);
        rows.push(compare(phase, q, probed, reference));
    }
    drop(knot);
}

#[test]
fn probed_answers_as_the_reference_server_does_but_for_the_listed_differences() {
    let started = Instant::now();
    let topo = Topology::new();
    let all: Vec<String> = profiles().into_iter().flat_map(|p| p.3).collect();
    let others: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|a| *a != BACKEND_V4 && *a != BACKEND_V6)
        .collect();
    add_backends(&topo, &others);
    let _listeners: Vec<std::net::TcpListener> = all
        .iter()
        .map(|a| {
            let at = if a.contains(':') {
                format!("[{a}]:80")
            } else {
                format!("{a}:80")
            };
            topo.backend.tcp_listen(&at)
        })
        .collect();
    let files = DaemonFiles::new();
    let write = |negative_ttl: u32| {
        let text = files.header(PROBER_IF) + &config(negative_ttl);
        files.write_config(&text)
    };
    let cfg = write(30);
    let daemon = RunningDaemon::start(&topo.prober, cfg, Some(&files.config_path())).expect("start the daemon");
    let wait_online = || {
        for (name, _, _, endpoints) in profiles() {
            for i in 0..endpoints.len() {
                daemon.wait_status(name, &format!("e{i}"), S::Online, Duration::from_secs(5));
            }
        }
    };
    wait_online();

    let mut rows = Vec::new();
    run_phase(&topo, &daemon, "", BATTERY, &mut rows);
    // The same zone with a negative TTL below the TTL, then above it.
    for (negative_ttl, phase) in [(10, "negative_ttl 10s"), (60, "negative_ttl 60s")] {
        write(negative_ttl);
        let (code, v) = daemon.call("POST", "/v1/reload");
        assert_eq!(code, 200, "reload: {v}");
        wait_online();
        run_phase(&topo, &daemon, phase, NEGATIVE, &mut rows);
    }
    daemon.stop();
    // RFC 2308 3 in probed's own answers, not only as Knot's: the negative answer's SOA TTL is
    // min(SOA TTL 30, minimum).
    for (phase, ttl) in [("negative_ttl 10s", 10), ("negative_ttl 60s", 30)] {
        let r = rows
            .iter()
            .find(|r| r.phase == phase && r.question == "nothing.tm.example. A")
            .unwrap();
        let soa = r.probed.authority.first().map_or("", String::as_str);
        assert!(soa.starts_with(&format!("tm.example. {ttl} SOA ")), "{phase}: {soa}");
    }

    let text = table(&rows);
    println!("\n{text}");
    let _ = std::fs::create_dir_all("/tmp/dnsref");
    let _ = std::fs::write("/tmp/dnsref/differential.md", &text);

    let mut failures = Vec::new();
    for r in &rows {
        for (f, why) in &r.diffs {
            if why.is_none() {
                failures.push(format!(
                    "{} {}: {f} differs\n  probed: {}\n  knot:   {}\n--- probed said:\n{}\n--- knot said:\n{}",
                    r.phase,
                    r.question,
                    r.probed.field(f),
                    r.knot.field(f),
                    r.probed.raw,
                    r.knot.raw
                ));
            }
        }
    }
    for (q, f, _) in EXPECTED {
        let happened = rows
            .iter()
            .any(|r| r.question == *q && r.diffs.iter().any(|d| d.0 == *f));
        if !happened {
            failures.push(format!(
                "expected difference no longer happens: {q} {f} (remove it from EXPECTED)"
            ));
        }
    }
    eprintln!("{} questions in {:.1?}", rows.len(), started.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
