//! The device loop on a host thread: the block loop of `cuda/include/gyre/block.h` (K0..K9
//! of `docs/protocol.md`), the same code the CUDA and OpenCL kernels run, compiled over the
//! C11 port (`cuda/ring_kernel_c11.c`), answering with a Rust [`Handler`] (called through
//! the trampoline of [`crate::ffi`]) or with a built-in kernel's device code
//! (`cuda/handlers/*.h`) over emulated lanes.

use core::sync::atomic::Ordering::{Acquire, Release};
use std::ffi::c_void;
use std::sync::Arc;

use gyre_abi::{error, state};
use gyre_core::chain::StageLink;
use gyre_core::cost::CostCounters;
use gyre_core::doorbell::Doorbell;
use gyre_core::kernels::ids;
use gyre_core::{Handler, IdleStrategy, SharedRegion};

use crate::ffi::{self, HandlerCtx, ParkCtx, RawKernel};

/// What answers a CPU kernel's requests.
///
/// # Examples
///
/// ```
/// use gyre_cpu::CpuHandler;
/// use gyre_core::kernels::{self, ids};
///
/// let host = CpuHandler::Host(&kernels::echo);
/// let device_code = CpuHandler::Builtin { id: ids::ECHO, lanes: 32 };
/// assert!(device_code.validate().is_ok());
/// assert!(CpuHandler::Builtin { id: 99, lanes: 1 }.validate().is_err());
/// # let _ = host;
/// ```
#[derive(Clone, Copy)]
pub enum CpuHandler<'a> {
    /// A Rust handler, called once per request on the kernel's thread (a panic is caught
    /// and faults the kernel with [`error::HANDLER_PANIC`]).
    Host(&'a dyn Handler),
    /// Built-in kernel `id` (`gyre_core::kernels::ids`): the device code of
    /// `cuda/handlers/*.h`, the very source the CUDA and OpenCL kernels are built with,
    /// run over `lanes` lanes emulated on the kernel's thread (1..=256: each phase of the
    /// handler runs for lane 0, 1, ... in turn).
    Builtin {
        /// The kernel id: [`ids::ECHO`], [`ids::VEC_SCALE`] or [`ids::REDUCE_SUM`].
        id: u32,
        /// Emulated lanes, 1..=256.
        lanes: u32,
    },
}

impl core::fmt::Debug for CpuHandler<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CpuHandler::Host(_) => f.write_str("Host(..)"),
            CpuHandler::Builtin { id, lanes } => f
                .debug_struct("Builtin")
                .field("id", id)
                .field("lanes", lanes)
                .finish(),
        }
    }
}

impl CpuHandler<'_> {
    /// The most lanes a built-in runs over.
    pub const MAX_LANES: u32 = ffi::MAX_LANES;

    /// Checks a built-in's id and lanes.
    ///
    /// # Errors
    ///
    /// A message naming the bad value: an id that is not a built-in kernel, or lanes
    /// outside 1..=[`CpuHandler::MAX_LANES`].
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            CpuHandler::Host(_) => Ok(()),
            CpuHandler::Builtin { id, lanes } => {
                if !matches!(id, ids::ECHO | ids::VEC_SCALE | ids::REDUCE_SUM) {
                    return Err(format!("{id} is not a built-in kernel id"));
                }
                if lanes == 0 || lanes > Self::MAX_LANES {
                    return Err(format!(
                        "{lanes} lanes (a CPU kernel emulates 1..={})",
                        Self::MAX_LANES
                    ));
                }
                Ok(())
            }
        }
    }
}

/// A C kernel and the contexts it points to; freed on drop.
struct CKernel<'a> {
    raw: *mut RawKernel,
    /// Boxed so that the pointers the C loop holds stay put when `CKernel` moves.
    ctx: Option<Box<HandlerCtx<'a>>>,
    park: Option<Box<ParkCtx<'a>>>,
}

/// Faults the kernel of `region` with `code` from the host side (the kernel could not be
/// made): error code, then state, as the kernel itself would.
fn fault(region: &SharedRegion, code: u32) {
    let cb = region.control();
    cb.error_code.store(code, Release);
    cb.state.store(state::FAULTED, Release);
}

