//! The rules: turns the spanned TOML tree into a resolved `Config`, or into the full list of
//! what is wrong with it. One file per part of the file it checks; the helpers here are the
//! ones more than one part uses.
mod cluster;
mod daemon;
mod discovery;
mod dns;
pub(super) mod endpoint;
mod health;
mod passive;
mod profile;
mod sections;
mod sink;
mod source;

use std::collections::HashSet;

use toml::de::{DeTable, DeValue};

use super::{
    model::*,
    read::{Item, Reader, Table},
    reference::{self, Section},
    ConfigError, ConfigErrors,
};
use crate::schema::read::{broke, names};
use daemon::daemon;
use profile::profile;
use source::source;

pub(super) fn parse(text: &str, file: &str) -> Result<Config, ConfigErrors> {
    let mut r = Reader {
        text,
        file,
        errors: Vec::new(),
        base: 0,
    };
    // A file of many profiles is read one `[[profile]]` block at a time (sections.rs);
    // anything else whole.
    let mut sections = sections::split(text);
    let rest = sections.as_ref().map_or(text, |s| &s.others);
    let Some(mut root) = parse_toml(&mut r, rest) else {
        return Err(ConfigErrors(r.errors));
    };
    // `profile` written outside the blocks too (`profile = [...]`, dotted keys): TOML's own
    // error, from the whole file.
    if sections.is_some() && root.get_ref().contains_key("profile") {
        sections = None;
        let Some(whole) = parse_toml(&mut r, text) else {
            return Err(ConfigErrors(r.errors));
        };
        root = whole;
    }
    let root_value = toml::Spanned::new(root.span(), DeValue::Table(root.into_inner()));
    let blocks = sections.as_ref().map(|s| s.profiles.as_slice());
    let config = read_config(&mut r, &root_value, blocks);
    // Rules run in dependency order; the operator reads the file top to bottom.
    r.errors.sort_by_key(|e| (e.line, e.column));
    match config {
        Some(config) if r.errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors(r.errors)),
    }
}

/// The TOML tree of `text` (which starts at `r.base` in the file), or None with the error.
fn parse_toml<'i>(r: &mut Reader<'_>, text: &'i str) -> Option<toml::Spanned<DeTable<'i>>> {
    match DeTable::parse(text) {
        Ok(root) => Some(root),
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            r.error(span, "", None, format!("not valid TOML: {}", e.message().trim_end()));
            None
        }
    }
}

/// The profiles read so far: each one's model, name and where it was written in the file.
#[derive(Default)]
struct Profiles {
    list: Vec<Option<Profile>>,
    names: Vec<Option<String>>,
    spans: Vec<std::ops::Range<usize>>,
    seen: HashSet<String>,
}

/// A block's endpoint tables parsed apart from it (sections.rs): their runs, and how many
/// tables they hold.
#[derive(Clone, Copy, Default)]
struct Runs<'b> {
    ranges: &'b [std::ops::Range<usize>],
    endpoints: usize,
}

impl Profiles {
    fn read(&mut self, r: &mut Reader<'_>, item: &toml::Spanned<DeValue<'_>>, runs: Runs<'_>) {
        let (profile, name) = profile(r, item, self.list.len(), &mut self.seen, runs);
        self.names.push(name);
        self.list.push(profile);
        let span = item.span();
        self.spans.push(r.base + span.start..r.base + span.end);
    }
}

/// Reads `[[profile]]` blocks, each parsed on its own: its tree is dropped before the next.
fn read_blocks(r: &mut Reader<'_>, blocks: &[sections::Block], out: &mut Profiles) {
    let text = r.text;
    for block in blocks {
        r.base = block.whole.start;
        let mut runs = Runs {
            ranges: &block.runs,
            endpoints: block.endpoints,
        };
        let head = block.head(text);
        let Some(mut root) = parse_toml(r, &head) else { continue };
        // `endpoint` in the head as well as endpoint tables: TOML's error, from the block whole.
        if !runs.ranges.is_empty() && written_endpoints(&root) {
            runs = Runs::default();
            let Some(whole) = parse_toml(r, &text[block.whole.clone()]) else {
                continue;
            };
            root = whole;
        }
        // A block holds its one `[[profile]]` table and nothing else (sections.rs).
        if let Some(DeValue::Array(items)) = profile_key(&root) {
            for item in items {
                out.read(r, item, runs);
            }
        }
    }
    r.base = 0;
}

