//! The peers a ring kernel is measured against: the same 64-byte echo done the way a
//! CUDA program without a persistent kernel does it, in the same process and run.
//!
//! * [`LaunchPeer::launch_echo`]: one kernel launch per request, then
//!   `cuStreamSynchronize`.
//! * [`LaunchPeer::graph_echo`]: one CUDA graph replay per request (`cuGraphLaunch` of a
//!   graph captured once), then `cuStreamSynchronize`: what CUDA offers to cut launch
//!   overhead.
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
use crate::error::Result;
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
