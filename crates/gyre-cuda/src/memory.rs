//! RAII device memory, typed by a device-copy bound.
//!
//! * [`DeviceBuffer<T>`]: device memory (`cuMemAlloc`), reached by explicit copies.
//! * [`PinnedBuffer<T>`]: page-locked host memory mapped into the device
//!   (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`, not write-combined, so host reads stay
//!   cached) with its device address (`cuMemHostGetDevicePointer`). `PinnedBuffer<u8>` is a
//!   [`RegionMemory`], so a [`gyre_core::SharedRegion`] can live in it (zero copy).
//! * [`UnifiedBuffer<T>`]: managed memory (`cuMemAllocManaged`) with prefetch and advice;
//!   host access is refused where the device lacks concurrent managed access.
//!
//! Every buffer is zeroed at allocation (on the context's utility stream, complete before
//! the constructor returns), binds its context before each driver call, and hands its
//! memory back to the context in `Drop` ([`crate::context`]: freed at once, or deferred
//! while a ring kernel runs, since a free could wait for it forever).

use core::ptr::NonNull;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use gyre_core::region::RegionMemory;

use crate::context::{Context, Release, Reusable};
use crate::error::{Error, Result};
use crate::result;
use crate::sys::{self, CUmemLocation, CUmemLocationType, CUmem_advise};

/// Types that may be copied to and from the device bit for bit, and for which all-zero
/// bytes are a valid value: exactly `bytemuck::Pod`.
pub trait DeviceRepr: bytemuck::Pod + Send + Sync {}
impl<T: bytemuck::Pod + Send + Sync> DeviceRepr for T {}

/// The alignment a [`PinnedBuffer`] must have to back a shared region.
pub const REGION_ALIGN: usize = 128;

fn bytes_of<T>(op: &'static str, len: usize) -> Result<usize> {
    let elem = core::mem::size_of::<T>();
    len.checked_mul(elem)
        .ok_or(Error::SizeOverflow { op, len, elem })
}

/// Zeroes `bytes` of device (or managed) memory at `p` on the utility stream and waits.
fn zero_device(ctx: &Context, p: sys::CUdeviceptr, bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    ctx.bind()?;
    let s = ctx.streams.utility()?;
    // SAFETY: `p` is `bytes` bytes of device memory of this context; the stream is live.
    unsafe { result::memset_d8_async(p, 0, bytes, s.get())? };
    s.synchronize("zeroing new device memory")
}

/// `len` values of `T` in device memory.
#[derive(Debug)]
pub struct DeviceBuffer<T: DeviceRepr> {
    ctx: Arc<Context>,
    ptr: sys::CUdeviceptr,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` zeroed values. The zeroing has completed when this returns (it
    /// runs on the context's utility stream, never the legacy default stream), so any
    /// later copy or launch sees zeros. A block freed while ring kernels ran and deferred
    /// ([`crate::context`]) is reused when its size matches.
    ///
    /// # Errors
    ///
    /// [`Error::SizeOverflow`]; the driver's error naming the call and the size.
    pub fn zeroed(ctx: &Arc<Context>, len: usize) -> Result<Self> {
        let bytes = bytes_of::<T>("cuMemAlloc", len)?;
        let ptr = match ctx.reuse(Reusable::Device, bytes) {
            Some(Release::Device(p, _)) => p,
            other => {
                if let Some(r) = other {
                    ctx.release(r);
                }
                ctx.bind()?;
                // SAFETY: the context is current.
                unsafe { result::mem_alloc(bytes)? }
            }
        };
        // Owned from here: Drop releases it on every error path below.
        let buf = Self {
            ctx: ctx.clone(),
            ptr,
            len,
            _t: PhantomData,
        };
        zero_device(ctx, ptr, bytes)?;
        Ok(buf)
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Copies `src` (exactly `len` values) to the device and waits.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`]; the driver's error.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        let bytes = self.same_len("cuMemcpyHtoDAsync", src.len())?;
        self.ctx.bind()?;
        let s = self.ctx.streams.utility()?;
        // SAFETY: `src` is `bytes` readable bytes, borrowed until the synchronize below;
        // the destination holds `bytes` bytes.
        unsafe { result::memcpy_htod_async(self.ptr, src.as_ptr().cast(), bytes, s.get())? };
        s.synchronize("a host-to-device copy")
    }

    /// Copies the device values into `dst` (exactly `len` values) and waits.
    ///
    /// # Errors
    ///
    /// [`Error::LengthMismatch`]; the driver's error.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        let bytes = self.same_len("cuMemcpyDtoHAsync", dst.len())?;
        self.ctx.bind()?;
        let s = self.ctx.streams.utility()?;
        // SAFETY: `dst` is `bytes` writable bytes of a Pod type (any bytes are valid),
        // borrowed until the synchronize below; the source holds `bytes` bytes.
        unsafe { result::memcpy_dtoh_async(dst.as_mut_ptr().cast(), self.ptr, bytes, s.get())? };
        s.synchronize("a device-to-host copy")
    }

    fn same_len(&self, op: &'static str, other: usize) -> Result<usize> {
        if other != self.len {
            return Err(Error::LengthMismatch {
                op,
                buffer: self.len,
                host: other,
            });
        }
        bytes_of::<T>(op, self.len)
    }
}

