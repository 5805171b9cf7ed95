//! probed's kernel program `probe_rx`: the XDP reply matcher on the probe interface, which is
//! also the probe generator for the frames userspace runs through it (see tx.rs), plus
//! `test_reflector`, a fixture for tests and benchmarks that the daemon never loads.
#![no_std]
#![no_main]

mod maps;
mod parse;
mod reflector;
mod rx;
mod tx;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: eBPF programs cannot panic at run time; the verifier rejects any path that
    // would reach here, so this is never executed.
    unsafe { core::hint::unreachable_unchecked() }
}
