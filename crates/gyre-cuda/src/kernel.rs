//! [`CudaKernel`]: a ring kernel running on the device, as gyre-core's
//! [`KernelInstance`].
//!
//! The kernel runs on a stream held from the context's pool ([`crate::stream`]), never
//! the default stream. It is counted as running on its context from just before its launch
//! until its stream is seen complete ([`crate::context`]): meanwhile no memory of the
//! context is freed, since a free could wait for it forever.
//!
//! The stream is also how a dead kernel is noticed: [`KernelInstance::failure`] queries
//! it, and a kernel that the device ended with an error (a fault in the handler, an
//! illegal address) reports the CUDA error by name and code; a sticky error poisons the
//! context ([`Context::poison`]), which the backend resets before its next launch.

use std::sync::{Arc, OnceLock};

use gyre_abi::error::KERNEL_GONE;
use gyre_core::loan::LoanPoolView;
use gyre_core::KernelInstance;
use parking_lot::Mutex;

use crate::context::{Context, RunningKernel};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::stream::StreamLease;

/// Whatever owns memory the kernel touches (its region or device buffer, the registered
/// export file), dropped only once the kernel has finished.
pub(crate) type Keep = Box<dyn core::any::Any + Send + Sync>;

/// Where a checked ring's waves land (`cuda/include/gyre/wave.h`): nowhere (an ordered
/// ring), device memory (its device address and size), or the kernel's dynamic shared
/// memory (its size: the launch reserves it, and the kernel's scratch argument is null).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scratch {
    None,
    Device(u64, u64),
    Shared(u32),
}

/// What a running kernel holds.
struct Running {
    /// Counts the kernel as running on the context until it is seen finished.
    guard: RunningKernel,
    keep: Keep,
    stream: StreamLease,
    _module: Arc<Module>,
}

/// A ring kernel on the device; see the module docs.
pub(crate) struct CudaKernel {
    ctx: Arc<Context>,
    name: String,
    /// `None` once joined (or never launched).
    running: Mutex<Option<Running>>,
    /// How the execution ended, once seen: `Err` with the driver's error.
    outcome: OnceLock<std::result::Result<(), String>>,
    /// Whether K8 also writes the registered telemetry export file.
    writes_export: bool,
}

impl CudaKernel {
    /// Launches `module`'s entry point, one block of `lanes` threads, on `stream`, with
    /// the eleven arguments of the ring kernel's launch contract (`cuda/ring_kernel.cu`):
    /// the region, the export file's telemetry line (or 0), a pipeline stage's link
    /// (`next`: the next stage's region or 0; its flags; the next stage's message type)
    /// a loan kernel's pool (`gyre_core::loan::LoanPoolView`: bytes, state words, size
    /// or 0, log2 of the smallest block), and a checked ring's scratch ([`Scratch`]).
    ///
    /// # Safety
    ///
    /// `region` addresses a shared region laid out and initialised as the contract says,
    /// `export_tel` a telemetry line or 0, `next` another such region or 0, `loans` a
    /// loan pool's device addresses (or a size of 0); `keep` owns the memory behind all
    /// of them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch(
        ctx: &Arc<Context>,
        name: &str,
        module: Arc<Module>,
        stream: StreamLease,
        guard: RunningKernel,
        lanes: u32,
        mut region: u64,
        mut export_tel: u64,
        (mut next, mut link_flags, mut next_type): (u64, u32, u32),
        loans: LoanPoolView,
        scratch: Scratch,
        keep: Keep,
    ) -> Result<Self> {
        let (mut scratch, mut scratch_bytes, shared_bytes) = match scratch {
            Scratch::None => (0u64, 0u64, 0u32),
            Scratch::Device(ptr, bytes) => (ptr, bytes, 0),
            // A null pointer with a size: the kernel stages in its dynamic shared memory.
            Scratch::Shared(bytes) => (0, u64::from(bytes), bytes),
        };
        let (mut loan_base, mut loan_words, mut loan_bytes, mut loan_shift) =
            (loans.base, loans.words, loans.bytes, loans.min_shift);
        let mut params = [
            std::ptr::addr_of_mut!(region).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(export_tel).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(next).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(link_flags).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(next_type).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(loan_base).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(loan_words).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(loan_bytes).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(loan_shift).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(scratch).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(scratch_bytes).cast::<std::ffi::c_void>(),
        ];
        ctx.bind()?;
        // SAFETY: the ring kernel's eleven parameters are three pointers, two 32-bit
        // words, two pointers, a 64-bit and a 32-bit word, a pointer and a 64-bit word,
        // passed as the addresses of `region`, `export_tel`, `next`, `link_flags`,
        // `next_type`, `loan_base`, `loan_words`, `loan_bytes`, `loan_shift`, `scratch`
        // and `scratch_bytes` (u64 for pointers and `unsigned long long`, u32 for
        // `unsigned int`; read by the driver during the call); `keep`, held until the
        // kernel has finished, owns what they point to (the caller's contract); the
        // stream is live and held.
        unsafe {
            crate::result::launch(
                module.function(),
                1,
                lanes,
                shared_bytes,
                stream.get(),
                &mut params,
            )?;
        }
        Ok(Self {
            ctx: ctx.clone(),
            name: name.to_owned(),
            running: Mutex::new(Some(Running {
                guard,
                keep,
                stream,
                _module: module,
            })),
            outcome: OnceLock::new(),
            writes_export: export_tel != 0,
        })
    }

    /// Records how the execution ended (poisoning the context on a sticky error).
    fn record(&self, r: Result<()>) -> &std::result::Result<(), String> {
        self.outcome.get_or_init(|| match r {
            Ok(()) => Ok(()),
            Err(e) => {
                self.ctx.poison(&e);
                Err(e.to_string())
            }
        })
    }

    /// Queries the stream once, unless the outcome is known. Only a sticky error (the
    /// device ended the kernel: a fault, a watchdog) is an outcome; another failure of the
    /// query (the context cannot be bound, the driver is shutting down) says nothing about
    /// the kernel and is logged, and the next poll asks again.
    fn poll(&self) -> Option<&std::result::Result<(), String>> {
        if let Some(o) = self.outcome.get() {
            return Some(o);
        }
        let g = self.running.lock();
        let r = g.as_ref()?;
        match r.stream.query() {
            Ok(false) => None,
            Ok(true) => Some(self.record(Ok(()))),
            Err(e) if e.cuda_code().is_some_and(crate::result::is_sticky) => {
                Some(self.record(Err(e)))
            }
            Err(e) => {
                tracing::warn!(kernel = %self.name, error = %e, "querying the ring kernel's stream");
                None
            }
        }
    }

    fn lost(&self, cause: &str) -> gyre_core::Error {
        gyre_core::Error::KernelLost {
            kernel: self.name.clone(),
            code: KERNEL_GONE,
            cause: cause.to_owned(),
        }
    }
}