// SAFETY: `zeroed` returns zeroed device memory of `len` bytes from `cuMemAlloc`, whose
// addresses are non-zero and aligned to at least 256 bytes, freed only on drop. As a
// ring it is owned by a `SharedRegion`, which every kernel reading or writing the ring
// holds until it finished (its own launch's `keep`; a writer's link, on this device or
// a peer), so no kernel outlives it. The host does not address it (no view).
unsafe impl gyre_core::region::RingMemory for DeviceBuffer<u8> {
    fn device_address(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn host(&self) -> Option<NonNull<u8>> {
        None
    }
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // Cannot overflow: checked at allocation.
        let bytes = self.len * core::mem::size_of::<T>();
        self.ctx.release(Release::Device(self.ptr, bytes));
    }
}

/// `len` values of `T` in page-locked host memory mapped into the device's address space.
#[derive(Debug)]
pub struct PinnedBuffer<T: DeviceRepr> {
    ctx: Arc<Context>,
    host: NonNull<T>,
    dev: sys::CUdeviceptr,
    len: usize,
}

// SAFETY: the buffer owns its allocation; `&mut` access goes through `&mut self` and
// shared access through `&self` (T: Sync); the device side is the caller's protocol.
unsafe impl<T: DeviceRepr> Send for PinnedBuffer<T> {}
// SAFETY: as above.
unsafe impl<T: DeviceRepr> Sync for PinnedBuffer<T> {}

