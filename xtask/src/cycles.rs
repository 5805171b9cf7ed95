//! The module-cycle check of `cargo xtask lint`: no two modules of probe-user that are
//! siblings (two top-level modules, or two children of one module) may each use the other,
//! directly or around a loop. A module using its parent or its own children is not an edge:
//! those are one concern. Read from the source text (`use` trees and `crate::`/`super::`
//! paths, comments and inline test modules left out), so it needs no build.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

type Module = Vec<String>;

/// Every cycle among sibling modules of the crate whose sources are under `src`, each as its
/// modules' paths.
pub fn find(src: &Path) -> anyhow::Result<Vec<Vec<String>>> {
    let modules = modules(src)?;
    let known: BTreeSet<&Module> = modules.keys().collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in &modules {
        for path in paths(&strip(text)) {
            let Some(target) = resolve(module, &path, &known) else {
                continue;
            };
            let common = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == module.len() || common == target.len() {
                continue;
            }
            edges
                .entry(module[..=common].to_vec())
                .or_default()
                .insert(target[..=common].to_vec());
        }
    }
    Ok(strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(|m| m.join("::")).collect())
        .collect())
}

/// Each module's path and text; test files (`tests.rs`, under `tests/`) left out.
fn modules(src: &Path) -> anyhow::Result<BTreeMap<Module, String>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src)?.with_extension("");
            let mut module: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                module.pop();
            }
            if module.iter().any(|s| s == "tests") {
                continue;
            }
            out.insert(module, std::fs::read_to_string(&path)?);
        }
    }
    Ok(out)
}

/// `text` as code alone: comments, string and character literals blanked (a `use` or a
/// `crate::` inside them is not one), and without an inline `#[cfg(test)] mod tests { .. }`
/// (which ends a file by this crate's style).
fn strip(text: &str) -> String {
    let code = blank(text);
    match code.find("#[cfg(test)]\nmod tests {") {
        Some(i) => code[..i].to_string(),
        None => code,
    }
}

/// `text` with every comment and literal replaced by spaces (newlines kept).
fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let hide = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    hide(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"..." or r#"..."#, closed by a quote and as many hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            while j < chars.len() {
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                hide(&mut out, chars[j]);
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&h) = chars.get(i) {
                    hide(&mut out, h);
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal (a lifetime has no closing quote two characters on).
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether the character before `i` continues an identifier (so `r` there is not a prefix).
fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The paths a module's text names: each `use` tree expanded, and every `crate::`, `super::`
/// and `self::` path elsewhere.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let word_start = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'_';
        rest = &rest[i + 4..];
        if !word_start {
            continue;
        }
        if let Some(end) = rest.find(';') {
            let tree: String = rest[..end].split_whitespace().collect::<Vec<_>>().join("");
            expand(&tree, &mut out);
        }
    }
    let bytes = code.as_bytes();
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(root) {
            let at = from + i;
            from = at + root.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':') {
                continue;
            }
            let len = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(code.len() - at);
            out.push(code[at..at + len].trim_end_matches(':').to_string());
        }
    }
    out
}

/// `a::b::{c, d::{e, f}}` as `a::b::c`, `a::b::d::e`, `a::b::d::f`.
fn expand(tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        out.push(tree.split(" as ").next().unwrap_or(tree).to_string());
        return;
    };
    let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
    let (prefix, inner) = (&tree[..open], &tree[open + 1..close]);
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                let part = inner[start..i].trim();
                if !part.is_empty() {
                    expand(&format!("{prefix}{part}"), out);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
}

/// The module `path` names from inside `module`, cut to the longest module that exists.
fn resolve(module: &Module, path: &str, known: &BTreeSet<&Module>) -> Option<Module> {
    let mut segments = path.split("::").map(str::trim);
    let mut target: Module = match segments.next()? {
        "crate" => Vec::new(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        "self" => module.clone(),
        _ => return None,
    };
    for s in segments {
        match s {
            "super" => {
                target.pop()?;
            }
            "self" | "" | "*" => {}
            s => target.push(s.split(" as ").next().unwrap_or(s).to_string()),
        }
    }
    while !target.is_empty() && !known.contains(&target) {
        target.pop();
    }
    (!target.is_empty()).then_some(target)
}

/// Tarjan's strongly connected components of `edges`.
fn strongly_connected(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, (n, n));
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.index[w].1.min(s.index[v].1);
                s.index.get_mut(v).expect("visited").1 = low;
            } else if s.on_stack.contains(w) {
                let low = s.index[w].0.min(s.index[v].1);
                s.index.get_mut(v).expect("visited").1 = low;
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_expand_to_each_path() {
        let mut out = Vec::new();
        expand("crate::{a::{b,c},d as e}", &mut out);
        assert_eq!(out, ["crate::a::b", "crate::a::c", "crate::d"]);
    }

    #[test]
    fn a_loop_between_siblings_is_found_and_a_parent_is_not_one() {
        let dir = std::env::temp_dir().join(format!("xtask-cycles-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("lib.rs"), "mod a; mod d;").unwrap();
        std::fs::write(dir.join("a.rs"), "use crate::d::x::Thing;").unwrap();
        std::fs::write(dir.join("d/mod.rs"), "mod x; mod y; use self::x::T;").unwrap();
        std::fs::write(
            dir.join("d/x.rs"),
            "use super::y::U; // crate::a::Nope\nconst S: &str = \"use crate::a::{x\"; /* crate::a */",
        )
        .unwrap();
        std::fs::write(dir.join("d/y.rs"), "fn f() { super::x::g(); let _ = super::Z; }").unwrap();
        let found = find(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        let mut cycle = found[0].clone();
        cycle.sort();
        assert_eq!(cycle, ["d::x", "d::y"]);
    }
}
