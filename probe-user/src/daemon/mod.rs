//! The daemon's core: turns a `Config` into running health checks and publishes every state
//! change. `Daemon::start` spawns the runner, then the consumers of its change stream
//! (`consumers/`: events file, sinks, DNS server), which `Control` holds; everything talks to
//! the runner through `Control`, so the runner owns all probing state and needs no locks. The
//! API (`crate::api`) is started beside it by the binary and serves `Control`; it is not part
//! of the core.
//!
//! # Threads and runtimes
//!
//! | thread | runs | why apart |
//! |---|---|---|
//! | caller's runtime (`probed run`: current-thread) | the API server, signal handlers | a status of 100k endpoints is megabytes of JSON: it must never delay a probe |
//! | `probed-runner` (current-thread runtime) | the runner loop: scheduling, L4 sends, results, verdicts | owns every piece of state, so no locks |
//! | `probed-l7` (multi-thread runtime, one worker per core) | HTTP(S) and UDP request/response probes as tasks, at most 256 HTTP in flight | TLS and parsing use every core and never delay the runner |
//! | `probed-l4` (`engine/`) | the kernel engine: batches to the generator, ring-buffer reads, timeouts | blocking bpf() calls and a 1 ms reply tick |
//! | `probed-events` | the events file, the change stream's first subscriber | a slow disk or a blocked stdout must not hold up probing |
//! | `probed-state` | the state file (sort, encode, fsync, rename) | an fsync can take tens of ms |
//! | `probed-dns-udp` (one per `[dns].listen`) | DNS queries over UDP in batches (recvmmsg/sendmmsg), answered from the zone | a query flood must never delay a probe |
//! | `probed-dns` (current-thread runtime) | DNS over TCP (`dns/tcp.rs`) and the task that keeps the zone in step with the change stream | as above |
//! | `probed-sink-NAME` | one `[[sink]]`: syncs its structure (nft map or set, BPF slot table, HAProxy backend, a program's stdin) with its profile's eligible set | a failing data path must never hold up probing or another sink |
//! | `probed-cluster` (`[cluster]`) | the node's gossip (chitchat over authenticated UDP) | another node's silence must never hold up probing |
//!
//! # Data flow
//!
//! ```text
//! config --> table::plan --> runner/apply (Table::swap_in) --> scheduler --> runner/fire --> L4 port (kernel engine) / tasks (HTTP, UDP)
//!                                                                                              |
//!     runner/results <-------------------------------------------------------------------------+
//!          | Table::record (table/restatus.rs): last result, lateness, Tracker::observe -> verdict
//!          v
//!     Table::restatus: endpoint status, profile counts, fail-open, nested --> Changed
//!          |
//!     runner/publish --> crate::changes::Bus --> consumers/ (joined through Control): events file, sinks, DNS; API feeds
//!     runner/rtts --> watch channel --> DNS server (performance routing)
//!
//!     API requests --> Control --> requests/* (views read the table; admin changes go through Table's methods)
//!     reload: Control: consumers prepare --> Command::Reload (runner: plan, apply, joins) --> consumers refollow
//!     cluster gossip <--> runner/cluster (own verdicts out, others' votes in -> Table::set_cluster_health)
//! ```

pub mod checks;
mod consumers;
pub mod control;
mod lock;
mod metrics;
pub mod ports;
pub mod protocol;
mod requests;
mod runner;
pub mod state;
mod table;
pub mod views;

use std::{path::PathBuf, time::Duration};

use tokio::sync::{mpsc, oneshot};

pub use consumers::events;
pub use control::Control;
pub use protocol::{RequestError, SelectQuery};
pub use views::{EndpointView, ProfileView, ReloadReport, SelectView};

use crate::{config::Config, engine::EngineError};

/// How much lower the file writers' threads (state file, events file) run than the probing
/// threads. They work in batches and a few milliseconds of delay costs them nothing, while
/// every millisecond the L4 engine or the runner waits for a core is lateness: at a million
/// targets the state file's serialisation (a second of a core every ten) competed with the
/// engine's thread for the machine's two cores.
const WRITER_NICE: i32 = 10;

