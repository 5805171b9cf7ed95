//! The L4 kernel engine's kernel side: probe_rx, attached to the probe interface, matches
//! replies and, run by userspace with live frames marked by this start's marker
//! (`TxCtl::marker`), generates the probes; its maps, and the thin calls userspace makes on
//! them. No policy here: `engine` decides what to send and when.
use std::{
    os::fd::{AsRawFd, RawFd},
    path::Path,
};

use aya::{
    maps::{Array, HashMap, Map, MapData, MapError, PerCpuArray, RingBuf},
    programs::{
        tc::TcAttachOptions, LinkOrder, SchedClassifier, TcAttachType, TestRun, TestRunAttrs, TestRunOptions, Xdp,
    },
    Ebpf, EbpfLoader,
};
use probe_common::{
    counters::{RxCounters, TxCounters},
    http::HttpReq,
    l4::{CookieKey, FlowKey, Inflight, ProbeEvent, ProbeJob, Road, TxCtl, GENERATOR_MARK_LEN, MAX_JOBS},
};

use super::{
    attach_xdp, if_index, mmap::MappedArray, pin::PinDir, refuse_foreign_xdp, AttachMode, Hook, KernelError, BPF_OBJECT,
};

const RX: &str = "probe_rx";
/// The same matcher at tcx ingress.
const RX_TC: &str = "probe_rx_tc";
/// The start-up check of BPF_FIB_LOOKUP_SRC.
const FIB_SRC: &str = "probe_fib_src";

/// Live-frames batch size: frames the kernel builds and flushes per pass.
const LIVE_BATCH: u32 = 64;

/// How the engine's kernel side is set up.
#[derive(Clone, Debug)]
pub struct KernelConfig {
    /// Interface the generator runs on; probes leave by whichever device the route names.
    pub iface: String,
    /// Further interfaces replies may arrive on (routes out of them): probe_rx is attached
    /// there too, with the same maps.
    pub more_ifaces: Vec<String>,
    pub mode: AttachMode,
    /// Where the matcher runs: XDP (`mode` applies) or tcx ingress.
    pub hook: Hook,
    /// Make the generator and probe_fib_src answer as Linux 6.3-6.6 does to
    /// BPF_FIB_LOOKUP_SRC (-EINVAL), for tests of the fallback on a newer kernel.
    pub simulate_no_fib_src: bool,
    /// The reserved source-port range (inclusive).
    pub sport_min: u16,
    pub sport_max: u16,
    /// Random per daemon start.
    pub key: [u64; 2],
    /// In-flight table size (the most probes on the wire at once).
    pub max_inflight: u32,
    /// probe_rx may not be able to send frames back out of the interface (native XDP on a
    /// device without XDP transmit, veth whose peer has no NAPI): a matched SYN+ACK is then
    /// passed to the node's stack, which ends the half-open connection with its own RST,
    /// instead of being turned into that RST in place and lost.
    pub rst_by_stack: bool,
}

/// probe_rx attached, with handles on the maps the engine uses.
pub struct L4Kernel {
    ebpf: Ebpf,
    ifindex: u32,
    /// Every interface probe_rx was attached to, by name and the index it had then.
    attached: Vec<(String, u32)>,
    /// The mode probe_rx runs in: Driver or Skb (XDP hook only).
    mode: AttachMode,
    hook: Hook,
    jobs: JobsMmap,
    ctl: Array<MapData, TxCtl>,
    /// What marks the generator's frames for this start's key (`TxCtl::marker`).
    marker: u64,
    rx_ctl: Array<MapData, u32>,
    inflight: HashMap<MapData, FlowKey, Inflight>,
    roads: HashMap<MapData, FlowKey, Road>,
    http_reqs: HashMap<MapData, u32, HttpReq>,
    events: RingBuf<MapData>,
    rx_counters: PerCpuArray<MapData, RxCounters>,
    tx_counters: PerCpuArray<MapData, TxCounters>,
    /// Runs of the generator that were `live_frames_supported`'s check, not probes: taken off
    /// `no_job` in `tx_counters`.
    checks_run: u64,
    pins: PinDir,
}

