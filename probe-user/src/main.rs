//! The probed binary: daemon and command-line interface.
mod cli;

/// mimalloc (its v2 design) instead of glibc's malloc: at a million targets the resident memory
/// after start-up is ~25% smaller (glibc kept what the start's transients freed), and at 65k
/// targets the peak is no larger. mimalloc v3 was tried too: as small at a million, but 50-60
/// MB more at 10k-65k (README, "A million targets").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
