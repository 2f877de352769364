//! [`SvmRegion`]: a shared region in fine-grained SVM with atomics, the zero-copy
//! (`Unified`) placement of control block, telemetry and rings; [`SvmAllocator`]: the same
//! memory for loan pools.

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use opencl3::context::Context;
use opencl3::memory::{
    svm_alloc, svm_free, CL_MEM_READ_WRITE, CL_MEM_SVM_ATOMICS, CL_MEM_SVM_FINE_GRAIN_BUFFER,
};

use crate::error::{cl_error, Result};

/// Alignment of every region: one control block (128 bytes, the ABI's largest alignment).
pub const REGION_ALIGN: u32 = 128;

/// The live SVM allocations of one context (base -> bytes), so a launch can check that
/// its region, or a loan pool's bytes and state words, are some.
#[derive(Debug, Default)]
pub(crate) struct SvmRegistry(Mutex<HashMap<usize, usize>>);

impl SvmRegistry {
    fn insert(&self, p: usize, len: usize) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p, len);
    }
    fn remove(&self, p: usize) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&p);
    }
    /// Whether `p` is the base of a live allocation of this context.
    pub(crate) fn contains(&self, p: usize) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&p)
    }
    /// Whether `p` is the base of a live allocation of this context of at least `len`
    /// bytes.
    pub(crate) fn holds(&self, p: usize, len: usize) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&p)
            .is_some_and(|&n| n >= len)
    }
}

/// `len` zeroed bytes of fine-grained SVM with atomics (`clSVMAlloc` with
/// `CL_MEM_SVM_FINE_GRAIN_BUFFER | CL_MEM_SVM_ATOMICS`), 128-byte aligned, freed with
/// `clSVMFree` on drop. Host and kernel address the same bytes while the kernel runs;
/// the host's Rust atomics and the kernel's OpenCL C atomics order them.
///
/// Drop it only once no kernel uses it: `OpenClKernel` holds the region until its kernel
/// has finished, and leaks it if it has not.
///
/// # Examples
///
/// ```no_run
/// use gyre_core::Backend as _;
/// let backend = gyre_opencl::OpenClBackend::new(0, 0)?;
/// let region = backend.alloc_region(4096)?; // an SvmRegion behind the trait
/// assert_eq!(region.base().as_ptr() as usize % 128, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SvmRegion {
    ctx: Arc<Context>,
    registry: Arc<SvmRegistry>,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region owns its SVM allocation exclusively; its bytes are accessed only
// through the protocol's atomics and ownership rules, which are thread-safe. The context
// is Send + Sync (OpenCL objects are thread-safe, clSVMFree included).
unsafe impl Send for SvmRegion {}
// SAFETY: as above; `&SvmRegion` only hands out the base pointer.
unsafe impl Sync for SvmRegion {}

impl SvmRegion {
    /// Allocates and zeroes `len` bytes in `ctx`.
    pub(crate) fn zeroed(
        ctx: &Arc<Context>,
        registry: &Arc<SvmRegistry>,
        len: usize,
    ) -> Result<Self> {
        let size = len.max(1);
        let flags = CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER | CL_MEM_SVM_ATOMICS;
        // SAFETY: a valid context; size and alignment are checked by the implementation,
        // which returns null (an Err here) on failure.
        let raw = unsafe { svm_alloc(ctx.get(), flags, size, REGION_ALIGN) }.map_err(|code| {
            cl_error(
                "clSVMAlloc",
                code,
                format!(
                    ", {size} bytes aligned to {REGION_ALIGN}, fine-grained buffer with atomics \
                     (null: out of memory, or size above CL_DEVICE_MAX_MEM_ALLOC_SIZE)"
                ),
            )
        })?;
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| {
            cl_error(
                "clSVMAlloc",
                opencl3::error_codes::CL_INVALID_VALUE,
                format!(", {size} bytes"),
            )
        })?;
        // SAFETY: a fine-grained buffer is host-accessible without map/unmap; `size`
        // bytes were just allocated and no kernel knows them yet.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, size) };
        registry.insert(ptr.as_ptr() as usize, size);
        Ok(Self {
            ctx: ctx.clone(),
            registry: registry.clone(),
            ptr,
            len: size,
        })
    }
}

impl Drop for SvmRegion {
    fn drop(&mut self) {
        self.registry.remove(self.ptr.as_ptr() as usize);
        // SAFETY: allocated by clSVMAlloc in this context, freed once; no kernel uses it
        // (see the type's contract).
        let r = unsafe { svm_free(self.ctx.get(), self.ptr.as_ptr().cast::<c_void>()) };
        if let Err(code) = r {
            tracing::error!(
                code,
                name = crate::error::cl_error_name(code),
                bytes = self.len,
                "clSVMFree failed: leaking the SVM region"
            );
        }
    }
}

