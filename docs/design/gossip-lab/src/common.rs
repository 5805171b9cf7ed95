//! What both simulations share: the verdict layout (probed's cluster/verdicts.rs), the byte
//! counters, the authenticated-framing overhead, simulated loss, and the propagation tracker.
use std::{
    collections::{HashMap, HashSet},
    hash::{Hash, Hasher},
    net::SocketAddr,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use rand::RngExt;

pub const BUCKETS: u32 = 16;
pub const PER_BUCKET: usize = 64;
/// probed's transport: 24-byte header + 32-byte HMAC tag per datagram.
pub const HEADER: usize = 24;
pub const TAG: usize = 32;
pub const PART_BYTES: usize = 32 * 1024;

pub static SENT_BYTES: AtomicU64 = AtomicU64::new(0);
pub static SENT_DGRAMS: AtomicU64 = AtomicU64::new(0);
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Loss probability in parts per million, applied at the sender.
pub static LOSS_PPM: AtomicU64 = AtomicU64::new(0);

pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

pub fn hash_str(s: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// One node's verdicts: BUCKETS buckets of PER_BUCKET (check, verdict) entries. Every node
/// probes the same checks (k = 0), so check ids are the same everywhere.
pub struct Own {
    pub buckets: Vec<Vec<(u64, u8)>>,
}

impl Own {
    pub fn new(seed: u64) -> Own {
        let mut buckets = Vec::new();
        for b in 0..BUCKETS {
            let mut entries: Vec<(u64, u8)> = (0..PER_BUCKET as u64)
                .map(|j| {
                    let check = mix64(u64::from(b) * 1000 + j);
                    let v = if mix64(seed ^ check) % 5 == 0 { b'd' } else { b'u' };
                    (check, v)
                })
                .collect();
            entries.sort_unstable();
            buckets.push(entries);
        }
        Own { buckets }
    }

    pub fn encode(&self, b: u32) -> String {
        let mut s = String::with_capacity(PER_BUCKET * 17);
        for (c, v) in &self.buckets[b as usize] {
            s.push_str(&format!("{c:016x}{}", *v as char));
        }
        s
    }

    /// Changes one verdict; returns (bucket, check, new verdict).
    pub fn change(&mut self, rng: &mut impl RngExt) -> (u32, u64, u8) {
        let b = rng.random_range(0..BUCKETS);
        let j = rng.random_range(0..PER_BUCKET);
        let e = &mut self.buckets[b as usize][j];
        e.1 = match e.1 {
            b'u' => b'd',
            b'd' => b'c',
            _ => b'u',
        };
        (b, e.0, e.1)
    }
}

pub fn key(b: u32) -> String {
    format!("v/{b:x}")
}

/// Wraps `payload` the way probed's transport does (header + payload + tag) and sends it,
/// counting the bytes; drops it instead with the configured loss probability.
pub async fn send_framed(socket: &tokio::net::UdpSocket, to: SocketAddr, header: [u8; HEADER], payload: &[u8]) {
    let ppm = LOSS_PPM.load(Ordering::Relaxed);
    let mut d = Vec::with_capacity(HEADER + payload.len() + TAG);
    d.extend_from_slice(&header);
    d.extend_from_slice(payload);
    d.extend_from_slice(&[0u8; TAG]);
    SENT_BYTES.fetch_add(d.len() as u64, Ordering::Relaxed);
    SENT_DGRAMS.fetch_add(1, Ordering::Relaxed);
    if ppm > 0 && rand::random_range(0..1_000_000u64) < ppm {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let _ = socket.send_to(&d, to).await;
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Phase {
    Initial,
    Steady,
    Late,
}

struct WriteRec {
    seq: u64,
    t0: Instant,
    need: u64,
    seen: u64,
    phase: Phase,
    done: bool,
}

#[derive(Default)]
struct Inner {
    /// (writer, item, tag) -> record. item: bucket (or check); tag: value hash or version.
    writes: HashMap<(usize, u64, u64), WriteRec>,
    live: u64,
    seq: u64,
    lat: Vec<(Phase, Duration)>,
    /// For the late joiner: (writer, bucket) pairs it has seen any value of.
    late: Option<(usize, Instant, HashSet<(usize, u64)>, usize, Option<Duration>)>,
}

/// Records when each write is first seen by each live node.
#[derive(Default)]
pub struct Tracker(Mutex<Inner>);

impl Tracker {
    pub fn set_live(&self, node: usize, live: bool) {
        let mut g = self.0.lock().unwrap();
        if live {
            g.live |= 1 << node;
        } else {
            g.live &= !(1 << node);
            let now = Instant::now();
            let mut done = Vec::new();
            for w in g.writes.values_mut() {
                w.need &= !(1 << node);
                if !w.done && w.seen & w.need == w.need {
                    w.done = true;
                    done.push((w.phase, now - w.t0));
                }
            }
            g.lat.extend(done);
        }
    }

    pub fn write(&self, writer: usize, item: u64, tag: u64, phase: Phase) {
        let mut g = self.0.lock().unwrap();
        let need = g.live & !(1 << writer);
        g.seq += 1;
        let seq = g.seq;
        g.writes.insert(
            (writer, item, tag),
            WriteRec {
                seq,
                t0: Instant::now(),
                need,
                seen: 0,
                phase,
                done: need == 0,
            },
        );
    }

    /// `observer` holds the value written as `tag`: that write, and every earlier write of the
    /// same item (superseded by it), count as delivered to it.
    pub fn seen(&self, observer: usize, writer: usize, item: u64, tag: u64) {
        let mut g = self.0.lock().unwrap();
        let Some(seq) = g.writes.get(&(writer, item, tag)).map(|w| w.seq) else { return };
        Self::mark(&mut g, observer, writer, item, |_, s| s <= seq);
    }

    /// `observer` holds `writer`'s `item` at version `version` (tags are versions): every
    /// write of it up to that version counts as delivered.
    pub fn seen_upto(&self, observer: usize, writer: usize, item: u64, version: u64) {
        let mut g = self.0.lock().unwrap();
        Self::mark(&mut g, observer, writer, item, |t, _| t <= version);
    }

    fn mark(g: &mut Inner, observer: usize, writer: usize, item: u64, pick: impl Fn(u64, u64) -> bool) {
        let now = Instant::now();
        let mut done = Vec::new();
        for ((w, i, t), rec) in g.writes.iter_mut() {
            if *w != writer || *i != item || !pick(*t, rec.seq) {
                continue;
            }
            rec.seen |= 1 << observer;
            if !rec.done && rec.seen & rec.need == rec.need {
                rec.done = true;
                done.push((rec.phase, now - rec.t0));
            }
        }
        g.lat.extend(done);
    }

    pub fn start_late(&self, node: usize, expect: usize) {
        let mut g = self.0.lock().unwrap();
        g.late = Some((node, Instant::now(), HashSet::new(), expect, None));
    }

    /// Observer `observer` holds some value of `writer`'s `bucket`.
    pub fn has_bucket(&self, observer: usize, writer: usize, bucket: u64) {
        let mut g = self.0.lock().unwrap();
        if let Some((node, t0, set, expect, done)) = g.late.as_mut() {
            if *node == observer && done.is_none() {
                set.insert((writer, bucket));
                if set.len() >= *expect {
                    *done = Some(t0.elapsed());
                }
            }
        }
    }

    /// (phase, count done, count pending older than `grace`, p50, p95, max) per phase; the
    /// late joiner's time to hold every bucket.
    pub fn report(&self, grace: Duration) -> (Vec<String>, Option<Duration>) {
        let g = self.0.lock().unwrap();
        let mut out = Vec::new();
        for phase in [Phase::Initial, Phase::Steady, Phase::Late] {
            let mut l: Vec<Duration> = g.lat.iter().filter(|(p, _)| *p == phase).map(|(_, d)| *d).collect();
            l.sort();
            let pending = g
                .writes
                .values()
                .filter(|w| w.phase == phase && !w.done && w.t0.elapsed() > grace)
                .count();
            if l.is_empty() && pending == 0 {
                continue;
            }
            let q = |f: f64| l.get(((l.len() as f64 - 1.0) * f).round() as usize).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
            out.push(format!(
                "{phase:?}: delivered-to-all {} (never within {:?}: {pending}), ms p50 {:.0} p95 {:.0} max {:.0}",
                l.len(),
                grace,
                q(0.5),
                q(0.95),
                q(1.0)
            ));
        }
        let mut missing: Vec<String> = g
            .writes
            .iter()
            .filter(|(_, w)| !w.done && w.t0.elapsed() > grace)
            .map(|((wr, _, _), w)| format!("w{wr} age {:.1}s missing {:b}", w.t0.elapsed().as_secs_f64(), w.need & !w.seen))
            .collect();
        missing.sort();
        if !missing.is_empty() {
            out.push(format!("undelivered: {}", missing.join("; ")));
        }
        (out, g.late.as_ref().and_then(|l| l.4))
    }
}

/// User + system CPU seconds of this process.
pub fn cpu_secs() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}
