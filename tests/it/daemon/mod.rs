//! The daemon as a whole: in this process (`Daemon::start` on a thread in the prober's
//! namespace), as the `probed run` binary driven by signals, when it falls behind, what it
//! leaves in the namespace when it stops, and the demo.
mod binary;
mod demo_cleanup;
mod end_to_end;
mod pace;
mod passive;
mod ports_reserve;
