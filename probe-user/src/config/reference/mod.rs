//! The configuration reference, `probed.toml(5)`: every table of the file and every key it
//! accepts, with the key's type, default, allowed values, what a reload does with it and what it
//! is for. It is also the reader's list of accepted keys (`Reader::table` refuses any key its
//! table's [`Section`] does not name), so a key cannot be accepted without being documented here,
//! nor documented without being accepted. `probed generate man` renders it with [`man_page`];
//! the tests check its defaults and ranges against what the reader does.
mod tables;
#[cfg(test)]
mod tests;

use roff::{bold, italic, line_break, roman, Roff};

pub use crate::schema::keys::*;

pub use tables::*;

/// The manual page `probed.toml(5)`, in roff.
pub fn man_page() -> String {
    let mut page = Roff::new();
    let source = format!("probed {}", env!("CARGO_PKG_VERSION"));
    // No date, so that the page depends on the reference only; `""` keeps its place.
    page.control("TH", ["probed.toml", "5", "\"\"", &source, "File Formats"]);
    page.control("SH", ["NAME"]);
    page.text([roman("probed.toml - configuration file of probed(8)")]);
    page.control("SH", ["SYNOPSIS"]);
    page.text([bold("/etc/probed/probed.toml")]);
    page.control("SH", ["DESCRIPTION"]);
    for paragraph in DESCRIPTION {
        page.control("PP", []);
        page.text([roman(*paragraph)]);
    }
    page.control("SH", ["FILE LAYOUT"]);
    page.text([roman(ROOT.about)]);
    for key in ROOT.keys() {
        let header = SECTIONS
            .iter()
            .find(|s| s.path == key.name)
            .map_or(key.name, |s| s.header);
        page.control("TP", []);
        page.text([bold(header)]);
        page.text([roman(key.about)]);
        page.text([
            line_break(),
            italic("Reload:"),
            roman(format!(" {}.", key.reload.text())),
        ]);
    }
    page.control("SH", ["RELOAD"]);
    for paragraph in RELOAD {
        page.control("PP", []);
        page.text([roman(*paragraph)]);
    }
    page.control("SH", ["KEYS"]);
    page.text([roman(
        "Each table, then each of its keys: its type, what leaving it out means, the values it takes, \
         and what a reload does with a changed value.",
    )]);
    for section in SECTIONS {
        page.control("SS", [section.header]);
        page.text([roman(section.about)]);
        for key in section.keys() {
            render_key(&mut page, key);
        }
    }
    page.control("SH", ["EXAMPLE"]);
    page.control("PP", []);
    page.control("RS", ["4"]);
    page.control("nf", []);
    for line in EXAMPLE.lines() {
        page.text([roman(line)]);
    }
    page.control("fi", []);
    page.control("RE", []);
    page.control("SH", ["FILES"]);
    page.control("TP", []);
    page.text([bold("/etc/probed/probed.toml")]);
    page.text([roman("The file the package installs and its service reads.")]);
    page.control("SH", ["SEE ALSO"]);
    page.text([
        bold("probed"),
        roman("(8), "),
        bold("probed-validate"),
        roman("(8), "),
        bold("probed-reload"),
        roman("(8), "),
        bold("probed-run"),
        roman("(8)"),
    ]);
    page.render()
}

fn render_key(page: &mut Roff, key: &Key) {
    page.control("TP", []);
    page.text([bold(key.name), roman(" ("), italic(key.ty.name()), roman(")")]);
    page.text([roman(key.about)]);
    let mut facts = vec![("Default:", key.default.text())];
    if let Some(allowed) = key.allowed.text() {
        facts.push(("Allowed:", allowed));
    }
    if let Some(only) = key.only.text() {
        facts.push(("Applies to:", only));
    }
    facts.push(("Reload:", key.reload.text().to_string()));
    for (label, text) in facts {
        let end = if text.ends_with('.') { "" } else { "." };
        page.text([line_break(), italic(label), roman(format!(" {text}{end}"))]);
    }
}
