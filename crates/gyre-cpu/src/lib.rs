//! gyre's CPU backend: the ring-kernel device loop, run by one host thread per kernel.
//!
//! [`CpuBackend`] runs [`kernel_loop`]: the device loop of `cuda/include/gyre/ring.h`, the
//! very code the CUDA and OpenCL kernels run, compiled over the C11 port
//! (`cuda/include/gyre/port_c11.h`, `cuda/ring_kernel_c11.c`, built by `build.rs`), on a
//! host thread, over the same shared-memory ABI. The built-in kernels run their device
//! code (`cuda/handlers/*.h`, over lanes emulated on the thread: [`CpuBackend::with_lanes`]);
//! any other kernel's handler is a Rust closure (called through one `extern "C"`
//! trampoline that catches panics). It is the embedded default
//! (no GPU needed) and the test bed of the protocol: every strategy and conformance test
//! runs on it.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use gyre_core::{Backend, LaunchSpec, IdleStrategy, SharedRegion, Channel, Kind};
//! use gyre_core::ring::Geometry;
//!
//! let backend = gyre_cpu::CpuBackend::new();
//! let region = Arc::new(SharedRegion::new_host(Geometry::new(8, 128, 4)?, 0)?);
//! let spec = LaunchSpec {
//!     name: "echo".into(),
//!     handler: Arc::new(gyre_core::kernels::echo),
//!     builtin: None,
//!     idle: IdleStrategy::default(),
//!     telemetry: true,
//!     cuda_source: None,
//!     opencl_source: None,
//!     lane_handler: None,
//!     export: None,
//!     doorbell: None,
//!     reply_bell: None,
//!     loans: None,
//!     link: None,
//! };
//! let kernel = backend.launch(region.clone(), &spec)?;
//! let ch = Channel::new(region, "echo");
//! let i = ch.try_publish(Kind::Call, 1, b"hi").unwrap();
//! let reply = ch.wait_blocking(i, &IdleStrategy::default(), None, |r| Ok(r.payload.to_vec()))?;
//! assert_eq!(reply, b"hi");
//! ch.close();
//! ch.command(gyre_abi::command::TERMINATE);
//! while !kernel.is_finished() { std::thread::yield_now(); }
//! kernel.join()?;
//! # Ok::<(), gyre_core::Error>(())
//! ```

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod ffi;
mod kernel;
#[cfg(test)]
mod loan_probe;

use std::sync::Arc;
use std::thread::JoinHandle;

use gyre_core::bridge::{CopyEngine, HostDeviceMemory};
use gyre_core::channel::bell::ReplyBell;
use gyre_core::doorbell::Doorbell;
use gyre_core::ring::Geometry;
use gyre_core::{Backend, Error, KernelInstance, LaunchSpec, Result, SharedRegion};
use std::sync::Mutex;

pub use kernel::{
    kernel_loop, kernel_loop_linked, kernel_loop_with_doorbell, with_replies_hook, CpuHandler,
    Stepper,
};

/// The environment variable that sets the lanes of [`CpuBackend::new`]'s built-in
/// kernels (1..=256; default 1).
pub const LANES_ENV: &str = "GYRE_CPU_LANES";

/// The CPU backend. Always available.
///
/// A built-in kernel (`LaunchSpec::builtin`) runs its device code (`cuda/handlers/*.h`,
/// the source the CUDA and OpenCL kernels are built with) over emulated lanes; a
/// lane-parallel handler (`LaunchSpec::lane_handler`) its Rust function once per emulated
/// lane; any other kernel runs its Rust handler.
#[derive(Debug, Default, Clone)]
pub struct CpuBackend {
    /// The built-ins' lanes; `None`: [`LANES_ENV`], or 1.
    lanes: Option<u32>,
    /// The cost model: checked rings, with this latency charged per read wave and per
    /// fence (`None`: coherent rings, nothing counted).
    cost: Option<std::time::Duration>,
}

