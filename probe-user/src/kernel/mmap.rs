//! A BPF array created with BPF_F_MMAPABLE, mapped into this process: userspace reads and
//! writes its entries as memory, without a syscall per entry (the generator's jobs, the
//! passive observers' counters).
use std::{
    os::fd::{AsFd, AsRawFd},
    ptr::NonNull,
};

use aya::maps::MapData;

use super::KernelError;

/// `entries` values of `T`, shared with the kernel. The kernel lays an mmapable array's
/// values out back to back, each rounded up to 8 bytes: `T`'s size must be a multiple of 8.
pub struct MappedArray<T> {
    ptr: NonNull<T>,
    entries: usize,
    /// The mapping's length in bytes (whole pages).
    len: usize,
    _map: MapData,
}

// SAFETY: the mapping is owned by this value alone; it holds plain data the kernel also
// writes, reached only through raw pointers by its users.
unsafe impl<T> Send for MappedArray<T> {}

impl<T> MappedArray<T> {
    /// Maps `map` (an mmapable array of `entries` values of `T`) shared and writable.
    pub fn new(map: MapData, entries: u32, name: &'static str) -> Result<Self, KernelError> {
        const { assert!(std::mem::size_of::<T>().is_multiple_of(8)) };
        let bytes = entries as usize * std::mem::size_of::<T>();
        let page = 4096;
        let len = bytes.div_ceil(page) * page;
        let fd = map.fd().as_fd().as_raw_fd();
        // SAFETY: mapping a BPF array created with BPF_F_MMAPABLE, shared and writable, for
        // its full (page-rounded) size; the fd stays open for the mapping's life (`_map`).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(KernelError::Mmap {
                name,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Self {
            ptr: NonNull::new(p.cast::<T>()).expect("mmap returned null without failing"),
            entries: entries as usize,
            len,
            _map: map,
        })
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Entry `index`'s address, or None past the end. What may be done through it, and
    /// when, is the caller's contract with the kernel program that shares the entry.
    pub fn entry(&self, index: usize) -> Option<*mut T> {
        // SAFETY: in bounds of the mapping, which holds `entries` values.
        (index < self.entries).then(|| unsafe { self.ptr.as_ptr().add(index) })
    }
}

impl<T> Drop for MappedArray<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped in new().
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