impl<T: DeviceRepr> PinnedBuffer<T> {
    /// Allocates `len` zeroed values, mapped into the device (`cuMemHostAlloc` with
    /// `DEVICEMAP | PORTABLE`: cached, not write-combined, so host reads stay fast).
    /// Needs `CAN_MAP_HOST_MEMORY`. A deferred block of the same size is reused.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] without `CAN_MAP_HOST_MEMORY`; the driver's error.
    pub fn zeroed(ctx: &Arc<Context>, len: usize) -> Result<Self> {
        let bytes = bytes_of::<T>("cuMemHostAlloc", len)?;
        if !ctx.device().can_map_host_memory {
            return Err(Error::Unsupported {
                op: "cuMemHostAlloc(DEVICEMAP)",
                capability: "CAN_MAP_HOST_MEMORY",
                device: ctx.device().name.clone(),
            });
        }
        let alloc_bytes = bytes.max(1);
        let raw = match ctx.reuse(Reusable::Host, alloc_bytes) {
            Some(Release::Host(p, _)) => p,
            other => {
                if let Some(r) = other {
                    ctx.release(r);
                }
                ctx.bind()?;
                // SAFETY: the context is current.
                unsafe { result::mem_host_alloc_mapped(alloc_bytes)? }
            }
        };
        let host = NonNull::new(raw.cast::<T>()).ok_or_else(|| Error::Driver {
            op: "cuMemHostAlloc",
            name: "a null pointer".into(),
            code: 0,
            detail: format!(", {bytes} bytes"),
        })?;
        // Owned from here: Drop releases it on every error path below.
        let mut buf = Self {
            ctx: ctx.clone(),
            host,
            dev: 0,
            len,
        };
        // SAFETY: `raw` is `alloc_bytes` writable bytes owned by `buf`.
        unsafe { std::ptr::write_bytes(raw.cast::<u8>(), 0, alloc_bytes) };
        ctx.bind()?;
        // SAFETY: the context is current; `raw` is a live DEVICEMAP allocation.
        buf.dev = unsafe { result::host_device_pointer(raw)? };
        Ok(buf)
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of the mapping (equal to the host address under unified
    /// addressing).
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.dev
    }

    /// The host address.
    pub fn host_ptr(&self) -> NonNull<T> {
        self.host
    }

    /// The values, from the host. A running kernel may write them concurrently: use this
    /// only while no kernel does, or read through atomics as the ring protocol does.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised (zeroed, Pod) values, live until drop.
        unsafe { std::slice::from_raw_parts(self.host.as_ptr(), self.len) }
    }

    /// The values, mutably, from the host.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` excludes other host access.
        unsafe { std::slice::from_raw_parts_mut(self.host.as_ptr(), self.len) }
    }
}

impl<T: DeviceRepr> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let bytes = (self.len * core::mem::size_of::<T>()).max(1);
        self.ctx
            .release(Release::Host(self.host.as_ptr().cast::<c_void>(), bytes));
    }
}

// SAFETY: `zeroed` returns zeroed memory of `len` bytes that lives until drop, and
// cuMemHostAlloc returns page-aligned memory; `region_zeroed` also checks the 128-byte
// alignment before handing one out.
unsafe impl RegionMemory for PinnedBuffer<u8> {
    fn base(&self) -> NonNull<u8> {
        self.host
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl PinnedBuffer<u8> {
    /// Zeroed mapped pinned memory for a shared region of `bytes` bytes, checked to be
    /// [`REGION_ALIGN`]-aligned on both sides.
    ///
    /// # Errors
    ///
    /// As [`PinnedBuffer::zeroed`], and [`Error::Driver`] for a misaligned allocation.
    pub fn region_zeroed(ctx: &Arc<Context>, bytes: usize) -> Result<Self> {
        let b = Self::zeroed(ctx, bytes)?;
        let addr = b.host.as_ptr() as usize;
        if addr % REGION_ALIGN != 0 || b.dev as usize % REGION_ALIGN != 0 {
            return Err(Error::Driver {
                op: "cuMemHostAlloc",
                name: "misaligned allocation".into(),
                code: 0,
                detail: format!(
                    ", {bytes} bytes at host {addr:#x} / device {:#x}, need {REGION_ALIGN}-byte alignment",
                    b.dev
                ),
            });
        }
        Ok(b)
    }
}

/// Where to prefetch managed memory to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// The buffer's device.
    Device,
    /// Host memory.
    Host,
}

/// `len` values of `T` in managed (unified) memory.
#[derive(Debug)]
pub struct UnifiedBuffer<T: DeviceRepr> {
    ctx: Arc<Context>,
    ptr: sys::CUdeviceptr,
    len: usize,
    _t: PhantomData<T>,
}

// SAFETY: the buffer owns its allocation; host access goes through `&self` / `&mut self`.
unsafe impl<T: DeviceRepr> Send for UnifiedBuffer<T> {}
// SAFETY: as above.
unsafe impl<T: DeviceRepr> Sync for UnifiedBuffer<T> {}

impl<T: DeviceRepr> UnifiedBuffer<T> {
    /// Allocates `len` zeroed values of managed memory, attached globally, with the device
    /// as preferred location and the host as an accessor.
    ///
    /// # Errors
    ///
    /// The driver's error naming the call and the size.
    pub fn zeroed(ctx: &Arc<Context>, len: usize) -> Result<Self> {
        let bytes = bytes_of::<T>("cuMemAllocManaged", len)?;
        ctx.bind()?;
        // SAFETY: the context is current.
        let ptr = unsafe { result::mem_alloc_managed(bytes)? };
        let buf = Self {
            ctx: ctx.clone(),
            ptr,
            len,
            _t: PhantomData,
        };
        zero_device(ctx, ptr, bytes)?;
        buf.advise(
            CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
            Location::Device,
        )?;
        buf.advise(CUmem_advise::CU_MEM_ADVISE_SET_ACCESSED_BY, Location::Host)?;
        Ok(buf)
    }