impl CpuBackend {
    /// A launch over `region`, ringing `reply_bell` after each batch (`None`: rings none).
    fn launch_on(
        &self,
        region: Arc<SharedRegion>,
        spec: &LaunchSpec,
        reply_bell: Option<Arc<ReplyBell>>,
    ) -> Result<Box<dyn KernelInstance>> {
        spec.idle.validate()?;
        // Lanes matter to built-ins and lane-parallel handlers only: a bad
        // GYRE_CPU_LANES fails those, not others.
        let lanes = if spec.builtin.is_some() || spec.lane_handler.is_some() {
            self.lanes()?
        } else {
            1
        };
        let handler = match &spec.lane_handler {
            Some(lh) => lh.for_lanes(lanes),
            None => spec.handler.clone(),
        };
        let builtin = spec
            .builtin
            .filter(|id| CpuHandler::Builtin { id: *id, lanes }.validate().is_ok());
        let idle = spec.idle;
        let telemetry = spec.telemetry;
        let name = spec.name.clone();
        let doorbell = spec
            .doorbell
            .clone()
            .unwrap_or_else(|| Arc::new(Doorbell::new()));
        let bell = doorbell.clone();
        let link = spec.link.clone();
        let rings = reply_bell.clone();
        let cost = self
            .cost
            .map(|e| Arc::new(gyre_core::cost::CostCounters::new(e)));
        let counters = cost.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gyre-cpu-{}", spec.name))
            .spawn(move || {
                let _span = tracing::info_span!("gyre_cpu_kernel", kernel = %name).entered();
                let h = match builtin {
                    Some(id) => CpuHandler::Builtin { id, lanes },
                    None => CpuHandler::Host(&*handler),
                };
                tracing::info!(handler = ?h, "ring kernel started");
                let run = || {
                    kernel_loop_linked(
                        &region,
                        h,
                        idle,
                        telemetry,
                        Some(&bell),
                        link.as_ref(),
                        counters.as_deref(),
                    );
                };
                match rings.as_deref() {
                    Some(replies) => {
                        let mut ringer = replies.ringer();
                        with_replies_hook(&mut || ringer.ring(), run);
                        ringer.ended();
                    }
                    None => run(),
                }
                let (s, c) = {
                    let cb = region.control();
                    (
                        cb.state.load(std::sync::atomic::Ordering::Acquire),
                        cb.error_code.load(std::sync::atomic::Ordering::Acquire),
                    )
                };
                tracing::info!(state = s, error = c, "ring kernel stopped");
            })
            .map_err(|e| Error::Launch {
                backend: "cpu",
                kernel: spec.name.clone(),
                source: gyre_core::Cause::context("spawning the kernel thread", e),
            })?;
        Ok(Box::new(CpuKernel {
            thread: Mutex::new(Some(thread)),
            doorbell,
            reply_bell,
            cost,
        }))
    }

    /// The CPU backend. Built-in kernels run over the lanes [`LANES_ENV`] names, or one.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CPU backend with built-in kernels run over `lanes` emulated lanes (1..=256):
    /// every multi-lane path of the device handlers (strides, block-shared words,
    /// barriers between phases) then runs on the CPU. One lane is the fastest.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `lanes` is outside 1..=256.
    ///
    /// # Examples
    ///
    /// ```
    /// let backend = gyre_cpu::CpuBackend::with_lanes(32)?;
    /// assert_eq!(backend.lanes()?, 32);
    /// assert!(gyre_cpu::CpuBackend::with_lanes(0).is_err());
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn with_lanes(lanes: u32) -> Result<Self> {
        check_lanes(lanes, "CpuBackend::with_lanes")?;
        Ok(Self {
            lanes: Some(lanes),
            cost: None,
        })
    }

    /// This backend under the cost model of a PCIe GPU (`gyre_core::cost`): zero-copy
    /// rings become checked rings (`docs/protocol.md`, "Checked slots"), read by the
    /// kernel in waves, and the kernel counts its read waves, fences and remote stores
    /// ([`gyre_core::KernelInstance::cost`]) and charges `emulate` for each wave and each
    /// fence (a busy wait; zero: count only). The fast path's budget is measured and
    /// tested with it without a GPU.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::Backend;
    /// let b = gyre_cpu::CpuBackend::new().cost_model(std::time::Duration::from_nanos(1000));
    /// assert!(b.checked_slots());
    /// assert!(!gyre_cpu::CpuBackend::new().checked_slots());
    /// ```
    pub fn cost_model(mut self, emulate: std::time::Duration) -> Self {
        self.cost = Some(emulate);
        self
    }

    /// The lanes built-in kernels run over.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when [`LANES_ENV`] is set (and no lanes were given) but is not a
    /// number in 1..=256.
    pub fn lanes(&self) -> Result<u32> {
        if let Some(l) = self.lanes {
            return Ok(l);
        }
        match std::env::var(LANES_ENV) {
            Err(_) => Ok(1),
            Ok(v) => {
                let lanes = v
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| Error::InvalidArgument {
                        name: LANES_ENV,
                        value: format!("{v:?}"),
                        reason: LANES_REASON,
                    })?;
                check_lanes(lanes, LANES_ENV)?;
                Ok(lanes)
            }
        }
    }
}

