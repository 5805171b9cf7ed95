//! `[source]` tests.
use super::*;

rule!(
    port_range_overlaps_ephemeral,
    "[source]\nport_range = \"60000-62000\"",
    "source.port_range"
);
rule!(
    port_range_reversed,
    "[source]\nport_range = \"65000-61000\"",
    "source.port_range"
);
rule!(
    source_address_bad,
    "[source]\naddresses = [\"100.64.0.300\"]",
    "source.addresses[0]"
);
rule!(xdp_mode_unknown, "[source]\nxdp_mode = \"native\"", "source.xdp_mode");
rule!(hook_unknown, "[source]\nhook = \"tc\"", "source.hook");
rule!(
    interface_name_bad,
    "[source]\ninterfaces = [\"a/b\"]",
    "source.interfaces[0]"
);

#[test]
fn hook_is_read() {
    assert_eq!(ok("").source.hook, crate::kernel::Hook::Xdp);
    for (text, want) in [("xdp", crate::kernel::Hook::Xdp), ("tcx", crate::kernel::Hook::Tcx)] {
        let c = ok(&format!("[source]\nhook = \"{text}\"\n"));
        assert_eq!(c.source.hook, want, "{text}");
    }
}

#[test]
fn xdp_mode_is_read() {
    for (text, want) in [
        ("auto", crate::kernel::AttachMode::Auto),
        ("driver", crate::kernel::AttachMode::Driver),
        ("skb", crate::kernel::AttachMode::Skb),
    ] {
        let c = ok(&format!("[source]\nxdp_mode = \"{text}\"\n"));
        assert_eq!(c.source.xdp_mode, want, "{text}");
    }
}