fn map_err(name: &'static str) -> impl Fn(MapError) -> KernelError {
    move |source| KernelError::Map { name, source }
}

fn rx_ctl_bits(rst_by_stack: bool) -> u32 {
    if rst_by_stack {
        probe_common::l4::RX_CTL_RST_BY_STACK
    } else {
        0
    }
}

fn take(ebpf: &mut Ebpf, name: &'static str) -> Result<Map, KernelError> {
    ebpf.take_map(name).ok_or(KernelError::MissingMap { name })
}

impl L4Kernel {
    /// Loads probe_rx, sets the key, attaches it to the interface and pins the maps in `pins`
    /// for bpftool.
    pub fn load(cfg: &KernelConfig, mut pins: PinDir) -> Result<Self, KernelError> {
        // Every name is checked before anything is loaded; the first is the generator's.
        let ifindexes = std::iter::once(&cfg.iface)
            .chain(&cfg.more_ifaces)
            .map(|i| if_index(i))
            .collect::<Result<Vec<u32>, _>>()?;
        let ifindex = ifindexes[0];
        let mut ebpf = EbpfLoader::new()
            .override_global("PROBE_SPORT_MIN", &cfg.sport_min, true)
            .override_global("PROBE_SPORT_MAX", &cfg.sport_max, true)
            .override_global("PROBE_FIB_SRC_OFF", &u8::from(cfg.simulate_no_fib_src), true)
            .map_max_entries("PROBE_INFLIGHT", cfg.max_inflight)
            .map_max_entries("PROBE_ROADS", cfg.max_inflight)
            .load(BPF_OBJECT)
            .map_err(KernelError::Load)?;
        // The loader parsed the kernel's whole BTF (~15 MB at its peak) though probe_rx needs
        // no CO-RE relocation; give those pages back now rather than keep them for good.
        crate::alloc::release_freed();
        let rx: &mut Xdp = ebpf
            .program_mut(RX)
            .ok_or(KernelError::MissingProgram { name: RX })?
            .try_into()
            .map_err(|source| KernelError::WrongProgramType { name: RX, source })?;
        // Loaded in both hooks: at XDP it is the matcher, and in both it is the generator.
        rx.load().map_err(|source| KernelError::Verifier { name: RX, source })?;
        // Before any interface runs it.
        let mut rx_ctl: Array<MapData, u32> =
            Array::try_from(take(&mut ebpf, "PROBE_RX_CTL")?).map_err(map_err("PROBE_RX_CTL"))?;
        rx_ctl
            .set(0, rx_ctl_bits(cfg.rst_by_stack), 0)
            .map_err(map_err("PROBE_RX_CTL"))?;
        let rx: &mut Xdp = ebpf
            .program_mut(RX)
            .ok_or(KernelError::MissingProgram { name: RX })?
            .try_into()
            .map_err(|source| KernelError::WrongProgramType { name: RX, source })?;
        let mode = match cfg.hook {
            Hook::Xdp => {
                // Every interface is checked before probed takes any XDP hook.
                for iface in std::iter::once(&cfg.iface).chain(&cfg.more_ifaces) {
                    refuse_foreign_xdp(iface)?;
                }
                let mode = attach_xdp(rx, RX, &cfg.iface, cfg.mode)?;
                for iface in &cfg.more_ifaces {
                    let m = attach_xdp(rx, RX, iface, cfg.mode)?;
                    log::info!("probe_rx also on {iface}, in {m} mode");
                }
                mode
            }
            Hook::Tcx => {
                attach_tcx(&mut ebpf, std::iter::once(&cfg.iface).chain(&cfg.more_ifaces))?;
                cfg.mode
            }
        };

        // Pinned for inspection (`bpftool map dump pinned ...`). Not the cookie key (whoever
        // reads it can forge replies) nor the job array (whoever can write it can make the
        // generator send probes of its choosing): those live only in this process.
        for name in [
            "PROBE_TX_CTL",
            "PROBE_INFLIGHT",
            "PROBE_RX_COUNTERS",
            "PROBE_TX_COUNTERS",
            "PROBE_IFACES",
        ] {
            let map = ebpf.map(name).ok_or(KernelError::MissingMap { name })?;
            pins.pin_map(map, name)?;
        }
        // The generator sends only by interfaces whose replies probe_rx sees. The handle can
        // go once filled: the program keeps the map alive.
        let mut ifaces: HashMap<MapData, u32, u32> =
            HashMap::try_from(take(&mut ebpf, "PROBE_IFACES")?).map_err(map_err("PROBE_IFACES"))?;
        for &index in &ifindexes {
            ifaces.insert(index, 1, 0).map_err(map_err("PROBE_IFACES"))?;
        }
        let mut key: Array<MapData, CookieKey> =
            Array::try_from(take(&mut ebpf, "PROBE_KEY")?).map_err(map_err("PROBE_KEY"))?;
        key.set(0, CookieKey { k: cfg.key }, 0).map_err(map_err("PROBE_KEY"))?;
        let marker = probe_common::cookie::generator_marker(&cfg.key);
        let Map::Array(jobs_data) = take(&mut ebpf, "PROBE_JOBS")? else {
            return Err(KernelError::MissingMap { name: "PROBE_JOBS" });
        };
        let jobs = JobsMmap::new(jobs_data)?;
        let attached = std::iter::once(&cfg.iface)
            .chain(&cfg.more_ifaces)
            .cloned()
            .zip(ifindexes.iter().copied())
            .collect();
        Ok(Self {
            ifindex,
            attached,
            mode,
            hook: cfg.hook,
            jobs,
            ctl: Array::try_from(take(&mut ebpf, "PROBE_TX_CTL")?).map_err(map_err("PROBE_TX_CTL"))?,
            marker,
            rx_ctl,
            inflight: HashMap::try_from(take(&mut ebpf, "PROBE_INFLIGHT")?).map_err(map_err("PROBE_INFLIGHT"))?,
            roads: HashMap::try_from(take(&mut ebpf, "PROBE_ROADS")?).map_err(map_err("PROBE_ROADS"))?,
            http_reqs: HashMap::try_from(take(&mut ebpf, "PROBE_HTTP_REQS")?).map_err(map_err("PROBE_HTTP_REQS"))?,
            events: RingBuf::try_from(take(&mut ebpf, "PROBE_EVENTS")?).map_err(map_err("PROBE_EVENTS"))?,
            rx_counters: PerCpuArray::try_from(take(&mut ebpf, "PROBE_RX_COUNTERS")?)
                .map_err(map_err("PROBE_RX_COUNTERS"))?,
            tx_counters: PerCpuArray::try_from(take(&mut ebpf, "PROBE_TX_COUNTERS")?)
                .map_err(map_err("PROBE_TX_COUNTERS"))?,
            checks_run: 0,
            ebpf,
            pins,
        })
    }

