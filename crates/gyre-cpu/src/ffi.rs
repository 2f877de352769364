//! The C ring kernel (`cuda/ring_kernel_c11.c`, built by `build.rs`) and the Rust side of
//! its handler: one `extern "C"` trampoline per message that calls a Rust [`Handler`] and
//! catches its panics, so nothing unwinds through C.

use core::sync::atomic::Ordering::Acquire;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use gyre_core::doorbell::Doorbell;
use gyre_core::region::RingId;
use gyre_core::{Handler, IdleStrategy, SharedRegion};

/// `gyre_c11_start`'s kind of the host's handler (1..=3 are the built-in kernel ids).
pub(crate) const KIND_HOST: u32 = 0;

/// The most lanes a CPU kernel emulates (`GYRE_MAX_LANES` of `port_c11.h`; a test checks
/// that they agree).
pub(crate) const MAX_LANES: u32 = 256;

/// `gyre_c11_kernel` (opaque: made and freed by C).
#[repr(C)]
pub(crate) struct RawKernel {
    _opaque: [u8; 0],
}

/// `gyre_c11_idle_cfg` (`cuda/include/gyre/port_c11.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleCfg {
    kind: u32,
    spins: u32,
    yields: u32,
    pad: u32,
    max_park_ns: u64,
    sleep_ns: u64,
}

impl From<IdleStrategy> for IdleCfg {
    fn from(s: IdleStrategy) -> Self {
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match s {
            IdleStrategy::BusySpin => Self {
                kind: 0,
                spins: 0,
                yields: 0,
                pad: 0,
                max_park_ns: 0,
                sleep_ns: 0,
            },
            IdleStrategy::Backoff {
                spins,
                yields,
                max_park,
            } => Self {
                kind: 1,
                spins,
                yields,
                pad: 0,
                max_park_ns: ns(max_park).max(1000),
                sleep_ns: 0,
            },
            IdleStrategy::Sleep(d) => Self {
                kind: 2,
                spins: 0,
                yields: 0,
                pad: 0,
                max_park_ns: 0,
                sleep_ns: ns(d),
            },
        }
    }
}

/// The C handler signature (`gyre_c11_handler_fn`).
pub(crate) type HandlerFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    tag: u32,
    msg_type: u32,
    req: *const u8,
    req_len: u32,
    reply: *mut u8,
    reply_cap: u32,
    reply_len: *mut u32,
    panicked: *mut u32,
) -> u32;

/// The C notify signature (`gyre_c11_notify_fn`).
pub(crate) type NotifyFn = unsafe extern "C" fn(ctx: *mut c_void);

/// The C park signature (`gyre_c11_park_fn`).
pub(crate) type ParkFn =
    unsafe extern "C" fn(ctx: *mut c_void, tail: u64, last_cmd: u32, timeout_ns: u64) -> u32;

extern "C" {
    pub(crate) fn gyre_c11_kernel_new() -> *mut RawKernel;
    pub(crate) fn gyre_c11_kernel_free(k: *mut RawKernel);
    pub(crate) fn gyre_c11_start(
        k: *mut RawKernel,
        region: *mut u8,
        kind: u32,
        handler: Option<HandlerFn>,
        ctx: *mut c_void,
        lanes: u32,
        idle: *const IdleCfg,
        park: Option<ParkFn>,
        park_ctx: *mut c_void,
        telemetry: u32,
        next: *mut u8,
        link_flags: u32,
        next_type: u32,
        notify: Option<NotifyFn>,
        notify_ctx: *mut c_void,
        cost: *mut c_void,
    ) -> u32;
    #[cfg(test)]
    pub(crate) fn gyre_c11_check_slot(words: *const u64, payload: u32) -> u64;
    #[cfg(test)]
    pub(crate) fn gyre_c11_scratch_slots(batch: u32, slot_size: u32) -> u32;
    pub(crate) fn gyre_c11_run(k: *mut RawKernel);
    pub(crate) fn gyre_c11_replies_set(f: Option<NotifyFn>, ctx: *mut c_void);
    #[cfg(test)]
    pub(crate) fn gyre_c11_max_lanes() -> u32;
    pub(crate) fn gyre_c11_set_lane_order(k: *mut RawKernel, descending: u32);
    pub(crate) fn gyre_c11_step(k: *mut RawKernel) -> i64;
    pub(crate) fn gyre_c11_state(k: *const RawKernel) -> u32;
}

/// What the C loop's `ctx` points to: the handler.
pub(crate) struct HandlerCtx<'a> {
    pub(crate) handler: &'a dyn Handler,
}

