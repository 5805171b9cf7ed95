//! Bounds-checked packet access: every header read goes through `ptr_at`.
use probe_common::packet::{Ipv4Hdr, Ipv6Hdr};

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

/// The network header of a frame, as far as matching needs it.
pub struct L3 {
    pub ipv6: bool,
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub proto: u8,
    pub l4_off: usize,
}

#[inline(always)]
pub fn parse_l3(ctx: &impl Packet, off: usize, ethertype_v6: bool) -> Option<L3> {
    if ethertype_v6 {
        let ip = read_at::<Ipv6Hdr>(ctx, off)?;
        if ip.ver_tc_flow[0] >> 4 != 6 {
            return None;
        }
        // Extension headers are not followed: probe replies never carry them.
        Some(L3 {
            ipv6: true,
            saddr: ip.saddr,
            daddr: ip.daddr,
            proto: ip.next_hdr,
            l4_off: off + Ipv6Hdr::LEN,
        })
    } else {
        let ip = read_at::<Ipv4Hdr>(ctx, off)?;
        // Strict: a malformed header or a fragment is passed on untouched, never read past.
        if !ip.is_plain() {
            return None;
        }
        let (mut saddr, mut daddr) = ([0u8; 16], [0u8; 16]);
        saddr[..4].copy_from_slice(&ip.saddr);
        daddr[..4].copy_from_slice(&ip.daddr);
        Some(L3 {
            ipv6: false,
            saddr,
            daddr,
            proto: ip.proto,
            l4_off: off + ip.header_len(),
        })
    }
}

/// Shrinks the frame to `T`'s size and returns it as a `T` to be written in place, borrowed
/// from the context exclusively (as tx.rs's frame_mut).
#[inline(always)]
pub fn shrink_to<T>(ctx: &mut impl Packet) -> Option<&mut T> {
    if !ctx.set_len(core::mem::size_of::<T>()) {
        return None;
    }
    let p = ptr_at::<T>(ctx, 0)?;
    // SAFETY: ptr_at checked the bounds after the resize; every frame layout has alignment 1;
    // the packet is reached only through `ctx`, which the returned reference borrows
    // mutably, so no other reference to it can exist.
    Some(unsafe { &mut *p })
}