    /// Leaves the RSTs that end probe connections to the node's stack from now on (see
    /// `KernelConfig::rst_by_stack`).
    pub fn set_rst_by_stack(&mut self) -> Result<(), KernelError> {
        self.rx_ctl
            .set(0, rx_ctl_bits(true), 0)
            .map_err(map_err("PROBE_RX_CTL"))
    }

    /// The interfaces probe_rx is attached to, by name.
    pub fn interfaces(&self) -> impl Iterator<Item = &str> {
        self.attached.iter().map(|(name, _)| name.as_str())
    }

    /// The mode probe_rx was attached in (Driver or Skb); with the tcx hook, the configured
    /// one, unused.
    pub fn rx_mode(&self) -> AttachMode {
        self.mode
    }

    /// The first interface probe_rx was attached to that is gone: deleted, or replaced by a new
    /// one of the same name (a new index, without probe_rx). Replies there are no longer
    /// matched, so every probe through it would end as a timeout the backend did not cause.
    pub fn lost_interface(&self) -> Option<&str> {
        self.attached
            .iter()
            .find(|(name, index)| if_index(name).ok() != Some(*index))
            .map(|(name, _)| name.as_str())
    }

    /// Where the matcher runs.
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// Whether this kernel's bpf_fib_lookup takes BPF_FIB_LOOKUP_SRC (Linux 6.7+): one test
    /// run of probe_fib_src, which is loaded for it and unloaded after.
    pub fn fib_lookup_src_supported(&mut self) -> Result<bool, KernelError> {
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(FIB_SRC)
            .ok_or(KernelError::MissingProgram { name: FIB_SRC })?
            .try_into()
            .map_err(|source| KernelError::WrongProgramType { name: FIB_SRC, source })?;
        prog.load()
            .map_err(|source| KernelError::Verifier { name: FIB_SRC, source })?;
        // Ethernet-sized, content unused: the program only calls the helper.
        let frame = [0u8; 64];
        let out = prog
            .test_run(TestRunOptions {
                data_in: Some(&frame),
                ..TestRunOptions::new()
            })
            .map_err(|source| KernelError::Run { name: FIB_SRC, source });
        let unloaded = prog.unload();
        let verdict = out?.return_value;
        if let Err(e) = unloaded {
            log::debug!("unloading {FIB_SRC}: {e}");
        }
        Ok(verdict == XDP_PASS)
    }

