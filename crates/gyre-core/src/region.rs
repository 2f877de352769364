//! The shared region of one ring kernel: control block, telemetry line, request ring and
//! reply ring in one allocation.
//!
//! ```text
//! offset 0              ControlBlock        128 B  (line 0 host-written, line 1 kernel-written)
//! offset 128            TelemetryBuffer      64 B  (+64 B padding, kernel-written)
//! offset 256            request ring   capacity x slot_size  (host -> kernel)
//! 256 + ring_bytes      reply ring     capacity x slot_size  (kernel -> host)
//! ```
//!
//! Where the region lives is the backend's business ([`RegionMemory`]): an aligned host
//! allocation for the CPU backend, mapped pinned memory for a zero-copy GPU strategy.

use core::ptr::NonNull;
use core::sync::atomic::Ordering::{Relaxed, Release};
use std::alloc::Layout;

use gyre_abi::{ControlBlock, TelemetryBuffer, ABI_VERSION, MAGIC};

use crate::error::{Error, Result};
use crate::ring::{Geometry, SlotPtr};

/// Offset of the telemetry line.
pub const TELEMETRY_OFFSET: usize = 128;
/// Offset of the request ring.
pub const RINGS_OFFSET: usize = 256;

/// Memory that backs a [`SharedRegion`].
///
/// # Safety
///
/// Implementors guarantee that `base()` points to `len()` bytes that are readable and
/// writable by the host, aligned to at least 128 bytes, zeroed when the value was
/// created, and valid (not moved, not freed) until the value is dropped.
pub unsafe trait RegionMemory: Send + Sync + 'static {
    /// Start of the memory.
    fn base(&self) -> NonNull<u8>;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A zeroed, page-aligned host allocation.
#[derive(Debug)]
pub struct HostMemory {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: HostMemory owns its allocation exclusively; the bytes are only accessed through
// the protocol's atomics and ownership rules, which are thread-safe.
unsafe impl Send for HostMemory {}
// SAFETY: as above; `&HostMemory` only hands out the base pointer.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Allocates `len` zeroed bytes aligned to 4096.
    pub fn zeroed(len: usize) -> Result<Self> {
        let align = 4096;
        let layout = Layout::from_size_align(len.max(1), align)
            .map_err(|_| Error::Alloc { size: len, align })?;
        // SAFETY: the layout has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(Error::Alloc { size: len, align })?;
        Ok(Self { ptr, layout })
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: `zeroed` returns zeroed, 4096-aligned memory of `layout.size() >= len` bytes
// that lives until drop.
unsafe impl RegionMemory for HostMemory {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}

/// Which of the two rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingId {
    /// Host -> kernel.
    Request,
    /// Kernel -> host.
    Reply,
}

/// Control block, telemetry and both rings of one kernel.
///
/// Invariant: `mem` is at least [`SharedRegion::bytes_for`]`(geometry)` long, `base` is
/// `mem.base()` (cached: slot access is on every hot path), and the control block was
/// initialised by [`SharedRegion::new`].
pub struct SharedRegion {
    mem: Box<dyn RegionMemory>,
    base: NonNull<u8>,
    geometry: Geometry,
}

// SAFETY: `base` points into `mem`, which is Send + Sync and owned by the region; all
// shared access to the bytes goes through atomics or the protocol's ownership rules.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl core::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("base", &self.mem.base())
            .field("geometry", &self.geometry)
            .finish()
    }
}

impl SharedRegion {
    /// Bytes a region of this geometry needs.
    pub fn bytes_for(g: &Geometry) -> usize {
        RINGS_OFFSET + 2 * g.ring_bytes()
    }

    /// Allocates a zeroed host region and initialises its control block.
    pub fn new_host(g: Geometry, host_timeout_ms: u32) -> Result<Self> {
        let mem = HostMemory::zeroed(Self::bytes_for(&g))?;
        Self::new(Box::new(mem), g, host_timeout_ms)
    }

    /// Wraps `mem` and writes the control block's host line: magic, ABI version, geometry,
    /// the run command and the host timeout.
    pub fn new(mem: Box<dyn RegionMemory>, g: Geometry, host_timeout_ms: u32) -> Result<Self> {
        let need = Self::bytes_for(&g);
        if mem.len() < need || mem.base().as_ptr() as usize % 128 != 0 {
            return Err(Error::Alloc {
                size: need,
                align: 128,
            });
        }
        let base = mem.base();
        let r = Self {
            mem,
            base,
            geometry: g,
        };
        let cb = r.control();
        cb.capacity.store(g.capacity(), Relaxed);
        cb.slot_size.store(g.slot_size(), Relaxed);
        cb.batch_size.store(g.batch(), Relaxed);
        cb.host_timeout_ms.store(host_timeout_ms, Relaxed);
        cb.command.store(gyre_abi::command::RUN, Relaxed);
        cb.generation.store(1, Relaxed);
        cb.abi_version.store(ABI_VERSION, Relaxed);
        cb.magic.store(MAGIC, Release);
        Ok(r)
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The control block.
    #[inline(always)]
    pub fn control(&self) -> &ControlBlock {
        // SAFETY: offset 0 of a live, 128-aligned region at least 128 bytes long (type
        // invariant). Every field another party writes is atomic; the plain reserved
        // fields are never written after zeroing.
        unsafe { self.base.cast::<ControlBlock>().as_ref() }
    }

    /// The telemetry line.
    #[inline(always)]
    pub fn telemetry(&self) -> &TelemetryBuffer {
        // SAFETY: offset 128 is 64-aligned and in bounds; all fields are atomics.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(TELEMETRY_OFFSET)
                .cast::<TelemetryBuffer>()
        }
    }

    /// The slot of free-running index `index` in `ring`.
    #[inline(always)]
    pub fn slot(&self, ring: RingId, index: u64) -> SlotPtr<'_> {
        let g = &self.geometry;
        let ring_base = match ring {
            RingId::Request => RINGS_OFFSET,
            RingId::Reply => RINGS_OFFSET + g.ring_bytes(),
        };
        let i = (index & g.mask()) as usize;
        debug_assert!(i < g.capacity() as usize);
        let off = ring_base + i * g.slot_size() as usize;
        debug_assert!(off + g.slot_size() as usize <= self.mem.len());
        // SAFETY: `off` is within the region (i < capacity), 128-aligned because the base
        // is and slot_size and RINGS_OFFSET are multiples of 128; the region outlives the
        // SlotPtr as long as callers hold `&self` (they hold an Arc of the region).
        unsafe {
            let p = NonNull::new_unchecked(self.base.as_ptr().add(off));
            SlotPtr::new(p, g.payload())
        }
    }

    /// Raw bytes of the whole region (for tests and telemetry export).
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }
}
