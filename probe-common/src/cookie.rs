//! The keyed probe cookie and the keyed source-port choice: SipHash-1-3 over a fixed
//! six-word message.
//!
//! The cookie becomes a TCP probe's initial sequence number (and a UDP probe's IPv4 id or
//! IPv6 flow label), so a reply can only match when it echoes a value an off-path sender
//! cannot guess. The source port comes from the same key, so a blind forger must guess it
//! too. The key is random per daemon start; the message is fixed-size so the eBPF verifier
//! sees no loop bound it cannot prove.
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

/// SipHash-1-3 of six 64-bit words (48 bytes) under `key`.
#[inline(always)]
pub fn siphash13_6(key: &[u64; 2], m: &[u64; 6]) -> u64 {
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
    absorb(&mut v, m[5]);
    // Length block: 48 bytes, no tail.
    absorb(&mut v, 48u64 << 56);
    v[2] ^= 0xff;
    sip_round(&mut v);
    sip_round(&mut v);
    sip_round(&mut v);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// What a hash is for, in the message's last word, so the cookie and the source port of the
/// same flow are independent values.
const PURPOSE_COOKIE: u64 = 0;
const PURPOSE_SPORT: u64 = 1;
const PURPOSE_MARKER: u64 = 2;

/// The generator's frame marker for this start's key (`TxCtl::marker`): a keyed value, never
/// 0, which no program without the key can put in front of a frame.
pub fn generator_marker(key: &[u64; 2]) -> u64 {
    let h = siphash13_6(key, &[0, 0, 0, 0, 0, PURPOSE_MARKER << 32]);
    h.max(1)
}

/// The message for `flow` and `gen`: four address words, the ports and protocol, and the
/// generation with the purpose (and attempt) in a word of its own, so all 32 generation bits
/// count (a five-word message once shifted gen by 40 and lost its top 8 bits).
#[inline(always)]
fn message(flow: &FlowKey, sport: u16, gen: u32, purpose: u64) -> [u64; 6] {
    let s = flow.saddr;
    let d = flow.daddr;
    [
        u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]),
        u64::from_le_bytes([s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]]),
        u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]),
        u64::from_le_bytes([d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]]),
        u64::from(sport) | u64::from(flow.dport) << 16 | u64::from(flow.proto) << 32 | u64::from(flow.family) << 40,
        u64::from(gen) | purpose << 32,
    ]
}

/// The cookie of one probe: the flow's addresses, ports and protocol plus the probe's
/// generation, so every probe of the same target gets a fresh value.
#[inline(always)]
pub fn probe_cookie(key: &[u64; 2], flow: &FlowKey, gen: u32) -> u32 {
    let h = siphash13_6(key, &message(flow, flow.sport, gen, PURPOSE_COOKIE));
    (h ^ (h >> 32)) as u32
}

