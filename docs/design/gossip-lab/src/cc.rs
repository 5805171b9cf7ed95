//! chitchat 0.11.2 as probed uses it: a Transport that serializes each ChitchatMessage, cuts
//! it into parts of at most 32 KiB, frames each part like probed's transport (24-byte header,
//! 32-byte tag: zeros here, the size is what matters) and puts it back together on arrival.
use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, atomic::AtomicU64},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use chitchat::{
    ChitchatConfig, ChitchatHandle, ChitchatId, ChitchatMessage, Deserializable, FailureDetectorConfig,
    ListenerHandle, Serializable, spawn_chitchat,
    transport::{Socket, Transport},
};
use rand::{SeedableRng, rngs::StdRng};

use crate::common::*;

pub struct FramedTransport;

struct FramedSocket {
    socket: tokio::net::UdpSocket,
    next_id: u64,
    buf: Vec<u8>,
    partial: HashMap<(SocketAddr, u64), (Vec<Option<Vec<u8>>>, Instant)>,
}

static IDS: AtomicU64 = AtomicU64::new(1);

#[async_trait]
impl Transport for FramedTransport {
    async fn open(&self, listen: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = tokio::net::UdpSocket::bind(listen).await?;
        Ok(Box::new(FramedSocket {
            socket,
            next_id: IDS.fetch_add(1 << 32, std::sync::atomic::Ordering::Relaxed),
            buf: vec![0; 65_536],
            partial: HashMap::new(),
        }))
    }
}

#[async_trait]
impl Socket for FramedSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let payload = msg.serialize_to_vec();
        self.next_id += 1;
        let chunks: Vec<&[u8]> = if payload.is_empty() { vec![&[][..]] } else { payload.chunks(PART_BYTES).collect() };
        let parts = chunks.len() as u8;
        for (i, c) in chunks.iter().enumerate() {
            let mut h = [0u8; HEADER];
            h[..4].copy_from_slice(b"PRBG");
            h[4] = 1;
            h[5] = i as u8;
            h[6] = parts;
            h[16..24].copy_from_slice(&self.next_id.to_be_bytes());
            send_framed(&self.socket, to, h, c).await;
        }
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        loop {
            let (len, from) = match self.socket.recv_from(&mut self.buf).await {
                Ok(r) => r,
                Err(_) => continue,
            };
            if len < HEADER + TAG {
                continue;
            }
            let d = &self.buf[..len];
            let (part, parts) = (d[5] as usize, d[6] as usize);
            let id = u64::from_be_bytes(d[16..24].try_into().unwrap());
            let body = d[HEADER..len - TAG].to_vec();
            let whole = if parts == 1 {
                body
            } else {
                let now = Instant::now();
                self.partial.retain(|_, p| now.duration_since(p.1) < Duration::from_secs(2));
                let e = self.partial.entry((from, id)).or_insert_with(|| (vec![None; parts], now));
                e.0[part] = Some(body);
                if e.0.iter().any(Option::is_none) {
                    continue;
                }
                let (ps, _) = self.partial.remove(&(from, id)).unwrap();
                ps.into_iter().flatten().flatten().collect()
            };
            if let Ok(m) = ChitchatMessage::deserialize(&mut &whole[..]) {
                return Ok((from, m));
            }
        }
    }
}

pub struct CcNode {
    pub idx: usize,
    pub handle: ChitchatHandle,
    _listener: ListenerHandle,
    changer: tokio::task::JoinHandle<()>,
}

pub async fn start(idx: usize, addr: SocketAddr, seed: Option<SocketAddr>, interval: Duration, tracker: Arc<Tracker>, phase: Phase, changes: Arc<std::sync::atomic::AtomicBool>) -> CcNode {
    let generation = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
    let config = ChitchatConfig {
        chitchat_id: ChitchatId::new(format!("n{idx}"), generation, addr),
        cluster_id: "probed".into(),
        gossip_interval: interval,
        listen_addr: addr,
        seed_nodes: seed.iter().map(ToString::to_string).collect(),
        failure_detector_config: FailureDetectorConfig {
            initial_interval: interval,
            dead_node_grace_period: Duration::from_secs(3600),
            ..FailureDetectorConfig::default()
        },
        marked_for_deletion_grace_period: Duration::from_secs(600),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    let own = Own::new(idx as u64);
    let mut initial = vec![("region".to_string(), format!("r{idx}"))];
    tracker.set_live(idx, true);
    for b in 0..BUCKETS {
        let v = own.encode(b);
        tracker.write(idx, u64::from(b), hash_str(&v), phase);
        initial.push((key(b), v));
    }
    let handle = spawn_chitchat(config, initial, &FramedTransport).await.expect("spawn");
    let chitchat = handle.chitchat();
    let t2 = tracker.clone();
    let listener = chitchat.lock().await.subscribe_event("v/", move |ev| {
        let Some(writer) = ev.node.node_id.strip_prefix('n').and_then(|s| s.parse::<usize>().ok()) else { return };
        let Ok(b) = u64::from_str_radix(ev.key, 16) else { return };
        if writer != idx {
            t2.seen(idx, writer, b, hash_str(ev.value));
            t2.has_bucket(idx, writer, b);
        }
    });
    let t3 = tracker.clone();
    let cc = chitchat.clone();
    let changer = tokio::spawn(async move {
        let mut own = own;
        let mut rng = StdRng::seed_from_u64(idx as u64 * 7 + 1);
        let offset = Duration::from_millis(rand::RngExt::random_range(&mut rng, 0..1000));
        tokio::time::sleep(offset).await;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if !changes.load(std::sync::atomic::Ordering::Relaxed) {
                continue;
            }
            let (b, _, _) = own.change(&mut rng);
            let v = own.encode(b);
            t3.write(idx, u64::from(b), hash_str(&v), Phase::Steady);
            cc.lock().await.self_node_state().set(key(b), v);
        }
    });
    CcNode {
        idx,
        handle,
        _listener: listener,
        changer,
    }
}

impl CcNode {
    pub async fn kill(self) {
        self.changer.abort();
        let _ = self.handle.shutdown().await;
    }

    pub async fn sees_live(&self, name: &str) -> bool {
        self.handle.chitchat().lock().await.live_nodes().any(|id| &*id.node_id == name)
    }

    pub async fn live_count(&self) -> usize {
        self.handle.chitchat().lock().await.live_nodes().count()
    }
}