impl<'a> CKernel<'a> {
    /// K0 (and the first K8) over `region`. `None` when the kernel faulted there (the
    /// control block says why: a bad control block, or [`error::HANDLER_REJECTED`] for a
    /// built-in that does not validate) or the allocation failed (faulted with
    /// [`error::HANDLER_PANIC`]). With a doorbell (registered by the calling thread), the
    /// back-off parks on it.
    fn start(
        region: &'a SharedRegion,
        handler: CpuHandler<'a>,
        idle: IdleStrategy,
        telemetry: bool,
        doorbell: Option<&'a Doorbell>,
        link: Option<&'a StageLink>,
        cost: Option<&'a CostCounters>,
    ) -> Option<Self> {
        if let Err(why) = handler.validate() {
            tracing::warn!(%why, "CPU kernel handler rejected");
            fault(region, error::HANDLER_REJECTED);
            // The next stage is told by the host's chain view (`ChainView::state`).
            return None;
        }
        // SAFETY: allocates and zeroes a kernel; NULL only when out of memory.
        let raw = unsafe { ffi::gyre_c11_kernel_new() };
        if raw.is_null() {
            fault(region, error::HANDLER_PANIC);
            return None;
        }
        let idle = ffi::IdleCfg::from(idle);
        let (kind, lanes, host) = match handler {
            CpuHandler::Host(h) => (ffi::KIND_HOST, 1, Some(h)),
            CpuHandler::Builtin { id, lanes } => (id, lanes, None),
        };
        let k = Self {
            raw,
            ctx: host.map(|handler| Box::new(HandlerCtx { handler })),
            park: doorbell.map(|doorbell| Box::new(ParkCtx { region, doorbell })),
        };
        let ctx: *const HandlerCtx<'a> = k.ctx.as_deref().map_or(std::ptr::null(), |c| c);
        let park_ctx: *const ParkCtx<'a> = k.park.as_deref().map_or(std::ptr::null(), |p| p);
        let (next, link_flags, next_type) = link.map_or((std::ptr::null_mut(), 0, 0), |l| {
            let (base, offset) = l.argument();
            (base.as_ptr().wrapping_add(offset), l.flags, l.next_msg_type)
        });
        let notify_ctx: *const Vec<Arc<Doorbell>> = link
            .map(|l| &l.next_doorbells)
            .filter(|b| !b.is_empty())
            .map_or(std::ptr::null(), |b| b);
        // SAFETY: `raw` is a fresh kernel; the region is a live, initialised shared region
        // of `SharedRegion::bytes_for` bytes that outlives the kernel (`'a`), accessed by
        // the host only through atomics and the protocol; `ctx` and `park_ctx` point to
        // the boxed contexts, which live in `k` as long as the kernel (the trampoline is
        // given only with a handler context, the park only with a park context); kind
        // and lanes were validated above. A link's argument is a live, initialised shared
        // region or link table entry naming such regions (the `StageLink` holds them, and
        // the caller holds the link for `'a`), and its doorbells outlive the kernel
        // likewise (notify only with some). The cost counters, when given, outlive the
        // kernel too (`'a`); the C port writes them through relaxed atomics of the same
        // layout (`CostCounters` is `repr(C)` of eight `AtomicU64`, `gyre_c11_cost`).
        let cost_ptr = cost.map_or(std::ptr::null_mut(), |c| {
            (c as *const CostCounters).cast_mut().cast::<c_void>()
        });
        let code = unsafe {
            ffi::gyre_c11_start(
                k.raw,
                region.base().as_ptr(),
                kind,
                k.ctx.is_some().then_some(ffi::trampoline as ffi::HandlerFn),
                ctx.cast_mut().cast::<c_void>(),
                lanes,
                &idle,
                k.park.is_some().then_some(ffi::park as ffi::ParkFn),
                park_ctx.cast_mut().cast::<c_void>(),
                u32::from(telemetry),
                next,
                link_flags,
                next_type,
                (!notify_ctx.is_null()).then_some(ffi::notify as ffi::NotifyFn),
                notify_ctx.cast_mut().cast::<c_void>(),
                cost_ptr,
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

/// Runs the ring-kernel loop over `region` with a Rust handler until it terminates or
/// faults. With `telemetry` false, K8 is skipped except on state changes (see
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
    kernel_loop_with_doorbell(region, CpuHandler::Host(handler), idle, telemetry, None);
}

/// [`kernel_loop`] with any [`CpuHandler`], whose idle back-off parks on `doorbell` in its
/// last phase: the calling thread registers with it, and the host rings it when it
/// publishes a request or a command (see `gyre_core::doorbell`), so an idle kernel parks
/// long and still answers at once. A kernel whose idle strategy never parks (`BusySpin`,
/// `Sleep`) tells the doorbell so, and the host's rings then cost no fence
/// (`Doorbell::enter`). A built-in that does not validate faults the kernel with
/// [`error::HANDLER_REJECTED`] at once.
pub fn kernel_loop_with_doorbell(
    region: &SharedRegion,
    handler: CpuHandler<'_>,
    idle: IdleStrategy,
    telemetry: bool,
    doorbell: Option<&Doorbell>,
) {
    kernel_loop_linked(region, handler, idle, telemetry, doorbell, None, None);
}

/// [`kernel_loop_with_doorbell`] for a pipeline stage: its replies go where `link` says
/// (the next stage's request ring, or the chain head's reply ring; see
/// `gyre_core::chain`), and the next stage's doorbell is rung after each publication to
/// it. `None`: a kernel that is not chained. With `cost`, the loop counts (and, as the
/// counters say, charges) what it would pay over PCIe (`gyre_core::cost`).
pub fn kernel_loop_linked(
    region: &SharedRegion,
    handler: CpuHandler<'_>,
    idle: IdleStrategy,
    telemetry: bool,
    doorbell: Option<&Doorbell>,
    link: Option<&StageLink>,
    cost: Option<&CostCounters>,
) {
    // A kernel that never parks tells its doorbell so (rings stop fencing); one that
    // parks parks on it only where the doorbell allows (see `Doorbell::enter`), and
    // otherwise backs off by sleeping.
    let doorbell = doorbell.filter(|d| d.enter(matches!(idle, IdleStrategy::Backoff { .. })));
    let Some(k) = CKernel::start(region, handler, idle, telemetry, doorbell, link, cost) else {
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

/// Runs `run` (a kernel loop of this crate, on this thread) with `published` called after
/// each batch whose replies the kernel published (`GYRE_REPLIES_PUBLISHED` of `ring.h`):
/// the host serves those replies' waiters there (`gyre_core::channel::bell`). The hook is
/// the calling thread's; the one it replaces (a nested call's outer hook) is back when
/// `run` returns or unwinds. A panic of `published` is caught at the boundary to C,
/// logged, and ends the hook for the rest of `run`.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// let batches = AtomicU64::new(0);
/// let answer = gyre_cpu::with_replies_hook(&mut || { batches.fetch_add(1, Relaxed); }, || 42);
/// assert_eq!((answer, batches.load(Relaxed)), (42, 0));
/// ```
pub fn with_replies_hook<R>(published: &mut dyn FnMut(), run: impl FnOnce() -> R) -> R {
    thread_local! {
        /// This thread's hook context as last set here (the C side keeps its own copy).
        static CURRENT: core::cell::Cell<*mut c_void> =
            const { core::cell::Cell::new(std::ptr::null_mut()) };
    }
    /// Puts the replaced hook back when `run` returns or unwinds.
    struct Restore(*mut c_void);
    impl Drop for Restore {
        fn drop(&mut self) {
            let f = (!self.0.is_null()).then_some(ffi::replies as ffi::NotifyFn);
            // SAFETY: the outer hook's context, which outlives this inner call (its own
            // `Restore` comes later), or none.
            unsafe { ffi::gyre_c11_replies_set(f, self.0) };
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let mut f: &mut dyn FnMut() = published;
    let ctx: *mut c_void = (&mut f as *mut &mut dyn FnMut()).cast();
    let _restore = Restore(CURRENT.with(|c| c.replace(ctx)));
    // SAFETY: `ctx` points to `f`, which outlives the hook: `_restore` replaces it before
    // `f` goes (declared after `f`, dropped first), and only this thread's kernel calls it.
    unsafe { ffi::gyre_c11_replies_set(Some(ffi::replies as ffi::NotifyFn), ctx) };
    run()
}

/// The kernel loop driven one step at a time on the caller's thread: deterministic
/// tests, property tests against a model, fault injection. The same C functions as
/// [`kernel_loop`].
pub struct Stepper<'a> {
    k: CKernel<'a>,
}

impl<'a> Stepper<'a> {
    /// Runs step K0 (validation) with a Rust handler. `None` if the kernel faulted there
    /// (see the control block's error code).
    pub fn new(region: &'a SharedRegion, handler: &'a dyn Handler) -> Option<Self> {
        Self::with(region, CpuHandler::Host(handler))
    }

    /// Runs step K0 with any [`CpuHandler`]. `None` if the kernel faulted there (see the
    /// control block's error code: [`error::HANDLER_REJECTED`] for a built-in that does
    /// not validate).
    pub fn with(region: &'a SharedRegion, handler: CpuHandler<'a>) -> Option<Self> {
        Self::start(region, handler, None)
    }

    /// [`Stepper::with`] counting into `cost` (and charging its emulated latency): the
    /// cost model's tests step a checked ring and read what each step paid.
    pub fn with_cost(
        region: &'a SharedRegion,
        handler: CpuHandler<'a>,
        cost: &'a CostCounters,
    ) -> Option<Self> {
        Self::start(region, handler, Some(cost))
    }

    fn start(
        region: &'a SharedRegion,
        handler: CpuHandler<'a>,
        cost: Option<&'a CostCounters>,
    ) -> Option<Self> {
        CKernel::start(
            region,
            handler,
            IdleStrategy::BusySpin,
            true,
            None,
            None,
            cost,
        )
        .map(|k| Self { k })
    }

    /// One loop iteration: commands and heartbeats (K1, K9), then at most one batch
    /// (K2..K8), checking for protocol errors under the head. Returns the requests
    /// answered, or `None` once the kernel stopped (terminated or faulted).
    pub fn step(&mut self) -> Option<u64> {
        // SAFETY: a started kernel; `&mut self` makes this the only caller.
        let n = unsafe { ffi::gyre_c11_step(self.k.raw) };
        u64::try_from(n).ok()
    }

    /// Emulates a built-in's lanes in descending order (`true`) or ascending (the
    /// default). The answers must not differ: a handler that reads, within one phase, a
    /// word another lane writes in that phase (a missing barrier: a race where lanes are
    /// threads) sees the other value in one of the two orders.
    pub fn set_lanes_descending(&mut self, descending: bool) {
        // SAFETY: a started kernel; `&mut self` makes this the only caller.
        unsafe { ffi::gyre_c11_set_lane_order(self.k.raw, u32::from(descending)) };
    }

    /// The state the kernel last wrote.
    pub fn state(&self) -> u32 {
        // SAFETY: a started kernel; reads one field.
        unsafe { ffi::gyre_c11_state(self.k.raw) }
    }
}

#[cfg(test)]
mod tests {
    /// The C check word (`gyre_check_slot` of ring.h) is gyre_abi's, over random slots
    /// of every payload size class and length, a corrupt length among them.
    #[test]
    fn rust_and_c_agree_on_the_check_word() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for payload in [64usize, 192, 448, 960] {
            for len in [0u32, 1, 7, 8, 9, 63, 64, 65, payload as u32, u32::MAX] {
                let mut w: Vec<u64> = (0..8 + payload / 8).map(|_| next()).collect();
                w[3] = (w[3] & 0xffff_ffff) | (u64::from(len) << 32);
                let rust = gyre_abi::check::slot(&w, payload);
                // SAFETY: `w` holds 8 + payload / 8 words, all the check may read.
                let c = unsafe { crate::ffi::gyre_c11_check_slot(w.as_ptr(), payload as u32) };
                assert_eq!(rust, c, "payload {payload}, len {len}");
            }
        }
    }

    /// The C port stages as many slots as gyre-core's rule says (the CUDA backend sizes
    /// its scratch with the Rust one).
    #[test]
    fn rust_and_c_agree_on_the_scratch_slots() {
        for (batch, slot) in [
            (1u32, 128u32),
            (32, 128),
            (4096, 128),
            (64, 1 << 20),
            (7, 4096),
        ] {
            // SAFETY: a pure function.
            let c = unsafe { crate::ffi::gyre_c11_scratch_slots(batch, slot) };
            assert_eq!(c, gyre_core::cost::scratch_slots(batch, slot as usize));
        }
    }

    #[test]
    fn rust_and_c_agree_on_the_most_lanes() {
        // SAFETY: returns a constant.
        assert_eq!(
            unsafe { crate::ffi::gyre_c11_max_lanes() },
            crate::ffi::MAX_LANES
        );
    }
}
