//! The sinks with real traffic through a load balancer in a namespace: nftables, the pinned
//! slot table (bpf), HAProxy and an exec'd program; and the route sink with BIRD announcing a
//! VIP by BGP to a router.
mod bpf;
mod exec;
mod haproxy;
mod nft;
mod route;
mod route_end;
