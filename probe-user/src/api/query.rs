//! Query strings: parameters, percent-decoded, and whole numbers within bounds.

/// A query parameter that is not what its key takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}={value:?}: expected a whole number from 0 to {max}")]
pub(super) struct BadNumber {
    key: &'static str,
    value: String,
    max: usize,
}

/// `key`'s whole number in the query string, `default` when absent.
pub(super) fn number(query: &str, key: &'static str, default: usize, max: usize) -> Result<usize, BadNumber> {
    match param(query, key) {
        None => Ok(default),
        Some(value) => value
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or(BadNumber { key, value, max }),
    }
}

/// The value of `key` in a query string, percent-decoded.
pub(super) fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

/// Decodes `%XX` escapes (and `+` is left alone: paths, not forms). Bad escapes stay as written.
pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