    fn location(&self, at: Location) -> CUmemLocation {
        match at {
            Location::Device => CUmemLocation {
                type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.ctx.dev(),
            },
            Location::Host => CUmemLocation {
                type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                id: 0,
            },
        }
    }

    fn bytes(&self) -> usize {
        // Cannot overflow: checked at allocation.
        self.len * core::mem::size_of::<T>()
    }

    /// Gives the driver `advice` about the whole buffer for `at`.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn advise(&self, advice: CUmem_advise, at: Location) -> Result<()> {
        if self.bytes() == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: the exact range of a live managed allocation of the bound context.
        unsafe { result::mem_advise(self.ptr, self.bytes(), advice, self.location(at)) }
    }

    /// Prefetches the whole buffer to `to` on the utility stream, and waits.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn prefetch(&self, to: Location) -> Result<()> {
        if self.bytes() == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        let s = self.ctx.streams.utility()?;
        // SAFETY: the exact range of a live managed allocation; a live stream.
        unsafe { result::mem_prefetch_async(self.ptr, self.bytes(), self.location(to), s.get())? };
        s.synchronize("a managed-memory prefetch")
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The (unified) address, valid on the device and the host.
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    fn host_access(&self) -> Result<()> {
        if self.ctx.device().concurrent_managed_access {
            Ok(())
        } else {
            Err(Error::Unsupported {
                op: "host access to managed memory while kernels may run",
                capability: "CONCURRENT_MANAGED_ACCESS",
                device: self.ctx.device().name.clone(),
            })
        }
    }

    /// The values, from the host. Refused ([`Error::Unsupported`]) where the device lacks
    /// concurrent managed access: there, host access while any kernel runs faults.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`], see above.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.host_access()?;
        // SAFETY: `len` initialised (zeroed, Pod) values at a host-addressable managed
        // address, live until drop.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr as usize as *const T, self.len) })
    }

    /// The values, mutably, from the host (refused as [`as_slice`](Self::as_slice) is).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`], see [`as_slice`](Self::as_slice).
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.host_access()?;
        // SAFETY: as above, and `&mut self` excludes other host access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr as usize as *mut T, self.len) })
    }
}

impl<T: DeviceRepr> Drop for UnifiedBuffer<T> {
    fn drop(&mut self) {
        self.ctx.release(Release::Managed(self.ptr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_overflow_is_a_typed_error() {
        let e = bytes_of::<u64>("cuMemAlloc", usize::MAX).unwrap_err();
        assert!(
            matches!(
                e,
                Error::SizeOverflow {
                    len: usize::MAX,
                    elem: 8,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(bytes_of::<u32>("x", 3).unwrap(), 12);
    }

    #[test]
    fn pod_types_are_device_repr() {
        fn is<T: DeviceRepr>() {}
        is::<u8>();
        is::<[f32; 4]>();
        is::<[u64; 16]>();
    }
}
