//! A fixed set of non-blocking streams per context.
//!
//! The device has `CUDA_DEVICE_MAX_CONNECTIONS` hardware work queues ([`crate::probe`]
//! asks for 32). Streams beyond that share queues, and work queued on a queue behind a
//! persistent kernel never starts. So a context never has more streams than queues: one
//! *utility* stream, serialised by a lock, for short synchronous work (zeroing memory,
//! prefetches, one-off copies), and at most `connections - 2` streams *held* for as long
//! as their owner lives: one by each ring kernel, one by each copy engine, one for the
//! visibility probe while it runs (one queue is left for work gyre does not issue: the
//! legacy default stream, another library's streams). A stream released by its owner goes back to the pool and is reused; the
//! streams are destroyed with the context. When every stream is held,
//! [`StreamPool::lease`] fails with [`Error::StreamsExhausted`] instead of creating one
//! more. No stream is ever the legacy default stream.
//!
//! Nothing waits on a stream without a deadline: every synchronisation polls
//! `cuStreamQuery` (`result::stream_wait`) for at most [`SYNC_DEADLINE`], or a shorter
//! limit of its own, and a wait past it is [`Error::Timeout`], never a hang.

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::result;
use crate::sys::CUstream;

/// The longest any stream synchronisation waits (a copy, a zeroing, a kernel's end after
/// it was told to stop): far past any work gyre queues, so reaching it means the work is
/// stuck behind something that never ends.
pub(crate) const SYNC_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, Default)]
struct Pool {
    /// Created streams nobody holds.
    free: Vec<CUstream>,
    /// Streams held by leases.
    held: usize,
}

/// The streams of one context; see the module docs.
#[derive(Debug)]
pub(crate) struct StreamPool {
    connections: u32,
    pool: Mutex<Pool>,
    utility: Mutex<Option<CUstream>>,
}

// SAFETY: stream handles are driver objects usable from any thread with the context
// bound; every access is under one of the two locks.
unsafe impl Send for StreamPool {}
// SAFETY: as above.
unsafe impl Sync for StreamPool {}

impl StreamPool {
    pub(crate) fn new(connections: u32) -> Self {
        Self {
            connections,
            pool: Mutex::new(Pool::default()),
            utility: Mutex::new(None),
        }
    }

    /// Streams that may be held at once: one queue is the utility stream's, and one is
    /// left for work gyre does not issue (the legacy default stream, another library's
    /// stream in the same process).
    pub(crate) fn limit(&self) -> usize {
        (self.connections as usize).saturating_sub(2).max(1)
    }

    /// Streams held now.
    pub(crate) fn held(&self) -> usize {
        self.pool.lock().held
    }

    /// A stream for `purpose`, held until the lease drops.
    ///
    /// # Errors
    ///
    /// [`Error::StreamsExhausted`] when [`limit`](Self::limit) are held; the driver's
    /// error if creating one fails.
    pub(crate) fn lease(ctx: &Arc<Context>, purpose: &'static str) -> Result<StreamLease> {
        let me = &ctx.streams;
        let mut p = me.pool.lock();
        if p.held >= me.limit() {
            return Err(Error::StreamsExhausted {
                purpose,
                held: p.held,
                limit: me.limit(),
                connections: me.connections,
            });
        }
        let stream = match p.free.pop() {
            Some(s) => s,
            None => {
                ctx.bind()?;
                // SAFETY: the context is current.
                unsafe { result::stream_create()? }
            }
        };
        p.held += 1;
        Ok(StreamLease {
            ctx: ctx.clone(),
            stream,
        })
    }

    /// The utility stream, locked for the caller's synchronous work; the context must be
    /// bound. Work on it must be complete (synchronised) before the guard drops.
    pub(crate) fn utility(&self) -> Result<UtilityStream<'_>> {
        let mut g = self.utility.lock();
        if g.is_none() {
            // SAFETY: the caller bound the context.
            *g = Some(unsafe { result::stream_create()? });
        }
        Ok(UtilityStream(g))
    }

    /// Destroys every stream (the context is going away). Failures are logged.
    pub(crate) fn destroy_all(&self) {
        for s in self.take_all() {
            // SAFETY: created by this pool, destroyed once; no lease holds it.
            if let Err(e) = unsafe { result::stream_destroy(s) } {
                tracing::warn!(error = %e, "destroying a CUDA stream");
            }
        }
    }

    /// Forgets every stream without a driver call: the context is reset, which destroys
    /// them.
    pub(crate) fn forget_all(&self) {
        self.take_all();
    }

    fn take_all(&self) -> Vec<CUstream> {
        let mut p = self.pool.lock();
        p.free.drain(..).chain(self.utility.lock().take()).collect()
    }
}

/// The locked utility stream ([`StreamPool::utility`]).
pub(crate) struct UtilityStream<'a>(MutexGuard<'a, Option<CUstream>>);

impl UtilityStream<'_> {
    /// The stream handle.
    pub(crate) fn get(&self) -> CUstream {
        // `utility` stores Some before making the guard.
        self.0.unwrap_or(std::ptr::null_mut())
    }

    /// Waits for the work issued on it, for at most [`SYNC_DEADLINE`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::Timeout`] naming `what`; the driver's error.
    pub(crate) fn synchronize(&self, what: &str) -> Result<()> {
        // SAFETY: a live stream of the bound context (the caller bound it).
        unsafe { result::stream_wait(self.get(), what, SYNC_DEADLINE) }
    }
}

/// A stream held from the pool; see the module docs. Dropping it returns the stream.
/// The owner drops it only once the stream's work has finished (or the context is
/// poisoned, when nothing runs any more).
#[derive(Debug)]
pub(crate) struct StreamLease {
    ctx: Arc<Context>,
    stream: CUstream,
}

// SAFETY: a stream handle is usable from any thread with its context bound.
unsafe impl Send for StreamLease {}
// SAFETY: as above; `&StreamLease` only reads the handle.
unsafe impl Sync for StreamLease {}

impl StreamLease {
    /// The stream handle.
    pub(crate) fn get(&self) -> CUstream {
        self.stream
    }

    /// `cuStreamQuery` with the context bound: `Ok(true)` when its work is done.
    pub(crate) fn query(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: a live stream of the bound context.
        unsafe { result::stream_query(self.stream) }
    }

    /// Waits for the stream's work, for at most [`SYNC_DEADLINE`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::Timeout`] naming `what`; the driver's error.
    pub(crate) fn synchronize(&self, what: &str) -> Result<()> {
        self.wait_idle(what, SYNC_DEADLINE)
    }

    /// Waits for the stream's work by polling `cuStreamQuery`, for at most `within`:
    /// a synchronisation that cannot hang (a persistent kernel that never ends).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Timeout`] naming `what`; the driver's error.
    pub(crate) fn wait_idle(&self, what: &str, within: std::time::Duration) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: a live stream of the bound context.
        unsafe { result::stream_wait(self.stream, what, within) }
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        let mut p = self.ctx.streams.pool.lock();
        p.held = p.held.saturating_sub(1);
        p.free.push(self.stream);
    }
}