    /// Whether this kernel runs the generator: one live-frames run of probe_rx with no job
    /// (the generator drops the frame and counts it under `no_job`, which `tx_counters` takes
    /// back off). Some kernels refuse live-frame runs (seen on a 6.18 build: EPERM); the
    /// error says why.
    pub fn live_frames_supported(&mut self) -> Result<(), KernelError> {
        let ctl = self.tx_ctl(0, 0, 0);
        self.run_generator(ctl, &[0u8; 64], 1, 1)?;
        self.checks_run += 1;
        Ok(())
    }

    /// The generator's control record for `count` jobs written before, whose UDP payload in
    /// the template sums to `payload_sum` over `payload_len` bytes.
    fn tx_ctl(&self, count: u64, payload_sum: u64, payload_len: u32) -> TxCtl {
        TxCtl {
            next: 0,
            count,
            payload_sum,
            payload_len,
            _pad: 0,
            marker: self.marker,
        }
    }

    /// Runs probe_rx as the generator: `repeat` frames of `template` behind this start's
    /// marker, in batches of `batch`, under `ctl`.
    fn run_generator(&mut self, ctl: TxCtl, template: &[u8], repeat: u32, batch: u32) -> Result<(), KernelError> {
        self.ctl.set(0, ctl, 0).map_err(map_err("PROBE_TX_CTL"))?;
        // The marker in front of the template marks the frames as the generator's.
        let mut data_in = Vec::with_capacity(GENERATOR_MARK_LEN + template.len());
        data_in.extend_from_slice(&self.marker.to_ne_bytes());
        data_in.extend_from_slice(template);
        let xdp_md = XdpMd {
            data: 0,
            data_end: data_in.len() as u32,
            data_meta: 0,
            ingress_ifindex: self.ifindex,
            rx_queue_index: 0,
            egress_ifindex: 0,
        };
        let prog: &Xdp = self.ebpf.program(RX).unwrap().try_into().unwrap();
        let opts = TestRunOptions {
            data_in: Some(&data_in),
            ctx_in: Some(xdp_md.bytes()),
            repeat,
            attrs: TestRunAttrs::new().xdp_live_frames(batch),
            ..TestRunOptions::new()
        };
        prog.test_run(opts)
            .map_err(|source| KernelError::Run { name: RX, source })?;
        Ok(())
    }

    pub fn pin_dir(&self) -> &Path {
        self.pins.path()
    }

