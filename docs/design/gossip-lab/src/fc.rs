//! A foca-based prototype of probed's gossip: foca (SWIM) for membership and failure
//! detection; verdict changes as foca custom broadcasts (either the whole changed bucket, like
//! today, or just the changed verdict); a new member gets each node's full state pushed to it
//! directly when it comes up (foca has no state sync of its own). Same framing overhead as
//! probed's transport. No anti-entropy beyond that: a lost broadcast is lost (see `--loss`).
use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, HashSet},
    net::SocketAddr,
    num::{NonZeroU8, NonZeroU32, NonZeroUsize},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use foca::{AccumulatingRuntime, BroadcastHandler, Config, Foca, Invalidates, OwnedNotification, PostcardCodec, Timer};
use rand::{SeedableRng, rngs::StdRng};
use tokio::sync::mpsc;

use crate::common::*;

#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Id {
    addr: SocketAddr,
    idx: u16,
    generation: u64,
}

impl foca::Identity for Id {
    type Addr = SocketAddr;
    fn renew(&self) -> Option<Self> {
        Some(Id {
            generation: self.generation + 1,
            ..self.clone()
        })
    }
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn win_addr_conflict(&self, other: &Self) -> bool {
        self.generation > other.generation
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Bucket,
    Verdict,
}

#[derive(Debug)]
pub struct Key {
    writer: u16,
    item: u64,
    version: u64,
}

impl Invalidates for Key {
    fn invalidates(&self, o: &Self) -> bool {
        self.writer == o.writer && self.item == o.item && self.version > o.version
    }
}

#[derive(Debug)]
pub struct Bad;
impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("bad broadcast")
    }
}
impl std::error::Error for Bad {}

pub struct Handler {
    me: usize,
    /// (writer, item) -> version held.
    view: HashMap<(u16, u64), u64>,
    tracker: Arc<Tracker>,
    mode: Mode,
}

/// writer u16 | item u64 | version u64 | value
fn encode(writer: u16, item: u64, version: u64, value: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(18 + value.len());
    d.extend_from_slice(&writer.to_be_bytes());
    d.extend_from_slice(&item.to_be_bytes());
    d.extend_from_slice(&version.to_be_bytes());
    d.extend_from_slice(value);
    d
}

impl BroadcastHandler<Id> for Handler {
    type Key = Key;
    type Error = Bad;

    fn receive_item(&mut self, data: &[u8], sender: Option<&Id>) -> Result<Option<Key>, Bad> {
        if data.len() < 18 {
            return Err(Bad);
        }
        let writer = u16::from_be_bytes(data[0..2].try_into().unwrap());
        let item = u64::from_be_bytes(data[2..10].try_into().unwrap());
        let version = u64::from_be_bytes(data[10..18].try_into().unwrap());
        if sender.is_some() && usize::from(writer) == self.me {
            return Ok(None);
        }
        let held = self.view.entry((writer, item)).or_insert(0);
        if *held >= version && !(sender.is_none() && version == 0) {
            return Ok(None);
        }
        *held = version;
        if usize::from(writer) != self.me {
            self.tracker.seen_upto(self.me, usize::from(writer), item, version);
            if self.mode == Mode::Bucket {
                self.tracker.has_bucket(self.me, usize::from(writer), item);
            }
        }
        Ok(Some(Key { writer, item, version }))
    }
}

pub struct FcNode {
    pub idx: usize,
    pub id: Id,
    kill: mpsc::UnboundedSender<()>,
    pub members: Arc<Mutex<HashSet<usize>>>,
}

pub struct Params {
    pub mode: Mode,
    pub packet: usize,
    pub fast: bool,
    pub cluster: u32,
}

pub fn config(p: &Params) -> Config {
    let mut c = Config::new_lan(NonZeroU32::new(p.cluster).unwrap());
    c.max_packet_size = NonZeroUsize::new(p.packet).unwrap();
    if p.fast {
        // Roughly probed's cadence: detection within ~2 s like phi-accrual at 200 ms.
        c.probe_period = Duration::from_millis(500);
        c.probe_rtt = Duration::from_millis(150);
        c.suspect_to_down_after = Duration::from_millis(1200);
    }
    c.max_transmissions = NonZeroU8::new(c.max_transmissions.get().max(4)).unwrap();
    c
}

const TAG_FOCA: u8 = 0;
const TAG_SYNC: u8 = 1;

