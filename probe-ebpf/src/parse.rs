//! Bounds-checked packet access: every header read goes through `ptr_at`.
use aya_ebpf::programs::XdpContext;

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
