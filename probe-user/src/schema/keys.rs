//! How the configuration file is described: a table (`Section`) and its keys (`Key`), each with
//! its type, default, allowed values, where it applies (`Only`) and what a reload does with it.
//! The reference (`config::reference`) is made of these, and so are the keys each probe and
//! sink kind declares for itself; the readers and the manual page both read them.
use crate::rules::{Protocol, SinkType};

/// One table of the file: where it is, what it is for, and the keys it accepts, in the order the
/// reader lists them when it refuses an unknown one.
#[derive(Debug)]
pub struct Section {
    /// The table's path as error messages name it, without array indexes: `daemon`,
    /// `profile.health`, `dns.region`; empty for the top level of the file.
    pub path: &'static str,
    /// How the file opens it: `[daemon]`, `[[profile.endpoint]]`; empty for the top level.
    pub header: &'static str,
    pub about: &'static str,
    /// The table's own keys.
    pub own: &'static [Key],
    /// The keys that kinds declare for themselves (a probe kind's, in its folder), after
    /// the table's own.
    pub kinds: &'static [&'static [Key]],
}

impl Section {
    /// Every key, the table's own first.
    pub fn keys(&self) -> impl Iterator<Item = &'static Key> {
        self.own.iter().chain(self.kinds.iter().copied().flatten())
    }

    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        self.keys().map(|k| k.name)
    }

    pub fn accepts(&self, key: &str) -> bool {
        self.keys().any(|k| k.name == key)
    }

    pub fn key(&self, name: &str) -> Option<&'static Key> {
        self.keys().find(|k| k.name == name)
    }
}

/// One key of a table.
#[derive(Debug)]
pub struct Key {
    pub name: &'static str,
    pub ty: Type,
    pub default: Unset,
    pub allowed: Allowed,
    /// Where the key applies when not wherever its table does.
    pub only: Only,
    pub reload: Reload,
    pub about: &'static str,
}

impl Key {
    /// Builds a key that applies wherever its table does.
    pub(crate) const fn new(
        name: &'static str,
        ty: Type,
        default: Unset,
        allowed: Allowed,
        reload: Reload,
        about: &'static str,
    ) -> Key {
        Key {
            name,
            ty,
            default,
            allowed,
            only: Only::All,
            reload,
            about,
        }
    }

    /// The same key, applying only where `only` says (in words: its reader checks it).
    pub(crate) const fn only(self, only: &'static str) -> Key {
        Key {
            only: Only::Text(only),
            ..self
        }
    }

    /// The same key, for checks of `protocols` only (`and`: what else it needs, in words).
    pub(crate) const fn protocols(self, protocols: &'static [Protocol], and: &'static str) -> Key {
        Key {
            only: Only::Protocols(protocols, and),
            ..self
        }
    }

    /// The same key, for sinks of `kinds` only (`and` as for `protocols`).
    pub(crate) const fn sinks(self, kinds: &'static [SinkType], and: &'static str) -> Key {
        Key {
            only: Only::Sinks(kinds, and),
            ..self
        }
    }
}

/// Where a key applies when not wherever its table does. Which protocols and which sink kinds
/// take a key is data here, and the readers refuse the key on any other (`refuse_foreign` in
/// the validator), so the page and the reader cannot tell two stories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    All,
    /// Health checks of these protocols; the words say what else it needs ("" if nothing).
    Protocols(&'static [Protocol], &'static str),
    /// Sinks of these kinds; the words as above.
    Sinks(&'static [SinkType], &'static str),
    /// Said in words only; the key's reader checks it.
    Text(&'static str),
}

impl Only {
    /// As the page says it; None when the key applies wherever its table does.
    pub fn text(self) -> Option<String> {
        let either = |field: &str, names: Vec<&str>, and: &str| {
            let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
            let list = match quoted.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => quoted.concat(),
            };
            let mut text = format!("{field} = {list}");
            if !and.is_empty() {
                text.push(' ');
                text.push_str(and);
            }
            text
        };
        match self {
            Only::All => None,
            Only::Protocols(list, and) => Some(either("protocol", list.iter().map(|p| p.as_str()).collect(), and)),
            Only::Sinks(list, and) => Some(either("kind", list.iter().map(|k| k.as_str()).collect(), and)),
            Only::Text(text) => Some(text.to_string()),
        }
    }

    /// Whether a key so marked may be set on a check of protocol `p`.
    pub fn admits_protocol(self, p: Protocol) -> bool {
        match self {
            Only::Protocols(list, _) => list.contains(&p),
            Only::All | Only::Sinks(..) | Only::Text(_) => true,
        }
    }

    /// Whether a key so marked may be set on a sink of kind `kind`.
    pub fn admits_sink(self, kind: SinkType) -> bool {
        match self {
            Only::Sinks(list, _) => list.contains(&kind),
            Only::All | Only::Protocols(..) | Only::Text(_) => true,
        }
    }
}

