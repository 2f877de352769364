//! The primary context of a device: one per device and process, shared by everything
//! gyre does on it, and the rules that keep a running persistent kernel from hanging the
//! rest.
//!
//! * **Bound on every thread.** The driver's current context is per thread; every safe
//!   type calls [`Context::bind`] before its driver calls, so any thread (a tokio worker,
//!   the completion driver, a copy thread) may use any handle.
//! * **No free under a running kernel.** `cuMemFree`, `cuMemFreeHost`,
//!   `cuMemHostUnregister` and `cuModuleUnload` may wait for every kernel of the context to
//!   finish, which a persistent ring kernel never does. Buffers therefore hand their
//!   memory back through `Context::release`: freed at once when no ring kernel runs,
//!   else kept on a deferred list that the last ring kernel to finish frees. A deferred
//!   block of the right size is reused by the next allocation instead of allocating anew
//!   (`Context::reuse`). Modules stay loaded for the context's life (`crate::module`).
//! * **No wait under a running kernel.** `cuModuleLoadDataEx` and `cuMemHostRegister`
//!   can wait for the context to idle too (a load next to a running ring kernel hung on
//!   an H200): they run only through `Context::while_idle`, which refuses them with
//!   [`Error::WouldWait`] while a ring kernel runs and keeps launches out meanwhile.
//!   Handlers are compiled ahead and loaded before the first launch or after the last
//!   kernel is joined (a reload loads after its R3 join).
//!   The running count and the deferred list share one lock, so a free never overlaps a
//!   launch.
//! * **Fixed streams.** At most `CUDA_DEVICE_MAX_CONNECTIONS` streams exist per context
//!   (`crate::stream`), so no work ever shares a hardware queue with a persistent kernel.
//! * **Sticky errors.** A kernel fault corrupts the context: every later call fails with
//!   the same error. The first such error *poisons* the context ([`Context::poison`]);
//!   from then on gyre makes no driver call to free anything of it (frees are deferred).
//!   Once nothing holds it any more, [`Context::recover`] drops it: its `Drop` resets the
//!   device's primary context *before* releasing it, forgetting its modules, streams
//!   and memory without driver calls (the reset destroys them), and the next context is
//!   checked before use. A refused retain is met with another reset. Where no reset
//!   helps, the device is unusable for the rest of the process and every later use gets
//!   [`Error::ProcessRestartRequired`] naming the original fault (`crate::recovery`,
//!   unit-tested against a fake driver). NVIDIA documents sticky errors as needing a new
//!   process; `docs/reliability.md` says what a service does then.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::module::Modules;
use crate::probe::{CudaInfo, DeviceInfo};
use crate::recovery::Fault;
use crate::result;
use crate::stream::StreamPool;
use crate::sys;

/// Memory handed back to the context (see the module docs).
pub(crate) enum Release {
    /// `cuMemAlloc` memory of this many bytes.
    Device(sys::CUdeviceptr, usize),
    /// `cuMemHostAlloc` memory of this many bytes.
    Host(*mut c_void, usize),
    /// `cuMemAllocManaged` memory.
    Managed(sys::CUdeviceptr),
    /// A `cuMemHostRegister` registration, and the owner of the registered memory, kept
    /// until the registration is gone.
    Unregister(*mut c_void, Option<Box<dyn core::any::Any + Send + Sync>>),
}

impl core::fmt::Debug for Release {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Release::Device(p, b) => write!(f, "Device({p:#x}, {b})"),
            Release::Host(p, b) => write!(f, "Host({p:p}, {b})"),
            Release::Managed(p) => write!(f, "Managed({p:#x})"),
            Release::Unregister(p, _) => write!(f, "Unregister({p:p})"),
        }
    }
}

/// A kind of memory [`Context::reuse`] can hand out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reusable {
    /// `cuMemAlloc` memory.
    Device,
    /// `cuMemHostAlloc(DEVICEMAP | PORTABLE)` memory.
    Host,
}

