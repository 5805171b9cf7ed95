//! The server's threads: one per UDP listener, answering batches of datagrams (recvmmsg and
//! sendmmsg: one system call each way for up to 32 queries), and one with hickory-server on the
//! TCP listeners and the task that keeps the zone in step with the change stream. Queries read
//! the zone under a read lock; a batch of changes takes the write lock once. The runner never
//! waits for these threads: a query flood costs CPU, never a probe's place in the schedule.
use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::sync::{mpsc, oneshot, watch};

use super::{
    shared::{Counters, Shared},
    tcp::Clients,
    zone::Zone,
};
use crate::changes::{Rtts, Subscription};

/// A UDP thread looks at its stop flag this often when no query comes.
const UDP_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("listen for DNS on {proto} {addr}")]
    Bind {
        proto: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("start the DNS server's thread")]
    Thread(#[source] std::io::Error),
}

enum Update {
    /// A new zone (after a reload) and the stream that follows its snapshot.
    Follow(Box<Zone>, Subscription),
}

/// The server's sockets, bound (so that a taken port stops the daemon's start before it
/// probes) and not yet answering.
pub struct Bound {
    listen: Vec<SocketAddr>,
    udp: Vec<std::net::UdpSocket>,
    tcp: Vec<std::net::TcpListener>,
}

/// The running server. Dropping it stops the thread.
pub struct DnsServer {
    shared: Arc<Shared>,
    listen: Vec<SocketAddr>,
    updates: mpsc::UnboundedSender<Update>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    udp_stop: Arc<AtomicBool>,
    udp_threads: Vec<std::thread::JoinHandle<()>>,
}

impl DnsServer {
    /// Binds UDP and TCP on every address (in the caller's network namespace; a failure leaves
    /// nothing bound).
    pub fn bind(listen: &[SocketAddr]) -> Result<Bound, DnsError> {
        let mut udp = Vec::new();
        let mut tcp = Vec::new();
        for &addr in listen {
            let bind_error = |proto| move |source| DnsError::Bind { proto, addr, source };
            let u = std::net::UdpSocket::bind(addr).map_err(bind_error("UDP"))?;
            u.set_nonblocking(true).map_err(bind_error("UDP"))?;
            let t = std::net::TcpListener::bind(addr).map_err(bind_error("TCP"))?;
            t.set_nonblocking(true).map_err(bind_error("TCP"))?;
            udp.push(u);
            tcp.push(t);
        }
        Ok(Bound {
            listen: listen.to_vec(),
            udp,
            tcp,
        })
    }

