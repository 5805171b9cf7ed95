//! probed's integration tests: real programs in real network namespaces, one test binary with a
//! module per layer, so that a layer is a filter (`cargo test -p probed-tests --test it --
//! kernel::`, or `cargo xtask test -- kernel::`):
//!
//! | module | what runs |
//! |---|---|
//! | `kernel` | probe_rx and the L4 engine, loaded in a namespace: TCP, UDP and HTTP in the kernel, hooks, parsing, floods |
//! | `probes` | the probes in user space (HTTP over sockets, `probed check`) and their verdicts |
//! | `daemon` | the daemon as a whole, in this process and as the `probed` binary, and the demo |
//! | `api` | the API: who may change what, its limits, paging, and the CLI that reads it |
//! | `sinks` | the sinks, against a real load balancer in a namespace |
//! | `dns` | the authoritative DNS server against `dig`, floods and a reference server |
//! | `cluster` | several daemons sharing verdicts |
//! | `package` | the Debian package in a throwaway root (`#[ignore]`d: `cargo xtask test` runs them with `--ignored` and `PROBED_DEB`) |
//!
//! Tests of every layer share this process and run in parallel: each builds its own
//! namespaces, pin directories and files with names unique to the call
//! (`probed_tests::unique_name`). A test that changes or measures the whole process (its
//! descriptor limit, its open descriptors, its memory) runs in a process of its own
//! (`probed_tests::serial::own_process`); one that loads the whole machine runs while no other
//! test has a namespace (`probed_tests::serial::alone`). Helpers shared by the layers are in
//! the `probed_tests` library (tests/src).
mod api;
mod cluster;
mod daemon;
mod dns;
mod kernel;
mod package;
mod probes;
mod sinks;
