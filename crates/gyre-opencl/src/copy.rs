//! [`ClCopyEngine`]: a kernel's rings in an OpenCL buffer, for the copy strategies
//! (`sync`, `async`, `dma-polling`) on a device without fine-grained SVM with atomics, or
//! where zero copy is turned off (`GYRE_OPENCL_SVM=off`).
//!
//! The kernel's region is one `clCreateBuffer` (`CL_MEM_READ_WRITE`, no host pointer,
//! zeroed by `clEnqueueFillBuffer`), laid out as a `SharedRegion`; the ring kernel gets it as its
//! `__global` argument, the same pointer the zero-copy launch passes as SVM. The host never
//! maps it: the bridge (`gyre_core::bridge`) reaches it only through this engine's
//! `clEnqueueWriteBuffer` / `clEnqueueReadBuffer`, all on one in-order command queue of
//! the engine's own (never the ring kernel's, whose queue the persistent kernel holds),
//! so the copies complete in issue order: the stream order the bridge's doorbell relies
//! on.
//!
//! **Waiting.** Every copy is enqueued without blocking and its event kept (only the last:
//! the queue is in order). A blocking copy, and [`CopyEngine::synchronize`], flush the
//! queue and poll that event's status, for at most [`SYNC_DEADLINE`]; past it the wait is a
//! [`gyre_core::Error::Transfer`] naming the deadline, never a hang (a device whose compute
//! units all run persistent kernels may never get to the copy: see
//! [`crate::OpenClBackend`]'s reservation). OpenCL cannot cancel a command, so such a
//! copy may still run later, into or out of the caller's memory: after a timeout the
//! engine is *wedged*: it issues no more copies, and on drop it leaks its queue, its
//! buffer and the staging memory it gave the bridge, where every device-to-host copy
//! writes: a late copy never writes freed memory. A late host-to-device copy may still
//! read the bridge's mirror of the request ring after it was freed (a read, into the
//! leaked buffer); CUDA's engine has the same hazard.
//!
//! **Concurrent access.** OpenCL makes no promise about a buffer that a running kernel and
//! a copy on another queue touch at once; the bridge's protocol makes it safe in the way
//! CUDA's copy path is (a slot is copied only once what the other side published says it
//! is complete). A GPU reads device memory by DMA, so a copy may read reply slots the kernel
//! is still writing and the bridge uses only those below the `k2h_head` read before them
//! ([`CopyEngine::reads_ahead`]); on a CPU device (PoCL) the copy is a `memcpy` by a driver
//! thread over memory the kernel's work-item writes under the C11 memory model, so it does
//! not read ahead.

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gyre_core::bridge::CopyEngine;
use gyre_core::region::{HostMemory, RegionMemory};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::event::{Event, CL_COMPLETE};
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::types::{cl_mem, CL_NON_BLOCKING};

use crate::error::{check, cl_error, Result};

/// The longest any copy waits: far past any copy gyre issues, so reaching it means the
/// copy is stuck behind something that never ends.
pub const SYNC_DEADLINE: Duration = Duration::from_secs(30);

/// Polls of an event's status between yields while waiting for a copy.
const SPINS_BEFORE_YIELD: u32 = 64;