pub async fn start(idx: usize, addr: SocketAddr, seed: Option<Id>, p: &Params, tracker: Arc<Tracker>, phase: Phase, changes: Arc<AtomicBool>) -> FcNode {
    let id = Id {
        addr,
        idx: idx as u16,
        generation: 1,
    };
    let socket = tokio::net::UdpSocket::bind(addr).await.expect("bind");
    let mode = p.mode;
    let handler = Handler {
        me: idx,
        view: HashMap::new(),
        tracker: tracker.clone(),
        mode,
    };
    let mut foca = Foca::with_custom_broadcast(id.clone(), config(p), StdRng::seed_from_u64(idx as u64), PostcardCodec, handler);
    let mut own = Own::new(idx as u64);
    // Per bucket, the version of its last change.
    let mut bucket_version = vec![0u64; BUCKETS as usize];
    let mut version = 0u64;
    tracker.set_live(idx, true);
    for b in 0..BUCKETS {
        tracker.write(idx, u64::from(b), 0, phase);
    }
    let members = Arc::new(Mutex::new(HashSet::new()));
    let m2 = members.clone();
    let (kill_tx, mut kill_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut rt = AccumulatingRuntime::new();
        let mut timers: BinaryHeap<Reverse<(Instant, u64, Timer<Id>)>> = BinaryHeap::new();
        let mut seq = 0u64;
        let mut buf = vec![0u8; 65_536];
        let mut rng = StdRng::seed_from_u64(idx as u64 * 7 + 1);
        let offset = Duration::from_millis(rand::RngExt::random_range(&mut rng, 0..1000));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, Duration::from_secs(1));
        if let Some(s) = seed {
            let _ = foca.announce(s, &mut rt);
        }
        loop {
            let next = timers.peek().map(|Reverse((t, _, _))| *t);
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                r = socket.recv_from(&mut buf) => {
                    let Ok((len, _from)) = r else { continue };
                    if len < HEADER + TAG + 1 { continue; }
                    let body = &buf[HEADER..len - TAG];
                    match body[0] {
                        TAG_FOCA => { let _ = foca.handle_data(&body[1..], &mut rt); }
                        TAG_SYNC => apply_sync(&body[1..], idx, mode, &tracker),
                        _ => {}
                    }
                }
                _ = tokio::time::sleep_until(next.unwrap_or(far).into()), if next.is_some() => {
                    let now = Instant::now();
                    while timers.peek().is_some_and(|Reverse((t, _, _))| *t <= now) {
                        let Reverse((_, _, t)) = timers.pop().unwrap();
                        let _ = foca.handle_timer(t, &mut rt);
                    }
                }
                _ = tick.tick() => {
                    if changes.load(Ordering::Relaxed) {
                        let (b, check, v) = own.change(&mut rng);
                        version += 1;
                        bucket_version[b as usize] = version;
                        let data = match mode {
                            Mode::Bucket => {
                                tracker.write(idx, u64::from(b), version, Phase::Steady);
                                encode(idx as u16, u64::from(b), version, own.encode(b).as_bytes())
                            }
                            Mode::Verdict => {
                                tracker.write(idx, check, version, Phase::Steady);
                                encode(idx as u16, check, version, &[v])
                            }
                        };
                        let _ = foca.add_broadcast(&data);
                    }
                }
                _ = kill_rx.recv() => break,
            }
            while let Some((to, data)) = rt.to_send() {
                let mut d = Vec::with_capacity(data.len() + 1);
                d.push(TAG_FOCA);
                d.extend_from_slice(&data);
                send_framed(&socket, to.addr, [0u8; HEADER], &d).await;
            }
            let now = Instant::now();
            while let Some((after, t)) = rt.to_schedule() {
                seq += 1;
                timers.push(Reverse((now + after, seq, t)));
            }
            while let Some(n) = rt.to_notify() {
                match n {
                    OwnedNotification::MemberUp(m) => {
                        m2.lock().unwrap().insert(usize::from(m.idx));
                        // Push our whole state to the newcomer (foca has no state sync).
                        let mut d = vec![TAG_SYNC];
                        d.extend_from_slice(&(idx as u16).to_be_bytes());
                        for b in 0..BUCKETS {
                            let v = own.encode(b);
                            d.extend_from_slice(&b.to_be_bytes());
                            d.extend_from_slice(&bucket_version[b as usize].to_be_bytes());
                            d.extend_from_slice(&(v.len() as u16).to_be_bytes());
                            d.extend_from_slice(v.as_bytes());
                        }
                        send_framed(&socket, m.addr, [0u8; HEADER], &d).await;
                    }
                    OwnedNotification::MemberDown(m) => {
                        m2.lock().unwrap().remove(&usize::from(m.idx));
                    }
                    _ => {}
                }
            }
        }
    });
    FcNode {
        idx,
        id,
        kill: kill_tx,
        members,
    }
}

/// A node's whole state, pushed to a newcomer: writer u16, then (bucket u32, version u64,
/// len u16, value) per bucket. (The receiving foca's view is not updated here: in this
/// prototype only the tracker needs to know.)
fn apply_sync(mut d: &[u8], me: usize, _mode: Mode, tracker: &Tracker) {
    if d.len() < 2 {
        return;
    }
    let writer = usize::from(u16::from_be_bytes(d[0..2].try_into().unwrap()));
    d = &d[2..];
    while d.len() >= 14 {
        let b = u32::from_be_bytes(d[0..4].try_into().unwrap());
        let version = u64::from_be_bytes(d[4..12].try_into().unwrap());
        let len = usize::from(u16::from_be_bytes(d[12..14].try_into().unwrap()));
        d = &d[(14 + len).min(d.len())..];
        tracker.seen_upto(me, writer, u64::from(b), version);
        tracker.has_bucket(me, writer, u64::from(b));
    }
}

impl FcNode {
    pub fn kill(&self) {
        let _ = self.kill.send(());
    }
}
