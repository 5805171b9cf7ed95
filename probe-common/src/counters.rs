//! The reply matcher's counters: one per-CPU array slot holding named fields.

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
}

const _: () = assert!(core::mem::size_of::<RxCounters>() == 32);

impl RxCounters {
    /// Adds another CPU's slot to this one.
    pub fn accumulate(&mut self, other: &RxCounters) {
        self.syn_ack += other.syn_ack;
        self.rst += other.rst;
        self.icmp_unreach += other.icmp_unreach;
        self.other += other.other;
    }
}

// SAFETY: RxCounters is repr(C), Copy, made only of u64 fields with no padding, so every
// bit pattern is a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RxCounters {}