/// Lowers the calling thread's priority by `WRITER_NICE` from where it is (Linux keeps a nice
/// value per thread; it starts at the process's). A failure leaves it as it was: priority is
/// an optimisation, never a reason not to write.
fn lower_this_thread() {
    if let Err(e) = crate::kernel::process::lower_this_thread(WRITER_NICE) {
        log::debug!("cannot lower a writer thread's priority: {e}");
    }
}

/// Errors starting or running the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("start the L4 engine on {iface}")]
    Engine {
        iface: String,
        #[source]
        source: Box<EngineError>,
    },
    #[error("no interface to send TCP/UDP probes from: set source.interfaces (the route to {target} names none)")]
    NoInterface { target: std::net::SocketAddr },
    #[error("the configuration cannot be applied")]
    Build(#[from] table::BuildError),
    #[error(transparent)]
    GeoDb(#[from] crate::dns::regions::GeoDbError),
    #[error("{op}{}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Io {
        op: &'static str,
        path: Option<PathBuf>,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "source.ports {}-{} overlaps the kernel's ephemeral ports {}-{} (net.ipv4.ip_local_port_range): \
         move one of them, or a local connection's reply could be taken for a probe's",
        probes.0, probes.1, kernel.0, kernel.1
    )]
    PortsOverlap { probes: (u16, u16), kernel: (u16, u16) },
    #[error("another probed already uses {what} {}; give each daemon its own", path.display())]
    InUse { what: &'static str, path: PathBuf },
    #[error("the L4 engine stopped: no TCP or UDP check can get a result any more")]
    EngineStopped,
    #[error("sink {name}")]
    Sink {
        name: String,
        #[source]
        source: crate::sinks::SinkError,
    },
    #[error("start the DNS server")]
    Dns(#[source] crate::dns::DnsError),
    #[error("cluster.key_file {}", path.display())]
    ClusterKey {
        path: PathBuf,
        #[source]
        source: ClusterKeyError,
    },
    #[error("start the cluster's gossip")]
    Cluster(#[source] crate::cluster::node::NodeError),
    #[error("the daemon has stopped")]
    Stopped,
    #[error(transparent)]
    Journal(#[from] crate::fleet::journal::JournalError),
    #[error("the fleet journal {} holds endpoints of profile {profile:?} its rules refuse now; fix the profile or those endpoints (the API can remove them once the daemon runs with the old rules):\n{errors}", path.display())]
    FleetItems {
        path: PathBuf,
        profile: String,
        errors: crate::config::ConfigErrors,
    },
}

/// Fills the profiles of `config` whose endpoints the API owns from `fleet`, what the journal
/// at `path` holds: their generations.
fn admit_fleet(
    config: &mut Config,
    fleet: &crate::fleet::journal::Fleet,
    path: &std::path::Path,
) -> Result<Vec<(String, u64)>, DaemonError> {
    let mut generations = Vec::new();
    for p in config.profiles.iter_mut().filter(|p| p.endpoints_from.at_run_time()) {
        let Some(held) = fleet.get(&p.name) else {
            continue;
        };
        p.endpoints = crate::fleet::readmit(p, held.items.values()).map_err(|errors| DaemonError::FleetItems {
            path: path.to_path_buf(),
            profile: p.name.clone(),
            errors,
        })?;
        generations.push((p.name.clone(), held.generation));
    }
    Ok(generations)
}

/// Why the cluster's key file gave no key.
#[derive(Debug, thiserror::Error)]
pub enum ClusterKeyError {
    #[error(transparent)]
    File(#[from] crate::secret::SecretFileError),
    #[error("is {0}")]
    Short(#[from] crate::cluster::transport::ShortKey),
}

/// Why the runner is told to stop. Asked (SIGTERM, `Daemon::shutdown`): route sinks leave
/// their devices to the service manager's store, for a restart to take over without a
/// withdrawal. Failed (a start that could not finish, `Daemon::abort`, a daemon dropped): every
/// sink clears, and a route sink withdraws and takes its device out of the store, so that a
/// node that cannot check does not keep its VIP announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Asked,
    Failed,
}

/// Settings that do not come from the config file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Re-read on reload requests that carry no config (SIGHUP, `POST /v1/reload`).
    pub config_path: Option<PathBuf>,
}

/// A running daemon core: the runner on its thread.
pub struct Daemon {
    control: Control,
    stop: Option<oneshot::Sender<Stop>>,
    /// The runner's result, once it ends.
    done: oneshot::Receiver<Result<(), DaemonError>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    /// Starts the runner with the kernel engine; call it in the network namespace of the
    /// probe interface (the runner's thread inherits it, so probes leave from there).
    /// Nothing is left running when it fails.
    pub async fn start(config: Config, options: Options) -> Result<Daemon, DaemonError> {
        Self::start_with(config, options, ports::Ports::system())
    }

    /// Starts the runner with the given ports, then the consumers of its stream.
    pub fn start_with(mut config: Config, options: Options, ports: ports::Ports) -> Result<Daemon, DaemonError> {
        let fleet_path = crate::fleet::journal::fleet_path(&config.daemon.state_file);
        let has_api = config.profiles.iter().any(|p| p.endpoints_from.at_run_time());
        // Read once (the runner's lock on the state file is not held yet, so nothing is
        // written): its API profiles' endpoints now, the compact rewrite once the lock is held.
        // A journal that cannot be read matters only to a configuration with API profiles.
        let fleet = match crate::fleet::journal::read_file(&fleet_path) {
            Ok(fleet) => Some(fleet),
            Err(e) if !has_api => {
                log::warn!(
                    "{}; the fleet API's batches will not be kept across restarts",
                    crate::errors::chain(&e)
                );
                None
            }
            Err(e) => return Err(e.into()),
        };
        let generations = match &fleet {
            Some(f) => admit_fleet(&mut config, f, &fleet_path)?,
            None => Vec::new(),
        };
        let (tx, rx) = mpsc::channel(64);
        let config_path = options.config_path.as_deref().map(std::sync::Arc::from);
        let config = std::sync::Arc::new(config);
        let (stop, stop_rx) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let (built_tx, built) = std::sync::mpsc::sync_channel(1);
        let (go_tx, go) = std::sync::mpsc::sync_channel::<Vec<crate::changes::Join>>(1);
        let (joined_tx, joined) = std::sync::mpsc::sync_channel(1);
        // Reading the configuration left its transients on this thread, which allocates
        // little once the daemon runs: given back before the runner loads probe_rx and builds
        // its table, the start's two peaks, they do not come on top of either.
        crate::alloc::release_freed();
        let runner_config = config.clone();
        let thread = std::thread::Builder::new()
            .name("probed-runner".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(source) => {
                        let _ = built_tx.send(Err(DaemonError::Io {
                            op: "start the runner's runtime",
                            path: None,
                            source,
                        }));
                        return;
                    }
                };
                // The table is built on the thread that runs it: what it allocates belongs to
                // this thread's heap, whose freed pages the runner hands back as it goes
                // (`Runner::end_turn`); built by the caller, they stayed with a thread that
                // hardly allocates afterwards.
                let mut runner = match rt.block_on(async { runner::Runner::new(runner_config, ports) }) {
                    Ok(runner) => runner,
                    Err(e) => {
                        let _ = built_tx.send(Err(e));
                        return;
                    }
                };
                runner.start_fleet(&generations);
                let _ = built_tx.send(Ok(()));
                // The consumers join the first table before the loop publishes anything else;
                // without them (their start failed) the runner ends unrun.
                let Ok(joins) = go.recv() else {
                    return;
                };
                let _ = joined_tx.send((runner.join(joins), runner.watch_rtts()));
                let result = rt.block_on(runner.run(rx, stop_rx));
                let _ = done_tx.send(result);
            })
            .map_err(|source| DaemonError::Io {
                op: "spawn the runner thread",
                path: None,
                source,
            })?;
        match built.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            // Building the runner panicked: the caller sees the panic, as it did when it built it.
            Err(_) => match thread.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the runner thread reports before it ends"),
            },
        }
        // The state file's lock is the runner's now: the journal may be rewritten.
        let journal = match fleet
            .as_ref()
            .map(|f| crate::fleet::journal::Journal::start(&fleet_path, f))
        {
            None => None,
            Some(Ok(journal)) => Some(std::sync::Arc::new(std::sync::Mutex::new(journal))),
            Some(Err(e)) if !has_api => {
                log::warn!(
                    "{}; the fleet API's batches will not be kept across restarts",
                    crate::errors::chain(&e)
                );
                None
            }
            Some(Err(e)) => {
                drop(go_tx);
                let _ = thread.join();
                return Err(e.into());
            }
        };
        drop(fleet);
        let prepared = match consumers::Consumers::prepare_start(&config) {
            Ok(prepared) => prepared,
            Err(e) => {
                drop(go_tx);
                let _ = thread.join();
                return Err(e);
            }
        };
        let _ = go_tx.send(consumers::Consumers::start_joins(&prepared));
        let mut daemon = Daemon {
            control: Control {
                tx,
                config_path,
                consumers: std::sync::Arc::default(),
                journal,
                discovery: std::sync::Arc::default(),
            },
            stop: Some(stop),
            done,
            thread: Some(thread),
        };
        let Ok((joined, rtts)) = joined.recv() else {
            return Err(daemon.stop_now().err().unwrap_or(DaemonError::Stopped));
        };
        let runner = daemon.control.tx.clone();
        // The route sinks tell the cluster what they announce through the runner; a full
        // queue is waited for (a route change is rare, and the last one must not be lost).
        let announce: consumers::Announce = Box::new(move |all| {
            let _ = runner.blocking_send(protocol::Command::Routes(all));
        });
        match consumers::Consumers::start(&config, prepared, joined, (rtts, announce)) {
            Ok(started) => {
                *daemon.control.consumers.try_lock().expect("no one else holds it yet") = started;
                daemon.control.follow_discovery(&config);
                Ok(daemon)
            }
            Err(e) => {
                let _ = daemon.stop_now();
                Err(e)
            }
        }
    }

    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Waits until the runner ends by itself (it only does on an error); its consumers end
    /// with it.
    pub async fn wait(&mut self) -> Result<(), DaemonError> {
        let result = (&mut self.done).await.map_err(|_| DaemonError::Stopped)?;
        self.stop_consumers().await;
        result
    }

    /// Stops probing, saves the last known health, writes the queued events, detaches the
    /// programs and removes the pins; returns once all of that is done.
    pub async fn shutdown(self) -> Result<(), DaemonError> {
        self.end(Stop::Asked).await
    }

    /// Stops as `shutdown` does, but as a failure: the daemon cannot go on (its API did not
    /// start, say), so every sink clears and a route sink withdraws rather than leaving its
    /// device to the service manager.
    pub async fn abort(self) -> Result<(), DaemonError> {
        self.end(Stop::Failed).await
    }

    async fn end(mut self, why: Stop) -> Result<(), DaemonError> {
        // No batch of a discovery may come after the runner's last save.
        self.control.stop_discovery().await;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(why);
        }
        let result = match tokio::time::timeout(Duration::from_secs(10), &mut self.done).await {
            Ok(Ok(r)) => {
                if let Some(t) = self.thread.take() {
                    // It has sent its result and is returning: the join does not block long.
                    let _ = t.join();
                }
                r
            }
            // A runner that does not end is left to the process's exit, not waited for.
            Ok(Err(_)) | Err(_) => {
                drop(self.thread.take());
                Err(DaemonError::Stopped)
            }
        };
        self.stop_consumers().await;
        result
    }

    /// Ends the consumers, once the runner has ended their streams: each takes what is
    /// queued first. On a thread of the pool: joining theirs blocks.
    async fn stop_consumers(&self) {
        let mut consumers = std::mem::take(&mut *self.control.consumers.lock().await);
        let _ = tokio::task::spawn_blocking(move || consumers.stop()).await;
    }

    /// Stops the runner and waits for it, off any runtime (the start's failures, a drop).
    fn stop_now(&mut self) -> Result<(), DaemonError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Stop::Failed);
        }
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let _ = thread.join();
        self.done.try_recv().map_err(|_| DaemonError::Stopped)?
    }
}

/// A daemon dropped without `shutdown` (a test that failed, a caller's early return) still
/// stops: the runner first, then its consumers.
impl Drop for Daemon {
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        let running = self
            .control
            .discovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(d) = running {
            d.stop();
        }
        let _ = self.stop_now();
        if let Ok(mut consumers) = self.control.consumers.try_lock() {
            consumers.stop();
        }
    }
}