    /// Sends up to MAX_JOBS probes of one frame shape: `template` is the frame the generator
    /// writes headers over (its length decides the shape; a UDP payload rides in its tail).
    /// It runs the attached probe_rx, so the run changes nothing in the XDP dispatcher.
    /// Returns how many the generator took. Jobs without a source address come back with
    /// the one the generator's route lookup picked (still unset when it found no route).
    pub fn send(
        &mut self,
        jobs: &mut [ProbeJob],
        template: &[u8],
        payload_sum: u64,
        payload_len: u32,
    ) -> Result<u32, KernelError> {
        let n = jobs.len().min(MAX_JOBS as usize);
        if n == 0 {
            return Ok(0);
        }
        self.jobs.write(&jobs[..n]);
        let ctl = self.tx_ctl(n as u64, payload_sum, payload_len);
        self.run_generator(ctl, template, n as u32, LIVE_BATCH)?;
        self.jobs.read(&mut jobs[..n]);
        Ok(n as u32)
    }

    /// Claims a probe's outcome for userspace (timeout): true if the entry was still there.
    pub fn claim(&mut self, flow: &FlowKey) -> bool {
        self.inflight.remove(flow).is_ok()
    }

    /// Claims an HTTP probe's outcome like `claim`, and says which stage it had reached (the
    /// entry is read, then deleted: probe_rx may advance it in between, which only makes a
    /// response timeout read as a connect timeout).
    pub fn claim_stage(&mut self, flow: &FlowKey) -> Option<u8> {
        let entry = self.inflight.get(flow, 0).ok()?;
        self.inflight.remove(flow).ok()?;
        Some(entry.stage)
    }

    /// Writes HTTP request template `id`.
    pub fn set_http_req(&mut self, id: u32, req: &HttpReq) -> Result<(), KernelError> {
        self.http_reqs.insert(id, req, 0).map_err(map_err("PROBE_HTTP_REQS"))
    }

    /// Deletes HTTP request template `id`.
    pub fn remove_http_req(&mut self, id: u32) -> Result<(), KernelError> {
        self.http_reqs.remove(&id).map_err(map_err("PROBE_HTTP_REQS"))
    }

    /// Records a probe that userspace sends itself (the raw-socket path).
    pub fn track(&mut self, flow: &FlowKey, entry: Inflight) -> Result<(), KernelError> {
        self.inflight.insert(flow, entry, 0).map_err(map_err("PROBE_INFLIGHT"))
    }

    /// Records how a tunnelled probe that userspace sends itself reaches its backend, for what
    /// probe_rx sends on its flow (the generator records its own).
    pub fn keep_road(&mut self, flow: &FlowKey, road: Road) -> Result<(), KernelError> {
        self.roads.insert(flow, road, 0).map_err(map_err("PROBE_ROADS"))
    }

    /// Whether a probe of `flow` is in flight.
    pub fn in_flight(&self, flow: &FlowKey) -> bool {
        self.inflight.get(flow, 0).is_ok()
    }

    /// How many roads the kernel holds (a walk of the map: for snapshots, not the hot path).
    pub fn roads(&self) -> usize {
        self.roads.keys().filter(Result::is_ok).count()
    }

    /// Forgets a tunnelled probe's road once the probe has ended (a missing entry is fine:
    /// the generator could not record it, or a later probe of the flow took its place).
    pub fn forget_road(&mut self, flow: &FlowKey) {
        let _ = self.roads.remove(flow);
    }

    /// Drains every pending event into `out`.
    pub fn drain_events(&mut self, out: &mut Vec<ProbeEvent>) {
        while let Some(item) = self.events.next() {
            if item.len() >= std::mem::size_of::<ProbeEvent>() {
                // SAFETY: the kernel writes whole ProbeEvent records; read_unaligned copes
                // with the ring buffer's 8-byte record alignment either way.
                out.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<ProbeEvent>()) });
            }
        }
    }

    /// The ring buffer's fd, to poll for readiness.
    pub fn events_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    pub fn rx_counters(&self) -> Result<RxCounters, KernelError> {
        let mut total = RxCounters::default();
        for c in self
            .rx_counters
            .get(&0, 0)
            .map_err(map_err("PROBE_RX_COUNTERS"))?
            .iter()
        {
            total.accumulate(c);
        }
        Ok(total)
    }

    pub fn tx_counters(&self) -> Result<TxCounters, KernelError> {
        let mut total = TxCounters::default();
        for c in self
            .tx_counters
            .get(&0, 0)
            .map_err(map_err("PROBE_TX_COUNTERS"))?
            .iter()
        {
            total.accumulate(c);
        }
        total.no_job = total.no_job.saturating_sub(self.checks_run);
        Ok(total)
    }
}