/// The trampoline: calls the Rust handler on the request and reply slots (with the
/// request's slot tag, [`gyre_core::Handler::handle_at`], through `handle_word`, which
/// returns its answer as one word in a register: [`gyre_core::handler::answer_word`]),
/// and turns the answer into the C contract (`*reply_len` and a status; `*panicked` for
/// a panic, which is caught here).
///
/// # Safety
///
/// `ctx` points to a live [`HandlerCtx`]; `req` is `req_len` readable bytes and `reply`
/// `reply_cap` writable bytes, not overlapping, owned by the kernel for the call (the
/// protocol: a published, unreleased request slot and an unpublished reply slot);
/// `reply_len` and `panicked` are writable.
pub(crate) unsafe extern "C" fn trampoline(
    ctx: *mut c_void,
    tag: u32,
    msg_type: u32,
    req: *const u8,
    req_len: u32,
    reply: *mut u8,
    reply_cap: u32,
    reply_len: *mut u32,
    panicked: *mut u32,
) -> u32 {
    // SAFETY: the caller's contract (the C loop passes what `Kernel` gave it, and the slot
    // payloads of the protocol).
    let (h, req, reply) = unsafe {
        (
            &*ctx.cast::<HandlerCtx<'_>>(),
            std::slice::from_raw_parts(req, req_len as usize),
            std::slice::from_raw_parts_mut(reply, reply_cap as usize),
        )
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        h.handler.handle_word(tag, msg_type, req, reply)
    }));
    let (status, len, did_panic) = match outcome {
        // `answer_word`: the status high, the length low (a length beyond the slot is K5's
        // BAD_LENGTH; an error's status is never NONE, the rule of `reply_status`, which
        // K5 applies again).
        Ok(w) => ((w >> 32) as u32, w as u32, 0),
        Err(_) => (gyre_abi::error::HANDLER_PANIC, 0, 1),
    };
    // SAFETY: writable out-parameters (the caller's contract).
    unsafe {
        *reply_len = len;
        *panicked = did_panic;
    }
    status
}

/// What the C loop's park context points to: the kernel's region and its doorbell.
pub(crate) struct ParkCtx<'a> {
    pub(crate) region: &'a SharedRegion,
    pub(crate) doorbell: &'a Doorbell,
}

/// The park of the back-off's last phase: [`Doorbell::park`] (announce, re-check for work,
/// park until rung or `timeout_ns`), the work being a request published at `tail` (its
/// sequence, or a head beyond it: doorbell mode) or a command other than `last_cmd`.
/// Returns whether it parked.
///
/// # Safety
///
/// `ctx` points to a live [`ParkCtx`]; called on the kernel's thread, which registered
/// with the doorbell.
pub(crate) unsafe extern "C" fn park(
    ctx: *mut c_void,
    tail: u64,
    last_cmd: u32,
    timeout_ns: u64,
) -> u32 {
    // SAFETY: the caller's contract.
    let p = unsafe { &*ctx.cast::<ParkCtx<'_>>() };
    let cb = p.region.control();
    let parked = p.doorbell.park(Duration::from_nanos(timeout_ns), || {
        p.region
            .slot(RingId::Request, tail)
            .sequence()
            .load(Acquire)
            == tail.wrapping_add(1)
            || cb.h2k_head.load(Acquire) > tail
            || cb.command.load(Acquire) != last_cmd
    });
    u32::from(parked)
}

/// A pipeline stage's notification of the stages it writes (after a publication to them
/// or a command): rings each one's doorbell, fencing first (`Doorbell::ring`), so a
/// parked stage wakes up.
///
/// # Safety
///
/// `ctx` points to a live `Vec<Arc<Doorbell>>`.
pub(crate) unsafe extern "C" fn notify(ctx: *mut c_void) {
    // SAFETY: the caller's contract.
    let bells = unsafe { &*ctx.cast::<Vec<Arc<Doorbell>>>() };
    for d in bells {
        d.ring();
    }
}

/// The hook after each batch whose replies the kernel published
/// ([`crate::with_replies_hook`]): calls the host's closure. A panic does not unwind into
/// C: it is logged and the hook removed for the rest of the loop (the waiters are then
/// the completion driver's).
///
/// # Safety
///
/// `ctx` points to a live `&mut dyn FnMut()`, used by this thread only.
pub(crate) unsafe extern "C" fn replies(ctx: *mut c_void) {
    // SAFETY: the caller's contract.
    let f = unsafe { &mut *ctx.cast::<&mut dyn FnMut()>() };
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        tracing::error!(
            "the reply hook panicked: removed; the completion driver serves the waiters"
        );
        // SAFETY: clearing the calling thread's hook takes no pointer.
        unsafe { gyre_c11_replies_set(None, std::ptr::null_mut()) };
    }
}
