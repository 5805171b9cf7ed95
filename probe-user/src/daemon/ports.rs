//! The runner's side effects behind small traits (katran's BaseBpfAdapter pattern): the L4
//! engine and the clock. Production uses the kernel engine and CLOCK_MONOTONIC; the runner's
//! unit tests use `fake::FakeL4` and `fake::FakeClock`, so build, apply, results, admin
//! changes, reload and restart are tested without root on a virtual clock.
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use tokio::sync::mpsc::UnboundedReceiver;

use super::DaemonError;
use crate::{
    config::Config,
    engine::{EngineConfig, EngineError, L4Engine, L4Request, L4Result},
};

/// Where L4 probes go.
pub trait L4Port: Send + Sync {
    /// Queues a batch of probes; each comes back as one `L4Result` with its token.
    fn submit(&self, batch: Vec<L4Request>) -> Result<(), EngineError>;

    /// The kernel engine behind the port, for its counters in a metrics scrape.
    fn kernel(&self) -> Option<Arc<L4Engine>> {
        None
    }

    /// Whether plain HTTP probes can run in the kernel behind this port, or why not.
    fn kernel_http(&self) -> Result<(), crate::engine::NoXdpTransmit> {
        Ok(())
    }
}

/// The kernel engine as a port, with the probe ports reserved for as long as it runs.
struct KernelL4 {
    engine: Arc<L4Engine>,
    /// Held, not read: dropping it gives the ports back.
    _reserved: Option<crate::kernel::ports::Reservation>,
}

impl L4Port for KernelL4 {
    fn submit(&self, batch: Vec<L4Request>) -> Result<(), EngineError> {
        self.engine.submit(batch)
    }

    fn kernel(&self) -> Option<Arc<L4Engine>> {
        Some(self.engine.clone())
    }

    fn kernel_http(&self) -> Result<(), crate::engine::NoXdpTransmit> {
        self.engine.kernel_http()
    }
}

/// A started L4 port and the results it sends back.
pub type StartedL4 = (Arc<dyn L4Port>, UnboundedReceiver<L4Result>);

/// Starts the L4 port for a configuration; `first` is the first L4 target (its route names the
/// interface when the config names none).
pub type L4Starter = Box<dyn FnMut(&Config, SocketAddr) -> Result<StartedL4, DaemonError> + Send>;

/// The runner's clocks: monotonic nanoseconds for schedules and windows, Unix milliseconds
/// for what people read.
pub trait Clock: Send {
    fn mono_ns(&self) -> u64;
    fn unix_ms(&self) -> u64;

    /// The Unix time of a monotonic instant in the past.
    fn unix_ms_at(&self, mono: u64) -> u64 {
        let ago_ms = self.mono_ns().saturating_sub(mono) / 1_000_000;
        self.unix_ms().saturating_sub(ago_ms)
    }
}

/// CLOCK_MONOTONIC and the system's wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn mono_ns(&self) -> u64 {
        crate::clock::mono_ns()
    }

    fn unix_ms(&self) -> u64 {
        crate::clock::unix_ms()
    }
}

/// Everything the runner drives that is not plain computation.
pub struct Ports {
    pub clock: Box<dyn Clock>,
    pub start_l4: L4Starter,
}

impl Ports {
    /// The kernel engine and the system clock.
    pub fn system() -> Self {
        Ports {
            clock: Box::new(SystemClock),
            start_l4: Box::new(start_kernel_engine),
        }
    }
}

