//! A fast hasher for maps whose keys the daemon makes itself: ids, tokens, and the flows the
//! engine picks. None of them comes from the network, so SipHash's resistance to flooding
//! buys nothing there, and at 100k probes/s its cost showed in every profile.
use std::{
    collections::HashMap,
    hash::{BuildHasherDefault, Hasher},
};

/// FNV-1a, 64 bits: a hash that is the same in every process, build and Rust release (std's
/// hashers promise none of that), for values that are stored or must agree across restarts.
pub fn stable(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64's finaliser: spreads a weak hash's (FNV's) bits over the whole word, so that
/// `mix64(x) % n` and comparisons of mixed values are fair.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A check key as the state file stores it: its stable hash in hex. The key itself holds
/// request headers (an Authorization value, say), which have no business on disk.
pub fn fingerprint(key: &str) -> String {
    fingerprint_of(stable(key.as_bytes()))
}

/// The fingerprint of a key whose stable hash is already known.
pub fn fingerprint_of(stable: u64) -> String {
    format!("{stable:016x}")
}

/// A HashMap with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// `v`'s [`FastHasher`] hash, for tables that file entries by hash themselves
/// (`hashbrown::HashTable`).
pub fn fast_hash<T: std::hash::Hash + ?Sized>(v: &T) -> u64 {
    use std::hash::BuildHasher;
    BuildHasherDefault::<FastHasher>::default().hash_one(v)
}

/// FxHash's step (rotate, xor, multiply by an odd constant), eight bytes at a time: distinct
/// small integers get distinct low bits, and the multiply spreads them into the high bits
/// hashbrown tags with.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().unwrap()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::hash::Hash;

    use probe_common::l4::FlowKey;

    use super::*;

    fn hash<T: Hash>(v: &T) -> u64 {
        fast_hash(v)
    }

    #[test]
    fn flows_that_differ_in_one_field_hash_apart() {
        let base = FlowKey::v4([198, 18, 0, 1], [198, 19, 0, 1], 61000, 80, 6);
        let mut seen = std::collections::HashSet::new();
        for i in 0..4096u32 {
            let mut f = base;
            f.daddr[2] = (i >> 8) as u8;
            f.daddr[3] = i as u8;
            assert!(seen.insert(hash(&f)), "collision at {i}");
        }
        let mut other_port = base;
        other_port.sport += 1;
        assert_ne!(hash(&base), hash(&other_port));
        // The high bits (hashbrown's tags) vary too, not only the low ones.
        let tops: std::collections::HashSet<u64> = (0..256u16)
            .map(|p| {
                let mut f = base;
                f.sport = 61000 + p;
                hash(&f) >> 57
            })
            .collect();
        assert!(tops.len() > 64, "only {} distinct tags", tops.len());
    }
}
