//! Tolerant reading of the spanned TOML tree: a wrong type or an unknown key becomes an error
//! on the list and reading goes on, so one run reports everything. Also the duration syntax.
use std::{ops::Range, time::Duration};

use toml::{
    de::{DeTable, DeValue},
    Spanned,
};

use super::{error::ConfigError, keys::Section};

/// A value read from the file, with where it was and how it was written.
#[derive(Debug, Clone)]
pub(crate) struct Item<T> {
    pub v: T,
    pub span: Range<usize>,
    pub path: String,
    pub shown: String,
}

/// A table being read, with its path and span (used for "missing key" errors).
pub(crate) struct Table<'a, 'i> {
    pub entries: &'a DeTable<'i>,
    pub span: Range<usize>,
    pub path: String,
}

impl Table<'_, '_> {
    pub fn child(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }
}

pub(crate) struct Reader<'t> {
    pub text: &'t str,
    pub file: &'t str,
    pub errors: Vec<ConfigError>,
    /// Where the tree being read starts in `text`: spans are relative to it (a profile block
    /// parsed on its own, see `validate/sections.rs`).
    pub base: usize,
}

/// How a raw TOML value looks in an error message.
pub(crate) fn show(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("{:?}", s.as_ref()),
        DeValue::Integer(i) => i.to_string(),
        DeValue::Float(f) => f.as_str().to_string(),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(d) => d.to_string(),
        DeValue::Array(_) => "[...]".to_string(),
        DeValue::Table(_) => "{...}".to_string(),
    }
}

impl<'t> Reader<'t> {
    /// 1-based line and character column of a byte offset.
    fn place(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    pub fn error(&mut self, span: Range<usize>, field: &str, value: Option<String>, problem: impl Into<String>) {
        let (line, column) = self.place(self.base + span.start);
        self.errors.push(ConfigError {
            file: self.file.to_string(),
            line,
            column,
            field: field.to_string(),
            profile: None,
            value,
            problem: problem.into(),
        });
    }

    /// Reports `item` as bad.
    pub fn bad<T>(&mut self, item: &Item<T>, problem: impl Into<String>) {
        self.error(item.span.clone(), &item.path, Some(item.shown.clone()), problem);
    }

    pub fn missing(&mut self, table: &Table<'_, '_>, key: &str, problem: impl Into<String>) {
        self.error(table.span.clone(), &table.child(key), None, problem);
    }

    /// Reads `v` as a table, reporting the keys its reference `section` (`probed.toml(5)`) does
    /// not list.
    pub fn table<'a, 'i>(
        &mut self,
        v: &'a Spanned<DeValue<'i>>,
        path: String,
        section: &Section,
    ) -> Option<Table<'a, 'i>> {
        let DeValue::Table(entries) = v.get_ref() else {
            self.error(v.span(), &path, Some(show(v.get_ref())), "expected a table");
            return None;
        };
        let table = Table {
            entries,
            span: v.span(),
            path,
        };
        for (key, value) in entries {
            if !section.accepts(key.get_ref()) {
                let field = table.child(key.get_ref());
                let allowed: Vec<&str> = section.names().collect();
                self.error(
                    key.span(),
                    &field,
                    Some(show(value.get_ref())),
                    format!("unknown key; expected one of: {}", allowed.join(", ")),
                );
            }
        }
        Some(table)
    }

    /// The items of an array of tables (`[[path]]`); None, reported as not `expected`, when
    /// `v` is anything else.
    pub fn tables_of<'a, 'i>(
        &mut self,
        v: &'a Spanned<DeValue<'i>>,
        path: &str,
        expected: &str,
    ) -> Option<&'a [Spanned<DeValue<'i>>]> {
        match v.get_ref() {
            DeValue::Array(items) => Some(items),
            other => {
                self.error(v.span(), path, Some(show(other)), expected);
                None
            }
        }
    }

    pub fn get<'a, 'i>(table: &Table<'a, 'i>, key: &str) -> Option<&'a Spanned<DeValue<'i>>> {
        table
            .entries
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(_, v)| v)
    }

    fn typed<'i, T>(
        &mut self,
        v: &Spanned<DeValue<'i>>,
        path: String,
        want: &str,
        convert: impl FnOnce(&DeValue<'i>) -> Option<T>,
    ) -> Option<Item<T>> {
        let shown = show(v.get_ref());
        match convert(v.get_ref()) {
            Some(t) => Some(Item {
                v: t,
                span: v.span(),
                path,
                shown,
            }),
            None => {
                self.error(v.span(), &path, Some(shown), format!("expected {want}"));
                None
            }
        }
    }

    pub fn string(&mut self, table: &Table<'_, '_>, key: &str) -> Option<Item<String>> {
        let v = Self::get(table, key)?;
        self.typed(v, table.child(key), "a string", |v| v.as_str().map(str::to_string))
    }

    pub fn int(&mut self, table: &Table<'_, '_>, key: &str) -> Option<Item<i64>> {
        let v = Self::get(table, key)?;
        self.typed(v, table.child(key), "an integer", |v| {
            v.as_integer()
                .and_then(|i| i64::from_str_radix(i.as_str(), i.radix()).ok())
        })
    }

    pub fn boolean(&mut self, table: &Table<'_, '_>, key: &str) -> Option<Item<bool>> {
        let v = Self::get(table, key)?;
        self.typed(v, table.child(key), "true or false", DeValue::as_bool)
    }

    /// An array of strings; a single string counts as a list of one.
    pub fn strings(&mut self, table: &Table<'_, '_>, key: &str) -> Option<Item<Vec<Item<String>>>> {
        let v = Self::get(table, key)?;
        let path = table.child(key);
        match v.get_ref() {
            DeValue::String(s) => Some(Item {
                v: vec![Item {
                    v: s.to_string(),
                    span: v.span(),
                    path: path.clone(),
                    shown: show(v.get_ref()),
                }],
                span: v.span(),
                path,
                shown: show(v.get_ref()),
            }),
            DeValue::Array(items) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    if let Some(s) = self.typed(item, item_path, "a string", |v| v.as_str().map(str::to_string)) {
                        out.push(s);
                    }
                }
                let shown = format!(
                    "[{}]",
                    out.iter().map(|s| s.shown.as_str()).collect::<Vec<_>>().join(", ")
                );
                Some(Item {
                    v: out,
                    span: v.span(),
                    path,
                    shown,
                })
            }
            other => {
                self.error(v.span(), &path, Some(show(other)), "expected an array of strings");
                None
            }
        }
    }
}

/// Parses `"500ms"` or `"2s"`. Whole numbers only: fractions invite rounding surprises.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let (digits, scale) = if let Some(d) = s.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = s.strip_suffix('s') {
        (d, 1000)
    } else {
        return None;
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(Duration::from_millis(n.checked_mul(scale)?))
}

pub(crate) fn names<T: Copy>(items: &[T], name: impl Fn(T) -> &'static str) -> String {
    let all: Vec<&str> = items.iter().map(|i| name(*i)).collect();
    match all.as_slice() {
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
        [] => "nothing".to_string(),
    }
}

/// A shared rule broken by `item`: the config error already names the field and the value,
/// so only what is allowed is added.
pub(crate) fn broke<T>(r: &mut Reader<'_>, item: &Item<T>, e: crate::rules::RuleError) {
    r.bad(item, e.rule.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("0ms"), Some(Duration::ZERO));
        for bad in ["", "s", "2", "2 s", "1.5s", "-1s", "2m", "ms"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
