//! Fuzz target: see probed_fuzz::http.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| probed_fuzz::http::check(data));
