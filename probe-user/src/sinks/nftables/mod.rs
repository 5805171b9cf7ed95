//! The nftables sink: the elements of one map (a slot table: slot -> backend address, and
//! port when the map's value has one) or one set (the eligible addresses) in the operator's
//! ruleset. The operator declares the table, the map or set and the rule that uses it; probed
//! owns the elements only. Each sync is one transaction holding only the elements that
//! differ from what the data path holds.
pub mod config;

pub use config::KEYS;
use std::{collections::BTreeSet, fmt::Write, net::IpAddr};

use serde_json::Value;

use self::config::{NftFamily, NftSink, NftTarget};
use super::{desired_slots, Sink, SinkError, SinkFault, SyncReport};
use crate::{kernel::nft::Nft, sinks::model::ProfileModel};

/// What the data path's element type is, as read from the ruleset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ValueType {
    v6: bool,
    with_port: bool,
}

/// One element: an address, and a port when the type has one.
type Backend = (IpAddr, Option<u16>);

pub struct NftablesSink {
    cfg: NftSink,
    nft: Nft,
    value: ValueType,
    /// What the data path held after the last read or successful write; None when unknown
    /// (start, or a failure), which makes the next sync read it first.
    held: Option<Held>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// The slot table, and the keys at or above `slots` the map also holds (left by a larger
    /// `slots` before a reload, or put there by hand): they are deleted.
    Slots(Vec<Option<Backend>>, Vec<u64>),
    Set(BTreeSet<Backend>),
}

impl NftablesSink {
    /// Opens libnftables and checks that the map or set exists with a type probed can fill.
    pub fn open(cfg: &NftSink) -> Result<NftablesSink, SinkError> {
        let nft = Nft::open().map_err(|e| SinkError::new(SinkFault::Setup, "open libnftables").because(e))?;
        let mut sink = NftablesSink {
            cfg: cfg.clone(),
            nft,
            value: ValueType {
                v6: false,
                with_port: false,
            },
            held: None,
        };
        sink.check()?;
        Ok(sink)
    }

    /// `ip lb web_slots`, as nft commands name the map or set.
    fn object(&self) -> String {
        format!("{} {} {}", self.cfg.family.as_str(), self.cfg.table, self.name())
    }

    fn name(&self) -> &str {
        match &self.cfg.target {
            NftTarget::Map { name, .. } | NftTarget::Set { name } => name,
        }
    }

