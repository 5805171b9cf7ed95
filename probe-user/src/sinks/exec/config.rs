//! The exec sink's settings, its key and its reader: the program and its arguments go into
//! argv as they are, so they are checked here.
use serde::Serialize;
use toml::de::DeValue;

use crate::{
    rules::SinkType,
    schema::{
        keys::{words, Key, Reload::Applies, Type::Strings, Unset::Required},
        read::{Reader, Table},
    },
    sinks::names::ident,
};

/// A long-lived program fed one JSON line per change on its stdin (format in
/// `sinks::exec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecSink {
    /// The program (an absolute path) and its arguments; no shell is involved.
    pub command: Vec<String>,
}

/// Its key.
pub const KEYS: &[Key] = &[Key::new(
    "command",
    Strings,
    Required,
    words("the program's absolute path, then its arguments; no shell, no PATH search"),
    Applies,
    "The program started and fed one JSON line per change on its standard input.",
)
.sinks(&[SinkType::Exec], "")];

/// `kind = "exec"`, and its default name (the program's file name, when it is a valid one).
pub(crate) fn read(r: &mut Reader<'_>, t: &Table<'_, '_>) -> (Option<ExecSink>, Option<String>) {
    let Some(list) = r.strings(t, "command") else {
        if Reader::get(t, "command").is_none() {
            r.missing(
                t,
                "command",
                "an exec sink needs command = [\"/path/to/program\", \"arg\", ...]",
            );
        }
        return (None, None);
    };
    let Some(program) = list.v.first() else {
        r.bad(&list, "expected the program's absolute path, then its arguments");
        return (None, None);
    };
    let mut ok = true;
    if !program.v.starts_with('/') {
        r.bad(
            program,
            "expected an absolute path: no shell and no PATH search are involved",
        );
        ok = false;
    }
    for arg in &list.v {
        if arg.v.contains('\0') {
            r.bad(arg, "a program argument cannot hold a NUL byte");
            ok = false;
        }
    }
    if !ok || list.v.len() != list_len(t) {
        return (None, None);
    }
    let name = std::path::Path::new(&program.v)
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| ident(n))
        .map(str::to_string);
    let command = list.v.into_iter().map(|i| i.v).collect();
    (Some(ExecSink { command }), name)
}

/// How many values `command` holds as written (a wrong-typed one is reported by `strings`,
/// which leaves it out of its list).
fn list_len(t: &Table<'_, '_>) -> usize {
    match Reader::get(t, "command").map(toml::Spanned::get_ref) {
        Some(DeValue::Array(a)) => a.len(),
        _ => 1,
    }
}
