//! probe_rx: the XDP reply matcher on the probe interface, and its counters.
use aya::{maps::PerCpuArray, programs::Xdp, Ebpf};
use probe_common::counters::RxCounters;

use super::{attach_xdp, if_index, pin::PinDir, AttachMode, KernelError, BPF_OBJECT};

const PROG: &str = "probe_rx";
const COUNTERS: &str = "PROBE_RX_COUNTERS";

/// probe_rx loaded and attached to one interface. Dropping it detaches the program and
/// removes its pins.
pub struct RxProgram {
    ebpf: Ebpf,
    /// The mode it runs in: Driver or Skb.
    mode: AttachMode,
    iface: String,
    // Declared last so the pins go after the program is detached.
    pins: PinDir,
}

impl RxProgram {
    /// Loads probe_rx, attaches it to `iface` in `mode`, and pins its maps in `pins`.
    pub fn attach(iface: &str, mode: AttachMode, mut pins: PinDir) -> Result<Self, KernelError> {
        if_index(iface)?;
        let mut ebpf = Ebpf::load(BPF_OBJECT).map_err(KernelError::Load)?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROG)
            .ok_or(KernelError::MissingProgram { name: PROG })?
            .try_into()
            .map_err(|source| KernelError::WrongProgramType { name: PROG, source })?;
        prog.load()
            .map_err(|source| KernelError::Verifier { name: PROG, source })?;
        let mode = attach_xdp(prog, PROG, iface, mode)?;
        let map = ebpf.map(COUNTERS).ok_or(KernelError::MissingMap { name: COUNTERS })?;
        pins.pin_map(map, COUNTERS)?;
        Ok(Self {
            ebpf,
            mode,
            iface: iface.to_string(),
            pins,
        })
    }

    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    pub fn iface(&self) -> &str {
        &self.iface
    }

    pub fn pin_dir(&self) -> &std::path::Path {
        self.pins.path()
    }

    /// Sums the per-CPU counters.
    pub fn counters(&self) -> Result<RxCounters, KernelError> {
        let map = self
            .ebpf
            .map(COUNTERS)
            .ok_or(KernelError::MissingMap { name: COUNTERS })?;
        let array: PerCpuArray<_, RxCounters> =
            PerCpuArray::try_from(map).map_err(|source| KernelError::Map { name: COUNTERS, source })?;
        let per_cpu = array
            .get(&0, 0)
            .map_err(|source| KernelError::Map { name: COUNTERS, source })?;
        let mut total = RxCounters::default();
        for slot in per_cpu.iter() {
            total.accumulate(slot);
        }
        Ok(total)
    }
}

impl RxProgram {
    /// The kernel's id of the loaded program (what `bpftool prog show id N` takes).
    #[cfg(any(test, feature = "testing"))]
    pub fn program_id(&self) -> Result<u32, KernelError> {
        let prog: &Xdp = self
            .ebpf
            .program(PROG)
            .ok_or(KernelError::MissingProgram { name: PROG })?
            .try_into()
            .map_err(|source| KernelError::WrongProgramType { name: PROG, source })?;
        let info = prog
            .info()
            .map_err(|source| KernelError::ProgramInfo { name: PROG, source })?;
        Ok(info.id())
    }
}