const XDP_PASS: u32 = 2;

/// Loads probe_rx_tc and attaches it at tcx ingress of each interface, first in the chain:
/// a load balancer's own tcx program may end the chain (TCX_PASS) for packets it does not
/// want, and replies to probes must reach the matcher. probe_rx_tc itself passes with
/// TCX_NEXT, so the programs after it see all it does not consume. The links belong to the
/// program: they go when the `Ebpf` is dropped, and no other program's link is touched.
fn attach_tcx<'a>(ebpf: &mut Ebpf, ifaces: impl Iterator<Item = &'a String>) -> Result<(), KernelError> {
    let tc: &mut SchedClassifier = ebpf
        .program_mut(RX_TC)
        .ok_or(KernelError::MissingProgram { name: RX_TC })?
        .try_into()
        .map_err(|source| KernelError::WrongProgramType { name: RX_TC, source })?;
    tc.load()
        .map_err(|source| KernelError::Verifier { name: RX_TC, source })?;
    for iface in ifaces {
        tc.attach_with_options(
            iface,
            TcAttachType::Ingress,
            TcAttachOptions::TcxOrder(LinkOrder::first()),
        )
        .map_err(|source| tcx_attach_error(iface, source))?;
        log::info!("probe_rx_tc on {iface}, first at tcx ingress");
    }
    Ok(())
}

/// A failed tcx attach, with the likely reason when the kernel predates tcx (6.6). Decided on
/// the failure, not before: distribution kernels carry tcx under older version numbers.
fn tcx_attach_error(iface: &str, source: aya::programs::ProgramError) -> KernelError {
    use aya::util::KernelVersion;
    match KernelVersion::current() {
        Ok(v) if v < KernelVersion::new(6, 6, 0) => KernelError::TcxUnsupported {
            iface: iface.to_string(),
            version: v,
            source,
        },
        _ => KernelError::Attach {
            name: RX_TC,
            iface: iface.to_string(),
            source,
        },
    }
}

/// The kernel's `struct xdp_md`, the context handed to the generator.
#[repr(C)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

impl XdpMd {
    fn bytes(&self) -> &[u8] {
        // SAFETY: six u32 fields, repr(C), no padding: all 24 bytes are initialised.
        unsafe { std::slice::from_raw_parts(std::ptr::from_ref(self).cast::<u8>(), std::mem::size_of::<Self>()) }
    }
}

/// PROBE_JOBS mapped into our address space (the map is BPF_F_MMAPABLE).
struct JobsMmap(MappedArray<ProbeJob>);

impl JobsMmap {
    fn new(map: MapData) -> Result<Self, KernelError> {
        MappedArray::new(map, MAX_JOBS, "PROBE_JOBS").map(Self)
    }

    fn write(&mut self, jobs: &[ProbeJob]) {
        assert!(jobs.len() <= self.0.entries());
        let to = self.0.entry(0).expect("PROBE_JOBS has entries");
        // SAFETY: the mapping holds that many records (checked above) and the kernel reads it
        // only during the test run that follows, on this thread.
        unsafe { std::ptr::copy_nonoverlapping(jobs.as_ptr(), to, jobs.len()) };
    }

    /// Reads back what the generator wrote into the jobs (the sources it picked).
    fn read(&self, jobs: &mut [ProbeJob]) {
        assert!(jobs.len() <= self.0.entries());
        let from = self.0.entry(0).expect("PROBE_JOBS has entries");
        // SAFETY: as in write(); the test run that wrote them has returned.
        unsafe { std::ptr::copy_nonoverlapping(from, jobs.as_mut_ptr(), jobs.len()) };
    }
}