/// A kernel's device-resident region on an OpenCL device and the queue its copies run on.
///
/// Made by [`OpenClBackend`](crate::OpenClBackend)'s `alloc_resident`; the runtime hands
/// it to the bridge, and the launch finds its buffer again through
/// [`CopyEngine::as_any`].
///
/// # Examples
///
/// ```no_run
/// use gyre_core::Backend as _;
/// let backend = gyre_opencl::OpenClBackend::new(0, 0)?;
/// let g = gyre_core::ring::Geometry::new(64, 128, 8)?;
/// let engine = backend.alloc_resident(&g, 0)?;
/// let mut line = [0u8; 128];
/// // SAFETY: `line` outlives the blocking copy.
/// unsafe { engine.copy_d2h(line.as_mut_ptr(), 0, 128)? };
/// assert!(line.iter().all(|&b| b == 0)); // zeroed at allocation
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ClCopyEngine {
    device: String,
    /// Whether copies may read what the kernel is writing (a GPU's DMA; not a CPU device).
    reads_ahead: bool,
    /// The last copy enqueued; the enqueue and the store happen under this lock, so it is
    /// always the queue's last command.
    last: Mutex<Option<Event>>,
    /// Set when a wait ran past its deadline: a command still pending may yet read or
    /// write its memory, so no more copies are issued, and the queue and buffer are leaked
    /// on drop instead of released under it.
    wedged: AtomicBool,
    /// The staging memory handed to the bridge ([`CopyEngine::alloc_staging`]), which
    /// every device-to-host copy writes into: kept as long as the engine, and leaked with
    /// it when wedged, so a late copy never writes freed memory.
    staging: Mutex<Vec<Arc<HostMemory>>>,
    queue: ManuallyDrop<CommandQueue>,
    buf: ManuallyDrop<Buffer<u8>>,
    len: usize,
    /// Kept until the queue and buffer are released (fields drop in order).
    ctx: Arc<Context>,
}

impl ClCopyEngine {
    /// `len` bytes of zeroed device memory in `ctx` (zeroed before this returns, so before
    /// any copy or launch) and an in-order queue of its own for the copies.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Cl`] naming the call and the size.
    pub(crate) fn new(
        ctx: &Arc<Context>,
        device: &str,
        reads_ahead: bool,
        len: usize,
    ) -> Result<Self> {
        let size = len.max(1);
        // No host pointer (nothing for the driver to keep a host-side copy of); zeroed by
        // a fill on the copy queue below.
        // SAFETY: a valid context, no host pointer.
        let buf = check(
            "clCreateBuffer",
            unsafe { Buffer::<u8>::create(ctx, CL_MEM_READ_WRITE, size, std::ptr::null_mut()) },
            || format!(", {size} bytes of device memory for a kernel's rings"),
        )?;
        let queue = check(
            "clCreateCommandQueueWithProperties",
            CommandQueue::create_default_with_properties(ctx, 0, 0),
            || ", in-order, for a bridge's copies".into(),
        )?;
        let zero = 0u8;
        // SAFETY: a live queue and buffer of one context; the one-byte pattern is copied
        // at enqueue; the fill covers exactly the buffer; waited for by `finish`.
        let fill = unsafe {
            opencl3::command_queue::enqueue_fill_buffer(
                queue.get(),
                buf.get(),
                (&raw const zero).cast::<c_void>(),
                1,
                0,
                size,
                0,
                std::ptr::null(),
            )
        };
        check(
            "clEnqueueFillBuffer",
            fill.map(Event::new).map_err(opencl3::error_codes::ClError),
            || format!(", zeroing {size} bytes"),
        )?;
        check("clFinish", queue.finish(), || {
            ", zeroing a kernel's rings".into()
        })?;
        Ok(Self {
            device: device.to_owned(),
            reads_ahead,
            last: Mutex::new(None),
            wedged: AtomicBool::new(false),
            staging: Mutex::new(Vec::new()),
            queue: ManuallyDrop::new(queue),
            buf: ManuallyDrop::new(buf),
            len: size,
            ctx: ctx.clone(),
        })
    }

    /// The buffer (the ring kernel's region argument).
    pub(crate) fn mem(&self) -> cl_mem {
        self.buf.get()
    }

    /// The context the buffer belongs to.
    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    fn transfer_error(
        op: &'static str,
        offset: usize,
        len: usize,
        e: crate::Error,
    ) -> gyre_core::Error {
        gyre_core::Error::Transfer {
            engine: "opencl",
            op,
            offset,
            len,
            source: gyre_core::Cause::new(e),
        }
    }

