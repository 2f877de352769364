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
//! Every buffer is zeroed at allocation, frees itself in `Drop` (a failure there is logged
//! with `tracing`), and binds its context before each driver call.

use core::ptr::NonNull;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUmemLocation, CUmemLocationType, CUmem_advise};
use gyre_core::region::RegionMemory;

use crate::context::Context;
use crate::error::{check, Error, Result};

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

fn sized(bytes: usize) -> impl Fn() -> String {
    move || format!(", {bytes} bytes")
}

/// Waits for the legacy default stream only: never `cuCtxSynchronize`, which would wait
/// for a persistent kernel on its own stream, that is, forever. The context must be
/// current.
fn sync_legacy_stream() -> Result<()> {
    // SAFETY: the null stream is always valid in the current context.
    let r = unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) };
    check("cuStreamSynchronize(legacy stream)", r, String::new)
}

/// Logs a failure to free (nothing else can be done about it in `Drop`).
fn log_drop(what: &'static str, r: Result<()>) {
    if let Err(e) = r {
        tracing::error!(error = %e, "freeing a CUDA {what}");
    }
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
    /// Allocates `len` zeroed values.
    pub fn zeroed(ctx: &Arc<Context>, len: usize) -> Result<Self> {
        let bytes = bytes_of::<T>("cuMemAlloc", len)?;
        ctx.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: context current; one pointer written through a valid pointer. A zero
        // size is rounded up to one byte (the driver rejects 0).
        check(
            "cuMemAlloc",
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) },
            sized(bytes),
        )?;
        let buf = Self {
            ctx: ctx.clone(),
            ptr,
            len,
            _t: PhantomData,
        };
        // SAFETY: `ptr` is a live allocation of at least `bytes` bytes.
        let r = unsafe { sys::cuMemsetD8_v2(ptr, 0, bytes) };
        check("cuMemsetD8", r, sized(bytes))?;
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

    /// Copies `src` (exactly `len` values) to the device, synchronously.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        let bytes = self.same_len("cuMemcpyHtoD", src.len())?;
        self.ctx.bind()?;
        // SAFETY: `src` is `bytes` readable bytes; the destination holds `bytes` bytes.
        let r = unsafe { sys::cuMemcpyHtoD_v2(self.ptr, src.as_ptr().cast(), bytes) };
        check("cuMemcpyHtoD", r, sized(bytes))
    }

    /// Copies the device values into `dst` (exactly `len` values), synchronously.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        let bytes = self.same_len("cuMemcpyDtoH", dst.len())?;
        self.ctx.bind()?;
        // SAFETY: `dst` is `bytes` writable bytes of a Pod type (any bytes are valid);
        // the source holds `bytes` bytes.
        let r = unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), self.ptr, bytes) };
        check("cuMemcpyDtoH", r, sized(bytes))
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

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let r = self.ctx.bind().and_then(|()| {
            // SAFETY: allocated by cuMemAlloc in `zeroed`, freed once here.
            check(
                "cuMemFree",
                unsafe { sys::cuMemFree_v2(self.ptr) },
                String::new,
            )
        });
        log_drop("device buffer", r);
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
    /// Allocates `len` zeroed values, mapped into the device. Needs
    /// `CAN_MAP_HOST_MEMORY`.
    pub fn zeroed(ctx: &Arc<Context>, len: usize) -> Result<Self> {
        let bytes = bytes_of::<T>("cuMemHostAlloc", len)?;
        if !ctx.device().can_map_host_memory {
            return Err(Error::Unsupported {
                op: "cuMemHostAlloc(DEVICEMAP)",
                capability: "CAN_MAP_HOST_MEMORY",
                device: ctx.device().name.clone(),
            });
        }
        ctx.bind()?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: context current; one pointer written through a valid pointer.
        let r = unsafe { sys::cuMemHostAlloc(&mut raw, bytes.max(1), flags) };
        check("cuMemHostAlloc", r, sized(bytes))?;
        let host = NonNull::new(raw.cast::<T>()).ok_or_else(|| Error::Driver {
            op: "cuMemHostAlloc",
            name: "null pointer returned".into(),
            code: 0,
            detail: format!(", {bytes} bytes"),
        })?;
        // Owned from here: Drop frees it on every error path below.
        let mut buf = Self {
            ctx: ctx.clone(),
            host,
            dev: 0,
            len,
        };
        // SAFETY: `raw` is `bytes.max(1)` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(raw.cast::<u8>(), 0, bytes.max(1)) };
        // SAFETY: `raw` is a live DEVICEMAP allocation; flags must be 0.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut buf.dev, raw, 0) };
        check("cuMemHostGetDevicePointer", r, sized(bytes))?;
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
        let r = self.ctx.bind().and_then(|()| {
            // SAFETY: allocated by cuMemHostAlloc in `zeroed`, freed once here.
            let r = unsafe { sys::cuMemFreeHost(self.host.as_ptr().cast()) };
            check("cuMemFreeHost", r, String::new)
        });
        log_drop("pinned buffer", r);
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
    /// [`REGION_ALIGN`]-aligned.
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
    pub fn zeroed(ctx: &Arc<Context>, len: usize) -> Result<Self> {
        let bytes = bytes_of::<T>("cuMemAllocManaged", len)?;
        ctx.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        let flags = sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32;
        // SAFETY: context current; one pointer written through a valid pointer.
        let r = unsafe { sys::cuMemAllocManaged(&mut ptr, bytes.max(1), flags) };
        check("cuMemAllocManaged", r, sized(bytes))?;
        let buf = Self {
            ctx: ctx.clone(),
            ptr,
            len,
            _t: PhantomData,
        };
        // SAFETY: a live managed allocation of at least `bytes` bytes.
        check(
            "cuMemsetD8",
            unsafe { sys::cuMemsetD8_v2(ptr, 0, bytes) },
            sized(bytes),
        )?;
        sync_legacy_stream()?;
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
                id: self.ctx.device().ordinal,
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
    pub fn advise(&self, advice: CUmem_advise, at: Location) -> Result<()> {
        if self.bytes() == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        let bytes = self.bytes();
        // SAFETY: the exact range of a live managed allocation.
        let r = unsafe { sys::cuMemAdvise_v2(self.ptr, bytes, advice, self.location(at)) };
        check("cuMemAdvise", r, || {
            format!(", {advice:?} for {at:?}, {bytes} bytes")
        })
    }

    /// Prefetches the whole buffer to `to`, ordered on the legacy stream, and waits.
    pub fn prefetch(&self, to: Location) -> Result<()> {
        if self.bytes() == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        let bytes = self.bytes();
        let loc = self.location(to);
        // SAFETY: the exact range of a live managed allocation; a null stream is the
        // context's default stream, synchronised right after.
        let r =
            unsafe { sys::cuMemPrefetchAsync_v2(self.ptr, bytes, loc, 0, std::ptr::null_mut()) };
        check("cuMemPrefetchAsync", r, || {
            format!(", to {to:?}, {bytes} bytes")
        })?;
        sync_legacy_stream()
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
    pub fn as_slice(&self) -> Result<&[T]> {
        self.host_access()?;
        // SAFETY: `len` initialised (zeroed, Pod) values at a host-addressable managed
        // address, live until drop.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr as usize as *const T, self.len) })
    }

    /// The values, mutably, from the host (refused as [`as_slice`](Self::as_slice) is).
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.host_access()?;
        // SAFETY: as above, and `&mut self` excludes other host access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr as usize as *mut T, self.len) })
    }
}

impl<T: DeviceRepr> Drop for UnifiedBuffer<T> {
    fn drop(&mut self) {
        let r = self.ctx.bind().and_then(|()| {
            // SAFETY: allocated by cuMemAllocManaged in `zeroed`, freed once here.
            check(
                "cuMemFree",
                unsafe { sys::cuMemFree_v2(self.ptr) },
                String::new,
            )
        });
        log_drop("unified buffer", r);
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
