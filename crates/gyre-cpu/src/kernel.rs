//! The device loop on a host thread: `cuda/include/gyre/ring.h` (K0..K9 of
//! `docs/protocol.md`), the same code the CUDA and OpenCL kernels run, compiled over the
//! C11 port (`cuda/ring_kernel_c11.c`), with a Rust [`Handler`] called through the
//! trampoline of [`crate::ffi`].

use core::sync::atomic::Ordering::Acquire;
use std::ffi::c_void;

use gyre_abi::{error, state};
use gyre_core::doorbell::Doorbell;
use gyre_core::{Handler, IdleStrategy, SharedRegion};

use crate::ffi::{self, HandlerCtx, ParkCtx, RawKernel};

/// A C kernel and the contexts it points to; freed on drop.
struct CKernel<'a> {
    raw: *mut RawKernel,
    /// Boxed so that the pointers the C loop holds stay put when `CKernel` moves.
    ctx: Box<HandlerCtx<'a>>,
    park: Option<Box<ParkCtx<'a>>>,
}

impl<'a> CKernel<'a> {
    /// K0 (and the first K8) over `region`. `None` when the kernel faulted there (the
    /// control block says why) or the allocation failed (faulted too). With a doorbell
    /// (registered by the calling thread), the back-off parks on it.
    fn start(
        region: &'a SharedRegion,
        handler: &'a dyn Handler,
        idle: IdleStrategy,
        telemetry: bool,
        doorbell: Option<&'a Doorbell>,
    ) -> Option<Self> {
        // SAFETY: allocates and zeroes a kernel; NULL only when out of memory.
        let raw = unsafe { ffi::gyre_c11_kernel_new() };
        if raw.is_null() {
            let cb = region.control();
            cb.error_code
                .store(error::HANDLER_PANIC, core::sync::atomic::Ordering::Release);
            cb.state
                .store(state::FAULTED, core::sync::atomic::Ordering::Release);
            return None;
        }
        let idle = ffi::IdleCfg::from(idle);
        let k = Self {
            raw,
            ctx: Box::new(HandlerCtx { handler }),
            park: doorbell.map(|doorbell| Box::new(ParkCtx { region, doorbell })),
        };
        let ctx: *const HandlerCtx<'a> = &*k.ctx;
        let park_ctx: *const ParkCtx<'a> = k.park.as_deref().map_or(std::ptr::null(), |p| p);
        // SAFETY: `raw` is a fresh kernel; the region is a live, initialised shared region
        // of `SharedRegion::bytes_for` bytes that outlives the kernel (`'a`), accessed by
        // the host only through atomics and the protocol; `ctx` and `park_ctx` point to
        // the boxed contexts, which live in `k` as long as the kernel (the park is given
        // only with a context).
        let code = unsafe {
            ffi::gyre_c11_start(
                k.raw,
                region.base().as_ptr(),
                ffi::trampoline,
                ctx.cast_mut().cast::<c_void>(),
                &idle,
                k.park.is_some().then_some(ffi::park as ffi::ParkFn),
                park_ctx.cast_mut().cast::<c_void>(),
                u32::from(telemetry),
            )
        };
        (code == error::NONE).then_some(k)
    }
}

impl Drop for CKernel<'_> {
    fn drop(&mut self) {
        // SAFETY: made by gyre_c11_kernel_new, freed once; the loop is not running.
        unsafe { ffi::gyre_c11_kernel_free(self.raw) };
    }
}

/// Runs the ring-kernel loop over `region` until it terminates or faults. With
/// `telemetry` false, K8 is skipped except on state changes (see
/// `gyre_core::LaunchSpec::telemetry`). The idle back-off sleeps in its last phase
/// (nothing wakes it early): see [`kernel_loop_with_doorbell`].
///
/// Never panics and never unwinds into C: a handler panic is caught by the trampoline
/// and faults the kernel with [`error::HANDLER_PANIC`].
pub fn kernel_loop(
    region: &SharedRegion,
    handler: &dyn Handler,
    idle: IdleStrategy,
    telemetry: bool,
) {
    kernel_loop_with_doorbell(region, handler, idle, telemetry, None);
}

/// [`kernel_loop`] whose idle back-off parks on `doorbell` in its last phase: the calling
/// thread registers with it, and the host rings it when it publishes a request or a
/// command (see `gyre_core::doorbell`), so an idle kernel parks long and still answers at
/// once.
pub fn kernel_loop_with_doorbell(
    region: &SharedRegion,
    handler: &dyn Handler,
    idle: IdleStrategy,
    telemetry: bool,
    doorbell: Option<&Doorbell>,
) {
    if let Some(d) = doorbell {
        d.register_current_thread();
    }
    let Some(k) = CKernel::start(region, handler, idle, telemetry, doorbell) else {
        return;
    };
    // SAFETY: a started kernel over a live region (see `CKernel::start`); this thread runs
    // its loop, nothing else touches `k` meanwhile.
    unsafe { ffi::gyre_c11_run(k.raw) };
    let cb = region.control();
    match (cb.state.load(Acquire), cb.error_code.load(Acquire)) {
        (state::TERMINATED, error::HOST_HEARTBEAT_STALE) => {
            tracing::warn!("host heartbeat stale: the kernel terminated itself");
        }
        (state::FAULTED, code) => {
            tracing::warn!(code, name = error::name(code), "ring kernel faulted");
        }
        _ => {}
    }
}

/// The kernel loop driven one step at a time on the caller's thread: deterministic
/// tests, property tests against a model, fault injection. The same C functions as
/// [`kernel_loop`].
pub struct Stepper<'a> {
    k: CKernel<'a>,
}

impl<'a> Stepper<'a> {
    /// Runs step K0 (validation). `None` if the kernel faulted there (see the control
    /// block's error code).
    pub fn new(region: &'a SharedRegion, handler: &'a dyn Handler) -> Option<Self> {
        CKernel::start(region, handler, IdleStrategy::BusySpin, true, None).map(|k| Self { k })
    }

    /// One loop iteration: commands and heartbeats (K1, K9), then at most one batch
    /// (K2..K8), checking for protocol errors under the head. Returns the requests
    /// answered, or `None` once the kernel stopped (terminated or faulted).
    pub fn step(&mut self) -> Option<u64> {
        // SAFETY: a started kernel; `&mut self` makes this the only caller.
        let n = unsafe { ffi::gyre_c11_step(self.k.raw) };
        u64::try_from(n).ok()
    }

    /// The state the kernel last wrote.
    pub fn state(&self) -> u32 {
        // SAFETY: a started kernel; reads one field.
        unsafe { ffi::gyre_c11_state(self.k.raw) }
    }
}
