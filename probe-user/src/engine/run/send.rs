//! Sending: the backlog goes out as far as the in-flight table has room, grouped by frame
//! shape through the generator, or one by one through the raw socket when it cannot.
use std::{
    net::IpAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use probe_common::{
    cookie::{probe_cookie, sport_offset},
    csum::payload_sum,
    frame::{SynGueV4, SynGueV6, SynIpipV4, SynIpipV6, SynV4, SynV6, UdpV4, UdpV6},
    l4::{FlowKey, Inflight, ProbeJob, TUNNEL_GUE, TUNNEL_IPIP, TUNNEL_NONE},
    packet::{IPPROTO_TCP, IPPROTO_UDP},
};

use super::{EngineState, Live};
use crate::engine::{
    is_v4,
    source::{source_by, SourceBy},
    templates::Acquired,
    Encap, L4Outcome, L4Proto, L4Request, Tunnel, TxPath,
};

/// Probes sent between two reads of the ring buffer when a large backlog goes out: enough
/// for the generator's batches to stay full, few enough that replies are taken while their
/// probes' slots and flows are still in the cache.
pub(super) const SEND_SLICE: usize = 4096;
// A slice fits one generator run: the job array holds no more.
const _: () = assert!(SEND_SLICE <= probe_common::l4::MAX_JOBS as usize);

/// Source ports tried for one probe before it is given up for want of one (the range is busy
/// with live probes to the same target and port: `LocalError`, no verdict).
const PICK_ATTEMPTS: u16 = 16;

/// Shortest gap between two warnings about failed generator runs.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Probes that share one template frame: IPv4 or not, the UDP payload (None for TCP), and
/// the tunnel's kind (`TUNNEL_*`).
type FrameShape = (bool, Option<Arc<[u8]>>, u8, u16);

impl EngineState {
    /// A source port for this flow that no live probe uses, chosen with the cookie key from
    /// the target and the generation: a blind forger has to guess it as well as the cookie
    /// (M1). With no source address the flow leaves it unset, for the generator to fill in,
    /// and the port is kept unique per target and port alone.
    ///
    /// Fails with `NoRoute` when the source is of the other family, and with a local error
    /// (EADDRNOTAVAIL, as a socket's bind would) when every port tried is in use: that says
    /// nothing of the target. Probes through a tunnel meet it first: every backend of a VIP
    /// shares the VIP's flows.
    fn pick_flow(&self, src: Option<IpAddr>, req: &L4Request, proto: u8, gen: u32) -> Result<FlowKey, L4Outcome> {
        let dport = req.target.port();
        let base = match (src, req.target.ip()) {
            (Some(IpAddr::V4(s)), IpAddr::V4(d)) => FlowKey::v4(s.octets(), d.octets(), 0, dport, proto),
            (Some(IpAddr::V6(s)), IpAddr::V6(d)) => FlowKey::v6(s.octets(), d.octets(), 0, dport, proto),
            (None, IpAddr::V4(d)) => FlowKey::v4([0; 4], d.octets(), 0, dport, proto),
            (None, IpAddr::V6(d)) => FlowKey::v6([0; 16], d.octets(), 0, dport, proto),
            _ => return Err(L4Outcome::NoRoute),
        };
        let candidate = |attempt| FlowKey {
            sport: self.sport_min + sport_offset(&self.key, &base, gen, attempt, self.sport_span) as u16,
            ..base
        };
        let free = |flow: &FlowKey| !self.active_flows.contains_key(flow);
        // A flow whose probe just ended is passed over while another is free; a target probed
        // so fast that every try rests (thousands a second) takes a resting one over none.
        (0..PICK_ATTEMPTS)
            .map(candidate)
            .find(|f| free(f) && !self.cooling.resting(f, self.last_turn))
            .or_else(|| (0..PICK_ATTEMPTS).map(candidate).find(free))
            .ok_or(L4Outcome::LocalError {
                errno: libc::EADDRNOTAVAIL,
            })
    }

    /// Sends up to `most` probes of the backlog, as far as the in-flight table has room;
    /// says how many left the backlog.
    pub(super) fn pump(&mut self, most: usize) -> usize {
        let room = self.max_inflight.saturating_sub(self.active_flows.len());
        let n = room.min(self.backlog.len()).min(most);
        if n > 0 {
            let batch: Vec<_> = self.backlog.drain(..n).collect();
            self.send(batch);
        }
        self.stats.backlog = self.backlog.len() as u64;
        // The first round puts a whole fleet on the wire at once; afterwards a table that
        // large is mostly empty, and every probe's lookups miss the cache across it.
        let live = self.active_flows.len();
        if self.active_flows.capacity() > 4096 && live < self.active_flows.capacity() / 8 {
            self.active_flows.shrink_to(live * 2);
        }
        n
    }

    fn send(&mut self, reqs: Vec<(Instant, L4Request)>) {
        // Group by frame shape: family and transport (and payload for UDP). There are a few
        // shapes in a batch, so a list searched in order beats hashing each probe's shape.
        let mut groups: Vec<(FrameShape, Vec<ProbeJob>)> = Vec::new();
        let now = Instant::now();
        for (submitted, req) in reqs {
            // On the XDP path the generator's route lookup picks any source not configured,
            // where the kernel lets it (source_by).
            // A tunnelled probe is routed, and takes its source, by its backend.
            let ip = req.tunnel.map_or(req.target.ip(), |t| t.backend);
            if req.tunnel.is_some_and(|t| t.check(&req.target).is_err())
                || req.tunnel.is_some() && matches!(req.proto, L4Proto::Udp { .. })
            {
                // The daemon and `probed check` refuse such checks before they get here.
                self.reject(&req, L4Outcome::LocalError { errno: libc::EINVAL });
                continue;
            }
            let configured = self.sources.configured(ip);
            let src = match source_by(self.path, configured.is_some(), self.fib_src) {
                SourceBy::Config => configured,
                SourceBy::Generator => None,
                SourceBy::Userspace => match self.sources.source_for(ip, now) {
                    Some(src) => Some(src),
                    None => {
                        self.reject(&req, L4Outcome::NoRoute);
                        continue;
                    }
                },
            };
            let (proto, payload) = match &req.proto {
                L4Proto::Tcp | L4Proto::Http { .. } => (IPPROTO_TCP, None),
                L4Proto::Udp { payload } => (IPPROTO_UDP, Some(payload.clone())),
            };
            let req_id = match &req.proto {
                L4Proto::Http { request } => match self.template(request, now) {
                    Some(id) => id + 1,
                    None => {
                        self.reject(&req, L4Outcome::HttpUnsupported);
                        continue;
                    }
                },
                _ => 0,
            };
            let gen = self.next_gen;
            self.next_gen = self.next_gen.wrapping_add(1).max(1);
            let flow = match self.pick_flow(src, &req, proto, gen) {
                Ok(flow) => flow,
                Err(outcome) => {
                    if req_id != 0 {
                        self.templates.release(req_id - 1, now);
                    }
                    self.reject(&req, outcome);
                    continue;
                }
            };
            let live = Live {
                token: req.token,
                target: req.target,
                key: flow,
                flow,
                gen,
                udp: payload.is_some(),
                sent: now,
                queued: now.saturating_duration_since(submitted),
                claimed: false,
                payload: payload.clone(),
                req: req_id,
                tunnel: req.tunnel,
            };
            let slot = self.alloc_slot(live);
            self.active_flows.insert(flow, slot);
            self.deadlines.push(now, req.timeout, slot, gen);
            let v4 = is_v4(&req.target.ip());
            let pad = req.tunnel.map_or(0, |t| t.pad(!v4));
            let shape = (v4, payload, tunnel_kind(req.tunnel), pad);
            let group = match groups.iter().position(|(s, _)| *s == shape) {
                Some(i) => i,
                None => {
                    groups.push((shape, Vec::new()));
                    groups.len() - 1
                }
            };
            groups[group].1.push(job_of(flow, slot, gen, req_id, req.tunnel));
        }
        for ((v4, payload, tunnel, pad), mut jobs) in groups {
            match self.path {
                TxPath::Xdp => self.send_xdp((v4, tunnel, pad), payload.as_deref(), &mut jobs),
                TxPath::Raw => {
                    for job in &jobs {
                        self.send_raw(job);
                    }
                }
            }
        }
    }

    /// The kernel template of an HTTP request, written there first if new; None when it
    /// cannot be had (too long, every id in use, the kernel refused).
    fn template(&mut self, request: &Arc<[u8]>, now: Instant) -> Option<u32> {
        let bytes = probe_common::http::HttpReq::new(request)?;
        match self.templates.acquire(request, now) {
            Acquired::Known(id) => Some(id),
            Acquired::New(id) => match self.kernel.set_http_req(id, &bytes) {
                Ok(()) => Some(id),
                Err(e) => {
                    log::warn!("cannot write an HTTP request template to the kernel: {e}");
                    self.templates.release(id, now);
                    None
                }
            },
            Acquired::Full => None,
        }
    }

    fn send_xdp(&mut self, (v4, tunnel, pad): (bool, u8, u16), payload: Option<&[u8]>, jobs: &mut [ProbeJob]) {
        let head = match (v4, payload.is_some(), tunnel) {
            (true, _, TUNNEL_GUE) => SynGueV4::LEN,
            (false, _, TUNNEL_GUE) => SynGueV6::LEN,
            (true, _, TUNNEL_IPIP) => SynIpipV4::LEN,
            (false, _, TUNNEL_IPIP) => SynIpipV6::LEN,
            (true, false, _) => SynV4::LEN,
            (false, false, _) => SynV6::LEN,
            (true, true, _) => UdpV4::LEN,
            (false, true, _) => UdpV6::LEN,
        };
        // A full-size tunnelled probe: zeros after the SYN, which the generator leaves.
        let mut template = vec![0u8; head + usize::from(pad)];
        let (psum, plen) = match payload {
            Some(p) => {
                template.extend_from_slice(p);
                (payload_sum(p), p.len() as u32)
            }
            None => (0, 0),
        };
        for chunk in jobs.chunks_mut(probe_common::l4::MAX_JOBS as usize) {
            match self.kernel.send(chunk, &template, psum, plen) {
                Ok(_) => {
                    // Learn the flows as sent: their sources, where the generator picked them.
                    for job in chunk.iter() {
                        if let Some(live) = self.slots.get_mut(job.slot as usize).and_then(|l| l.as_mut()) {
                            if live.gen == job.gen && !job.flow.source_unset() {
                                live.flow = job.flow;
                            }
                        }
                    }
                }
                Err(e) => {
                    // A run fails for every batch while the cause lasts (the interface was
                    // deleted, say): say so at most every WARN_EVERY, not once per batch.
                    self.failed_runs += 1;
                    let now = Instant::now();
                    if self.last_run_warning.is_none_or(|t| now - t >= WARN_EVERY) {
                        log::warn!(
                            "generator run failed ({e}); sending through the raw socket instead \
                             ({} failed runs so far)",
                            self.failed_runs
                        );
                        self.last_run_warning = Some(now);
                    }
                    for job in chunk.iter() {
                        self.send_raw(job);
                    }
                }
            }
        }
    }

    /// Sends one probe through the stack: records it in the in-flight table under the same
    /// cookie the generator would use, then hands the IP packet to a raw socket.
    pub(super) fn send_raw(&mut self, job: &ProbeJob) {
        let mut job = *job;
        if job.flow.source_unset() {
            // The generator could not route it: ask the routing table for a source here.
            let toward = if job.tunnel == TUNNEL_NONE {
                ip_of(&job.flow)
            } else {
                outer_of(&job)
            };
            let Some(src) = self.sources.source_for(toward, Instant::now()) else {
                self.fail_now(job.slot, L4Outcome::NoRoute);
                return;
            };
            job.flow.saddr = octets(src);
            if let Some(live) = self.slots.get_mut(job.slot as usize).and_then(|l| l.as_mut()) {
                live.flow = job.flow;
            }
        }
        let cookie = probe_cookie(&self.key, &job.flow, job.gen);
        let entry = Inflight {
            slot: job.slot,
            gen: job.gen,
            cookie,
            peer_seq: 0,
            sent_ns: crate::clock::mono_ns(),
            req: job.req,
            stage: probe_common::l4::STAGE_SYN_SENT,
            tunnel: job.tunnel,
            _pad: [0; 2],
        };
        if self.kernel.track(&job.flow, entry).is_err() {
            self.fail_now(job.slot, L4Outcome::NoRoute);
            return;
        }
        if let Some(road) = probe_common::l4::Road::of(&job) {
            // Without it probe_rx sends the RST unwrapped, and an HTTP probe gets no verdict.
            if let Err(e) = self.kernel.keep_road(&job.flow, road) {
                log::debug!("cannot record the road of slot {}: {e}", job.slot);
            }
        }
        let payload = self
            .slots
            .get(job.slot as usize)
            .and_then(|l| l.as_ref())
            .and_then(|l| l.payload.clone());
        let tunnel = self
            .slots
            .get(job.slot as usize)
            .and_then(|l| l.as_ref())
            .and_then(|l| l.tunnel);
        if let Err(e) = self.raw.send(&job.flow, tunnel, cookie, payload.as_deref()) {
            log::debug!("raw send to slot {} failed: {e}", job.slot);
            if self.kernel.claim(&job.flow) {
                self.fail_now(job.slot, send_failure(&e));
            }
        }
    }
}

/// What a failed raw send says: nothing about the target when the node is short of buffers
/// or memory, else that the target cannot be reached from here.
fn send_failure(e: &std::io::Error) -> L4Outcome {
    match e.raw_os_error() {
        Some(errno) if crate::outcome::is_local_resource_errno(errno) => L4Outcome::LocalError { errno },
        _ => L4Outcome::NoRoute,
    }
}

/// The target address of a flow.
fn ip_of(flow: &FlowKey) -> IpAddr {
    if flow.family == probe_common::l4::FAMILY_V4 {
        IpAddr::from(flow.daddr_v4())
    } else {
        IpAddr::from(flow.daddr)
    }
}

/// The generator's job for a probe of `flow`, wrapped toward the backend if tunnelled.
pub(super) fn job_of(flow: FlowKey, slot: u32, gen: u32, req: u32, tunnel: Option<Tunnel>) -> ProbeJob {
    let mut job = ProbeJob::plain(flow, slot, gen, req);
    if let Some(t) = tunnel {
        job.tunnel = tunnel_kind(tunnel);
        if let Encap::Gue { port } = t.encap {
            job.tunnel_port = port;
        }
        job.outer = octets(t.backend);
        job.outer_src = t.source.map_or([0; 16], octets);
    }
    job
}

/// An address in a flow's layout: IPv4 in the first four bytes.
fn octets(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => {
            let mut o = [0; 16];
            o[..4].copy_from_slice(&a.octets());
            o
        }
        IpAddr::V6(a) => a.octets(),
    }
}