impl Release {
    /// Frees it now. The context must be current.
    fn free(self) -> Result<()> {
        // SAFETY: each variant was allocated (or registered) by the matching call and is
        // handed back exactly once (the buffers give up ownership when they release).
        unsafe {
            match self {
                Release::Device(p, _) | Release::Managed(p) => result::mem_free(p),
                Release::Host(p, _) => result::mem_free_host(p),
                Release::Unregister(p, owner) => {
                    let r = result::host_unregister(p);
                    drop(owner);
                    r
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct Life {
    /// Ring kernels launched and not yet seen finished.
    running: usize,
    /// Memory to free once `running` is 0.
    deferred: Vec<Release>,
}

/// A retained primary context. Everything made on it holds an `Arc<Context>`, so the
/// context outlives it.
#[derive(Debug)]
pub struct Context {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    info: CudaInfo,
    poison: OnceLock<(i32, String)>,
    life: Mutex<Life>,
    pub(crate) streams: StreamPool,
    pub(crate) modules: Modules,
}

// SAFETY: a CUcontext is a driver handle usable from any thread once made current there
// (which `bind` does); the raw pointers in `life` are allocations owned by the context
// until freed, touched only under its lock with the context bound.
unsafe impl Send for Context {}
// SAFETY: as above; shared access binds the context or goes through the locks.
unsafe impl Sync for Context {}

impl Context {
    /// The primary context of the device `info` describes (device 0), shared with every
    /// other user in this process (at most one per device, see `crate::registry`), made
    /// current on this thread. `info` proves that the driver is loaded and initialised.
    ///
    /// # Errors
    ///
    /// [`Error::ProcessRestartRequired`] for a device a sticky error left unusable; the
    /// driver's error naming the call.
    pub fn primary(info: &CudaInfo) -> Result<Arc<Self>> {
        crate::registry::primary(info)
    }

    /// A context value over `ctx`, the primary context of `dev` just retained (the
    /// registry makes sure there is one at a time).
    pub(crate) fn wrap(info: &CudaInfo, dev: sys::CUdevice, ctx: sys::CUcontext) -> Arc<Self> {
        Arc::new(Self {
            dev,
            ctx,
            info: info.clone(),
            poison: OnceLock::new(),
            life: Mutex::new(Life::default()),
            streams: StreamPool::new(info.env.max_connections),
            modules: Modules::default(),
        })
    }

    /// Makes this context current on the calling thread.
    ///
    /// # Errors
    ///
    /// The driver's error (`cuCtxSetCurrent`).
    pub fn bind(&self) -> Result<()> {
        // SAFETY: `ctx` is retained until Drop.
        unsafe { result::ctx_set_current(self.ctx) }
    }

    /// Lets this context's kernels write (and read) device memory of `peer`'s device
    /// through a peer mapping (`cuCtxEnablePeerAccess`), where the driver allows it from
    /// this device to that one (`cuDeviceCanAccessPeer`). Returns whether they can: true
    /// at once for the same device (one context per device), false when the driver says
    /// no. The mapping lasts as long as both contexts.
    ///
    /// # Errors
    ///
    /// The driver's, naming the call.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<bool> {
        if self.dev == peer.dev {
            return Ok(true);
        }
        if !result::device_can_access_peer(self.dev, peer.dev)? {
            return Ok(false);
        }
        self.bind()?;
        // SAFETY: `peer.ctx` is retained until `peer` drops, and `peer` is borrowed for
        // the call; this context was made current just above.
        unsafe { result::ctx_enable_peer_access(peer.ctx)? };
        Ok(true)
    }

    /// What the probe found (driver version, device attributes, driver environment).
    pub fn info(&self) -> &CudaInfo {
        &self.info
    }

    /// The device.
    pub fn device(&self) -> &DeviceInfo {
        &self.info.device
    }

    /// Records a sticky error (see [`result::is_sticky`]) as the context's poison; other
    /// errors are ignored. Returns whether the context is poisoned now.
    pub fn poison(&self, e: &Error) -> bool {
        if let Some(code) = e.cuda_code().filter(|&c| result::is_sticky(c)) {
            if self.poison.set((code, result::error_name(code))).is_ok() {
                tracing::error!(
                    device = self.info.device.ordinal,
                    code,
                    error = %e,
                    "CUDA context poisoned by a sticky error; it is reset once nothing holds it"
                );
            }
        }
        self.poison.get().is_some()
    }

    /// The sticky error that poisoned the context, if any: `(code, name)`.
    pub fn poisoned(&self) -> Option<&(i32, String)> {
        self.poison.get()
    }

    /// Returns `this` if it is healthy. A poisoned context held by nobody else is dropped
    /// (its `Drop` resets the device's primary context, `cuDevicePrimaryCtxReset`: every
    /// allocation, module and stream of the old one is gone, and the sticky error with
    /// them) and a fresh context returned.
    ///
    /// # Errors
    ///
    /// [`Error::ContextPoisoned`] while other holders remain (kernels, buffers, other
    /// runtimes); the driver's error if the new context cannot be made.
    pub fn recover(this: Arc<Self>) -> Result<Arc<Self>> {
        let Some((code, name)) = this.poisoned().cloned() else {
            return Ok(this);
        };
        let holders = Arc::strong_count(&this) - 1;
        if holders > 0 {
            return Err(Error::ContextPoisoned {
                ordinal: this.info.device.ordinal,
                name,
                code,
                holders,
            });
        }
        let info = this.info.clone();
        // The last Arc: its Drop releases and resets the device's primary context before
        // the registry lets `primary` make a new one.
        drop(this);
        let fresh = Self::primary(&info)?;
        if let Some((code, name)) = fresh.poisoned().cloned() {
            // Another thread took the old context between the count and the drop.
            return Err(Error::ContextPoisoned {
                ordinal: info.device.ordinal,
                name,
                code,
                holders: Arc::strong_count(&fresh) - 1,
            });
        }
        Ok(fresh)
    }

    /// The device handle.
    pub(crate) fn dev(&self) -> sys::CUdevice {
        self.dev
    }

    /// Counts a ring kernel as running, if fewer than `limit` run; see
    /// [`RunningKernel`]. Call it before the launch.
    pub(crate) fn begin_kernel(self: &Arc<Self>, limit: usize, why: &str) -> Result<RunningKernel> {
        let mut life = self.life.lock();
        if life.running >= limit {
            return Err(Error::TooManyKernels {
                device: self.info.device.name.clone(),
                running: life.running,
                limit,
                why: why.to_owned(),
            });
        }
        life.running += 1;
        Ok(RunningKernel {
            ctx: self.clone(),
            done: false,
        })
    }

    /// Runs `f` (which makes `op` for `what`, a driver call that can wait for every
    /// kernel of the context to finish) only if no ring kernel runs, and with none
    /// launched until it returns.
    ///
    /// # Errors
    ///
    /// [`Error::WouldWait`] while ring kernels run; `f`'s error.
    pub(crate) fn while_idle<T>(
        &self,
        op: &'static str,
        what: &str,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let life = self.life.lock();
        if life.running > 0 {
            return Err(Error::WouldWait {
                op,
                what: what.to_owned(),
                running: life.running,
            });
        }
        let r = f();
        drop(life);
        r
    }

    /// Ring kernels running on this context.
    pub fn running_kernels(&self) -> usize {
        self.life.lock().running
    }

    /// Streams held by ring kernels and copy engines, and how many may be held at once
    /// (see `crate::stream`).
    pub fn streams_held(&self) -> (usize, usize) {
        (self.streams.held(), self.streams.limit())
    }

    /// Modules loaded on this context (they stay loaded for its life).
    pub fn loaded_modules(&self) -> usize {
        self.modules.len()
    }

    /// Blocks freed later because a ring kernel was running.
    pub fn deferred_releases(&self) -> usize {
        self.life.lock().deferred.len()
    }

    /// Frees `r` now if no ring kernel runs, else defers it (see the module docs).
    /// Failures are logged: nothing else can be done about them in a `Drop`.
    pub(crate) fn release(&self, r: Release) {
        let mut life = self.life.lock();
        if life.running > 0 || self.poisoned().is_some() {
            // A poisoned context is reset when its last holder goes, which frees this
            // with everything else: no driver call on it meanwhile.
            life.deferred.push(r);
            return;
        }
        let freed = self.bind().and_then(|()| r.free());
        drop(life);
        self.log_free(freed);
    }

    /// A deferred block of `kind` and exactly `bytes` bytes, taken off the deferred list
    /// for reuse (not zeroed).
    pub(crate) fn reuse(&self, kind: Reusable, bytes: usize) -> Option<Release> {
        if self.poisoned().is_some() {
            return None;
        }
        let mut life = self.life.lock();
        let at = life.deferred.iter().position(|r| match (kind, r) {
            (Reusable::Device, Release::Device(_, b)) | (Reusable::Host, Release::Host(_, b)) => {
                *b == bytes
            }
            _ => false,
        })?;
        Some(life.deferred.swap_remove(at))
    }

    fn log_free(&self, r: Result<()>) {
        if let Err(e) = r {
            if self.poisoned().is_some() {
                tracing::debug!(error = %e, "free on a poisoned CUDA context (the reset frees it)");
            } else {
                tracing::error!(error = %e, "freeing CUDA memory");
            }
        }
    }

    /// Frees every deferred block; `life` is held, so no launch overlaps.
    fn free_deferred(&self, life: &mut Life) {
        if life.deferred.is_empty() || self.poisoned().is_some() {
            // A poisoned context's memory goes with its reset (`Drop`), never through a
            // driver call on it.
            return;
        }
        let n = life.deferred.len();
        if let Err(e) = self.bind() {
            tracing::error!(error = %e, blocks = n, "cannot bind the context to free deferred blocks");
            return;
        }
        for r in life.deferred.drain(..) {
            self.log_free(r.free());
        }
        tracing::debug!(
            blocks = n,
            "freed CUDA memory deferred while ring kernels ran"
        );
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // The registry stays locked until the device's primary context is released (and,
        // if poisoned, reset first): no other context of this device is made meanwhile.
        let registry = crate::registry::lock_for_release();
        let poisoned = self.poisoned().map(|(code, name)| Fault {
            code: *code,
            name: name.clone(),
        });
        let life = self.life.get_mut();
        life.running = 0;
        let deferred: Vec<Release> = life.deferred.drain(..).collect();
        if poisoned.is_some() {
            // Reset before release (`crate::recovery`): the reset destroys every
            // allocation, registration, module and stream of the context, so gyre's
            // handles of them go without a driver call. The owners of registered memory
            // are dropped after the reset, when no registration covers them any more.
            self.modules.forget_all();
            self.streams.forget_all();
            let reset = registry.close(self.info.device.ordinal, self.dev, poisoned);
            if reset {
                drop(deferred);
            } else {
                tracing::error!(
                    device = self.info.device.ordinal,
                    blocks = deferred.len(),
                    "a poisoned CUDA context was not reset: its memory stays allocated"
                );
                // Registrations may still cover their owners' memory (another library
                // may hold the primary context): keep the owners mapped for good.
                std::mem::forget(deferred);
            }
        } else {
            if let Err(e) = self.bind() {
                tracing::error!(error = %e, "dropping a CUDA context that cannot be bound");
            }
            for r in deferred {
                let freed = r.free();
                self.log_free(freed);
            }
            self.modules.unload_all();
            self.streams.destroy_all();
            registry.close(self.info.device.ordinal, self.dev, None);
        }
        // SAFETY: clears this thread's current context (no context is current after the
        // release; a null context is always valid here).
        let _ = unsafe { result::ctx_set_current(std::ptr::null_mut()) };
    }
}

/// A ring kernel counted as running on its context ([`Context::begin_kernel`]). Call
/// [`RunningKernel::finished`] once its stream has completed; dropping it without that
/// (a failed launch) also uncounts it.
#[derive(Debug)]
pub(crate) struct RunningKernel {
    ctx: Arc<Context>,
    done: bool,
}

impl RunningKernel {
    /// Uncounts the kernel; the last one to finish frees the deferred blocks.
    pub(crate) fn finished(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let mut life = self.ctx.life.lock();
        life.running = life.running.saturating_sub(1);
        if life.running == 0 {
            self.ctx.free_deferred(&mut life);
        }
    }
}

impl Drop for RunningKernel {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    //! The rules that need no driver: a load is refused while a ring kernel runs, and
    //! its compiled image is kept for the load after. (Dropping these contexts makes
    //! driver calls that fail without a driver; they are logged.)
    use super::*;
    use crate::module::Modules;
    use crate::probe::{DeviceInfo, DriverEnv};

    fn info() -> CudaInfo {
        let device = DeviceInfo {
            ordinal: 97,
            name: "no device (test)".into(),
            compute_capability: (9, 0),
            total_mem: 0,
            multiprocessors: 1,
            kernel_exec_timeout: false,
            can_map_host_memory: true,
            unified_addressing: true,
            concurrent_managed_access: false,
            pageable_memory_access: false,
            host_native_atomic_supported: false,
        };
        CudaInfo {
            driver_version: 13000,
            device_count: 1,
            devices: vec![device.clone()],
            device,
            env: DriverEnv {
                module_loading: "EAGER".into(),
                max_connections: 8,
                set_by_gyre: Vec::new(),
                not_set: None,
                initialized_before_gyre: false,
            },
        }
    }

    #[test]
    fn a_call_that_can_wait_is_refused_while_a_ring_kernel_runs() {
        let ctx = Context::wrap(&info(), 97, std::ptr::null_mut());
        assert_eq!(ctx.while_idle("op", "idle", || Ok(1)).unwrap(), 1);
        let k = ctx.begin_kernel(4, "test").unwrap();
        let mut ran = false;
        let e = ctx
            .while_idle("cuModuleLoadDataEx", "a handler", || {
                ran = true;
                Ok(())
            })
            .unwrap_err();
        assert!(!ran, "refused before the call");
        match &e {
            Error::WouldWait { op, running, .. } => {
                assert_eq!(*op, "cuModuleLoadDataEx");
                assert_eq!(*running, 1);
            }
            other => panic!("expected WouldWait, got {other:?}"),
        }
        assert!(e.to_string().contains("before the first launch"), "{e}");
        k.finished();
        assert_eq!(ctx.while_idle("op", "idle again", || Ok(2)).unwrap(), 2);
    }

    #[test]
    fn a_staged_image_survives_a_refused_load_and_is_not_compiled_again() {
        let ctx = Context::wrap(&info(), 97, std::ptr::null_mut());
        let mut compiles = 0;
        Modules::stage(&ctx, 7, || {
            compiles += 1;
            Ok(vec![1, 2, 3])
        })
        .unwrap();
        // Staging twice compiles once.
        Modules::stage(&ctx, 7, || {
            compiles += 1;
            Ok(vec![1, 2, 3])
        })
        .unwrap();
        assert_eq!(compiles, 1);
        let _k = ctx.begin_kernel(4, "test").unwrap();
        for _ in 0..2 {
            let e = Modules::get_or_load(&ctx, 7, "entry", "a handler", || {
                compiles += 1;
                Ok(vec![1, 2, 3])
            })
            .unwrap_err();
            assert!(matches!(e, Error::WouldWait { .. }), "{e:?}");
        }
        assert_eq!(
            compiles, 1,
            "the staged image is used, and kept after a refusal"
        );
        assert_eq!(ctx.loaded_modules(), 0);
    }
}
