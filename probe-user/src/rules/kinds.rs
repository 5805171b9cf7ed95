//! The names of the kinds a configuration chooses between that more than one layer reads: the
//! sink kinds (a check's kinds are `Protocol`, beside the dialects that offer them).
use crate::wire_enum::wire_enum;

wire_enum! {
    /// A sink's `kind`: each kind's name, once.
    #[derive(Debug, Hash)]
    pub enum SinkType {
        Nftables = "nftables",
        Bpf = "bpf",
        Haproxy = "haproxy",
        Exec = "exec",
        Route = "route",
    }
}