/// Starts the kernel L4 engine on the configured interfaces, or on the one the route to
/// `first` leaves by.
fn start_kernel_engine(config: &Config, first: SocketAddr) -> Result<StartedL4, DaemonError> {
    let iface = crate::engine::source::probe_iface(&config.source.interfaces, first.ip())
        .map_err(|_| DaemonError::NoInterface { target: first })?;
    let mut ec = EngineConfig::new(&iface, &config.daemon.pin_dir);
    ec.more_ifaces = config.source.interfaces.iter().skip(1).cloned().collect();
    ec.source_v4 = config.source.ipv4().find_map(|a| match a {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    });
    ec.source_v6 = config.source.ipv6().find_map(|a| match a {
        IpAddr::V6(a) => Some(a),
        IpAddr::V4(_) => None,
    });
    ec.mode = config.source.xdp_mode;
    ec.hook = config.source.hook;
    let (first_port, last_port) = (config.source.ports.first, config.source.ports.last);
    ec.sport_min = first_port;
    ec.sport_max = last_port;
    // The kernel must never pick one of the probe ports for a connection of its own: a reply
    // to it would be taken for a probe's (and eaten in XDP).
    match crate::kernel::ports::local_port_range() {
        Ok((lo, hi)) if lo <= last_port && first_port <= hi => {
            return Err(DaemonError::PortsOverlap {
                probes: (first_port, last_port),
                kernel: (lo, hi),
            });
        }
        Ok(_) => {}
        Err(e) => log::warn!("cannot read the kernel's ephemeral port range: {e}"),
    }
    let reservation = match crate::kernel::ports::Reservation::take(first_port, last_port) {
        Ok(r) => Some(r),
        Err(e) => {
            log::warn!("cannot reserve the probe ports {first_port}-{last_port} in ip_local_reserved_ports: {e}");
            None
        }
    };
    let (engine, rx) = L4Engine::start(ec).map_err(|source| DaemonError::Engine {
        iface: iface.clone(),
        source: Box::new(source),
    })?;
    log::info!(
        "L4 engine on {iface}: probe_rx at {}, sending via {} ({})",
        engine.rx_where(),
        engine.tx_path(),
        engine.tx_path_reason()
    );
    let port = KernelL4 {
        engine: Arc::new(engine),
        _reserved: reservation,
    };
    Ok((Arc::new(port), rx))
}

/// Test doubles for the ports.
#[cfg(test)]
pub mod fake {
    use std::sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    };

    use tokio::sync::mpsc;

    use super::*;

    /// Records every batch; the test answers probes itself (through the runner's result path).
    #[derive(Default)]
    pub struct FakeL4 {
        pub sent: Mutex<Vec<L4Request>>,
        pub starts: AtomicU64,
    }

    impl FakeL4 {
        /// Takes what was submitted since the last call.
        pub fn take(&self) -> Vec<L4Request> {
            std::mem::take(&mut *self.sent.lock().unwrap())
        }
    }

    impl L4Port for FakeL4 {
        fn submit(&self, batch: Vec<L4Request>) -> Result<(), EngineError> {
            self.sent.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    /// A starter that hands out `l4` (and counts starts); results are fed to the runner directly.
    pub fn starter(l4: Arc<FakeL4>) -> L4Starter {
        Box::new(move |_, _| {
            l4.starts.fetch_add(1, Ordering::Relaxed);
            let (_tx, rx) = mpsc::unbounded_channel();
            Ok((l4.clone() as Arc<dyn L4Port>, rx))
        })
    }

    /// A clock that moves only when told; Unix time follows it from a fixed epoch.
    #[derive(Clone, Default)]
    pub struct FakeClock(pub Arc<AtomicU64>);

    /// The Unix time (ms) at monotonic zero.
    pub const EPOCH_MS: u64 = 1_800_000_000_000;

    impl FakeClock {
        pub fn set_ns(&self, ns: u64) {
            self.0.store(ns, Ordering::Relaxed);
        }

        pub fn advance_ms(&self, ms: u64) {
            self.0.fetch_add(ms * 1_000_000, Ordering::Relaxed);
        }

        pub fn now(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    impl Clock for FakeClock {
        fn mono_ns(&self) -> u64 {
            self.now()
        }

        fn unix_ms(&self) -> u64 {
            EPOCH_MS + self.now() / 1_000_000
        }
    }
}