// SAFETY: `zeroed` returns zeroed, 128-aligned SVM of `len` bytes, host-readable and
// -writable (fine-grained), that lives until drop.
unsafe impl gyre_core::region::RegionMemory for SvmRegion {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Fine-grained SVM with atomics as a [`RawAllocator`](gyre_core::memory::RawAllocator)
/// (kind `Unified`): where a loan kernel's pool and its state words live on OpenCL, so the
/// kernel reads the loaned bytes in place and compare-and-swaps the words atomically with
/// the host (`CL_MEM_SVM_ATOMICS`). Blocks are zeroed and aligned to at least 128 bytes;
/// a larger alignment, which implementations may refuse (PoCL does), is made by
/// allocating `align` bytes more and starting at the first aligned byte.
///
/// # Examples
///
/// ```no_run
/// use gyre_core::Backend as _;
/// let backend = gyre_opencl::OpenClBackend::new(0, 0)?;
/// let alloc = backend.loan_allocator()?;
/// let block = alloc.alloc(1 << 20, 4096)?;
/// assert_eq!(block.device_addr() % 4096, 0);
/// // SAFETY: the block came from this allocator and nothing uses it.
/// unsafe { alloc.free(block) };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SvmAllocator {
    ctx: Arc<Context>,
    /// The context's live SVM: every block is registered while it lives, so a launch can
    /// check that a loan pool is SVM of its device's context.
    registry: Arc<SvmRegistry>,
    /// Over-aligned blocks: the address handed out -> the one clSVMAlloc returned.
    origins: Mutex<std::collections::HashMap<usize, usize>>,
}

impl SvmAllocator {
    pub(crate) fn new(ctx: &Arc<Context>, registry: &Arc<SvmRegistry>) -> Self {
        Self {
            ctx: ctx.clone(),
            registry: registry.clone(),
            origins: Mutex::default(),
        }
    }
}

fn alloc_error(what: String) -> gyre_core::Error {
    gyre_core::Error::Launch {
        backend: "opencl",
        kernel: "(loan pool)".into(),
        source: gyre_core::Cause::new(crate::error::cl_error(
            "clSVMAlloc",
            opencl3::error_codes::CL_OUT_OF_RESOURCES,
            what,
        )),
    }
}

// SAFETY: (1) `alloc` returns `bytes` bytes aligned to at least `align` from clSVMAlloc,
// (2) zeroed here, host-accessible without mapping (fine-grained), (3) live until
// `free` passes them to clSVMFree once, (4) OpenCL's SVM calls are thread-safe.
unsafe impl gyre_core::memory::RawAllocator for SvmAllocator {
    fn kind(&self) -> gyre_core::memory::MemoryKind {
        gyre_core::memory::MemoryKind::Unified
    }

    fn alloc(&self, bytes: usize, align: usize) -> gyre_core::Result<gyre_core::memory::RawBlock> {
        if bytes == 0 || !align.is_power_of_two() {
            return Err(gyre_core::Error::InvalidArgument {
                name: "SVM allocation",
                value: format!("{bytes} bytes aligned to {align}"),
                reason: "needs at least one byte and a power-of-two alignment",
            });
        }
        let align = align.max(REGION_ALIGN as usize);
        let extra = if align > REGION_ALIGN as usize {
            align
        } else {
            0
        };
        let total = bytes
            .checked_add(extra)
            .ok_or(gyre_core::Error::Alloc { size: bytes, align })?;
        let flags = CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER | CL_MEM_SVM_ATOMICS;
        // SAFETY: a valid context; size and alignment are checked by the implementation,
        // which returns null (an Err here) on failure.
        let raw =
            unsafe { svm_alloc(self.ctx.get(), flags, total, REGION_ALIGN) }.map_err(|_| {
                alloc_error(format!(
                    ", {total} bytes aligned to {REGION_ALIGN} for a loan pool (null: out of \
                 memory, or above CL_DEVICE_MAX_MEM_ALLOC_SIZE)"
                ))
            })?;
        let origin = raw as usize;
        let start = origin.next_multiple_of(align);
        let ptr = NonNull::new(start as *mut u8)
            .ok_or_else(|| alloc_error(format!(", {total} bytes (null)")))?;
        if start != origin {
            self.origins
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(start, origin);
        }
        // SAFETY: fine-grained SVM is host-accessible; [start, start + bytes) lies inside
        // the `total` bytes just allocated (start - origin < align = extra).
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, bytes) };
        self.registry.insert(start, bytes);
        Ok(gyre_core::memory::RawBlock::new(
            Some(ptr),
            ptr.as_ptr() as u64,
            bytes,
            align,
        ))
    }

    unsafe fn free(&self, block: gyre_core::memory::RawBlock) {
        let Some(ptr) = block.host_ptr() else {
            return;
        };
        let start = ptr.as_ptr() as usize;
        self.registry.remove(start);
        let origin = self
            .origins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&start)
            .unwrap_or(start);
        // SAFETY: the caller passes a block of this allocator, once, that no kernel uses
        // any more; `origin` is what clSVMAlloc returned for it in this context.
        let r = unsafe { svm_free(self.ctx.get(), origin as *mut c_void) };
        if let Err(code) = r {
            tracing::error!(
                code,
                name = crate::error::cl_error_name(code),
                bytes = block.size(),
                "clSVMFree failed: leaking a loan pool"
            );
        }
    }
}
