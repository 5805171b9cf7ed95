//! Bounds-checked packet access: every header read goes through `ptr_at`.
use aya_ebpf::{helpers::bpf_xdp_adjust_tail, programs::XdpContext};
pub use probe_common::parse::L3;
use probe_common::parse::{Packet, Wire};

/// Returns a pointer to a `T` at `offset` bytes into the frame, or `None` when the frame is
/// too short. The explicit comparison against `data_end` is what the verifier needs to see.
#[inline(always)]
pub fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Option<*mut T> {
    let start = ctx.data();
    let end = ctx.data_end();
    let len = core::mem::size_of::<T>();
    if start + offset + len > end {
        return None;
    }
    Some((start + offset) as *mut T)
}

/// Reads a `T` at `offset` (unaligned), or `None` when out of bounds.
#[inline(always)]
pub fn read_at<T: Copy>(ctx: &XdpContext, offset: usize) -> Option<T> {
    let p = ptr_at::<T>(ctx, offset)?;
    // SAFETY: ptr_at checked that offset..offset+size_of::<T>() lies inside the frame, and
    // read_unaligned places no alignment demand on packet memory.
    Some(unsafe { core::ptr::read_unaligned(p) })
}

/// A frame as the shared parser sees it: every read goes through `read_at`, so through
/// `ptr_at`'s bounds check, in the kernel exactly as in the host tests (there a byte slice).
pub struct Frame<'a>(pub &'a XdpContext);

impl Packet for Frame<'_> {
    #[inline(always)]
    fn read<T: Wire>(&self, off: usize) -> Option<T> {
        read_at(self.0, off)
    }
}

/// The strict network-header parse of probe_common::parse, on an XDP frame.
#[inline(always)]
pub fn parse_l3(ctx: &XdpContext, off: usize, ipv6: bool) -> Option<L3> {
    probe_common::parse::parse_l3(&Frame(ctx), off, ipv6)
}

/// Shrinks the frame to `T`'s size and returns it as a `T` to be written in place, borrowed
/// from the context exclusively (as tx.rs's frame_mut).
#[inline(always)]
pub fn shrink_to<T>(ctx: &mut XdpContext) -> Option<&mut T> {
    let len = (ctx.data_end() - ctx.data()) as i32;
    let delta = core::mem::size_of::<T>() as i32 - len;
    if delta > 0 {
        return None;
    }
    if delta < 0 {
        // SAFETY: shrinking the tail by a length the frame has is always valid; every packet
        // pointer is re-derived below through ptr_at.
        if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } != 0 {
            return None;
        }
    }
    let p = ptr_at::<T>(ctx, 0)?;
    // SAFETY: ptr_at checked the bounds after the resize; every frame layout has alignment 1;
    // the packet is reached only through `ctx`, which the returned reference borrows
    // mutably, so no other reference to it can exist.
    Some(unsafe { &mut *p })
}
