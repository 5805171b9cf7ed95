//! The bpf sink: a pinned slot table for an XDP or TC load balancer on the node, in the layout
//! and with the update protocol of `probe_common::slots` (two halves, a control entry that
//! names the live one). probed creates the two arrays under `<pin_dir>/sinks/` the first time
//! and leaves them there: a restart reopens them, and stopping leaves them holding the last
//! eligible set (fail-static) so the load balancer keeps forwarding.
pub mod config;
use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aya::maps::{Array, Map, MapData};
use probe_common::slots::{SlotBackend, SlotControl, SLOT_ABI_VERSION, SLOT_MIN_FLIP_NS};

use self::config::BpfSink as BpfConfig;
use super::{desired_slots, Sink, SinkError, SinkFault, SyncReport};
use crate::sinks::model::ProfileModel;

pub struct BpfSink {
    cfg: BpfConfig,
    paths: (PathBuf, PathBuf),
    table: Array<MapData, SlotBackend>,
    ctl: Array<MapData, SlotControl>,
    /// The earliest the next flip may happen (`SLOT_MIN_FLIP_NS` after the last).
    next_flip: Instant,
    /// The control entry and both halves as last read or written; None when unknown (start,
    /// or after a failure), which makes the next sync read them. A sync then writes only the
    /// entries of the idle half that differ from what it should hold: a few bpf() calls for
    /// one backend changing, instead of one per slot.
    known: Option<(SlotControl, [Vec<Option<SocketAddr>>; 2])>,
}

type Half = Vec<Option<SocketAddr>>;

/// The pins of sink map `name` under `pin_dir`: the table and its control entry.
pub fn pin_paths(pin_dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let dir = pin_dir.join("sinks");
    (dir.join(name), dir.join(format!("{name}_ctl")))
}

impl BpfSink {
    /// Opens the pinned table, or creates and pins it (empty, generation 0).
    pub fn open(cfg: &BpfConfig, pin_dir: &Path) -> Result<BpfSink, SinkError> {
        let paths = pin_paths(pin_dir, &cfg.map);
        if !paths.0.exists() {
            create(&paths, cfg.slots)?;
        }
        let table: Array<MapData, SlotBackend> = open_array(&paths.0)?;
        let ctl: Array<MapData, SlotControl> = open_array(&paths.1)?;
        let mut sink = BpfSink {
            cfg: cfg.clone(),
            paths,
            table,
            ctl,
            next_flip: Instant::now(),
            known: None,
        };
        sink.check()?;
        Ok(sink)
    }

    fn control(&self) -> Result<SlotControl, SinkError> {
        self.ctl
            .get(&0, 0)
            .map_err(|e| SinkError::new(SinkFault::Data, format!("read {}", self.paths.1.display())).because(e))
    }

    /// One half (0 or 1), as backends.
    fn read(&self, ctl: &SlotControl, half: u32) -> Result<Half, SinkError> {
        let base = half * ctl.slots;
        (0..ctl.slots)
            .map(|i| {
                self.table
                    .get(&(base + i), 0)
                    .map(|b| backend(&b))
                    .map_err(|e| SinkError::new(SinkFault::Data, format!("read {}", self.paths.0.display())).because(e))
            })
            .collect()
    }

    fn want(&self, model: &ProfileModel, held: &[Option<SocketAddr>]) -> Vec<Option<SocketAddr>> {
        let key = |s: &crate::changes::EndpointState| SocketAddr::new(s.address, s.port);
        desired_slots(model, self.cfg.slots, |_| true, key, held)
            .into_iter()
            .map(|s| s.map(key))
            .collect()
    }

    /// The control entry and both halves, from the cache or from the kernel.
    fn known(&mut self) -> Result<(SlotControl, [Half; 2]), SinkError> {
        if let Some(k) = self.known.take() {
            return Ok(k);
        }
        let ctl = self.control()?;
        let halves = [self.read(&ctl, 0)?, self.read(&ctl, 1)?];
        Ok((ctl, halves))
    }

    /// Writes `want` into the idle half (the entries that differ from what it holds), then
    /// makes it the live one. Returns the new control entry.
    fn publish(
        &mut self,
        ctl: SlotControl,
        idle_holds: &[Option<SocketAddr>],
        want: &[Option<SocketAddr>],
    ) -> Result<SlotControl, SinkError> {
        let idle = 1 - ctl.active;
        let base = idle * ctl.slots;
        for (i, b) in want.iter().enumerate() {
            if idle_holds.get(i) == Some(b) {
                continue;
            }
            let entry = b.map(entry).unwrap_or_default();
            self.table
                .set(base + i as u32, entry, 0)
                .map_err(|e| SinkError::new(SinkFault::Write, self.paths.0.display().to_string()).because(e))?;
        }
        // The half just retired must stay untouched for a while: readers may be in it.
        let wait = self.next_flip.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let next = SlotControl {
            active: idle,
            generation: ctl.generation + 1,
            ..ctl
        };
        self.ctl
            .set(0, next, 0)
            .map_err(|e| SinkError::new(SinkFault::Write, self.paths.1.display().to_string()).because(e))?;
        self.next_flip = Instant::now() + Duration::from_nanos(SLOT_MIN_FLIP_NS);
        Ok(next)
    }
}

