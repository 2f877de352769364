//! The shared region of one ring kernel: control block, telemetry line, request ring and
//! reply ring in one allocation.
//!
//! ```text
//! offset 0              ControlBlock        128 B  (line 0 host-written, line 1 kernel-written)
//! offset 128            TelemetryBuffer      64 B  (kernel-written)
//! offset 192            RingPlacement        64 B  (host-written before the first launch)
//! offset 256            request ring   capacity x slot_size  (host -> kernel)
//! 256 + ring_bytes      reply ring     capacity x slot_size  (kernel -> host)
//! ```
//!
//! Where the region lives is the backend's business ([`RegionMemory`]): an aligned host
//! allocation for the CPU backend, mapped pinned memory for a zero-copy GPU strategy.
//!
//! A request ring that only kernels touch (a pipeline's inner ring, written by one stage
//! and read by the next, both on one device) may live apart from the region, in memory
//! the host need not address ([`RingMemory`]: device memory on CUDA):
//! [`SharedRegion::place_request_ring`] writes its device address into the placement
//! line, where the kernels read it at start (`gyre_request_ring` in
//! `cuda/include/gyre/ring.h`).

use core::ptr::NonNull;
use core::sync::atomic::Ordering::{Relaxed, Release};
use std::alloc::Layout;

use gyre_abi::{
    ControlBlock, RingPlacement, TelemetryBuffer, ABI_VERSION, MAGIC, PLACEMENT_OFFSET,
};

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

/// Memory that holds a region's request ring apart from the region
/// ([`SharedRegion::place_request_ring`]): a pipeline's inner ring, which only kernels
/// touch. A backend gives it from [`crate::Backend::alloc_kernel_ring`].
///
/// # Safety
///
/// Implementors guarantee that `device_address()` is the address at which the backend's
/// kernels (and those of backends granted peer access to it,
/// [`crate::Backend::enable_peer_writes`]) reach `len()` bytes, non-zero and aligned to
/// at least 128 bytes, zeroed when the value was created and valid (not moved, not
/// freed) until the value is dropped;
/// and that `host()`, when it is `Some`, points to those same bytes, readable and
/// writable by the host, aligned to at least 128 bytes.
pub unsafe trait RingMemory: Send + Sync + 'static {
    /// The address the kernels use.
    fn device_address(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The host's address of the same bytes, where the host can address them.
    fn host(&self) -> Option<NonNull<u8>>;
}

