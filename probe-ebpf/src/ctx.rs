//! The packet a program sees, whatever hook it runs at: an XDP frame or a tc skb. The
//! parsers and the reply matcher are written against this trait, so the XDP and the tcx
//! entry points run the same code.
use aya_ebpf::{
    helpers::{
        bpf_skb_change_tail, bpf_skb_store_bytes, bpf_xdp_adjust_head, bpf_xdp_adjust_tail, bpf_xdp_store_bytes,
    },
    programs::{TcContext, XdpContext},
};

/// Direct access to a packet's bytes: `data()..data_end()` is what may be read (after the
/// bounds check in `parse::ptr_at`), and `set_len` trims the tail.
pub trait Packet {
    fn data(&self) -> usize;
    fn data_end(&self) -> usize;
    /// Cuts the packet to `len` bytes (never longer than it is); false when the kernel refuses.
    /// Every packet pointer taken before the call is invalid after it.
    fn set_len(&mut self, len: usize) -> bool;
    /// Grows or cuts the packet to `len` bytes, keeping none of its contents in place (the
    /// caller rewrites all of it); false when the kernel refuses. Every packet pointer taken
    /// before is invalid after it.
    fn resize(&mut self, len: usize) -> bool;
    /// Copies `len` bytes from `src` (map memory of at least `len` bytes) into the packet at
    /// `off`; false when they do not fit.
    fn store(&mut self, off: usize, src: *const u8, len: u32) -> bool;
}

impl Packet for XdpContext {
    #[inline(always)]
    fn data(&self) -> usize {
        XdpContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        XdpContext::data_end(self)
    }

    #[inline(always)]
    fn set_len(&mut self, len: usize) -> bool {
        let have = (self.data_end() - self.data()) as i32;
        let delta = len as i32 - have;
        if delta > 0 {
            return false;
        }
        // SAFETY: shrinking the tail by a length the frame has is always valid; callers
        // re-derive their packet pointers through ptr_at afterwards.
        delta == 0 || unsafe { bpf_xdp_adjust_tail(self.ctx, delta) } == 0
    }

    /// At the tail when the driver left room there; else at the head, into the headroom
    /// every XDP frame has (256 bytes less the kernel's xdp_frame): veth copies a locally
    /// built skb into a buffer of its own size, with no tailroom to speak of.
    #[inline(always)]
    fn resize(&mut self, len: usize) -> bool {
        let delta = len as i32 - (self.data_end() - self.data()) as i32;
        if delta == 0 {
            return true;
        }
        // SAFETY: both helpers check the frame's room themselves and fail without change
        // when there is too little; callers re-derive their packet pointers afterwards.
        unsafe {
            bpf_xdp_adjust_tail(self.ctx, delta) == 0 || (delta > 0 && bpf_xdp_adjust_head(self.ctx, -delta) == 0)
        }
    }

    #[inline(always)]
    fn store(&mut self, off: usize, src: *const u8, len: u32) -> bool {
        // SAFETY: the helper bounds-checks the destination against the frame; the verifier
        // checks `src` holds `len` readable bytes.
        unsafe { bpf_xdp_store_bytes(self.ctx, off as u32, src.cast_mut().cast(), len) == 0 }
    }
}

/// Brings the first `max` bytes of an skb (or all of a shorter one) into its linear part,
/// where direct packet access reaches, when they are not there already; the packet's bytes
/// stay as they were. XDP frames are always linear. A failure leaves the packet as it was:
/// the bounds-checked parsers then find too little and pass it.
#[inline(always)]
pub fn pull_headers(ctx: &TcContext, max: u32) {
    let want = ctx.len().min(max);
    if ((ctx.data_end() - ctx.data()) as u32) < want {
        let _ = ctx.pull_data(want);
    }
}

impl Packet for TcContext {
    #[inline(always)]
    fn data(&self) -> usize {
        TcContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        TcContext::data_end(self)
    }

    #[inline(always)]
    fn set_len(&mut self, len: usize) -> bool {
        if len as u32 > self.len() {
            return false;
        }
        // SAFETY: trimming an skb to a length it has; the helper re-validates the packet
        // pointers, which callers re-derive through ptr_at afterwards.
        len as u32 == self.len() || unsafe { bpf_skb_change_tail(self.skb.skb, len as u32, 0) } == 0
    }

    #[inline(always)]
    fn resize(&mut self, len: usize) -> bool {
        // SAFETY: as in set_len; growing reallocates the skb's data when it must.
        len as u32 == self.len() || unsafe { bpf_skb_change_tail(self.skb.skb, len as u32, 0) } == 0
    }

    #[inline(always)]
    fn store(&mut self, off: usize, src: *const u8, len: u32) -> bool {
        // SAFETY: as for XDP: the helper checks the destination, the verifier the source.
        unsafe { bpf_skb_store_bytes(self.skb.skb, off as u32, src.cast(), len, 0) == 0 }
    }
}
