//! What the sink kinds' readers share: the alphabet of the names that end up in nft scripts and
//! pin paths, and the slot count of a map.
use crate::{
    rules::limits::{DEFAULT_SLOTS, MAX_SLOTS},
    schema::read::{Item, Reader, Table},
};

/// The alphabet of sink, nftables and pin names, as the reference says it.
pub(crate) const IDENT: &str = "1 to 63 letters, digits, '_' or '-', starting with a letter";

pub(crate) const IDENT_RULE: &str = "expected 1-63 letters, digits, '_' or '-', starting with a letter";

/// nftables and pin names: no quoting, no path separators, nothing a script could misread.
pub(crate) fn ident(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(crate) fn named(r: &mut Reader<'_>, item: &Item<String>) -> Option<String> {
    if ident(&item.v) {
        Some(item.v.clone())
    } else {
        r.bad(item, IDENT_RULE);
        None
    }
}

pub(crate) fn required_ident(r: &mut Reader<'_>, t: &Table<'_, '_>, key: &str, why: &str) -> Option<String> {
    match r.string(t, key) {
        None => {
            r.missing(t, key, why);
            None
        }
        Some(item) => named(r, &item),
    }
}

pub(crate) fn slots(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<u32> {
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
