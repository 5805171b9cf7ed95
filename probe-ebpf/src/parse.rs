//! Bounds-checked packet access: every header read goes through `ptr_at`, on any hook's
//! context (`ctx::Packet`: an XDP frame or a tc skb).
use probe_common::parse::Wire;
pub use probe_common::parse::L3;

use crate::ctx::Packet;

/// Returns a pointer to a `T` at `offset` bytes into the frame, or `None` when the frame is
/// too short. The explicit comparison against `data_end` is what the verifier needs to see.
#[inline(always)]
pub fn ptr_at<T>(ctx: &impl Packet, offset: usize) -> Option<*mut T> {
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
pub fn read_at<T: Copy>(ctx: &impl Packet, offset: usize) -> Option<T> {
    let p = ptr_at::<T>(ctx, offset)?;
    // SAFETY: ptr_at checked that offset..offset+size_of::<T>() lies inside the frame, and
    // read_unaligned places no alignment demand on packet memory.
    Some(unsafe { core::ptr::read_unaligned(p) })
}

/// A frame as the shared parser sees it: its bounds, taken from the context once. Every
/// read is checked against them as in `ptr_at`, in the kernel exactly as in the host tests
/// (there a byte slice). Passed by reference to functions that are not inlined: handing them
/// the context instead lets LLVM pass its 32-bit fields, whose widening in the callee the
/// verifier refuses on packet pointers.
#[derive(Clone, Copy)]
pub struct Frame {
    start: usize,
    end: usize,
}

impl Frame {
    #[inline(always)]
    pub fn of(ctx: &impl Packet) -> Self {
        Self {
            start: ctx.data(),
            end: ctx.data_end(),
        }
    }
}

impl probe_common::parse::Packet for Frame {
    #[inline(always)]
    fn read<T: Wire>(&self, off: usize) -> Option<T> {
        if self.start + off + core::mem::size_of::<T>() > self.end {
            return None;
        }
        // SAFETY: the bounds were checked just above against the frame's end; T: Wire
        // accepts any bytes at any alignment.
        Some(unsafe { core::ptr::read_unaligned((self.start + off) as *const T) })
    }
}

/// The strict network-header parse of probe_common::parse, on a frame at either hook.
#[inline(always)]
pub fn parse_l3(ctx: &impl Packet, off: usize, ipv6: bool) -> Option<L3> {
    probe_common::parse::parse_l3(&Frame::of(ctx), off, ipv6)
}

/// `parse_l3` in a stack frame of its own: the header copies it makes do not count against
/// the caller's frame (the matcher's deepest call chain runs through its caller).
#[inline(never)]
pub fn parse_l3_into(frame: &Frame, off: usize, ipv6: bool, out: &mut L3) -> bool {
    match probe_common::parse::parse_l3(frame, off, ipv6) {
        Some(l3) => {
            *out = l3;
            true
        }
        None => false,
    }
}

/// Shrinks the frame to `T`'s size and returns it as a `T` to be written in place, borrowed
/// from the context exclusively (as tx.rs's frame_mut).
#[inline(always)]
pub fn shrink_to<T>(ctx: &mut impl Packet) -> Option<&mut T> {
    shrink_to_at::<T>(ctx, 0)
}

/// Shrinks the frame to `off` bytes plus a `T`, and returns the `T` at `off` to be written in
/// place (the first `off` bytes are kept as they are).
#[inline(always)]
pub fn shrink_to_at<T>(ctx: &mut impl Packet, off: usize) -> Option<&mut T> {
    // Every packet pointer is re-derived below through ptr_at after the resize.
    if !ctx.set_len(off + core::mem::size_of::<T>()) {
        return None;
    }
    let p = ptr_at::<T>(ctx, off)?;
    // SAFETY: ptr_at checked the bounds after the resize; every frame layout has alignment 1;
    // the packet is reached only through `ctx`, which the returned reference borrows
    // mutably, so no other reference to it can exist.
    Some(unsafe { &mut *p })
}

/// Writes `value` at `off`, if the frame holds them.
#[inline(always)]
pub fn write_at<T: Copy>(ctx: &mut impl Packet, off: usize, value: T) -> Option<()> {
    let p = ptr_at::<T>(ctx, off)?;
    // SAFETY: ptr_at checked the bounds; write_unaligned places no alignment demand; the
    // context is borrowed mutably, so nothing else refers to the packet.
    unsafe { core::ptr::write_unaligned(p, value) };
    Some(())
}