    /// Serves `zone` on `bound`, kept current by `changes` and, for performance routing, by
    /// the round-trip times `rtts` brings.
    pub fn start(
        bound: Bound,
        zone: Zone,
        changes: Subscription,
        rtts: watch::Receiver<Rtts>,
    ) -> Result<DnsServer, DnsError> {
        let Bound { listen, udp, tcp } = bound;
        let shared = Arc::new(Shared::new(zone));
        let (updates, updates_rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel();
        let udp_stop = Arc::new(AtomicBool::new(false));
        let mut udp_threads = Vec::new();
        for sock in udp {
            let (shared, stop) = (shared.clone(), udp_stop.clone());
            let thread = std::thread::Builder::new()
                .name("probed-dns-udp".into())
                .spawn(move || serve_udp(&shared, &sock, &stop));
            match thread {
                Ok(t) => udp_threads.push(t),
                Err(e) => {
                    udp_stop.store(true, Ordering::Relaxed);
                    for t in udp_threads {
                        let _ = t.join();
                    }
                    return Err(DnsError::Thread(e));
                }
            }
        }
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("probed-dns".into())
            .spawn(move || serve(thread_shared, tcp, changes, updates_rx, rtts, stop_rx));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                udp_stop.store(true, Ordering::Relaxed);
                for t in udp_threads {
                    let _ = t.join();
                }
                return Err(DnsError::Thread(e));
            }
        };
        warn_on_budget(shared.zone().tcp().max_clients);
        log::info!(
            "dns: answering for {} on {}",
            shared.zone().origin(),
            listen.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        );
        Ok(DnsServer {
            shared,
            listen,
            updates,
            stop: Some(stop),
            thread: Some(thread),
            udp_stop,
            udp_threads,
        })
    }

    /// Where it listens (a reload cannot change it).
    pub fn listen(&self) -> &[SocketAddr] {
        &self.listen
    }

    /// Answers from `zone` from now on, following `changes` (taken with its snapshot).
    pub fn follow(&self, zone: Zone, changes: Subscription) {
        let _ = self.updates.send(Update::Follow(Box::new(zone), changes));
    }

    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Stops answering and joins the threads.
    pub fn stop(&mut self) {
        self.udp_stop.store(true, Ordering::Relaxed);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for t in self.udp_threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Says so when DNS over TCP may hold more than a quarter of the process's descriptors: then
/// its clients could leave probes, sinks and the state file without any.
fn warn_on_budget(max_clients: u32) {
    let Some(limit) = crate::kernel::process::open_files_limit() else {
        return;
    };
    if u64::from(max_clients) * 4 > limit {
        log::warn!(
            "dns: [dns.tcp] max_clients = {max_clients} is more than a quarter of the descriptor limit \
             ({limit}): lower it or raise LimitNOFILE, or DNS clients can starve the checks"
        );
    }
}

/// One UDP listener: a batch of queries in, their answers out, until `stop`.
fn serve_udp(shared: &Shared, sock: &std::net::UdpSocket, stop: &AtomicBool) {
    use crate::kernel::mmsg::{send_batch, RecvBatch, BATCH};
    if let Err(e) = sock
        .set_nonblocking(false)
        .and_then(|()| sock.set_read_timeout(Some(UDP_POLL)))
    {
        log::error!("dns: UDP socket {:?}: {e}; it answers nothing", sock.local_addr());
        return;
    }
    let mut batch = RecvBatch::default();
    let mut out = Vec::with_capacity(BATCH);
    let mut state = super::wire::UdpState::default();
    let mut settings_of = u64::MAX;
    while !stop.load(Ordering::Relaxed) {
        let n = match batch.recv(sock) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!("dns: receiving on {:?}: {e}", sock.local_addr());
                std::thread::sleep(UDP_POLL);
                continue;
            }
        };
        out.clear();
        // A new zone may come with new limits (a reload).
        let generation = shared.generation();
        if generation != settings_of {
            settings_of = generation;
            let settings = shared.zone().rate_limit().clone();
            match (&mut state.limiter, settings.responses_per_second) {
                (_, 0) => state.limiter = None,
                (Some(l), _) => l.set(&settings),
                (None, _) => state.limiter = Some(super::rrl::RateLimiter::new(settings)),
            }
        }
        let now_ms = crate::clock::mono_ns() / 1_000_000;
        for i in 0..n {
            let (datagram, from) = batch.get(i);
            if let Some(from) = from {
                if let Some(answer) = super::wire::answer_udp(shared, &mut state, datagram, from, now_ms) {
                    out.push((answer, from));
                }
            }
        }
        match send_batch(sock, &out) {
            Ok(sent) if sent < out.len() => {
                let lost = (out.len() - sent) as u64;
                shared.counters.send_errors.fetch_add(lost, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => {
                log::debug!("dns: sending answers: {e}");
                shared
                    .counters
                    .send_errors
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

fn serve(
    shared: Arc<Shared>,
    tcp: Vec<std::net::TcpListener>,
    changes: Subscription,
    updates: mpsc::UnboundedReceiver<Update>,
    rtts: watch::Receiver<Rtts>,
    stop: oneshot::Receiver<()>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            log::error!("dns: cannot start the server's runtime: {e}; no DNS answers");
            return;
        }
    };
    // The zone follows the verdicts on a thread of its own: on the connections' runtime, a
    // pipelining client's task answers up to its budget per poll before the follower runs, and
    // verdicts would reach the answers later under TCP load (issue 46, L8).
    let (follow_stop, follow_stopped) = oneshot::channel::<()>();
    let follower = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("probed-dns-zone".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        log::error!("dns: cannot start the zone follower's runtime: {e}; answers stay as they are");
                        return;
                    }
                };
                rt.block_on(async move {
                    tokio::select! {
                        () = follow(shared, changes, updates, rtts) => {}
                        _ = follow_stopped => {}
                    }
                });
            })
    };
    if let Err(e) = &follower {
        log::error!("dns: cannot start the zone follower's thread: {e}; answers stay as they are");
    }
    rt.block_on(async move {
        let clients = Arc::new(Clients::default());
        for l in tcp {
            match tokio::net::TcpListener::from_std(l) {
                Ok(l) => {
                    tokio::spawn(super::tcp::accept_loop(shared.clone(), clients.clone(), l));
                }
                Err(e) => log::error!("dns: a TCP listener cannot be served: {e}"),
            }
        }
        let _ = stop.await;
    });
    // Dropping the runtime ends every task: the listeners and connections close.
    drop(rt);
    let _ = follow_stop.send(());
    if let Ok(t) = follower {
        let _ = t.join();
    }
}

/// Gives the zone's endpoints their round-trip times.
pub fn set_rtts(zone: &mut Zone, rtts: &Rtts) {
    for (profile, endpoint, rtt) in rtts.iter() {
        zone.set_rtt(profile, endpoint, *rtt);
    }
}

/// Applies every batch of changes to the zone; switches to a new zone and stream when a
/// reload sends one, and takes in round-trip times.
async fn follow(
    shared: Arc<Shared>,
    mut changes: Subscription,
    mut updates: mpsc::UnboundedReceiver<Update>,
    mut rtts: watch::Receiver<Rtts>,
) {
    let mut open = true;
    let mut timed = true;
    loop {
        tokio::select! {
            batch = changes.recv(), if open => match batch {
                Some(batch) => {
                    if batch.lost > 0 {
                        log::error!("dns: {} changes lost; answers may be stale until the next reload", batch.lost);
                    }
                    shared.update(|zone| {
                        for change in &batch.changes {
                            zone.apply(change);
                        }
                    });
                }
                None => open = false,
            },
            update = updates.recv() => match update {
                Some(Update::Follow(zone, next)) => {
                    shared.update(|z| *z = *zone);
                    changes = next;
                    open = true;
                }
                None => return,
            },
            changed = rtts.changed(), if timed => match changed {
                Ok(()) => {
                    let now = rtts.borrow_and_update().clone();
                    if shared.zone().wants_rtts() {
                        shared.update(|zone| set_rtts(zone, &now));
                    }
                }
                // The runner has stopped: no time will change again.
                Err(_) => timed = false,
            },
        }
    }
}