const LANES_REASON: &str = "a CPU kernel emulates 1..=256 lanes";

fn check_lanes(lanes: u32, what: &'static str) -> Result<()> {
    if lanes == 0 || lanes > CpuHandler::MAX_LANES {
        return Err(Error::InvalidArgument {
            name: what,
            value: lanes.to_string(),
            reason: LANES_REASON,
        });
    }
    Ok(())
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    /// Under the cost model ([`CpuBackend::cost_model`]) only.
    fn checked_slots(&self) -> bool {
        self.cost.is_some()
    }

    /// A host allocation of its own: the same memory as an inline ring, but a chain's
    /// inner rings then take the path a GPU chain's take (placed apart from their region,
    /// `gyre_request_ring`), under every CPU pipeline test.
    fn alloc_kernel_ring(
        &self,
        bytes: usize,
    ) -> gyre_core::Result<Option<Box<dyn gyre_core::region::RingMemory>>> {
        Ok(Some(Box::new(gyre_core::region::HostMemory::zeroed(
            bytes,
        )?)))
    }

    /// Kernel threads' C11 atomics are the host's own.
    fn host_atomics(&self) -> bool {
        true
    }

    fn launch(
        &self,
        region: Arc<SharedRegion>,
        spec: &LaunchSpec,
    ) -> Result<Box<dyn KernelInstance>> {
        self.launch_on(region, spec, spec.reply_bell.clone())
    }

    /// A loan pool's "device" side: a separate host allocation the kernel's Rust handlers
    /// work on in place, reached by the host only through the bridge's copies.
    fn loan_device(&self, bytes: usize) -> Result<gyre_core::loan::LoanDevice> {
        Ok(gyre_core::loan::LoanDevice::Emulated(Arc::new(
            gyre_core::copy::HostDeviceArena::new(bytes)?,
        )))
    }

    /// "Device" memory that is a separate host allocation; the host reaches it only by
    /// the emulated copy engine's real copies ([`HostDeviceMemory`]).
    fn alloc_resident(&self, g: &Geometry, host_timeout_ms: u32) -> Result<Arc<dyn CopyEngine>> {
        Ok(Arc::new(HostDeviceMemory::new(*g, host_timeout_ms)?))
    }

    fn launch_resident(
        &self,
        mem: Arc<dyn CopyEngine>,
        spec: &LaunchSpec,
    ) -> Result<Box<dyn KernelInstance>> {
        let Some(dev) = mem.as_any().downcast_ref::<HostDeviceMemory>() else {
            return Err(Error::Launch {
                backend: "cpu",
                kernel: spec.name.clone(),
                source: gyre_core::Cause::msg(format!(
                    "device memory from the '{}' engine, not from the CPU backend",
                    mem.name()
                )),
            });
        };
        // The kernel's replies reach the host's rings by the bridge's copies: it rings
        // no reply bell.
        self.launch_on(dev.region().clone(), spec, None)
    }
}

/// A ring kernel running on a host thread.
#[derive(Debug)]
struct CpuKernel {
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Rung by the host when it publishes; the idle kernel parks on it.
    doorbell: Arc<Doorbell>,
    /// Rung by the kernel's thread after each batch (zero copy; see
    /// `gyre_core::channel::bell`).
    reply_bell: Option<Arc<ReplyBell>>,
    /// The cost model's counters (the kernel's thread writes them).
    cost: Option<Arc<gyre_core::cost::CostCounters>>,
}

impl KernelInstance for CpuKernel {
    fn cost(&self) -> Option<gyre_core::cost::DeviceCost> {
        self.cost.as_ref().map(|c| c.snapshot())
    }

    fn doorbell(&self) -> Option<Arc<Doorbell>> {
        Some(self.doorbell.clone())
    }

    fn reply_bell(&self) -> Option<Arc<ReplyBell>> {
        self.reply_bell.clone()
    }

    fn is_finished(&self) -> bool {
        match self.thread.lock() {
            Ok(g) => g.as_ref().is_none_or(|t| t.is_finished()),
            Err(_) => true,
        }
    }

    fn join(&self) -> Result<()> {
        let t = match self.thread.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(t) = t {
            // The loop catches handler panics itself; a panic escaping it is a bug that
            // kernel_loop already turned into a Faulted state.
            let _ = t.join();
        }
        Ok(())
    }
}
