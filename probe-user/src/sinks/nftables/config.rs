//! The nftables sink's settings, its keys (`map` and `slots` are the reference's, shared with
//! the bpf sink) and its reader.
use serde::Serialize;

use crate::{
    rules::SinkType,
    schema::{
        keys::{said, words, Allowed::OneOf, Key, Reload::Applies, Type, Unset::Required},
        read::{Reader, Table},
    },
    sinks::names::{named, required_ident, slots, IDENT},
    wire_enum::wire_enum,
};

/// An nftables map (slot table) or set (eligible addresses) in the operator's ruleset; probed
/// owns its elements only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NftSink {
    pub family: NftFamily,
    pub table: String,
    pub target: NftTarget,
}

wire_enum! {
    /// The family of an nftables sink's table.
    #[derive(Debug)]
    pub enum NftFamily {
        Ip = "ip",
        Ip6 = "ip6",
        Inet = "inet",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NftTarget {
    /// `map NAME { typeof numgen inc mod N : ip daddr [. tcp dport]; }`: slot -> backend.
    Map { name: String, slots: u32 },
    /// `set NAME { typeof ip daddr; }`: the eligible addresses.
    Set { name: String },
}

/// Its keys beside the shared ones.
pub const KEYS: &[Key] = &[
    Key::new(
        "family",
        Type::String,
        Required,
        OneOf(&["ip", "ip6", "inet"]),
        Applies,
        "The family of the nftables table.",
    )
    .sinks(&[SinkType::Nftables], ""),
    Key::new(
        "table",
        Type::String,
        Required,
        words(IDENT),
        Applies,
        "The nftables table that holds the map or set.",
    )
    .sinks(&[SinkType::Nftables], ""),
    Key::new(
        "set",
        Type::String,
        said("none"),
        words(IDENT),
        Applies,
        "An nftables set that holds the eligible addresses (and ports, with . inet_service in its \
             type); instead of map.",
    )
    .sinks(&[SinkType::Nftables], ""),
];

/// `kind = "nftables"`, and its default name (the map's or set's).
pub(crate) fn read(r: &mut Reader<'_>, t: &Table<'_, '_>) -> (Option<NftSink>, Option<String>) {
    let family = match r.string(t, "family") {
        None => {
            r.missing(
                t,
                "family",
                "an nftables sink needs the table's family: ip, ip6 or inet",
            );
            None
        }
        Some(item) => match item.v.parse::<NftFamily>() {
            Ok(family) => Some(family),
            Err(_) => {
                r.bad(&item, "expected ip, ip6 or inet");
                None
            }
        },
    };
    let table = required_ident(
        r,
        t,
        "table",
        "an nftables sink needs the table that holds its map or set",
    );
    let map = r.string(t, "map");
    let set = r.string(t, "set");
    let target = match (map, set) {
        (Some(map), None) => {
            let slots = slots(r, t);
            named(r, &map)
                .zip(slots)
                .map(|(name, slots)| NftTarget::Map { name, slots })
        }
        (None, Some(set)) => {
            if let Some(item) = r.int(t, "slots") {
                r.bad(
                    &item,
                    "slots applies to a map; a set holds the eligible addresses themselves",
                );
                None
            } else {
                named(r, &set).map(|name| NftTarget::Set { name })
            }
        }
        (Some(_), Some(set)) => {
            r.bad(
                &set,
                "set one of map (a slot table) or set (the eligible addresses), not both",
            );
            None
        }
        (None, None) => {
            r.missing(
                t,
                "map",
                "an nftables sink needs map = \"NAME\" (with slots) or set = \"NAME\"",
            );
            None
        }
    };
    let name = target.as_ref().map(|t| match t {
        NftTarget::Map { name, .. } | NftTarget::Set { name } => name.clone(),
    });
    let sink = family
        .zip(table)
        .zip(target)
        .map(|((family, table), target)| NftSink { family, table, target });
    (sink, name)
}