/// The `profile` key of a block's or a run's tree.
fn profile_key<'a, 'i>(root: &'a toml::Spanned<DeTable<'i>>) -> Option<&'a DeValue<'i>> {
    root.get_ref().get("profile").map(toml::Spanned::get_ref)
}

/// Whether a block's head has an `endpoint` key of its own (an array, dotted keys).
fn written_endpoints(root: &toml::Spanned<DeTable<'_>>) -> bool {
    let Some(DeValue::Array(items)) = profile_key(root) else {
        return false;
    };
    items
        .iter()
        .any(|p| matches!(p.get_ref(), DeValue::Table(t) if t.contains_key("endpoint")))
}

/// Parses a block's endpoint runs one at a time, each tree dropped before the next, and reads
/// their tables into `list` (None: only their syntax is checked).
fn read_runs(r: &mut Reader<'_>, runs: &[std::ops::Range<usize>], mut list: Option<&mut endpoint::EndpointList<'_>>) {
    let (text, base) = (r.text, r.base);
    for run in runs {
        r.base = run.start;
        let Some(root) = parse_toml(r, &text[run.clone()]) else {
            continue;
        };
        let tables = match profile_key(&root) {
            Some(DeValue::Table(p)) => p.get("endpoint"),
            _ => None,
        };
        if let (Some(list), Some(tables)) = (list.as_deref_mut(), tables) {
            list.array(r, tables);
        }
    }
    r.base = base;
}

fn read_config(
    r: &mut Reader<'_>,
    root: &toml::Spanned<DeValue<'_>>,
    blocks: Option<&[sections::Block]>,
) -> Option<Config> {
    let top = r.table(root, String::new(), &reference::ROOT)?;
    let daemon = daemon(r, Reader::get(&top, "daemon"));
    let source = source(r, Reader::get(&top, "source"));
    let dns = dns::dns(r, Reader::get(&top, "dns"));
    let cluster = cluster::cluster(r, Reader::get(&top, "cluster"));
    let mut read = Profiles::default();
    if let Some(list) = Reader::get(&top, "profile") {
        match list.get_ref() {
            DeValue::Array(items) => {
                for item in items {
                    read.read(r, item, Runs::default());
                }
            }
            other => r.error(
                list.span(),
                "profile",
                Some(super::read::show(other)),
                "expected [[profile]] tables",
            ),
        }
    }
    if let Some(blocks) = blocks {
        read_blocks(r, blocks, &mut read);
    }
    let Profiles {
        list: mut profiles,
        names,
        spans,
        ..
    } = read;
    let sinks = sink::sinks(r, Reader::get(&top, "sink"), &names, &profiles);
    if let Some(Some(dns)) = &dns {
        dns::profile_names(r, dns, &profiles, &spans);
    }
    nested_children(r, &profiles, &spans);
    if let Some(source) = &source {
        passive_interfaces(r, &mut profiles, &spans, &source.interfaces);
    }
    name_profiles(&mut r.errors, &names);
    Some(Config {
        daemon: daemon?,
        source: source?,
        profiles: profiles.into_iter().collect::<Option<Vec<_>>>()?,
        sinks: sinks?,
        dns: dns?,
        cluster: cluster?,
    })
}

/// Each `[profile.passive]` without interfaces takes `[source].interfaces`; with neither, it
/// is refused (the observers must know which way the backends are).
fn passive_interfaces(
    r: &mut Reader<'_>,
    profiles: &mut [Option<Profile>],
    spans: &[std::ops::Range<usize>],
    source: &[String],
) {
    for (i, (p, span)) in profiles.iter_mut().zip(spans).enumerate() {
        let Some(passive) = p.as_mut().and_then(|p| p.passive.as_mut()) else {
            continue;
        };
        if !passive.interfaces.is_empty() {
            continue;
        }
        if source.is_empty() {
            r.error(
                span.clone(),
                &format!("profile[{i}].passive.interfaces"),
                None,
                "passive detection needs the interfaces toward the backends: set interfaces here or [source].interfaces",
            );
        } else {
            passive.interfaces = source.to_vec();
        }
    }
}