// SAFETY: host memory is its own device address (a host thread runs the CPU backend's
// kernels); `zeroed` gives zeroed, 4096-aligned bytes that live until drop.
unsafe impl RingMemory for HostMemory {
    fn device_address(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
    fn host(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
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
/// initialised by [`SharedRegion::new`]. `requests` is the host's address of the request
/// ring's first slot: `base + RINGS_OFFSET`, or the host view of `apart` when the ring
/// was placed there in host-addressable memory.
pub struct SharedRegion {
    mem: Box<dyn RegionMemory>,
    base: NonNull<u8>,
    geometry: Geometry,
    requests: NonNull<u8>,
    /// The request ring, when it lives apart from the region (its address is in the
    /// placement line). Held as long as the region: every kernel on the region holds it.
    apart: Option<Box<dyn RingMemory>>,
}

// SAFETY: `base` points into `mem`, and `requests` into `mem` or `apart`, all Send + Sync
// and owned by the region; all shared access to the bytes goes through atomics or the
// protocol's ownership rules.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl core::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("base", &self.mem.base())
            .field("geometry", &self.geometry)
            .field(
                "request_ring_apart",
                &self.apart.as_ref().map(|r| r.device_address()),
            )
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
        // SAFETY: RINGS_OFFSET < need <= mem.len(): in bounds of the allocation.
        let requests = unsafe { NonNull::new_unchecked(base.as_ptr().add(RINGS_OFFSET)) };
        let r = Self {
            mem,
            base,
            geometry: g,
            requests,
            apart: None,
        };
        // Zeroed memory already says "inline"; a reused allocation is told so.
        r.placement().request_ring.store(0, Relaxed);
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

    /// The placement line: where the request ring lives. Crate-private: the line is
    /// written once, by [`SharedRegion::place_request_ring`], before any kernel reads it.
    pub(crate) fn placement(&self) -> &RingPlacement {
        // SAFETY: offset 192 is 64-aligned and in bounds (RINGS_OFFSET is 256); the one
        // field another party reads is atomic, the reserved words are never written.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(PLACEMENT_OFFSET)
                .cast::<RingPlacement>()
        }
    }

    /// Moves the request ring into `ring`, apart from the region: its device address
    /// goes into the placement line, where every kernel on this region (and every stage
    /// writing into it) reads it at start. For a ring only kernels touch: the host's
    /// [`Channel`](crate::Channel) writes a region's inline ring, so never place the
    /// ring of a region a channel uses; when `ring` has no host view, the host must not
    /// read the request ring at all ([`SharedRegion::slot`] of [`RingId::Request`]).
    ///
    /// Taking `&mut self`, this runs before the region is shared, so before any kernel
    /// runs on it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the ring is already apart, or `ring` is shorter
    /// than the ring, at address 0 or not 128-aligned. The region is unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::region::{HostMemory, RingId, SharedRegion};
    /// use gyre_core::ring::Geometry;
    ///
    /// let g = Geometry::new(8, 128, 4)?;
    /// let mut r = SharedRegion::new_host(g, 0)?;
    /// assert_eq!(r.request_ring_apart(), None);
    /// r.place_request_ring(Box::new(HostMemory::zeroed(g.ring_bytes())?))?;
    /// let at = r.request_ring_apart().expect("placed");
    /// assert_eq!(r.slot(RingId::Request, 0).header_ptr() as u64, at);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn place_request_ring(&mut self, ring: Box<dyn RingMemory>) -> Result<()> {
        let need = self.geometry.ring_bytes();
        let at = ring.device_address();
        let reason = if self.apart.is_some() {
            Some("placed once, before the region is shared")
        } else if ring.len() < need {
            Some("at least capacity x slot_size bytes")
        } else if at == 0 || at % 128 != 0 {
            Some("a non-zero device address aligned to 128 bytes")
        } else if ring.host().is_some_and(|h| h.as_ptr() as usize % 128 != 0) {
            Some("a host view aligned to 128 bytes")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::InvalidArgument {
                name: "request ring placement",
                value: format!("{} bytes at {at:#x} (ring: {need} bytes)", ring.len()),
                reason,
            });
        }
        if let Some(h) = ring.host() {
            self.requests = h;
        }
        self.placement().request_ring.store(at, Release);
        self.apart = Some(ring);
        Ok(())
    }

    /// The device address of the request ring when it lives apart from the region
    /// ([`SharedRegion::place_request_ring`]).
    pub fn request_ring_apart(&self) -> Option<u64> {
        self.apart.as_ref().map(|r| r.device_address())
    }

    /// The slot of free-running index `index` in `ring`.
    ///
    /// A request ring placed apart without a host view is never read by the host
    /// ([`SharedRegion::place_request_ring`]).
    #[inline(always)]
    pub fn slot(&self, ring: RingId, index: u64) -> SlotPtr<'_> {
        let g = &self.geometry;
        debug_assert!(
            ring == RingId::Reply || self.apart.as_ref().is_none_or(|a| a.host().is_some()),
            "the host reads a request ring it does not address"
        );
        let i = (index & g.mask()) as usize;
        debug_assert!(i < g.capacity() as usize);
        let off = i * g.slot_size() as usize;
        let first = match ring {
            RingId::Request => self.requests,
            // SAFETY: RINGS_OFFSET + ring_bytes < bytes_for(g) <= mem.len().
            RingId::Reply => unsafe {
                NonNull::new_unchecked(self.base.as_ptr().add(RINGS_OFFSET + g.ring_bytes()))
            },
        };
        debug_assert!(
            ring == RingId::Request
                || RINGS_OFFSET + g.ring_bytes() + off + g.slot_size() as usize <= self.mem.len()
        );
        // SAFETY: `first` is the ring's first slot, in the region or in the placed ring
        // (at least ring_bytes long, host view aligned to 128: place_request_ring checks
        // both); `off` is within the ring (i < capacity) and 128-aligned because
        // slot_size is a multiple of 128; the memory outlives the SlotPtr as long as
        // callers hold `&self` (they hold an Arc of the region, which owns both).
        unsafe {
            let p = NonNull::new_unchecked(first.as_ptr().add(off));
            SlotPtr::new(p, g.payload())
        }
    }

    /// Raw bytes of the whole region (for tests and telemetry export).
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }
}