    fn noun(&self) -> &'static str {
        match self.cfg.target {
            NftTarget::Map { .. } => "map",
            NftTarget::Set { .. } => "set",
        }
    }

    /// Lists the map or set; its JSON object.
    fn list(&mut self) -> Result<Value, SinkError> {
        let command = format!("list {} {}", self.noun(), self.object());
        let text = self.nft.list_json(&command).map_err(|e| {
            SinkError::new(
                SinkFault::Missing,
                format!(
                    "{} {} {}: {e}; declare it in the ruleset (see docs/operations/sinks.md)",
                    self.cfg.family.as_str(),
                    self.cfg.table,
                    self.name()
                ),
            )
        })?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| SinkError::new(SinkFault::Data, "nft JSON").because(e))?;
        json["nftables"]
            .as_array()
            .and_then(|items| items.iter().find_map(|i| i.get(self.noun())))
            .cloned()
            .ok_or_else(|| {
                SinkError::new(
                    SinkFault::Data,
                    format!("nft listed no {} {}", self.noun(), self.object()),
                )
            })
    }

    fn read(&mut self) -> Result<Held, SinkError> {
        let obj = self.list()?;
        let elems = obj["elem"].as_array().cloned().unwrap_or_default();
        match self.cfg.target {
            NftTarget::Map { slots, .. } => {
                let mut table = vec![None; slots as usize];
                let mut stale = Vec::new();
                for e in &elems {
                    // [key, value]; a key out of range is not a slot (any more): it is removed,
                    // whatever its value, or flows hashed to it would go to an old backend.
                    let Some(k) = e.get(0).and_then(Value::as_u64) else {
                        continue;
                    };
                    match (table.get_mut(k as usize), e.get(1).and_then(backend)) {
                        (Some(slot), Some(v)) => *slot = Some(v),
                        (Some(_), None) => {}
                        (None, _) => stale.push(k),
                    }
                }
                Ok(Held::Slots(table, stale))
            }
            NftTarget::Set { .. } => Ok(Held::Set(elems.iter().filter_map(backend).collect())),
        }
    }

    /// What the structure should hold; a slot table moves as little as it can from `held`.
    fn want(&self, model: &ProfileModel, held: &Held) -> Held {
        let fits = |a: &IpAddr| a.is_ipv6() == self.value.v6;
        let port = |p: u16| self.value.with_port.then_some(p);
        match self.cfg.target {
            NftTarget::Map { slots, .. } => {
                let held: &[Option<Backend>] = match held {
                    Held::Slots(h, _) => h,
                    Held::Set(_) => &[],
                };
                let key = |s: &crate::changes::EndpointState| (s.address, port(s.port));
                Held::Slots(
                    desired_slots(model, slots, |s| fits(&s.address), key, held)
                        .into_iter()
                        .map(|s| s.map(key))
                        .collect(),
                    Vec::new(),
                )
            }
            NftTarget::Set { .. } => Held::Set(
                model
                    .eligible()
                    .filter(|(_, s)| fits(&s.address))
                    .map(|(_, s)| (s.address, port(s.port)))
                    .collect(),
            ),
        }
    }

    /// The commands that turn `held` into `want`: one delete and one add at most.
    fn diff(&self, held: &Held, want: &Held) -> (String, usize) {
        let mut del = Vec::new();
        let mut add = Vec::new();
        match (held, want) {
            (Held::Slots(h, stale), Held::Slots(w, _)) => {
                del.extend(stale.iter().map(u64::to_string));
                for (k, (old, new)) in h.iter().zip(w).enumerate() {
                    if old == new {
                        continue;
                    }
                    if old.is_some() {
                        del.push(k.to_string());
                    }
                    if let Some(b) = new {
                        add.push(format!("{k} : {}", element(*b)));
                    }
                }
            }
            (Held::Set(h), Held::Set(w)) => {
                del.extend(h.difference(w).map(|b| element(*b)));
                add.extend(w.difference(h).map(|b| element(*b)));
            }
            _ => unreachable!("held and wanted are of the sink's one kind"),
        }
        let mut script = String::new();
        let object = self.object();
        if !del.is_empty() {
            let _ = writeln!(script, "delete element {object} {{ {} }}", del.join(", "));
        }
        if !add.is_empty() {
            let _ = writeln!(script, "add element {object} {{ {} }}", add.join(", "));
        }
        (script, del.len().max(add.len()))
    }
}

impl Sink for NftablesSink {
    fn describe(&self) -> String {
        match self.cfg.target {
            NftTarget::Map { slots, .. } => format!("nftables map {} ({slots} slots)", self.object()),
            NftTarget::Set { .. } => format!("nftables set {}", self.object()),
        }
    }

    fn check(&mut self) -> Result<(), SinkError> {
        let obj = self.list()?;
        let value_field = match self.cfg.target {
            NftTarget::Map { .. } => {
                let key = obj["type"].as_str().unwrap_or_default();
                if !matches!(key, "integer" | "mark") {
                    return Err(SinkError::new(
                        SinkFault::WrongType,
                        format!(
                            "map {} is keyed by {key}; a slot table is keyed by an integer (typeof numgen inc mod N)",
                            self.object()
                        ),
                    ));
                }
                &obj["map"]
            }
            NftTarget::Set { .. } => &obj["type"],
        };
        let shown = value_field.to_string();
        self.value = value_type(value_field).ok_or_else(|| {
            SinkError::new(
                SinkFault::WrongType,
                format!(
                    "{} {} holds {shown}; probed writes ipv4_addr or ipv6_addr, optionally . inet_service",
                    self.noun(),
                    self.object()
                ),
            )
        })?;
        if self.cfg.family == NftFamily::Ip && self.value.v6 || self.cfg.family == NftFamily::Ip6 && !self.value.v6 {
            return Err(SinkError::new(
                SinkFault::WrongType,
                format!(
                    "{} {} holds {shown}, which its table's family cannot use",
                    self.noun(),
                    self.object()
                ),
            ));
        }
        Ok(())
    }

