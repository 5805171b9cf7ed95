//! The packet a program sees, whatever hook it runs at: an XDP frame or a tc skb. The
//! parsers and the reply matcher are written against this trait, so the XDP and the tcx
//! entry points run the same code.
use aya_ebpf::{
    helpers::{bpf_skb_change_tail, bpf_xdp_adjust_tail},
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
}
