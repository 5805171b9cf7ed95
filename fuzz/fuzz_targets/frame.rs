//! Fuzz target: see probed_fuzz::frame.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| probed_fuzz::frame::check(data));
