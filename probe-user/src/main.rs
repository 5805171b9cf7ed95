//! The probed binary: daemon and command-line interface.
mod cli;

/// mimalloc (its v2 design) instead of glibc's malloc: at a million targets the resident memory
/// after start-up is ~25% smaller (glibc kept what the start's transients freed), and at 65k
/// targets the peak is no larger. mimalloc v3 was tried too: as small at a million, but 50-60
/// MB more at 10k-65k (docs/bench/million.md). Its arenas are committed on demand
/// (`probed::alloc::configure`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sets the allocator up before Rust's runtime starts (and allocates): an entry of the
/// executable's `.init_array`, which the loader runs before `main`.
#[used]
#[link_section = ".init_array"]
static CONFIGURE_ALLOC: extern "C" fn() = {
    extern "C" fn configure_alloc() {
        probed::alloc::configure();
    }
    configure_alloc
};

fn main() -> std::process::ExitCode {
    cli::main()
}
