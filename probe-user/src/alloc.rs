//! The allocator's own calls, for the few places that know a large transient just ended.

/// Hands the calling thread's freed pages back to the kernel. mimalloc keeps freed pages for
/// reuse by the thread that freed them, so a transient on a thread that allocates little
/// afterwards (the L4 engine's, after loading probe_rx) stays in the RSS for good otherwise.
/// Costs a walk of the thread's heap: call it after start-up work, not per probe. Harmless
/// where mimalloc is not the global allocator (tests): its heaps are then empty.
pub fn release_freed() {
    // SAFETY: `mi_collect` has no preconditions; it only walks mimalloc's own heaps.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