/// Every nested endpoint names another profile that exists, and no chain of them loops back.
fn nested_children(r: &mut Reader<'_>, profiles: &[Option<Profile>], spans: &[std::ops::Range<usize>]) {
    let index: std::collections::HashMap<&str, usize> = profiles
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_ref().map(|p| (p.name.as_str(), i)))
        .collect();
    for (i, (p, span)) in profiles.iter().zip(spans).enumerate() {
        let Some(p) = p else { continue };
        for n in &p.nested {
            let field = format!("profile[{i}].endpoint");
            let value = Some(format!("{{ profile = {:?} }}", n.child));
            if n.child == p.name {
                r.error(span.clone(), &field, value, "a profile cannot be its own endpoint");
            } else if !index.contains_key(n.child.as_str()) {
                r.error(span.clone(), &field, value, "no profile has this name");
            } else if let Some(path) = loop_from(&p.name, &n.child, profiles, &index) {
                r.error(
                    span.clone(),
                    &field,
                    value,
                    format!("nested profiles would loop: {}", path.join(" -> ")),
                );
            }
        }
    }
}

/// The chain from `parent` through `child` back to `parent`, if there is one.
fn loop_from(
    parent: &str,
    child: &str,
    profiles: &[Option<Profile>],
    index: &std::collections::HashMap<&str, usize>,
) -> Option<Vec<String>> {
    // Depth-first over the children; each profile is visited once, so this ends.
    let mut stack = vec![(child.to_string(), vec![parent.to_string(), child.to_string()])];
    let mut seen = HashSet::new();
    while let Some((at, path)) = stack.pop() {
        if !seen.insert(at.clone()) {
            continue;
        }
        let Some(Some(p)) = index.get(at.as_str()).map(|&i| &profiles[i]) else {
            continue;
        };
        for n in &p.nested {
            let mut next = path.clone();
            next.push(n.child.clone());
            if n.child == parent {
                return Some(next);
            }
            stack.push((n.child.clone(), next));
        }
    }
    None
}

/// Labels errors under `profile[i]` with that profile's name, for readable messages.
fn name_profiles(errors: &mut [ConfigError], names: &[Option<String>]) {
    for e in errors {
        let Some(rest) = e.field.strip_prefix("profile[") else {
            continue;
        };
        let index = rest.split(']').next().and_then(|i| i.parse::<usize>().ok());
        if let Some(name) = index.and_then(|i| names.get(i)).and_then(Clone::clone) {
            e.profile = Some(name);
        }
    }
}

fn opt_table<'a, 'i>(
    r: &mut Reader<'_>,
    v: Option<&'a toml::Spanned<DeValue<'i>>>,
    path: &str,
    section: &Section,
) -> Option<Option<Table<'a, 'i>>> {
    match v {
        None => Some(None),
        Some(v) => r.table(v, path.to_string(), section).map(Some),
    }
}

/// Names of profiles and endpoints end up in URLs and metric labels.
/// An error on each of `keys` that `t` has, saying `why`: keys of another kind of table.
fn refuse_keys<'k>(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    keys: impl IntoIterator<Item = &'k str>,
    why: impl Fn(&str) -> String,
) {
    for key in keys {
        if let Some(v) = Reader::get(t, key) {
            let shown = crate::config::read::show(v.get_ref());
            r.error(v.span(), &t.child(key), Some(shown), why(key));
        }
    }
}

/// Refuses every key of `section` set in `t` that applies elsewhere than here (`admits` says
/// from the key's `Only`), naming where it applies and `here` ("the protocol is tcp"); true
/// when there was none. The reference decides which protocols and sink kinds take a key: no
/// reader keeps a list of its own.
fn refuse_foreign(
    r: &mut Reader<'_>,
    t: &Table<'_, '_>,
    section: &reference::Section,
    admits: impl Fn(reference::Only) -> bool,
    here: &str,
) -> bool {
    let mut clean = true;
    for key in section.keys().filter(|k| !admits(k.only)) {
        if let Some(v) = Reader::get(t, key.name) {
            let shown = crate::config::read::show(v.get_ref());
            let only = key.only.text().unwrap_or_default();
            r.error(
                v.span(),
                &t.child(key.name),
                Some(shown),
                format!("{} applies to {only}; {here}", key.name),
            );
            clean = false;
        }
    }
    clean
}

/// What `valid_name` takes, for the errors that refuse a name (':' and brackets because an
/// endpoint's default name is its address and port, `[2001:db8::1]:80`).
const NAME_RULE: &str = "expected 1-63 letters, digits, '-', '_', '.', ':', '[' or ']'";

fn valid_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'[' | b']'))
}

fn port_value(r: &mut Reader<'_>, item: &Item<i64>) -> Option<u16> {
    match u16::try_from(item.v).ok().filter(|p| *p >= 1) {
        Some(p) => Some(p),
        None => {
            r.bad(item, "expected a port from 1 to 65535");
            None
        }
    }
}
