//! Cache-line prefetch, for loops that walk large tables in an order the hardware cannot
//! guess. At a million targets the runner's per-result work was a chain of dependent cache
//! misses (the check's slot, its scheduler entry, the owner's target); asking for the lines
//! of a whole batch first lets those misses overlap instead of queueing one behind another.

/// Asks the CPU to bring the cache line holding `v` into its caches, without waiting.
/// A hint only (a no-op off x86-64).
#[inline(always)]
pub fn line<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: PREFETCHT0 reads nothing architecturally and cannot fault (here the address
        // is a live reference's anyway); SSE, which it needs, is part of the x86-64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(v).cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}
