//! The peers a ring kernel is measured against: the same 64-byte echo done the way a
//! CUDA program without a persistent kernel does it, in the same process and run.
//!
//! * [`LaunchPeer::launch_echo`]: one kernel launch per request, then
//!   `cuStreamSynchronize`.
//! * [`LaunchPeer::graph_echo`]: one CUDA graph replay per request (`cuGraphLaunch` of a
//!   graph captured once), then `cuStreamSynchronize`: what CUDA offers to cut launch
//!   overhead.
//!
//! And the floor a ring kernel is measured against: [`FloorPeer`], a word ping-pong
//! between the host and a persistent kernel through mapped pinned memory (the reference
//! program's, `cuda/probes/fastpath_probe.cu`): no message can make the round trip
//! faster on this machine.
//!
//! Request and reply live in mapped pinned memory, as the ring kernel's zero-copy rings
//! do, so the peers pay no copy the ring kernel does not: the difference is launch and
//! synchronisation against a kernel that is already running.
//!
//! # Examples
//!
//! ```no_run
//! use gyre_cuda::{peer::LaunchPeer, CudaBackend};
//!
//! let backend = CudaBackend::new()?;
//! let mut peer = LaunchPeer::new(&backend)?;
//! let req = [7u8; 64];
//! assert_eq!(peer.launch_echo(&req)?, req);
//! assert_eq!(peer.graph_echo(&req)?, req);
//! # Ok::<(), gyre_cuda::Error>(())
//! ```

use std::sync::Arc;

use crate::backend::CudaBackend;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::PinnedBuffer;
use crate::module::Module;
use crate::result;
use crate::stream::{StreamLease, StreamPool};
use crate::sys;

/// Bytes per request (and reply).
pub const MESSAGE: usize = 64;

/// Entry point of [`PEER_SOURCE`].
pub const PEER_ENTRY: &str = "gyre_peer_echo";

/// The peer kernel: one thread per byte copies the request into the reply.
pub const PEER_SOURCE: &str = r#"
extern "C" __global__ void gyre_peer_echo(const unsigned char *in, unsigned char *out,
                                          unsigned int n) {
    const unsigned int i = threadIdx.x;
    if (i < n) {
        out[i] = in[i];
    }
    __threadfence_system();
}
"#;

/// The launch-per-request and graph-replay echo peers; see the module docs.
pub struct LaunchPeer {
    ctx: Arc<Context>,
    module: Arc<Module>,
    io: PinnedBuffer<u8>,
    graph: sys::CUgraphExec,
    // Declared last: dropped after the graph is destroyed.
    stream: StreamLease,
}

// SAFETY: the graph handle is a driver object usable from any thread with the context
// bound (every method binds it); `&mut self` serialises its use.
unsafe impl Send for LaunchPeer {}

impl core::fmt::Debug for LaunchPeer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LaunchPeer")
            .field("entry", &self.module.entry())
            .finish_non_exhaustive()
    }
}

impl LaunchPeer {
    /// Compiles the peer kernel, allocates the mapped request/reply buffer, holds a
    /// stream, and captures the one-launch graph.
    ///
    /// # Errors
    ///
    /// NVRTC's or the driver's error.
    pub fn new(backend: &CudaBackend) -> Result<Self> {
        let ctx = backend.context()?;
        let module = backend.load_program(&ctx, "gyre_peer_echo.cu", PEER_SOURCE, PEER_ENTRY)?;
        let io = PinnedBuffer::<u8>::zeroed(&ctx, 2 * MESSAGE)?;
        let stream = StreamPool::lease(&ctx, "the launch-per-request peer")?;
        let mut peer = Self {
            ctx,
            module,
            io,
            graph: std::ptr::null_mut(),
            stream,
        };
        peer.ctx.bind()?;
        // SAFETY: a live stream of the bound context, not capturing.
        unsafe { result::stream_begin_capture(peer.stream.get())? };
        let launched = peer.launch();
        // SAFETY: the stream is capturing on this thread (begun above); the capture is
        // ended even when the launch failed.
        let graph = unsafe { result::stream_end_capture_instantiate(peer.stream.get()) };
        launched?;
        peer.graph = graph?;
        Ok(peer)
    }

