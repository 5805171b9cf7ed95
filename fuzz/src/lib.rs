//! The checks behind probed's fuzz targets: each module takes the fuzzer's bytes and panics
//! (or trips a sanitizer) only on a bug. The targets in fuzz_targets/ are one call each.
pub mod config;
pub mod frame;
pub mod http;
pub mod packet;
