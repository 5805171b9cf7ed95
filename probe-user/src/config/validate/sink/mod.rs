//! `[[sink]]`: which forwarding structure follows which profile. The names given here end up
//! in nft scripts and pin paths, so they are held to a strict alphabet.
mod route;
mod userspace;

use std::collections::HashSet;

use route::{route, Claims};
use userspace::{exec, haproxy};

use toml::de::DeValue;

use crate::{
    config::{
        model::*,
        read::{Item, Reader, Table},
    },
    rules::limits::{DEFAULT_SLOTS, MAX_SLOTS},
};

/// Every `[[sink]]`, checked against the profiles that exist.
pub(super) fn sinks(
    r: &mut Reader<'_>,
    list: Option<&toml::Spanned<DeValue<'_>>>,
    profiles: &[Option<String>],
    resolved: &[Option<Profile>],
) -> Option<Vec<Sink>> {
    let Some(list) = list else {
        return Some(Vec::new());
    };
    let items = r.tables_of(list, "sink", "expected [[sink]] tables")?;
    let mut names = HashSet::new();
    let mut claims = Claims::default();
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match sink(r, item, i, (profiles, resolved), (&mut names, &mut claims)) {
            Some(s) => out.push(s),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn sink(
    r: &mut Reader<'_>,
    v: &toml::Spanned<DeValue<'_>>,
    index: usize,
    (profiles, resolved): (&[Option<String>], &[Option<Profile>]),
    (names, claims): (&mut HashSet<String>, &mut Claims),
) -> Option<Sink> {
    let t = r.table(v, format!("sink[{index}]"), &crate::config::reference::SINK)?;
    let profile_item = r.string(&t, "profile");
    let profile = match &profile_item {
        None => {
            r.missing(&t, "profile", "every sink follows one profile: set profile = \"NAME\"");
            None
        }
        Some(item) if !profiles.iter().flatten().any(|p| *p == item.v) => {
            let known: Vec<&str> = profiles.iter().flatten().map(String::as_str).collect();
            r.bad(item, format!("no profile has this name; profiles: {}", list(&known)));
            None
        }
        Some(item) => Some(item.v.clone()),
    };
    let on_stop_item = r.string(&t, "on_stop");
    let on_stop = match &on_stop_item {
        None => Some(OnStop::Keep),
        Some(item) => match item.v.parse::<OnStop>() {
            Ok(on_stop) => Some(on_stop),
            Err(_) => {
                r.bad(item, "expected keep (leave the data path as it is) or clear");
                None
            }
        },
    };
    let kind_item = r.string(&t, "kind");
    let (kind, default_name) = match kind_item.clone() {
        // A wrong-typed kind is already reported; it is not also missing.
        None if Reader::get(&t, "kind").is_some() => (None, None),
        None => {
            r.missing(
                &t,
                "kind",
                format!("every sink needs a kind: {}", SinkType::NAMES.join(", ")),
            );
            (None, None)
        }
        Some(item) => match item.v.parse::<SinkType>() {
            Ok(kind) => {
                // Reported beside what the kind's own reader finds.
                refuse_foreign(r, &t, kind);
                match kind {
                    SinkType::Nftables => nftables(r, &t),
                    SinkType::Bpf => bpf(r, &t),
                    SinkType::Haproxy => {
                        // The endpoints of the profile, once it read well, name the servers.
                        let endpoints = profile_item
                            .as_ref()
                            .and_then(|p| resolved.iter().flatten().find(|r| r.name == p.v).map(|r| (p, r)));
                        haproxy(r, &t, endpoints)
                    }
                    SinkType::Exec => exec(r, &t),
                    SinkType::Route => {
                        let name = Reader::get(&t, "name").and_then(|v| v.get_ref().as_str().map(str::to_string));
                        route(r, &t, (index, name.as_deref()), claims)
                    }
                }
            }
            Err(_) => {
                r.bad(&item, format!("expected {}", SinkType::NAMES.join(", ")));
                (None, None)
            }
        },
    };
    let name = match r.string(&t, "name") {
        Some(item) if !ident(&item.v) => {
            r.bad(&item, IDENT_RULE);
            None
        }
        Some(item) if !names.insert(item.v.clone()) => {
            r.bad(&item, "another sink already has this name");
            None
        }
        Some(item) => Some(item.v),
        None => match default_name {
            Some(n) if !names.insert(n.clone()) => {
                r.missing(
                    &t,
                    "name",
                    format!("another sink is also called {n:?}: give each a name"),
                );
                None
            }
            None if kind.is_some() => {
                r.missing(
                    &t,
                    "name",
                    format!("this sink's default name would not be a sink name ({IDENT_RULE}): set name"),
                );
                None
            }
            other => other,
        },
    };
    // A route sink's routes go with probed's device: stopping always withdraws them.
    let on_stop = match (&kind, &on_stop_item) {
        (Some(SinkKind::Route(_)), Some(item)) => {
            r.bad(
                item,
                "a route sink always withdraws when probed stops (its routes go with probed's device): remove on_stop",
            );
            None
        }
        (Some(SinkKind::Route(_)), None) => Some(OnStop::Clear),
        _ => on_stop,
    };
    Some(Sink {
        name: name?,
        profile: profile?,
        on_stop: on_stop?,
        kind: kind?,
    })
}

/// `kind = "nftables"`, and its default name (the map's or set's).
fn nftables(r: &mut Reader<'_>, t: &Table<'_, '_>) -> (Option<SinkKind>, Option<String>) {
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
    let kind = family
        .zip(table)
        .zip(target)
        .map(|((family, table), target)| SinkKind::Nftables(NftSink { family, table, target }));
    (kind, name)
}

/// `kind = "bpf"`, and its default name (the pin's).
fn bpf(r: &mut Reader<'_>, t: &Table<'_, '_>) -> (Option<SinkKind>, Option<String>) {
    let map = required_ident(
        r,
        t,
        "map",
        "a bpf sink needs map = \"NAME\", the pin's name under pin_dir/sinks/",
    );
    let slots = slots(r, t);
    let name = map.clone();
    (
        map.zip(slots).map(|(map, slots)| SinkKind::Bpf(BpfSink { map, slots })),
        name,
    )
}

fn slots(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<u32> {
    match r.int(t, "slots") {
        None => Some(DEFAULT_SLOTS),
        Some(item) => match u32::try_from(item.v).ok().filter(|n| (1..=MAX_SLOTS).contains(n)) {
            Some(n) => Some(n),
            None => {
                r.bad(&item, format!("expected 1 to {MAX_SLOTS} slots"));
                None
            }
        },
    }
}

/// Every key of another kind's, as the reference has it.
fn refuse_foreign(r: &mut Reader<'_>, t: &Table<'_, '_>, kind: SinkType) {
    super::refuse_foreign(
        r,
        t,
        &crate::config::reference::SINK,
        |only| only.admits_sink(kind),
        &format!("this sink's kind is {kind}"),
    );
}

const IDENT_RULE: &str = "expected 1-63 letters, digits, '_' or '-', starting with a letter";

/// nftables and pin names: no quoting, no path separators, nothing a script could misread.
fn ident(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What HAProxy takes in a backend or server name (its identifier alphabet), kept to what
/// cannot break an admin socket command line: no spaces, ';', '/' or quotes.
pub(super) const HAPROXY_NAME_RULE: &str = "expected 1-63 letters, digits, '-', '_', '.' or ':'";

pub(super) fn haproxy_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

fn named(r: &mut Reader<'_>, item: &Item<String>) -> Option<String> {
    if ident(&item.v) {
        Some(item.v.clone())
    } else {
        r.bad(item, IDENT_RULE);
        None
    }
}

fn required_ident(r: &mut Reader<'_>, t: &Table<'_, '_>, key: &str, why: &str) -> Option<String> {
    match r.string(t, key) {
        None => {
            r.missing(t, key, why);
            None
        }
        Some(item) => named(r, &item),
    }
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