    /// Enqueues one launch of the peer kernel on the stream.
    fn launch(&self) -> Result<()> {
        let base = self.io.device_ptr();
        let mut input = base;
        let mut output = base + MESSAGE as u64;
        let mut n = MESSAGE as u32;
        let mut params = [
            std::ptr::addr_of_mut!(input).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(output).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(n).cast::<std::ffi::c_void>(),
        ];
        // SAFETY: the kernel takes (const u8*, u8*, u32), passed as the addresses of the
        // three values (read during the call); `io` lives as long as `self`, and every
        // launch is synchronised before `self` can drop.
        unsafe {
            result::launch(
                self.module.function(),
                1,
                MESSAGE as u32,
                0,
                self.stream.get(),
                &mut params,
            )
        }
    }

    fn exchange(
        &mut self,
        req: &[u8; MESSAGE],
        run: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<[u8; MESSAGE]> {
        self.io.as_mut_slice()[..MESSAGE].copy_from_slice(req);
        self.ctx.bind()?;
        run(self)?;
        self.stream.synchronize("the peer echo")?;
        let mut out = [0u8; MESSAGE];
        out.copy_from_slice(&self.io.as_slice()[MESSAGE..]);
        Ok(out)
    }

    /// One request: a kernel launch, then a stream synchronisation.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn launch_echo(&mut self, req: &[u8; MESSAGE]) -> Result<[u8; MESSAGE]> {
        self.exchange(req, Self::launch)
    }

    /// One request: a replay of the captured graph, then a stream synchronisation.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn graph_echo(&mut self, req: &[u8; MESSAGE]) -> Result<[u8; MESSAGE]> {
        self.exchange(req, |p| {
            // SAFETY: a live executable graph and stream of the bound context.
            unsafe { result::graph_launch(p.graph, p.stream.get()) }
        })
    }
}

impl Drop for LaunchPeer {
    fn drop(&mut self) {
        let _ = self.stream.synchronize("the peer echo");
        if !self.graph.is_null() {
            // SAFETY: instantiated in `new`, destroyed once; the stream is idle.
            if let Err(e) = self
                .ctx
                .bind()
                .and_then(|()| unsafe { result::graph_exec_destroy(self.graph) })
            {
                tracing::warn!(error = %e, "destroying the peer's CUDA graph");
            }
        }
    }
}

/// Entry point of [`FLOOR_SOURCE`].
pub const FLOOR_ENTRY: &str = "gyre_peer_floor";

/// The floor kernel: one thread answers word `i` with `i` until `n` words or the word
/// `u64::MAX` (the host's stop).
pub const FLOOR_SOURCE: &str = r#"
extern "C" __global__ void gyre_peer_floor(volatile unsigned long long *h2k,
                                           volatile unsigned long long *k2h,
                                           unsigned long long n) {
    for (unsigned long long i = 1; i <= n; ++i) {
        unsigned long long w;
        while ((w = *h2k) != i) {
            if (w == ~0ull) {
                return;
            }
        }
        *k2h = i;
    }
}
"#;

/// The floor of host <-> persistent-kernel messaging on this machine: a word ping-pong
/// through mapped pinned memory with a kernel that polls it (one dependent read of host
/// memory per poll, one posted write per answer), measured in the same process as a ring
/// kernel.
///
/// Load it before any ring kernel runs in the context (a module load next to a running
/// persistent kernel can wait for it).
///
/// # Examples
///
/// ```no_run
/// use gyre_cuda::{peer::FloorPeer, CudaBackend};
/// let backend = CudaBackend::new()?;
/// let mut floor = FloorPeer::new(&backend)?;
/// let mut rtts = Vec::new();
/// floor.ping_pong(1000, std::time::Duration::from_secs(5), |d| rtts.push(d))?;
/// assert_eq!(rtts.len(), 1000);
/// # Ok::<(), gyre_cuda::Error>(())
/// ```
pub struct FloorPeer {
    ctx: Arc<Context>,
    module: Arc<Module>,
    io: PinnedBuffer<u8>,
    stream: StreamLease,
}

