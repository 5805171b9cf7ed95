//! Several probed nodes as one: they share their verdicts over gossip, split the probing so
//! each check is probed by k nodes instead of all, and aggregate the verdicts per SPEC 9.
//! The pure parts: who probes what (`shard`), how verdicts travel (`verdicts`) and how they
//! combine (`aggregate`).
pub mod aggregate;
pub mod node;
pub mod remote;
pub mod routes;
pub mod shard;
pub mod transport;
pub mod verdicts;