/// The `ProbeJob::tunnel` of a probe.
fn tunnel_kind(tunnel: Option<Tunnel>) -> u8 {
    match tunnel.map(|t| t.encap) {
        None => TUNNEL_NONE,
        Some(Encap::Ipip) => TUNNEL_IPIP,
        Some(Encap::Gue { .. }) => TUNNEL_GUE,
    }
}

/// A tunnelled job's backend.
fn outer_of(job: &ProbeJob) -> IpAddr {
    if job.flow.family == probe_common::l4::FAMILY_V4 {
        IpAddr::from([job.outer[0], job.outer[1], job.outer[2], job.outer[3]])
    } else {
        IpAddr::from(job.outer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tunnelled_job_carries_its_backend_and_encapsulation() {
        let flow = FlowKey::v4([198, 18, 0, 1], [198, 18, 40, 1], 61000, 443, IPPROTO_TCP);
        for (backend, encap, kind, port) in [
            (IpAddr::from([198, 18, 0, 10]), Encap::Ipip, TUNNEL_IPIP, 0),
            (
                IpAddr::from([198, 18, 0, 11]),
                Encap::Gue { port: 6080 },
                TUNNEL_GUE,
                6080,
            ),
        ] {
            let t = Tunnel {
                backend,
                encap,
                mtu: 0,
                source: None,
            };
            let job = job_of(flow, 7, 9, 0, Some(t));
            assert_eq!((job.slot, job.gen, job.flow), (7, 9, flow));
            assert_eq!((job.tunnel, job.tunnel_port, outer_of(&job)), (kind, port, backend));
        }
        let v6 = FlowKey::v6([0x20; 16], [0x21; 16], 61000, 443, IPPROTO_TCP);
        let t = Tunnel {
            backend: IpAddr::from([0x22; 16]),
            encap: Encap::Gue { port: 9886 },
            mtu: 1500,
            source: Some(IpAddr::from([0x23; 16])),
        };
        let job = job_of(v6, 1, 1, 0, Some(t));
        assert_eq!((job.tunnel, job.tunnel_port, job.outer), (TUNNEL_GUE, 9886, [0x22; 16]));
        assert_eq!((job.outer_src, job.outer_source()), ([0x23; 16], [0x23; 16]));
        let own = job_of(v6, 1, 1, 0, Some(Tunnel { source: None, ..t }));
        assert_eq!(own.outer_source(), v6.saddr, "no source of its own: the probe's");
        let plain = job_of(flow, 1, 1, 0, None);
        assert_eq!((plain.tunnel, plain.outer), (TUNNEL_NONE, [0; 16]));
        // A full-size probe: the SYN (52 bytes over IPv4, 72 over IPv6) and zeros to the size.
        assert_eq!((t.pad(true), t.pad(false)), (1428, 1448));
        assert_eq!(Tunnel { mtu: 40, ..t }.pad(false), 0);
    }
}
