//! Attaches `test_reflector` (a SYN -> SYN+ACK responder in XDP, see probe-ebpf) to a
//! backend interface: a stand-in for a remote fleet whose TCP work costs this machine almost
//! nothing, so benchmarks can see what the prober itself costs.
use aya::{
    programs::{Xdp, XdpMode},
    Ebpf,
};

use crate::Netns;

/// The reflector attached to one interface; detached when dropped.
pub struct Reflector {
    _ebpf: Ebpf,
}

impl Reflector {
    pub fn attach(ns: &Netns, iface: &str, mode: XdpMode) -> Self {
        ns.enter(|| {
            let mut ebpf = Ebpf::load(probed::kernel::BPF_OBJECT).expect("load the eBPF object");
            let prog: &mut Xdp = ebpf
                .program_mut("test_reflector")
                .expect("test_reflector")
                .try_into()
                .unwrap();
            prog.load().expect("load test_reflector");
            prog.attach(iface, mode).expect("attach test_reflector");
            Self { _ebpf: ebpf }
        })
    }
}
