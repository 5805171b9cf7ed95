//! A node's verdicts as it writes them into its gossip state: compact, and changed only where
//! a verdict changed. Checks are named by their stable 64-bit hash (the same on every node
//! with the same configuration) and grouped into buckets by that hash; each bucket is one key,
//! `v/<bucket>`, whose value lists the bucket's checks and verdicts in check order, as hex
//! (gossip values are text): 16 digits of check and one of verdict each. A verdict change
//! rewrites one bucket of about `PER_BUCKET` entries, never the node's whole state. Readers
//! need no bucket count: they take every `v/` key. Pure.
use std::fmt::Write;

use super::aggregate::Verdict;

/// The prefix of verdict keys.
pub const PREFIX: &str = "v/";
/// Checks per bucket aimed at: a bucket's value stays about 1 KiB.
pub const PER_BUCKET: usize = 64;
/// Buckets at most (so 4M checks still fit 64 per bucket).
const MAX_BUCKETS: u32 = 1 << 16;
/// Hex digits per entry.
const ENTRY: usize = 17;

/// How many buckets a node with `checks` checks writes: a power of two, at least 1.
pub fn bucket_count(checks: usize) -> u32 {
    let want = checks.div_ceil(PER_BUCKET).max(1);
    u32::try_from(want.next_power_of_two()).map_or(MAX_BUCKETS, |n| n.min(MAX_BUCKETS))
}

/// The bucket of `check` among `buckets` (a power of two).
pub fn bucket_of(check: u64, buckets: u32) -> u32 {
    // The high bits: the low ones also choose hash-map slots everywhere else.
    (crate::hash::mix64(check) >> 32) as u32 & (buckets - 1)
}

pub fn key(bucket: u32) -> String {
    format!("{PREFIX}{bucket:x}")
}

fn digit(v: Verdict) -> char {
    match v {
        Verdict::Up => 'u',
        Verdict::Down => 'd',
        Verdict::Checking => 'c',
    }
}

/// One bucket's value; `entries` sorted by check.
pub fn encode(entries: &[(u64, Verdict)]) -> String {
    let mut out = String::with_capacity(entries.len() * ENTRY);
    for (check, v) in entries {
        let _ = write!(out, "{check:016x}{}", digit(*v));
    }
    out
}

/// Why a bucket's value could not be read (a node of another version, or a corrupt value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a verdict value of {len} bytes is not a list of 17-character entries (16 hex digits of check, then u, d or c) at byte {at}")]
pub struct DecodeError {
    pub len: usize,
    pub at: usize,
}

/// The entries of one bucket's value.
pub fn decode(value: &str) -> Result<Vec<(u64, Verdict)>, DecodeError> {
    let bytes = value.as_bytes();
    let bad = |at| DecodeError { len: bytes.len(), at };
    if !bytes.len().is_multiple_of(ENTRY) {
        return Err(bad(bytes.len() - bytes.len() % ENTRY));
    }
    bytes
        .chunks_exact(ENTRY)
        .enumerate()
        .map(|(i, e)| {
            let at = i * ENTRY;
            let hex = std::str::from_utf8(&e[..16]).map_err(|_| bad(at))?;
            // from_str_radix takes a leading '+', which is no hex digit.
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(at));
            }
            let check = u64::from_str_radix(hex, 16).map_err(|_| bad(at))?;
            let v = match e[16] {
                b'u' => Verdict::Up,
                b'd' => Verdict::Down,
                b'c' => Verdict::Checking,
                _ => return Err(bad(at + 16)),
            };
            Ok((check, v))
        })
        .collect()
}

/// A node's verdicts split into buckets: `(bucket, value)` for every bucket of `buckets`,
/// empty buckets included (their key must still replace an older value).
#[cfg(test)]
pub fn buckets(verdicts: &[(u64, Verdict)], buckets: u32) -> Vec<(u32, String)> {
    let mut by_bucket: Vec<Vec<(u64, Verdict)>> = vec![Vec::new(); buckets as usize];
    for &(check, v) in verdicts {
        by_bucket[bucket_of(check, buckets) as usize].push((check, v));
    }
    by_bucket
        .into_iter()
        .enumerate()
        .map(|(b, mut entries)| {
            entries.sort_unstable_by_key(|e| e.0);
            (b as u32, encode(&entries))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Verdict::*, *};

    #[test]
    fn values_round_trip_and_are_compact() {
        let entries = vec![(0, Up), (0x0123_4567_89ab_cdef, Down), (u64::MAX, Checking)];
        let text = encode(&entries);
        assert_eq!(text.len(), 3 * ENTRY);
        assert!(text.starts_with("0000000000000000u0123456789abcdefd"));
        assert_eq!(decode(&text).unwrap(), entries);
        assert_eq!(decode("").unwrap(), []);
    }

    #[test]
    fn bad_values_say_where() {
        assert_eq!(decode("0000000000000000u00").unwrap_err().at, 17);
        assert_eq!(decode("0000000000000000x").unwrap_err().at, 16);
        assert_eq!(decode("+000000000000000u").unwrap_err().at, 0);
        assert_eq!(decode("0000000000000000u000000000000000gd").unwrap_err().at, 17);
        let msg = decode("zz").unwrap_err().to_string();
        assert!(msg.contains("2 bytes") && msg.contains("u, d or c"), "{msg}");
    }

    #[test]
    fn buckets_hold_about_per_bucket_checks_and_cover_every_check_once() {
        assert_eq!(bucket_count(0), 1);
        assert_eq!(bucket_count(64), 1);
        assert_eq!(bucket_count(65), 2);
        assert_eq!(bucket_count(100_000), 2048);
        assert_eq!(bucket_count(usize::MAX / 2), 1 << 16);
        let verdicts: Vec<(u64, Verdict)> = (0..10_000u64)
            .map(|i| {
                (
                    crate::hash::stable(&i.to_le_bytes()),
                    if i % 3 == 0 { Down } else { Up },
                )
            })
            .collect();
        let n = bucket_count(verdicts.len());
        let split = buckets(&verdicts, n);
        assert_eq!(split.len(), n as usize);
        let mut back: Vec<(u64, Verdict)> = split.iter().flat_map(|(_, v)| decode(v).unwrap()).collect();
        back.sort_unstable_by_key(|e| e.0);
        let mut want = verdicts.clone();
        want.sort_unstable_by_key(|e| e.0);
        assert_eq!(back, want);
        let biggest = split.iter().map(|(_, v)| v.len() / ENTRY).max().unwrap();
        assert!(biggest <= 3 * PER_BUCKET, "the fullest bucket holds {biggest}");
        // One verdict changing changes one bucket's value.
        let mut changed = verdicts.clone();
        changed[17].1 = Checking;
        let differ = buckets(&changed, n).iter().zip(&split).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 1);
        assert_eq!(key(255), "v/ff");
    }
}
