//! The checks behind probed's fuzz targets: each module takes the fuzzer's bytes and panics
//! (or trips a sanitizer) only on a bug. The targets in fuzz_targets/ are one call each.
pub mod config;
pub mod frame;
pub mod http;
pub mod packet;

/// Every committed seed through its target's check, as a plain test: `cargo xtask test`
/// runs it, so a check that no longer compiles or no longer agrees with the code it checks
/// is caught without a fuzzing run.
#[cfg(test)]
mod seeds {
    use std::path::Path;

    fn replay(target: &str, check: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target);
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            eprintln!("{target}: {}", path.display());
            check(&bytes);
            n += 1;
        }
        assert!(n > 0, "no seeds in {}", dir.display());
    }

    #[test]
    fn packet() {
        replay("packet", crate::packet::check);
    }

    /// The seeds that exercise the strict rules land where the rules say.
    #[test]
    fn packet_seeds_classify_as_the_rules_say() {
        use probe_common::packet::ReplyClass::{IcmpUnreach, Other, Rst, SynAck};
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/packet");
        for (seed, want) in [
            ("synack4", SynAck),
            ("vlan1-synack4", SynAck),
            ("qinq-rst6", Rst),
            ("vlan3", Other),
            ("ext2-synack6", SynAck),
            ("frag6", Other),
            ("icmp6-udp-ext", IcmpUnreach),
            ("icmp4-host", Other),
        ] {
            let bytes = std::fs::read(dir.join(seed)).unwrap();
            assert_eq!(crate::packet::classify(&bytes), want, "seed {seed}");
        }
    }

    #[test]
    fn frame() {
        replay("frame", crate::frame::check);
    }

    #[test]
    fn config() {
        replay("config", crate::config::check);
    }

    #[test]
    fn http_response() {
        replay("http_response", crate::http::check);
    }
}
