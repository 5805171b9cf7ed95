//! The authoritative DNS server: answers to `dig` over UDP and TCP, what floods and slow
//! clients can do to it, and its answers beside a reference server's (Knot DNS).
mod discovery;
mod limits;
mod reference;
mod server;
