//! What probed's kernel objects share: the bounds-checked packet parsers, and the panic
//! handler every no_std object needs. Three objects link it: `probe` (probe_rx) and `passive`
//! (the passive observers), which the daemon embeds, and `probe-fixtures` (test_reflector,
//! for tests and benchmarks only).
#![no_std]

pub mod ctx;
pub mod parse;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: eBPF programs cannot panic at run time; the verifier rejects any path that
    // would reach here, so this is never executed.
    unsafe { core::hint::unreachable_unchecked() }
}
