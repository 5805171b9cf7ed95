//! The slot table a `kind = "bpf"` sink pins for an XDP or TC load balancer on the node: the
//! one definition both sides compile. ABI version 1; a change of layout or protocol bumps
//! `SLOT_ABI_VERSION`.
//!
//! Two pinned BPF arrays under `<pin_dir>/sinks/`:
//! - `NAME`: `2 * slots` entries of [`SlotBackend`] (key: `u32` index), two halves of `slots`.
//! - `NAME_ctl`: one [`SlotControl`] (key: `0u32`): which half is live, the slot count, the
//!   ABI version and a generation counter.
//!
//! A reader (per packet): look up the control entry; drop or pass if it is missing or its
//! `version` is not the one it was built for; index `active * slots + hash(flow) % slots`;
//! use the entry if `flags & SLOT_VALID`, else no backend (the profile has none eligible).
//!
//! The writer (probed) never touches the live half: it writes the other half whole, then
//! flips `active` and bumps `generation` with one update of the control entry, and it waits
//! at least `SLOT_MIN_FLIP_NS` before the next flip. A lookup that read the control entry
//! before a flip reads the old half, which stays as it was for that long: far longer than a
//! program runs, so no reader ever sees a half-written entry.

/// The layout and protocol described above.
pub const SLOT_ABI_VERSION: u32 = 1;
/// `SlotBackend::flags`: the entry names a backend.
pub const SLOT_VALID: u8 = 1;
pub const SLOT_FAMILY_V4: u8 = 4;
pub const SLOT_FAMILY_V6: u8 = 6;
/// The least time between two flips of `active` (10 ms).
pub const SLOT_MIN_FLIP_NS: u64 = 10_000_000;

/// One slot: the backend a flow hashed to it goes to.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SlotBackend {
    /// IPv4 in the first four bytes (the rest zero), or IPv6; network byte order.
    pub addr: [u8; 16],
    pub port_be: u16,
    /// `SLOT_FAMILY_V4` or `SLOT_FAMILY_V6`.
    pub family: u8,
    pub flags: u8,
    pub _pad: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<SlotBackend>() == 24);
const _: () = assert!(core::mem::align_of::<SlotBackend>() == 2);

/// The control entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SlotControl {
    /// `SLOT_ABI_VERSION` of the writer.
    pub version: u32,
    /// Slots per half.
    pub slots: u32,
    /// The live half: 0 or 1.
    pub active: u32,
    pub _pad: u32,
    /// Flips so far; a reader may compare it to notice a new table.
    pub generation: u64,
}

const _: () = assert!(core::mem::size_of::<SlotControl>() == 24);
const _: () = assert!(core::mem::align_of::<SlotControl>() == 8);

impl SlotBackend {
    /// The entry for an IPv4 backend (`addr` and `port` in host order as Rust holds them).
    pub fn v4(addr: [u8; 4], port: u16) -> Self {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&addr);
        SlotBackend {
            addr: a,
            port_be: port.to_be(),
            family: SLOT_FAMILY_V4,
            flags: SLOT_VALID,
            _pad: [0; 4],
        }
    }

    pub fn v6(addr: [u8; 16], port: u16) -> Self {
        SlotBackend {
            addr,
            port_be: port.to_be(),
            family: SLOT_FAMILY_V6,
            flags: SLOT_VALID,
            _pad: [0; 4],
        }
    }

    pub fn is_valid(&self) -> bool {
        self.flags & SLOT_VALID != 0
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: both are repr(C) with explicit padding fields, so every byte is initialised and
    // any bit pattern is a valid value.
    unsafe impl aya::Pod for super::SlotBackend {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SlotControl {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_hold_addresses_in_network_order() {
        let b = SlotBackend::v4([198, 18, 0, 2], 80);
        assert_eq!(&b.addr[..4], &[198, 18, 0, 2]);
        assert_eq!(b.port_be.to_ne_bytes(), [0, 80]);
        assert!(b.is_valid());
        assert!(!SlotBackend::default().is_valid(), "a zeroed slot names no backend");
    }
}
