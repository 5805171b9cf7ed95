//! Fuzz target: see probed_fuzz::packet.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| probed_fuzz::packet::check(data));