    fn bounds(&self, op: &'static str, offset: usize, len: usize) -> gyre_core::Result<()> {
        gyre_core::copy::check_range("opencl", op, offset, len, self.len)
    }

    /// Enqueues one copy through `enqueue` (given the queue and the buffer) and keeps its
    /// event as the last.
    fn issue(
        &self,
        op: &'static str,
        offset: usize,
        len: usize,
        enqueue: impl FnOnce(
            opencl3::types::cl_command_queue,
            cl_mem,
        ) -> std::result::Result<opencl3::types::cl_event, i32>,
    ) -> gyre_core::Result<()> {
        self.bounds(op, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if self.wedged.load(Ordering::Acquire) {
            return Err(gyre_core::Error::Transfer {
                engine: "opencl",
                op,
                offset,
                len,
                source: gyre_core::Cause::msg(format!(
                    "an earlier copy on {} never completed; this engine issues no more",
                    self.device
                )),
            });
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let ev = enqueue(self.queue.get(), self.buf.get()).map_err(|code| {
            Self::transfer_error(
                op,
                offset,
                len,
                cl_error(
                    if op == OP_H2D {
                        "clEnqueueWriteBuffer"
                    } else {
                        "clEnqueueReadBuffer"
                    },
                    code,
                    format!(", {len} bytes at offset {offset} on {}", self.device),
                ),
            )
        })?;
        *last = Some(Event::new(ev));
        Ok(())
    }

    /// Waits for every copy issued so far: flushes the queue and polls the last copy's
    /// status, for at most [`SYNC_DEADLINE`]. The event stays the engine's last: another
    /// thread's copies (a push beside a pull) may be behind it, and that thread's wait
    /// must find it too. The queue is in order, so the last event complete means every
    /// copy issued before it is.
    fn wait(&self, op: &'static str, offset: usize, len: usize) -> gyre_core::Result<()> {
        let ev = {
            let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let Some(ev) = last.as_ref() else {
                return Ok(());
            };
            // SAFETY: a live event (held by `last`); retained once more for the Event
            // made here, which releases it on drop.
            unsafe { opencl3::event::retain_event(ev.get()) }
                .map(|()| Event::new(ev.get()))
                .map_err(|code| {
                    Self::transfer_error(
                        op,
                        offset,
                        len,
                        cl_error("clRetainEvent", code, String::new()),
                    )
                })?
        };
        check("clFlush", self.queue.flush(), || {
            ", a bridge's copy queue".into()
        })
        .map_err(|e| Self::transfer_error(op, offset, len, e))?;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let status = match ev.command_execution_status() {
                Ok(s) => s.0,
                Err(e) => e.0,
            };
            if status == CL_COMPLETE {
                return Ok(());
            }
            if status < 0 {
                return Err(Self::transfer_error(
                    op,
                    offset,
                    len,
                    cl_error(
                        "a copy command",
                        status,
                        format!(" (its execution status) on {}", self.device),
                    ),
                ));
            }
            if start.elapsed() > SYNC_DEADLINE {
                self.wedged.store(true, Ordering::Release);
                tracing::error!(
                    device = %self.device,
                    "an OpenCL copy did not complete within {SYNC_DEADLINE:?}: no more copies \
                     on this engine, its queue and buffer will be leaked"
                );
                return Err(gyre_core::Error::Transfer {
                    engine: "opencl",
                    op,
                    offset,
                    len,
                    source: gyre_core::Cause::msg(format!(
                        "the copy did not complete within {SYNC_DEADLINE:?} on {} (every \
                         compute unit busy with persistent kernels?)",
                        self.device
                    )),
                });
            }
            spins += 1;
            if spins % SPINS_BEFORE_YIELD == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Staging memory shared with the engine that made it.
struct SharedStaging(Arc<HostMemory>);

// SAFETY: the HostMemory's guarantees (zeroed, aligned, valid until the last Arc goes).
unsafe impl RegionMemory for SharedStaging {
    fn base(&self) -> std::ptr::NonNull<u8> {
        self.0.base()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

const OP_H2D: &str = "copy host to device";
const OP_D2H: &str = "copy device to host";

// SAFETY: every copy is bounds-checked against the buffer and moves exactly `len` bytes;
// all copies go on one in-order queue, so they complete in issue order, and the blocking
// forms and `synchronize` return only once the last command issued (and so every earlier
// one) completed. The kernel reads the buffer after a write command completed.
unsafe impl CopyEngine for ClCopyEngine {
    fn name(&self) -> &'static str {
        "opencl"
    }

    fn len(&self) -> usize {
        self.len
    }

    unsafe fn copy_h2d(&self, dst: usize, src: *const u8, len: usize) -> gyre_core::Result<()> {
        // SAFETY: forwarded caller contract; completed by the wait below.
        unsafe { self.copy_h2d_async(dst, src, len)? };
        self.wait(OP_H2D, dst, len)
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: usize, len: usize) -> gyre_core::Result<()> {
        // SAFETY: forwarded caller contract; completed by the wait below.
        unsafe { self.copy_d2h_async(dst, src, len)? };
        self.wait(OP_D2H, src, len)
    }

    unsafe fn copy_h2d_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> gyre_core::Result<()> {
        self.issue(OP_H2D, dst, len, |q, m| {
            // SAFETY: a live queue and buffer of one context; bounds checked by `issue`;
            // the caller keeps `src` valid and unwritten until the copy completes (the
            // next wait).
            unsafe {
                opencl3::command_queue::enqueue_write_buffer(
                    q,
                    m,
                    CL_NON_BLOCKING,
                    dst,
                    len,
                    src.cast::<c_void>(),
                    0,
                    std::ptr::null(),
                )
            }
        })
    }

    unsafe fn copy_d2h_async(&self, dst: *mut u8, src: usize, len: usize) -> gyre_core::Result<()> {
        self.issue(OP_D2H, src, len, |q, m| {
            // SAFETY: a live queue and buffer of one context; bounds checked by `issue`;
            // the caller keeps `dst` valid and untouched until the copy completes.
            unsafe {
                opencl3::command_queue::enqueue_read_buffer(
                    q,
                    m,
                    CL_NON_BLOCKING,
                    src,
                    len,
                    dst.cast::<c_void>(),
                    0,
                    std::ptr::null(),
                )
            }
        })
    }

    fn reads_ahead(&self) -> bool {
        self.reads_ahead
    }

    fn synchronize(&self) -> gyre_core::Result<()> {
        self.wait("synchronize the copy queue", 0, 0)
    }

    /// Host memory the engine keeps too (see `staging`): a copy that outlives its wait
    /// cannot write memory the bridge has freed.
    fn alloc_staging(&self, bytes: usize) -> gyre_core::Result<Box<dyn RegionMemory>> {
        let mem = Arc::new(HostMemory::zeroed(bytes)?);
        self.staging
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(mem.clone());
        Ok(Box::new(SharedStaging(mem)))
    }

    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

impl Drop for ClCopyEngine {
    fn drop(&mut self) {
        // Copies still in flight must land before their host memory and the buffer go.
        if let Err(e) = self.wait("release the copy queue", 0, 0) {
            tracing::warn!(error = %e, "releasing an OpenCL bridge's copy queue");
        }
        if self.wedged.load(Ordering::Acquire) {
            // A command may still touch the buffer or the staging: keep them and the queue.
            let staging =
                std::mem::take(&mut *self.staging.lock().unwrap_or_else(|e| e.into_inner()));
            std::mem::forget(staging);
            return;
        }
        // SAFETY: dropped once, here; every command issued on the queue has completed
        // (the wait above), and nothing uses either after this.
        unsafe {
            ManuallyDrop::drop(&mut self.queue);
            ManuallyDrop::drop(&mut self.buf);
        }
    }
}