/// The source-port offset of probe `gen` of `flow` in a range of `span` ports (attempt 0,
/// then 1, 2, ... while the port is taken by another live probe). `flow.sport` is ignored:
/// the port is what this chooses. Keyed, so nobody without the key can predict a probe's
/// port from its target, its generation or earlier probes; with a power-of-two span the
/// choice is exactly uniform.
#[inline(always)]
pub fn sport_offset(key: &[u64; 2], flow: &FlowKey, gen: u32, attempt: u16, span: u32) -> u32 {
    if span == 0 {
        return 0;
    }
    let h = siphash13_6(key, &message(flow, 0, gen, PURPOSE_SPORT | u64::from(attempt) << 8));
    (h % u64::from(span)) as u32
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
        let base = siphash13_6(&k, &[0; 6]);
        for i in 0..6 {
            let mut m = [0u64; 6];
            m[i] = 1;
            assert_ne!(siphash13_6(&k, &m), base, "word {i}");
        }
    }

    #[test]
    fn every_generation_bit_changes_the_cookie() {
        // The five-word message shifted gen left by 40 and lost bits 24-31: g and g + 2^24
        // gave the same cookie.
        let k = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];
        for g in [1u32, 0x00ab_cdef, 0x7f00_0001] {
            for bit in 0..32 {
                assert_ne!(
                    probe_cookie(&k, &flow(61000), g),
                    probe_cookie(&k, &flow(61000), g ^ (1 << bit)),
                    "generation {g:#x} and bit {bit} flipped"
                );
            }
        }
    }

    #[test]
    fn cookie_and_sport_differ_per_family_and_protocol() {
        let k = [5, 6];
        let udp = FlowKey {
            proto: crate::packet::IPPROTO_UDP,
            ..flow(61000)
        };
        assert_ne!(probe_cookie(&k, &flow(61000), 9), probe_cookie(&k, &udp, 9));
        let v6ish = FlowKey {
            family: crate::l4::FAMILY_V6,
            ..flow(61000)
        };
        assert_ne!(probe_cookie(&k, &flow(61000), 9), probe_cookie(&k, &v6ish, 9));
    }

    #[test]
    fn sport_spreads_evenly_over_the_range() {
        // 64k generations of one target over 4096 ports: every port used, none far above or
        // below the mean of 16 (a binomial tail this wide is ~1e-9 per port).
        let k = [0x1111_2222_3333_4444, 0x5555_6666_7777_8888];
        let mut hits = std::vec![0u32; 4096];
        for g in 1..=65536u32 {
            let off = sport_offset(&k, &flow(0), g, 0, 4096);
            hits[off as usize] += 1;
        }
        let (lo, hi) = (hits.iter().min().unwrap(), hits.iter().max().unwrap());
        assert!(*lo >= 1 && *hi <= 48, "uneven spread: min {lo}, max {hi}");
        // Ranges that are not a power of two stay inside the range.
        for g in 1..2000 {
            assert!(sport_offset(&k, &flow(0), g, 0, 4001) < 4001);
        }
        assert_eq!(sport_offset(&k, &flow(0), 1, 0, 1), 0);
    }

    #[test]
    fn sport_is_unpredictable_without_the_key() {
        let k = [0x0bad_cafe_dead_beef, 0x1234_5678_9abc_def0];
        let other = [0x0bad_cafe_dead_beef, 0x1234_5678_9abc_def1];
        // The old unkeyed formula: (gen * phi ^ dport) >> 17, mod the range. Neither it nor
        // a key one bit away predicts the keyed choice better than chance (1/4096 per guess;
        // allow 8 hits in 4096 draws, an expectation of 1).
        let (mut old_hits, mut key_hits) = (0, 0);
        for g in 1..=4096u32 {
            let real = sport_offset(&k, &flow(0), g, 0, 4096);
            let old = ((u64::from(g).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 80) >> 17) % 4096;
            old_hits += u32::from(u64::from(real) == old);
            key_hits += u32::from(real == sport_offset(&other, &flow(0), g, 0, 4096));
        }
        assert!(old_hits <= 8, "the unkeyed formula predicts {old_hits} of 4096 ports");
        assert!(key_hits <= 8, "a neighbouring key predicts {key_hits} of 4096 ports");
        // The port does not follow from the cookie's inputs alone: other targets, other
        // attempts and other generations move it.
        let base = sport_offset(&k, &flow(0), 7, 0, 1 << 16);
        assert_ne!(base, sport_offset(&k, &flow(0), 7, 1, 1 << 16), "attempt");
        assert_ne!(base, sport_offset(&k, &flow(0), 8, 0, 1 << 16), "generation");
        let other_port = FlowKey { dport: 81, ..flow(0) };
        assert_ne!(base, sport_offset(&k, &other_port, 7, 0, 1 << 16), "target port");
        // The source port field of the flow is not an input (it is the output).
        assert_eq!(base, sport_offset(&k, &flow(61234), 7, 0, 1 << 16));
    }

    #[test]
    fn the_generator_marker_is_keyed() {
        let a = generator_marker(&[1, 2]);
        assert_ne!(a, generator_marker(&[1, 3]));
        assert_eq!(a, generator_marker(&[1, 2]));
        assert_ne!(a, 0);
        assert_ne!(a.to_le_bytes(), *b"probedTX", "not the constant of old");
    }
}