impl Sink for BpfSink {
    fn describe(&self) -> String {
        format!("bpf slot table {} ({} slots)", self.paths.0.display(), self.cfg.slots)
    }

    fn check(&mut self) -> Result<(), SinkError> {
        let ctl = self.control()?;
        if ctl.version != SLOT_ABI_VERSION || ctl.slots != self.cfg.slots || self.table.len() != 2 * self.cfg.slots {
            return Err(SinkError::new(
                SinkFault::WrongType,
                format!(
                "{} holds ABI version {} with {} slots in {} entries; this sink writes version {SLOT_ABI_VERSION} with \
                 {} slots: remove the two pins (rm {} {}) or change slots",
                self.paths.0.display(),
                ctl.version,
                ctl.slots,
                self.table.len(),
                self.cfg.slots,
                self.paths.0.display(),
                self.paths.1.display()
            ),
            ));
        }
        Ok(())
    }

    fn sync(&mut self, model: &ProfileModel) -> Result<SyncReport, SinkError> {
        let (ctl, mut halves) = self.known()?;
        let live = ctl.active as usize;
        let want = self.want(model, &halves[live]);
        let written = halves[live].iter().zip(&want).filter(|(a, b)| a != b).count();
        let ctl = if written > 0 {
            let next = self.publish(ctl, &halves[1 - live], &want)?;
            halves[1 - live] = want;
            next
        } else {
            ctl
        };
        let entries = halves[ctl.active as usize].iter().flatten().count();
        self.known = Some((ctl, halves));
        Ok(SyncReport {
            written,
            entries,
            ..SyncReport::default()
        })
    }

    fn verify(&mut self, model: &ProfileModel) -> Result<bool, SinkError> {
        // A fresh read: someone else may have written the table.
        self.known = None;
        let (ctl, halves) = self.known()?;
        let same = self.want(model, &halves[ctl.active as usize]) == halves[ctl.active as usize];
        self.known = Some((ctl, halves));
        Ok(same)
    }

    fn clear(&mut self) -> Result<(), SinkError> {
        let (ctl, halves) = self.known()?;
        self.publish(
            ctl,
            &halves[1 - ctl.active as usize],
            &vec![None; self.cfg.slots as usize],
        )
        .map(drop)
    }
}

fn entry(b: SocketAddr) -> SlotBackend {
    match b.ip() {
        IpAddr::V4(a) => SlotBackend::v4(a.octets(), b.port()),
        IpAddr::V6(a) => SlotBackend::v6(a.octets(), b.port()),
    }
}

fn backend(b: &SlotBackend) -> Option<SocketAddr> {
    if !b.is_valid() {
        return None;
    }
    let port = u16::from_be(b.port_be);
    match b.family {
        probe_common::slots::SLOT_FAMILY_V4 => {
            let a: [u8; 4] = b.addr[..4].try_into().expect("four bytes");
            Some(SocketAddr::new(IpAddr::from(a), port))
        }
        probe_common::slots::SLOT_FAMILY_V6 => Some(SocketAddr::new(IpAddr::from(b.addr), port)),
        _ => None,
    }
}

/// A set-up step `what` that failed with `e`.
fn setup(what: impl Into<String>, e: impl std::error::Error + Send + Sync + 'static) -> SinkError {
    SinkError::new(SinkFault::Setup, what).because(e)
}

/// Creates the two arrays, writes the control entry and pins both.
fn create((table_path, ctl_path): &(PathBuf, PathBuf), slots: u32) -> Result<(), SinkError> {
    if let Some(dir) = table_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| setup(format!("create {}", dir.display()), e))?;
    }
    let table = Array::<MapData, SlotBackend>::create(2 * slots, 0).map_err(|e| setup("create the slot array", e))?;
    let mut ctl = Array::<MapData, SlotControl>::create(1, 0).map_err(|e| setup("create the control array", e))?;
    let first = SlotControl {
        version: SLOT_ABI_VERSION,
        slots,
        ..SlotControl::default()
    };
    ctl.set(0, first, 0).map_err(|e| setup("write the control entry", e))?;
    table
        .pin(table_path)
        .map_err(|e| setup(format!("pin {}", table_path.display()), e))?;
    ctl.pin(ctl_path).map_err(|e| {
        let _ = std::fs::remove_file(table_path);
        setup(format!("pin {}", ctl_path.display()), e)
    })
}

fn open_array<V: aya::Pod>(path: &Path) -> Result<Array<MapData, V>, SinkError> {
    let missing = || SinkError::new(SinkFault::Missing, path.display().to_string());
    let data = MapData::from_pin(path).map_err(|e| missing().because(e))?;
    let map = Map::from_map_data(data).map_err(|e| missing().because(e))?;
    Array::try_from(map).map_err(|e| {
        SinkError::new(
            SinkFault::WrongType,
            format!(
                "{} is not an array of {}-byte values: {e}",
                path.display(),
                std::mem::size_of::<V>()
            ),
        )
    })
}