impl core::fmt::Debug for FloorPeer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FloorPeer").finish_non_exhaustive()
    }
}

impl FloorPeer {
    /// Compiles the floor kernel and allocates its two words (mapped pinned memory, on
    /// separate 128-byte lines).
    ///
    /// # Errors
    ///
    /// NVRTC's or the driver's error.
    pub fn new(backend: &CudaBackend) -> Result<Self> {
        let ctx = backend.context()?;
        let module = backend.load_program(&ctx, "gyre_peer_floor.cu", FLOOR_SOURCE, FLOOR_ENTRY)?;
        let io = PinnedBuffer::<u8>::zeroed(&ctx, 256)?;
        let stream = StreamPool::lease(&ctx, "the floor peer")?;
        Ok(Self {
            ctx,
            module,
            io,
            stream,
        })
    }

    /// The word at byte `at` of the buffer.
    fn word(&self, at: usize) -> &core::sync::atomic::AtomicU64 {
        debug_assert!(at + 8 <= self.io.len() && at % 8 == 0);
        // SAFETY: `io` is at least 256 bytes of page-aligned mapped pinned memory that
        // lives as long as `self`; the word is 8-aligned and in bounds; the kernel
        // accesses it with volatile 8-byte loads and stores, which are atomic.
        unsafe {
            &*self
                .io
                .host_ptr()
                .as_ptr()
                .add(at)
                .cast::<core::sync::atomic::AtomicU64>()
        }
    }

    /// Launches the kernel for `rounds` words and ping-pongs them, calling `each` with
    /// every round trip's duration. Waits at most `within` for the whole (a kernel that
    /// stops answering is stopped, and the stream waited for, again within `within`).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`]; the driver's error.
    pub fn ping_pong(
        &mut self,
        rounds: u64,
        within: std::time::Duration,
        mut each: impl FnMut(std::time::Duration),
    ) -> Result<()> {
        use core::sync::atomic::Ordering::{Acquire, Release};
        let (h2k, k2h) = (self.word(0), self.word(128));
        h2k.store(0, Release);
        k2h.store(0, Release);
        let base = self.io.device_ptr();
        let mut d_h2k = base;
        let mut d_k2h = base + 128;
        let mut n = rounds;
        let mut params = [
            std::ptr::addr_of_mut!(d_h2k).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(d_k2h).cast::<std::ffi::c_void>(),
            std::ptr::addr_of_mut!(n).cast::<std::ffi::c_void>(),
        ];
        self.ctx.bind()?;
        // SAFETY: the kernel takes (u64*, u64*, u64), passed as the addresses of the
        // three values (read during the call); `io` lives as long as `self`, and the
        // launch is waited for below before this returns.
        unsafe {
            result::launch(
                self.module.function(),
                1,
                1,
                0,
                self.stream.get(),
                &mut params,
            )?;
        }
        let start = std::time::Instant::now();
        let mut late = false;
        for i in 1..=rounds {
            let t = std::time::Instant::now();
            h2k.store(i, Release);
            while k2h.load(Acquire) != i {
                if start.elapsed() > within {
                    late = true;
                    break;
                }
                core::hint::spin_loop();
            }
            if late {
                break;
            }
            each(t.elapsed());
        }
        if late {
            h2k.store(u64::MAX, Release);
        }
        self.stream.wait_idle("the floor peer's kernel", within)?;
        if late {
            return Err(Error::Timeout {
                what: "the floor peer's answer".into(),
                after: within,
            });
        }
        Ok(())
    }
}

impl Drop for FloorPeer {
    fn drop(&mut self) {
        // The kernel ends after its words, or at the stop word.
        use core::sync::atomic::Ordering::Release;
        self.word(0).store(u64::MAX, Release);
        let _ = self
            .stream
            .wait_idle("the floor peer's kernel", std::time::Duration::from_secs(5));
    }
}
