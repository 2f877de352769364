//! Plain copies of the two control-block lines, as the bridge stages them for the copy
//! engine: line 0 (host-written) goes down, line 1 (kernel-written) comes up.
//!
//! The byte layout of each is exactly that of its half of [`ControlBlock`] (checked at
//! compile time below), so a staged line is copied as 64 bytes.

use core::sync::atomic::Ordering::{Acquire, Release};

use gyre_abi::ControlBlock;

/// Bytes of one control-block line.
pub(crate) const LINE: usize = 64;

/// Line 0 of the control block, as plain values.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct HostLine {
    pub magic: u32,
    pub abi_version: u32,
    pub command: u32,
    pub capacity: u32,
    pub slot_size: u32,
    pub batch_size: u32,
    pub host_timeout_ms: u32,
    pub host_flags: u32,
    pub h2k_head: u64,
    pub k2h_tail: u64,
    pub host_heartbeat: u64,
    pub epoch_us: u32,
    pub generation: u32,
}

/// Line 1 of the control block, as plain values.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct KernelLine {
    pub state: u32,
    pub error_code: u32,
    pub h2k_tail: u64,
    pub k2h_head: u64,
    pub kernel_heartbeat: u64,
    pub processed: u64,
    pub reserved: [u64; 3],
}

macro_rules! same_offsets {
    ($line:ty, $base:expr; $($f:ident = $g:ident),* $(,)?) => {
        $(static_assertions::const_assert_eq!(
            core::mem::offset_of!($line, $f) + $base,
            core::mem::offset_of!(ControlBlock, $g)
        );)*
    };
}

static_assertions::assert_eq_size!(HostLine, [u8; LINE]);
static_assertions::assert_eq_size!(KernelLine, [u8; LINE]);
same_offsets!(HostLine, 0; magic = magic, abi_version = abi_version, command = command,
    capacity = capacity, slot_size = slot_size, batch_size = batch_size,
    host_timeout_ms = host_timeout_ms, host_flags = host_flags, h2k_head = h2k_head, k2h_tail = k2h_tail,
    host_heartbeat = host_heartbeat, epoch_us = epoch_us, generation = generation);
same_offsets!(KernelLine, LINE; state = state, error_code = error_code, h2k_tail = h2k_tail,
    k2h_head = k2h_head, kernel_heartbeat = kernel_heartbeat, processed = processed);

impl HostLine {
    /// Snapshot of the host's line 0. `h2k_head` is loaded first, with acquire, so every
    /// request slot below it is fully written.
    pub fn load(cb: &ControlBlock) -> Self {
        let h2k_head = cb.h2k_head.load(Acquire);
        Self {
            magic: cb.magic.load(Acquire),
            abi_version: cb.abi_version.load(Acquire),
            command: cb.command.load(Acquire),
            capacity: cb.capacity.load(Acquire),
            slot_size: cb.slot_size.load(Acquire),
            batch_size: cb.batch_size.load(Acquire),
            host_timeout_ms: cb.host_timeout_ms.load(Acquire),
            host_flags: cb.host_flags.load(Acquire),
            h2k_head,
            k2h_tail: cb.k2h_tail.load(Acquire),
            host_heartbeat: cb.host_heartbeat.load(Acquire),
            epoch_us: cb.epoch_us.load(Acquire),
            generation: cb.generation.load(Acquire),
        }
    }

    /// Writes the line's bytes to `p`.
    ///
    /// # Safety
    ///
    /// `p` is valid for [`LINE`] writes, 8-aligned, and not accessed concurrently.
    pub unsafe fn store_to(&self, p: *mut u8) {
        debug_assert_eq!(p as usize % 8, 0);
        // SAFETY: caller contract; HostLine is Pod and LINE bytes long.
        unsafe { core::ptr::write(p.cast::<Self>(), *self) }
    }
}

impl KernelLine {
    /// Reads a staged line.
    ///
    /// # Safety
    ///
    /// `p` is valid for [`LINE`] reads, 8-aligned, and not written concurrently.
    pub unsafe fn load_from(p: *const u8) -> Self {
        debug_assert_eq!(p as usize % 8, 0);
        // SAFETY: caller contract; every bit pattern is a valid KernelLine (Pod).
        unsafe { core::ptr::read(p.cast::<Self>()) }
    }

    /// Stores the line into the mirror's line 1 with release: `k2h_head` after the reply
    /// slots it covers (published before this call), the state last.
    pub fn store_into(&self, cb: &ControlBlock) {
        cb.h2k_tail.store(self.h2k_tail, Release);
        cb.processed.store(self.processed, Release);
        cb.kernel_heartbeat.store(self.kernel_heartbeat, Release);
        cb.k2h_head.store(self.k2h_head, Release);
        cb.error_code.store(self.error_code, Release);
        cb.state.store(self.state, Release);
    }
}
