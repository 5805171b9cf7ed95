//! Attaches `test_reflector` (a SYN -> SYN+ACK responder in XDP, probe-ebpf/src/fixtures) to a
//! backend interface: a stand-in for a remote fleet whose TCP work costs this machine almost
//! nothing, so benchmarks can see what the prober itself costs.
use aya::{programs::Xdp, Ebpf};
use probed::kernel::AttachMode;

use crate::Netns;

/// The reflector attached to one interface; detached when dropped.
pub struct Reflector {
    _ebpf: Ebpf,
}

impl Reflector {
    /// Attaches in the mode the prober's tests use (`crate::l4::xdp_mode`): on veth, native
    /// XDP_TX toward a peer needs the peer's NAPI, which a native program there provides.
    pub fn attach(ns: &Netns, iface: &str) -> Self {
        Self::attach_in(ns, iface, crate::l4::xdp_mode())
    }

    pub fn attach_in(ns: &Netns, iface: &str, mode: AttachMode) -> Self {
        ns.enter(|| {
            let mut ebpf = Ebpf::load(probed::kernel::FIXTURE_OBJECT).expect("load the fixtures' eBPF object");
            let prog: &mut Xdp = ebpf
                .program_mut("test_reflector")
                .expect("test_reflector")
                .try_into()
                .unwrap();
            prog.load().expect("load test_reflector");
            probed::kernel::attach_xdp(prog, "test_reflector", iface, mode).expect("attach test_reflector");
            Self { _ebpf: ebpf }
        })
    }
}
