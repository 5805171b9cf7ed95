//! The Debian package, installed and run in a throwaway Debian root. Every test here is
//! `#[ignore]`d: it needs the built .deb (`PROBED_DEB`); `cargo xtask test` builds it and runs
//! `cargo test -p probed-tests --test it -- --ignored package::`.
mod deb;