    fn sync(&mut self, model: &ProfileModel) -> Result<SyncReport, SinkError> {
        let held = match self.held.take() {
            Some(h) => h,
            None => self.read()?,
        };
        let want = self.want(model, &held);
        let (script, written) = self.diff(&held, &want);
        if !script.is_empty() {
            if let Err(e) = self.nft.run(&script) {
                return Err(
                    SinkError::new(SinkFault::Write, format!("update {} {}", self.noun(), self.object())).because(e),
                );
            }
        }
        let entries = entries(&want);
        self.held = Some(want);
        Ok(SyncReport {
            written,
            entries,
            ..SyncReport::default()
        })
    }

    fn verify(&mut self, model: &ProfileModel) -> Result<bool, SinkError> {
        let held = self.read()?;
        let same = held == self.want(model, &held);
        self.held = Some(held);
        Ok(same)
    }

    fn clear(&mut self) -> Result<(), SinkError> {
        let command = format!("flush {} {}", self.noun(), self.object());
        self.held = None;
        self.nft
            .run(&command)
            .map(drop)
            .map_err(|e| SinkError::new(SinkFault::Write, command).because(e))
    }
}

fn entries(h: &Held) -> usize {
    match h {
        Held::Slots(s, _) => s.iter().flatten().count(),
        Held::Set(s) => s.len(),
    }
}

/// `198.18.1.1`, `198.18.1.1 . 80`, `2001:2::1 . 80`.
fn element((addr, port): Backend) -> String {
    match port {
        Some(p) => format!("{addr} . {p}"),
        None => addr.to_string(),
    }
}

/// An element value in nft's JSON: `"198.18.1.1"` or `{"concat": ["198.18.1.1", 80]}`.
fn backend(v: &Value) -> Option<Backend> {
    if let Some(s) = v.as_str() {
        return s.parse().ok().map(|a| (a, None));
    }
    let parts = v.get("concat")?.as_array()?;
    let addr = parts.first()?.as_str()?.parse().ok()?;
    let port = u16::try_from(parts.get(1)?.as_u64()?).ok()?;
    Some((addr, Some(port)))
}

/// `"ipv4_addr"`, `"ipv6_addr . inet_service"` (nft prints a concatenation as one string in
/// some versions and as a list in others).
fn value_type(v: &Value) -> Option<ValueType> {
    let parts: Vec<String> = match v {
        Value::String(s) => s.split('.').map(|p| p.trim().to_string()).collect(),
        Value::Array(a) => a.iter().filter_map(|p| p.as_str().map(str::to_string)).collect(),
        _ => return None,
    };
    let v6 = match parts.first().map(String::as_str) {
        Some("ipv4_addr") => false,
        Some("ipv6_addr") => true,
        _ => return None,
    };
    match parts.get(1..).unwrap_or_default() {
        [] => Some(ValueType { v6, with_port: false }),
        [p] if p == "inet_service" => Some(ValueType { v6, with_port: true }),
        _ => None,
    }
}

/// A socket address as a map value would take it, for tests.
#[cfg(test)]
fn socket((addr, port): Backend) -> std::net::SocketAddr {
    std::net::SocketAddr::new(addr, port.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nft_json_values_and_types() {
        let v: Value = serde_json::from_str(r#"{"concat": ["198.18.1.1", 80]}"#).unwrap();
        assert_eq!(backend(&v).map(socket), Some("198.18.1.1:80".parse().unwrap()));
        assert_eq!(
            backend(&Value::String("2001:2::1".into())),
            Some(("2001:2::1".parse().unwrap(), None))
        );
        assert_eq!(
            value_type(&Value::String("ipv4_addr . inet_service".into())),
            Some(ValueType {
                v6: false,
                with_port: true
            })
        );
        assert_eq!(
            value_type(&serde_json::json!(["ipv6_addr", "inet_service"])),
            Some(ValueType {
                v6: true,
                with_port: true
            })
        );
        assert_eq!(value_type(&Value::String("ether_addr".into())), None);
        assert_eq!(value_type(&Value::String("ipv4_addr . ether_addr".into())), None);
    }
}
