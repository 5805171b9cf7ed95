//! Types and pure packet logic shared by probed's kernel programs and its userspace.
//!
//! Everything here is `no_std`, `#[repr(C)]` where it crosses the kernel boundary, and
//! free of allocation, so the eBPF programs call exactly the code the host tests exercise.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod cookie;
pub mod counters;
pub mod csum;
pub mod frame;
pub mod http;
pub mod l4;
pub mod packet;
pub mod parse;
pub mod passive;
pub mod slots;

/// Directory under bpffs where a daemon pins its maps; each instance adds its own name.
pub const PIN_ROOT: &str = "/sys/fs/bpf";
