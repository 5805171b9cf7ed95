//! The allocator's own calls, for the few places that know a large transient just ended or
//! that other threads free what they made.

/// Hands the calling thread's freed pages back to the kernel. mimalloc keeps freed pages for
/// reuse by the thread that freed them, so a transient on a thread that allocates little
/// afterwards (the L4 engine's, after loading probe_rx) stays in the RSS for good otherwise;
/// and objects another thread freed are only reclaimed when their page's owner collects.
/// Costs a walk of the thread's heap (~70 µs with 65k targets' worth of objects): call it after
/// start-up work or on a slow timer, not per probe. Harmless where mimalloc is not the global
/// allocator (tests): its heaps are then empty.
pub fn release_freed() {
    // SAFETY: `mi_collect` has no preconditions; it only walks mimalloc's own heaps.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// mimalloc's `arena_eager_commit` option (its index in mimalloc v2's option list; the
/// bindings name only some of them).
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Sets the allocator up for a long-running daemon; call before the first allocation reserves
/// mimalloc's arena (the binary does it from `.init_array`). By default mimalloc commits its
/// arenas up front where the OS overcommits, as Linux does, and measured so, freed pages
/// stayed resident: 97 MiB once a 65k-target daemon had started, against 73 MiB with arenas
/// committed on demand, whose freed pages leave within a few hundred milliseconds.
pub fn configure() {
    // SAFETY: setting an option's default has no preconditions; mimalloc reads it when it
    // reserves an arena. A default: MIMALLOC_ARENA_EAGER_COMMIT in the environment still wins.
    unsafe { libmimalloc_sys::mi_option_set_default(ARENA_EAGER_COMMIT, 0) }
}