/// How a value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    String,
    Integer,
    Boolean,
    /// A string: a whole number and `ms` or `s`.
    Duration,
    /// An array of strings; one string counts as an array of one.
    Strings,
    Table,
    Tables,
}

impl Type {
    pub fn name(self) -> &'static str {
        match self {
            Type::String => "string",
            Type::Integer => "integer",
            Type::Boolean => "boolean",
            Type::Duration => "duration",
            Type::Strings => "array of strings",
            Type::Table => "table",
            Type::Tables => "array of tables",
        }
    }
}

/// What leaving a key out means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unset {
    /// The key must be written (where it applies).
    Required,
    /// The same as writing this value, a TOML literal.
    Value(&'static str),
    /// The same as writing these values, TOML literals, under the dialects lb, tm and ga.
    Dialect([&'static str; 3]),
    /// Described in words: no written value means the same.
    Text(&'static str),
}

/// What values a key takes, beyond its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Any value of the type.
    Any,
    /// Whole numbers from the first to the second, both included.
    Int(i64, i64),
    /// The same, written in octal (`0o660`).
    Octal(i64, i64),
    /// Durations from the first to the second number of milliseconds, both included.
    Millis(u64, u64),
    /// Whole seconds from the first to the second, both included.
    Seconds(u64, u64),
    /// Strings of the first to the second number of bytes, both included.
    Bytes(usize, usize),
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// Described in words.
    Text(&'static str),
}

/// What a reload (SIGHUP, `probed reload`, `POST /v1/reload`) does with a changed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// The new value takes effect.
    Applies,
    /// The new value takes effect; the endpoints whose check it changes start over.
    Recheck,
    /// The new value takes effect from each endpoint's next probe; every endpoint keeps its
    /// health and its results so far toward a change.
    Retime,
    /// The new value takes effect from each endpoint's next probe; every endpoint keeps its
    /// health, and the new check's results count toward a change from it.
    Reask,
    /// The running value stays until a restart; the reload's answer names the change.
    Restart,
    /// A table whose keys say, each for itself.
    PerKey,
}

impl Reload {
    pub(crate) fn text(self) -> &'static str {
        match self {
            Reload::Applies => "applied",
            Reload::Recheck => "applied; the endpoints whose check it changes start over",
            Reload::Retime => "applied from the next probe; endpoints keep their health and pending results",
            Reload::Reask => {
                "applied from the next probe; endpoints keep their health as the new check's starting point"
            }
            Reload::Restart => "needs a restart (the reload lists it in restart_needed)",
            Reload::PerKey => "as its keys say",
        }
    }
}

impl Unset {
    pub(crate) fn text(self) -> String {
        match self {
            Unset::Required => "none: required".to_string(),
            Unset::Value(v) | Unset::Text(v) => v.to_string(),
            Unset::Dialect([lb, tm, ga]) => format!("{lb} (lb), {tm} (tm), {ga} (ga)"),
        }
    }
}

impl Allowed {
    pub(crate) fn text(self) -> Option<String> {
        Some(match self {
            Allowed::Any => return None,
            Allowed::Int(min, max) => format!("{min} to {max}"),
            Allowed::Octal(min, max) => format!("0o{min:o} to 0o{max:o}"),
            Allowed::Millis(min, max) => format!("{} to {}", millis(min), millis(max)),
            Allowed::Seconds(min, max) => format!("\"{min}s\" to \"{max}s\", in whole seconds"),
            Allowed::Bytes(0, max) => format!("at most {max} bytes"),
            Allowed::Bytes(min, max) => format!("{min} to {max} bytes"),
            Allowed::OneOf(words) => words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(", "),
            Allowed::Text(t) => t.to_string(),
        })
    }
}

/// A duration as the file writes it: whole seconds where it can.
fn millis(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("\"{}s\"", ms / 1000)
    } else {
        format!("\"{ms}ms\"")
    }
}

/// Allowed values described in words.
pub const fn words(text: &'static str) -> Allowed {
    Allowed::Text(text)
}

/// What leaving a key out means, in words.
pub const fn said(text: &'static str) -> Unset {
    Unset::Text(text)
}
