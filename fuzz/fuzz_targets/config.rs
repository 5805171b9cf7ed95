//! Fuzz target: see probed_fuzz::config.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| probed_fuzz::config::check(data));
