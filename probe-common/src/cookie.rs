//! The keyed probe cookie: SipHash-1-3 over a fixed five-word message.
//!
//! The cookie becomes a TCP probe's initial sequence number (and a UDP probe's IPv4 id or
//! IPv6 flow label), so a reply can only match when it echoes a value an off-path sender
//! cannot guess. The key is random per daemon start; the message is fixed-size so the eBPF
//! verifier sees no loop bound it cannot prove.
use crate::l4::FlowKey;

#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

#[inline(always)]
fn absorb(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    sip_round(v);
    v[0] ^= m;
}

/// SipHash-1-3 of five 64-bit words (40 bytes) under `key`.
#[inline(always)]
pub fn siphash13_5(key: &[u64; 2], m: &[u64; 5]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f6d6570736575,
        key[1] ^ 0x646f72616e646f6d,
        key[0] ^ 0x6c7967656e657261,
        key[1] ^ 0x7465646279746573,
    ];
    absorb(&mut v, m[0]);
    absorb(&mut v, m[1]);
    absorb(&mut v, m[2]);
    absorb(&mut v, m[3]);
    absorb(&mut v, m[4]);
    // Length block: 40 bytes, no tail.
    absorb(&mut v, 40u64 << 56);
    v[2] ^= 0xff;
    sip_round(&mut v);
    sip_round(&mut v);
    sip_round(&mut v);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The cookie of one probe: the flow's addresses, ports and protocol plus the probe's
/// generation, so every probe of the same target gets a fresh value.
#[inline(always)]
pub fn probe_cookie(key: &[u64; 2], flow: &FlowKey, gen: u32) -> u32 {
    let s = flow.saddr;
    let d = flow.daddr;
    let m = [
        u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]),
        u64::from_le_bytes([s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]]),
        u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]),
        u64::from_le_bytes([d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]]),
        u64::from(flow.sport) | u64::from(flow.dport) << 16 | u64::from(flow.proto) << 32 | u64::from(gen) << 40,
    ];
    let h = siphash13_5(key, &m);
    (h ^ (h >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(sport: u16) -> FlowKey {
        FlowKey::v4([198, 18, 0, 1], [198, 19, 0, 7], sport, 80, crate::packet::IPPROTO_TCP)
    }

    #[test]
    fn cookie_depends_on_key_tuple_and_generation() {
        let k = [1, 2];
        let base = probe_cookie(&k, &flow(61000), 1);
        assert_eq!(base, probe_cookie(&k, &flow(61000), 1), "deterministic");
        assert_ne!(base, probe_cookie(&[1, 3], &flow(61000), 1), "key");
        assert_ne!(base, probe_cookie(&k, &flow(61001), 1), "source port");
        assert_ne!(base, probe_cookie(&k, &flow(61000), 2), "generation");
    }

    #[test]
    fn cookies_spread_over_the_whole_range() {
        // 4096 generations of one flow: high and low halves both vary, no repeats expected
        // beyond birthday odds (~0.2% of 2^32 space is far away; require none).
        let k = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];
        let mut seen = std::collections::HashSet::new();
        let (mut hi, mut lo) = (0u32, 0u32);
        for g in 0..4096 {
            let c = probe_cookie(&k, &flow(61000), g);
            hi |= c >> 16;
            lo |= c & 0xffff;
            assert!(seen.insert(c), "repeat at generation {g}");
        }
        assert_eq!((hi, lo), (0xffff, 0xffff), "every bit takes both values");
    }

    #[test]
    fn siphash_differs_per_word() {
        let k = [7, 9];
        let base = siphash13_5(&k, &[0; 5]);
        for i in 0..5 {
            let mut m = [0u64; 5];
            m[i] = 1;
            assert_ne!(siphash13_5(&k, &m), base, "word {i}");
        }
    }
}
