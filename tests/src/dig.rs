//! `dig` (BIND's client) as the reference client of the DNS tests: run in a namespace, its
//! answer read back into sections.
use crate::Netns;

/// One record as dig prints it: (owner, TTL, type, data).
pub type Rr = (String, u32, String, String);

/// One `dig` answer, as dig prints it.
#[derive(Debug, Default, Clone)]
pub struct Dig {
    /// NOERROR, NXDOMAIN, ... (BADVERS and other extended codes as dig names them).
    pub status: String,
    /// Header flags, lower case: qr, aa, tc, rd, ra, ad, cd.
    pub flags: Vec<String>,
    pub answers: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
    /// The `; EDNS: version: V, flags: F; udp: N` line, when the answer had an OPT record.
    pub edns: Option<String>,
    /// `ADDRESS/SOURCE/SCOPE` of an echoed Client Subnet option.
    pub subnet: Option<String>,
    /// Other EDNS options dig printed (`; COOKIE: ...`, `; EDE: ...`, `; NSID: ...`).
    pub options: Vec<String>,
    pub raw: String,
}

impl Dig {
    /// The A and AAAA data of the answer section, sorted.
    pub fn addresses(&self) -> Vec<String> {
        let mut a: Vec<String> = self
            .answers
            .iter()
            .filter(|r| r.2 == "A" || r.2 == "AAAA")
            .map(|r| r.3.clone())
            .collect();
        a.sort();
        a
    }
}

/// Reads dig's text output.
pub fn parse(raw: String) -> Dig {
    let mut d = Dig::default();
    let mut section = "";
    for line in raw.lines() {
        if let Some(rest) = line.split_once("status: ").map(|(_, r)| r) {
            d.status = rest.split(',').next().unwrap_or("").to_string();
        }
        if let Some(rest) = line.strip_prefix(";; flags: ") {
            d.flags = rest
                .split(';')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect();
        }
        if line.starts_with("; EDNS: ") {
            d.edns = Some(line.trim_start_matches("; ").to_string());
        } else if let Some(rest) = line.strip_prefix("; CLIENT-SUBNET: ") {
            d.subnet = Some(rest.trim().to_string());
        } else if line.starts_with("; ") && section == "opt" && line.contains(':') {
            d.options.push(line.trim_start_matches("; ").to_string());
        }
        if line.starts_with(";; ") && line.ends_with("SECTION:") {
            section = if line.contains("ANSWER") {
                "answer"
            } else if line.contains("AUTHORITY") {
                "authority"
            } else if line.contains("ADDITIONAL") {
                "additional"
            } else if line.contains("OPT PSEUDO") {
                "opt"
            } else {
                ""
            };
            continue;
        }
        if line.trim().is_empty() {
            section = "";
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 5 && !line.starts_with(';') {
            let rr = (
                f[0].to_string(),
                f[1].parse().unwrap_or(0),
                f[3].to_string(),
                f[4..].join(" "),
            );
            match section {
                "answer" => d.answers.push(rr),
                "authority" => d.authority.push(rr),
                "additional" => d.additional.push(rr),
                _ => {}
            }
        }
    }
    d.raw = raw;
    d
}

/// `dig @server -p port name type [options]` from `ns`, one try of at most 2 s, no cookie
/// unless `options` asks for one; panics when dig gets no answer.
pub fn dig(ns: &Netns, server: &str, port: u16, name: &str, qtype: &str, options: &[&str]) -> Dig {
    try_dig(ns, server, port, name, qtype, options)
        .unwrap_or_else(|e| panic!("dig @{server} -p {port} {name} {qtype}: {e}"))
}

/// As `dig`, but no answer (a server not up yet) is an error, not a panic.
pub fn try_dig(ns: &Netns, server: &str, port: u16, name: &str, qtype: &str, options: &[&str]) -> Result<Dig, String> {
    let at = format!("@{server}");
    let port = port.to_string();
    let mut args = vec![
        at.as_str(),
        "-p",
        &port,
        name,
        qtype,
        "+tries=1",
        "+time=2",
        "+nocookie",
    ];
    args.extend_from_slice(options);
    ns.try_exec("dig", &args).map(parse)
}
