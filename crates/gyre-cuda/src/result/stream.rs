//! The checked layer's streams, events and graphs (the graph-replay peer of the benchmark).

use super::{api, check, none};
use crate::error::{Error, Result};
use crate::sys::{self, CUDA_SUCCESS};

// ---- streams and events -------------------------------------------------------------------

/// `cuStreamCreate(CU_STREAM_NON_BLOCKING)`: never synchronises with the legacy stream.
///
/// # Safety
///
/// A context is current.
pub(crate) unsafe fn stream_create() -> Result<sys::CUstream> {
    let d = api()?;
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the caller's contract; one handle written through a valid pointer.
    let r = unsafe { (d.cuStreamCreate)(&mut s, sys::CU_STREAM_NON_BLOCKING) };
    check("cuStreamCreate", r, || ", CU_STREAM_NON_BLOCKING".into())?;
    Ok(s)
}

/// `cuStreamDestroy` (returns at once; the driver releases it when its work is done).
///
/// # Safety
///
/// `s` is live and destroyed once.
pub(crate) unsafe fn stream_destroy(s: sys::CUstream) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check(
        "cuStreamDestroy",
        unsafe { (d.cuStreamDestroy_v2)(s) },
        none,
    )
}

/// `cuStreamQuery`: `Ok(true)` when all its work completed, `Ok(false)` while some runs,
/// `Err` with the error that ended it (e.g. a kernel fault).
///
/// # Safety
///
/// `s` is a live stream of the current context.
pub(crate) unsafe fn stream_query(s: sys::CUstream) -> Result<bool> {
    let d = api()?;
    // SAFETY: the caller's contract.
    match unsafe { (d.cuStreamQuery)(s) } {
        CUDA_SUCCESS => Ok(true),
        sys::CUDA_ERROR_NOT_READY => Ok(false),
        r => Err(Error::driver("cuStreamQuery", r, String::new())),
    }
}

/// Waits for everything issued on `s` by polling `cuStreamQuery`, for at most `within`:
/// gyre never calls `cuStreamSynchronize`, which waits without end for work queued
/// behind a kernel that never finishes (a persistent one, a hung one). The first 50 us
/// poll back to back (a copy's completion is seen at once); then the thread yields,
/// and past 1 ms it sleeps up to 100 us between polls.
///
/// # Errors
///
/// [`Error::Timeout`] naming `what` past the deadline; `cuStreamQuery`'s error (a sticky
/// one when the work faulted), naming `what`.
///
/// # Safety
///
/// `s` is a live stream of the current context.
pub(crate) unsafe fn stream_wait(
    s: sys::CUstream,
    what: &str,
    within: std::time::Duration,
) -> Result<()> {
    use std::time::{Duration, Instant};
    let d = api()?;
    let start = Instant::now();
    loop {
        // SAFETY: the caller's contract.
        match unsafe { (d.cuStreamQuery)(s) } {
            CUDA_SUCCESS => return Ok(()),
            sys::CUDA_ERROR_NOT_READY => {}
            r => return check("cuStreamQuery", r, || format!(", waiting for {what}")),
        }
        let waited = start.elapsed();
        if waited >= within {
            return Err(Error::Timeout {
                what: what.to_owned(),
                after: within,
            });
        }
        if waited < Duration::from_micros(50) {
            core::hint::spin_loop();
        } else if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep((within - waited).min(Duration::from_micros(100)));
        }
    }
}

// ---- graphs (the benchmark's graph-replay peer) --------------------------------------------

/// `cuStreamBeginCapture` in thread-local mode.
///
/// # Safety
///
/// `s` is a live stream of the current context, not capturing.
pub(crate) unsafe fn stream_begin_capture(s: sys::CUstream) -> Result<()> {
    let d = api()?;
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: the caller's contract.
    check(
        "cuStreamBeginCapture",
        unsafe { (d.cuStreamBeginCapture_v2)(s, mode) },
        none,
    )
}

/// `cuStreamEndCapture`, then `cuGraphInstantiateWithFlags`; the graph itself is
/// destroyed once instantiated.
///
/// # Safety
///
/// `s` is capturing (see [`stream_begin_capture`]) on this thread.
pub(crate) unsafe fn stream_end_capture_instantiate(s: sys::CUstream) -> Result<sys::CUgraphExec> {
    let d = api()?;
    let mut g: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: the caller's contract.
    check(
        "cuStreamEndCapture",
        unsafe { (d.cuStreamEndCapture)(s, &mut g) },
        none,
    )?;
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: `g` is the graph just captured.
    let r = unsafe { (d.cuGraphInstantiateWithFlags)(&mut exec, g, 0) };
    // SAFETY: the executable graph does not need its source graph.
    let destroyed = unsafe { (d.cuGraphDestroy)(g) };
    check("cuGraphInstantiateWithFlags", r, none)?;
    check("cuGraphDestroy", destroyed, none)?;
    Ok(exec)
}

/// `cuGraphLaunch`.
///
/// # Safety
///
/// `exec` is a live executable graph; `s` a live stream of the current context.
pub(crate) unsafe fn graph_launch(exec: sys::CUgraphExec, s: sys::CUstream) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuGraphLaunch", unsafe { (d.cuGraphLaunch)(exec, s) }, none)
}

/// `cuGraphExecDestroy`.
///
/// # Safety
///
/// `exec` is live, destroyed once, and not running.
pub(crate) unsafe fn graph_exec_destroy(exec: sys::CUgraphExec) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check(
        "cuGraphExecDestroy",
        unsafe { (d.cuGraphExecDestroy)(exec) },
        none,
    )
}
