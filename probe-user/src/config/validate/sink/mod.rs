//! `[[sink]]`: which forwarding structure follows which profile. The names given here end up
//! in nft scripts and pin paths, so they are held to a strict alphabet.
use std::collections::HashSet;

use toml::de::DeValue;

use crate::{
    config::{
        model::*,
        read::{Reader, Table},
    },
    sinks::{
        self,
        haproxy::config::Server,
        names::{ident, IDENT_RULE},
        route::config::Claims,
    },
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
                    SinkType::Nftables => wrap(sinks::nftables::config::read(r, &t), SinkKind::Nftables),
                    SinkType::Bpf => wrap(sinks::bpf::config::read(r, &t), SinkKind::Bpf),
                    SinkType::Haproxy => {
                        // The endpoints of the profile, once it read well, name the servers.
                        let followed = profile_item
                            .as_ref()
                            .and_then(|p| resolved.iter().flatten().find(|r| r.name == p.v).map(|r| (p, r)));
                        let servers: Option<Vec<Server<'_>>> = followed.map(|(_, profile)| {
                            profile
                                .endpoints
                                .iter()
                                .map(|e| Server {
                                    name: &e.name,
                                    server: e.haproxy_server(),
                                    weight: e.weight,
                                })
                                .collect()
                        });
                        let endpoints = followed.zip(servers.as_deref()).map(|((item, _), s)| (item, s));
                        wrap(sinks::haproxy::config::read(r, &t, endpoints), SinkKind::Haproxy)
                    }
                    SinkType::Exec => wrap(sinks::exec::config::read(r, &t), SinkKind::Exec),
                    SinkType::Route => {
                        let name = Reader::get(&t, "name").and_then(|v| v.get_ref().as_str().map(str::to_string));
                        wrap(
                            sinks::route::config::read(r, &t, (index, name.as_deref()), claims),
                            SinkKind::Route,
                        )
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

/// A kind's reading as a `SinkKind`.
fn wrap<T>(
    (settings, name): (Option<T>, Option<String>),
    kind: fn(T) -> SinkKind,
) -> (Option<SinkKind>, Option<String>) {
    (settings.map(kind), name)
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

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
