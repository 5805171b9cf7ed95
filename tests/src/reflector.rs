//! Attaches `test_reflector` (a SYN -> SYN+ACK responder in XDP, probe-ebpf/src/fixtures) to a
//! backend interface: a stand-in for a remote fleet whose TCP work costs this machine almost
//! nothing, so benchmarks can see what the prober itself costs.
use aya::{programs::Xdp, Ebpf};
use probed::kernel::AttachMode;

use crate::Netns;

/// The reflector attached to one interface; detached when dropped.
pub struct Reflector {
    ebpf: Ebpf,
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
            Self { ebpf }
        })
    }
}

impl Reflector {
    /// SYNs this reflector has answered (what reached the backend over its link).
    pub fn syns(&self) -> u64 {
        let map = self.ebpf.map("REFLECTED_SYNS").expect("REFLECTED_SYNS");
        let counts: aya::maps::PerCpuArray<_, u64> = aya::maps::PerCpuArray::try_from(map).expect("a per-CPU array");
        counts.get(&0, 0).map_or(0, |per_cpu| per_cpu.iter().sum())
    }

    /// From now on SYNs to `addr` are dropped (the backend went dark), or answered again.
    pub fn set_dark(&mut self, addr: std::net::Ipv4Addr, dark: bool) {
        let map = self.ebpf.map_mut("REFLECT_DARK").expect("REFLECT_DARK");
        let mut m: aya::maps::HashMap<_, [u8; 4], u8> = aya::maps::HashMap::try_from(map).expect("a hash map");
        if dark {
            m.insert(addr.octets(), 1, 0).expect("mark dark");
        } else {
            let _ = m.remove(&addr.octets());
        }
    }
}
