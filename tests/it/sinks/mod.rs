//! The sinks with real traffic through a load balancer in a namespace: nftables, the pinned
//! slot table (bpf), HAProxy and an exec'd program.
mod bpf;
mod exec;
mod haproxy;
mod nft;
