//! Counters of the kernel programs: per-CPU array slots holding named fields.

/// What probe_rx saw on ingress, summed over CPUs by userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxCounters {
    /// TCP segments with SYN and ACK set.
    pub syn_ack: u64,
    /// TCP segments with RST set.
    pub rst: u64,
    /// ICMP type 3 or ICMPv6 type 1 (destination unreachable).
    pub icmp_unreach: u64,
    /// Everything else, passed untouched.
    pub other: u64,
    /// Replies matched to a live probe, by outcome.
    pub matched_open: u64,
    pub matched_refused: u64,
    pub matched_unreach: u64,
    /// Replies to a live probe's flow whose ack/sequence/id did not echo the cookie.
    pub forged: u64,
    /// Replies to the probe port range with no live probe (late, duplicate or invented).
    pub stale: u64,
    /// RSTs sent back with XDP_TX to close half-open probes.
    pub rst_sent: u64,
    /// Matched replies lost because the event ring buffer was full.
    pub ringbuf_full: u64,
    /// HTTP probes: requests sent in answer to a SYN+ACK (again for a repeated SYN+ACK).
    pub http_requests: u64,
    /// HTTP probes: responses, resets and closes matched after the request.
    pub matched_http: u64,
    /// HTTP probes whose SYN+ACK frame had no room for the request (the driver gives XDP no
    /// tailroom): those checks go through sockets from then on.
    pub http_no_room: u64,
    /// Segments of probe connections that are gone (a FIN or data arriving after probe_rx's
    /// RST, an answer after the timeout), answered with the RST the node's stack would send.
    pub late_reset: u64,
    /// HTTP probes the kernel could not settle with certainty and left to a socket.
    pub http_undecided: u64,
    /// UDP datagrams answering a live plain UDP probe (the port is open): consumed, so the
    /// node's stack neither tracks them nor answers with a port unreachable.
    pub udp_reply: u64,
    /// Segments sent on tunnelled probes' flows (RSTs, HTTP requests), wrapped as their SYN.
    pub tunnel_sent: u64,
    /// Tunnelled probes whose road was not recorded (PROBE_ROADS full): the RST went
    /// unwrapped, an HTTP probe ended without a verdict.
    pub no_road: u64,
}

const _: () = assert!(core::mem::size_of::<RxCounters>() == 152);

impl RxCounters {
    /// Adds another CPU's slot to this one.
    pub fn accumulate(&mut self, o: &RxCounters) {
        self.syn_ack += o.syn_ack;
        self.rst += o.rst;
        self.icmp_unreach += o.icmp_unreach;
        self.other += o.other;
        self.matched_open += o.matched_open;
        self.matched_refused += o.matched_refused;
        self.matched_unreach += o.matched_unreach;
        self.forged += o.forged;
        self.stale += o.stale;
        self.rst_sent += o.rst_sent;
        self.ringbuf_full += o.ringbuf_full;
        self.http_requests += o.http_requests;
        self.matched_http += o.matched_http;
        self.http_no_room += o.http_no_room;
        self.late_reset += o.late_reset;
        self.http_undecided += o.http_undecided;
        self.udp_reply += o.udp_reply;
        self.tunnel_sent += o.tunnel_sent;
        self.no_road += o.no_road;
    }
}

/// What the generator did, summed over CPUs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxCounters {
    /// Frames built and handed to the device.
    pub sent: u64,
    /// Runs past the end of the job list (dropped, nothing sent).
    pub no_job: u64,
    /// Jobs with no route to the target.
    pub no_route: u64,
    /// Jobs whose next hop had no resolved neighbour (reported for the stack path).
    pub no_neigh: u64,
    /// In-flight table insertions that failed (table full).
    pub inflight_full: u64,
    /// Events lost because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Tunnelled probes whose road could not be recorded (PROBE_ROADS full).
    pub roads_full: u64,
}

const _: () = assert!(core::mem::size_of::<TxCounters>() == 56);

impl TxCounters {
    pub fn accumulate(&mut self, o: &TxCounters) {
        self.sent += o.sent;
        self.no_job += o.no_job;
        self.no_route += o.no_route;
        self.no_neigh += o.no_neigh;
        self.inflight_full += o.inflight_full;
        self.ringbuf_full += o.ringbuf_full;
        self.roads_full += o.roads_full;
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), Copy, only u64 fields, no padding: every bit pattern is valid.
    unsafe impl aya::Pod for super::RxCounters {}
    // SAFETY: as for RxCounters.
    unsafe impl aya::Pod for super::TxCounters {}
}
