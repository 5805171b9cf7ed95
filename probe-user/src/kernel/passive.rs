//! The passive observers' kernel side (`probe_common::passive` has the model): passive_out at
//! tcx egress and passive_in at tcx ingress of each interface toward the backends, the
//! backends they watch, and their counters, read through a shared mapping. No policy here:
//! `daemon::runner::passive` decides what the counts mean.
use aya::{
    maps::{HashMap, MapData, MapError},
    programs::{tc::TcAttachOptions, LinkOrder, SchedClassifier, TcAttachType},
    Ebpf, EbpfLoader,
};
use probe_common::passive::{BackendKey, BackendRule, PassiveStats, MAX_PASSIVE_BACKENDS};

use super::{if_index, mmap::MappedArray, KernelError, PASSIVE_OBJECT};

const OUT: &str = "passive_out";
const IN: &str = "passive_in";

fn map_err(name: &'static str) -> impl Fn(MapError) -> KernelError {
    move |source| KernelError::Map { name, source }
}

/// The observers attached, with handles on their maps. Dropping it detaches them (the links
/// belong to the programs) and frees the maps.
pub struct PassiveKernel {
    ebpf: Ebpf,
    backends: HashMap<MapData, BackendKey, BackendRule>,
    stats: MappedArray<PassiveStats>,
    /// The interfaces watched, by name and the index they had then.
    attached: Vec<(String, u32)>,
}

impl PassiveKernel {
    /// Loads the observers with room for `flows` handshakes in flight and attaches them to
    /// each of `ifaces`, first in each tcx chain: they pass every packet on (TCX_NEXT), and a
    /// program after them that ends the chain must not hide packets from them.
    pub fn load(ifaces: &[String], flows: u32) -> Result<Self, KernelError> {
        let indexes = ifaces.iter().map(|i| if_index(i)).collect::<Result<Vec<u32>, _>>()?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("PASSIVE_FLOWS", flows)
            .load(PASSIVE_OBJECT)
            .map_err(KernelError::Load)?;
        crate::alloc::release_freed();
        for (name, hook) in [(OUT, TcAttachType::Egress), (IN, TcAttachType::Ingress)] {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(name)
                .ok_or(KernelError::MissingProgram { name })?
                .try_into()
                .map_err(|source| KernelError::WrongProgramType { name, source })?;
            prog.load().map_err(|source| KernelError::Verifier { name, source })?;
            for iface in ifaces {
                prog.attach_with_options(iface, hook, TcAttachOptions::TcxOrder(LinkOrder::first()))
                    .map_err(|source| KernelError::Attach {
                        name,
                        iface: iface.clone(),
                        source,
                    })?;
            }
        }
        log::info!("passive observers on {}, at tcx egress and ingress", ifaces.join(", "));
        let backends = HashMap::try_from(ebpf.take_map("PASSIVE_BACKENDS").ok_or(KernelError::MissingMap {
            name: "PASSIVE_BACKENDS",
        })?)
        .map_err(map_err("PASSIVE_BACKENDS"))?;
        let aya::maps::Map::Array(stats) = ebpf
            .take_map("PASSIVE_STATS")
            .ok_or(KernelError::MissingMap { name: "PASSIVE_STATS" })?
        else {
            return Err(KernelError::MissingMap { name: "PASSIVE_STATS" });
        };
        let stats = MappedArray::new(stats, MAX_PASSIVE_BACKENDS, "PASSIVE_STATS")?;
        Ok(Self {
            ebpf,
            backends,
            stats,
            attached: ifaces.iter().cloned().zip(indexes).collect(),
        })
    }

    /// The interfaces watched, by name.
    pub fn interfaces(&self) -> impl Iterator<Item = &str> {
        self.attached.iter().map(|(name, _)| name.as_str())
    }

    /// The first interface watched that is gone (deleted, or replaced by one of the same name
    /// without the observers).
    pub fn lost_interface(&self) -> Option<&str> {
        self.attached
            .iter()
            .find(|(name, index)| if_index(name).ok() != Some(*index))
            .map(|(name, _)| name.as_str())
    }

    /// Starts or goes on watching `backend` under `rule`. A slot given to a new backend is
    /// zeroed first (`zero`), by the caller.
    pub fn watch(&mut self, backend: &BackendKey, rule: BackendRule) -> Result<(), KernelError> {
        self.backends
            .insert(backend, rule, 0)
            .map_err(map_err("PASSIVE_BACKENDS"))
    }

    /// Stops watching `backend` (gone already is fine).
    pub fn unwatch(&mut self, backend: &BackendKey) {
        let _ = self.backends.remove(backend);
    }

    /// Slot `id`'s counters as they are now: each field read once, whole (the kernel writes
    /// them with aligned 8-byte atomic adds and stores); it may be adding meanwhile, so two
    /// fields may be a segment apart.
    pub fn read(&self, id: u32) -> PassiveStats {
        let Some(p) = self.stats.entry(id as usize) else {
            return PassiveStats::default();
        };
        // SAFETY: `p` is an entry of the live mapping; every field is an aligned u64, read
        // with one volatile load each.
        unsafe {
            let f = |field: *const u64| std::ptr::read_volatile(field);
            PassiveStats {
                started: f(&raw const (*p).started),
                completed: f(&raw const (*p).completed),
                refused: f(&raw const (*p).refused),
                unreachable: f(&raw const (*p).unreachable),
                timed_out: f(&raw const (*p).timed_out),
                rtt_sum_ns: f(&raw const (*p).rtt_sum_ns),
                consecutive: f(&raw const (*p).consecutive),
                peak: f(&raw const (*p).peak),
                streak_first_ns: f(&raw const (*p).streak_first_ns),
                last_fail_ns: f(&raw const (*p).last_fail_ns),
                peak_first_ns: f(&raw const (*p).peak_first_ns),
            }
        }
    }

    /// Zeroes slot `id`, for a backend that takes it over.
    pub fn zero(&self, id: u32) {
        if let Some(p) = self.stats.entry(id as usize) {
            // SAFETY: as in read; no backend is watched with this slot while it is zeroed.
            unsafe { std::ptr::write_volatile(p, PassiveStats::default()) };
        }
    }

    /// Zeroes slot `id`'s `peak`, read: the next read's peak is the longest run since now.
    /// A run the kernel extends between the read and this store starts the next peak over
    /// (its current run, `consecutive`, is not touched).
    pub fn take_peak(&self, id: u32) {
        if let Some(p) = self.stats.entry(id as usize) {
            // SAFETY: as in read: an aligned u64 store into the live mapping.
            unsafe { std::ptr::write_volatile(&raw mut (*p).peak, 0) };
        }
    }

    /// The observers' programs, for tests that look at them (`bpftool prog`).
    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }
}