impl KernelInstance for CudaKernel {
    fn writes_export_telemetry(&self) -> bool {
        self.writes_export
    }

    fn is_finished(&self) -> bool {
        self.poll().is_some() || self.running.lock().is_none()
    }

    fn failure(&self) -> Option<String> {
        match self.poll()? {
            Ok(()) => None,
            Err(cause) => Some(cause.clone()),
        }
    }

    fn join(&self) -> gyre_core::Result<()> {
        let taken = self.running.lock().take();
        if let Some(r) = &taken {
            match r
                .stream
                .wait_idle("the ring kernel's stream", crate::stream::SYNC_DEADLINE)
            {
                // Still running: put back everything it uses, and say so.
                Err(Error::Timeout { after, .. }) => {
                    *self.running.lock() = taken;
                    return Err(gyre_core::Error::Timeout {
                        op: "joining a CUDA ring kernel (its stream never went idle)",
                        after,
                    });
                }
                // Ended: well, or by a sticky error (a fault).
                Ok(()) => {
                    self.record(Ok(()));
                }
                Err(e) if e.cuda_code().is_some_and(crate::result::is_sticky) => {
                    self.record(Err(e));
                }
                // A failure that says nothing about the kernel (the context cannot be
                // bound, the driver is shutting down): it may still run, so nothing it
                // uses is released.
                Err(e) => {
                    *self.running.lock() = taken;
                    return Err(gyre_core::Error::Launch {
                        backend: "cuda",
                        kernel: self.name.clone(),
                        source: gyre_core::Cause::context("joining the ring kernel", e),
                    });
                }
            }
        }
        if let Some(r) = taken {
            // The stream is idle (or the context is broken): release everything. The
            // guard last, so the kernel's own memory is among what it may free.
            let Running {
                guard,
                keep,
                stream,
                _module,
            } = r;
            drop(keep);
            drop(stream);
            drop(_module);
            guard.finished();
            tracing::info!(kernel = %self.name, "CUDA ring kernel joined");
        }
        match self.outcome.get() {
            Some(Err(cause)) => Err(self.lost(cause)),
            _ => Ok(()),
        }
    }
}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        let Some(r) = self.running.get_mut().take() else {
            return;
        };
        let done = self.outcome.get().is_some()
            || match r.stream.query() {
                Ok(finished) => finished,
                Err(e) => {
                    // Finished, with an error: poison the context if it is sticky.
                    self.record(Err(e));
                    true
                }
            };
        if done {
            // As in `join`: the memory, stream and module first, the running count last.
            let Running {
                guard,
                keep,
                stream,
                _module,
            } = r;
            drop(keep);
            drop(stream);
            drop(_module);
            guard.finished();
        } else {
            // Freeing the region or returning the stream under a running kernel would
            // fault the device or queue work behind it: leak them, and keep the kernel
            // counted as running (it is).
            tracing::error!(
                kernel = %self.name,
                "CUDA ring kernel dropped while running: leaking its region and stream"
            );
            std::mem::forget(r);
        }
    }
}
