//! What to launch: [`KernelSpec`].

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;
use gyre_core::kernels::{self, ids, ReduceSum, Sum, VecF32, VecScale};
use gyre_core::{Handler, IdleStrategy};

/// Where a kernel publishes its telemetry for other processes (see
/// [`KernelSpec::export_telemetry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExportTarget {
    /// `$GYRE_SHM_DIR/<service>/<kernel name>` (default dir `/dev/shm/gyre`).
    Service(String),
    /// An explicit file path.
    Path(PathBuf),
}

/// Describes a ring kernel: its handler, ring geometry and polling behaviour.
///
/// `Req` and `Resp` are the request and reply types: plain-old-data
/// ([`bytemuck::Pod`]) whose size must fit the slot payload (`slot_size - 64` bytes),
/// checked at launch.
///
/// # Examples
///
/// ```
/// use gyre::KernelSpec;
/// let spec = KernelSpec::from_fn("double", |x: u32| x * 2)
///     .capacity(256)
///     .batch_size(16);
/// assert_eq!(spec.name(), "double");
/// ```
pub struct KernelSpec<Req, Resp> {
    pub(crate) name: String,
    pub(crate) capacity: usize,
    pub(crate) slot_size: usize,
    pub(crate) batch: Option<usize>,
    pub(crate) idle: IdleStrategy,
    pub(crate) host_idle: IdleStrategy,
    pub(crate) async_spin: Duration,
    pub(crate) host_timeout: Duration,
    pub(crate) watchdog: Option<Duration>,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) builtin: Option<u32>,
    pub(crate) msg_type: u32,
    pub(crate) timestamps: bool,
    pub(crate) telemetry: bool,
    pub(crate) export: Option<ExportTarget>,
    pub(crate) export_interval: Duration,
    pub(crate) cuda_source: Option<Arc<gyre_core::DeviceSource>>,
    pub(crate) opencl_source: Option<Arc<gyre_core::DeviceSource>>,
    pub(crate) lane_handler: Option<Arc<dyn gyre_core::LaneHandler>>,
    /// `None`: the device's default (see `KernelSpec::epoch`); `Some(ZERO)`: off.
    pub(crate) epoch: Option<Duration>,
    pub(crate) restart: Option<crate::RestartPolicy>,
    pub(crate) watch: Option<PathBuf>,
    /// A loan kernel's pool and byte handler ([`KernelSpec::loans`]).
    pub(crate) loan: Option<crate::loan::LoanSetup>,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Clone for KernelSpec<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            handler: self.handler.clone(),
            export: self.export.clone(),
            cuda_source: self.cuda_source.clone(),
            opencl_source: self.opencl_source.clone(),
            lane_handler: self.lane_handler.clone(),
            watch: self.watch.clone(),
            loan: self.loan.clone(),
            _types: PhantomData,
            ..*self
        }
    }
}

impl<Req, Resp> core::fmt::Debug for KernelSpec<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KernelSpec")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("slot_size", &self.slot_size)
            .field("batch", &self.batch)
            .field("idle", &self.idle)
            .field("host_idle", &self.host_idle)
            .field("async_spin", &self.async_spin)
            .field("host_timeout", &self.host_timeout)
            .field("watchdog", &self.watchdog)
            .field("builtin", &self.builtin)
            .field("cuda_source", &self.cuda_source.as_ref().map(|s| &s.name))
            .field(
                "opencl_source",
                &self.opencl_source.as_ref().map(|s| &s.name),
            )
            .field("telemetry", &self.telemetry)
            .field("export", &self.export)
            .field("epoch", &self.epoch)
            .field("restart", &self.restart)
            .field("watch", &self.watch)
            .finish_non_exhaustive()
    }
}

impl<Req: Pod, Resp: Pod> KernelSpec<Req, Resp> {
    /// A kernel running `handler` on raw payload bytes (see [`Handler`]).
    ///
    /// **Where it runs:** the CPU backend only ([`Backend::Auto`](crate::Backend::Auto)
    /// launches it there), unless device code is added with [`KernelSpec::cuda_handler`],
    /// [`KernelSpec::opencl_handler`] or [`KernelSpec::device_handler`]. An explicit
    /// device backend refuses it with
    /// [`Error::HandlerUnsupported`](crate::Error::HandlerUnsupported).
    pub fn raw(name: impl Into<String>, handler: impl Handler) -> Self {
        Self::with_handler(name.into(), Arc::new(handler), None, 0)
    }

    /// A kernel answering each request with `f(request)`.
    ///
    /// **Where it runs:** the CPU backend only ([`Backend::Auto`](crate::Backend::Auto)
    /// launches it there, even on a machine with a GPU), unless device code is added
    /// with [`KernelSpec::cuda_handler`], [`KernelSpec::opencl_handler`] or
    /// [`KernelSpec::device_handler`]. An explicit device backend refuses it with
    /// [`Error::HandlerUnsupported`](crate::Error::HandlerUnsupported).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Auto).build()?;
    /// let k = rt.launch(KernelSpec::from_fn("double", |x: u64| x * 2))?;
    /// assert_eq!(k.backend(), Backend::Cpu);
    /// assert_eq!(k.call_blocking(21)?, 42);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn from_fn<F>(name: impl Into<String>, f: F) -> Self
    where
        F: Fn(Req) -> Resp + Send + Sync + 'static,
    {
        Self::try_from_fn(name, move |r| Ok(f(r)))
    }

    /// A kernel answering each request with `f(request)`; `Err(status)` is returned to
    /// the caller as [`Error::Handler`](crate::Error::Handler) and the kernel keeps
    /// serving. Runs where [`KernelSpec::from_fn`] runs.
    ///
    /// Use your own codes from [`codes::USER_BASE`](crate::codes::USER_BASE) up
    /// (`USER_BASE + n`). The codes below it are gyre's: a status below `USER_BASE` other
    /// than [`codes::HANDLER_REJECTED`](crate::codes::HANDLER_REJECTED) and
    /// [`codes::UNKNOWN_TYPE`](crate::codes::UNKNOWN_TYPE) — `0` included — reaches the
    /// caller as `HANDLER_REJECTED`, never as a protocol error, a panic or a fault (the
    /// rule of every Rust handler, [`Handler`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{codes, Error, KernelSpec};
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::try_from_fn("half", |x: u32| {
    ///     if x % 2 == 0 { Ok(x / 2) } else { Err(codes::USER_BASE + 1) }
    /// }))?;
    /// assert_eq!(k.call_blocking(8)?, 4);
    /// assert!(matches!(
    ///     k.call_blocking(3),
    ///     Err(Error::Handler { status, .. }) if status == codes::USER_BASE + 1
    /// ));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn try_from_fn<F>(name: impl Into<String>, f: F) -> Self
    where
        F: Fn(Req) -> Result<Resp, u32> + Send + Sync + 'static,
    {
        let h = move |ty: u32, req: &[u8], reply: &mut [u8]| -> Result<usize, u32> {
            typed_call(ty, req, reply, &f)
        };
        Self::with_handler(name.into(), Arc::new(h), None, 0)
    }

    fn with_handler(
        name: String,
        handler: Arc<dyn Handler>,
        builtin: Option<u32>,
        msg_type: u32,
    ) -> Self {
        Self {
            name,
            capacity: 1024,
            slot_size: 128,
            batch: None,
            idle: IdleStrategy::kernel_default(),
            host_idle: IdleStrategy::default(),
            async_spin: Duration::from_micros(20),
            host_timeout: Duration::from_secs(10),
            watchdog: None,
            handler,
            builtin,
            msg_type,
            timestamps: false,
            telemetry: true,
            export: None,
            export_interval: gyre_core::shm::DEFAULT_INTERVAL,
            cuda_source: None,
            opencl_source: None,
            lane_handler: None,
            epoch: None,
            restart: None,
            watch: None,
            loan: None,
            _types: PhantomData,
        }
    }
}

/// The settings of every spec, whatever its payload: plain messages or loans.
impl<Req, Resp> KernelSpec<Req, Resp> {
    /// Kernel name, for logs and telemetry. Default: the built-in's or the given name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Renames the kernel.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    /// Slots per ring: a power of two in `2..=2^24` (default 1024). At most this many
    /// requests are in flight; a full ring is back-pressure (`try_send` returns `Full`).
    ///
    /// Capacity costs memory and launch time. Both rings are allocated and zeroed at
    /// launch and the host keeps about 40 bytes of bookkeeping per slot, so a kernel takes
    /// about `capacity * (2 * slot_size + 40)` bytes (under a copy strategy, as much again
    /// for the device-side rings). 2^16 slots of 128 bytes: 18 MiB, launched in 8 ms;
    /// 2^20: 296 MiB, 0.13 s; the largest, 2^24: 4.6 GiB and 12.6 s on the 2-core machine
    /// of `docs/benchmarks.md` ("Ring capacity"; `examples/capacity_cost.rs` measures it).
    ///
    /// # Examples
    ///
    /// ```
    /// let spec = gyre::KernelSpec::<u64, u64>::echo().capacity(4096);
    /// # let _ = spec;
    /// ```
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }
    /// Bytes per slot: a multiple of 128, `128..=1 MiB` (default 128, a 64-byte payload).
    pub fn slot_size(mut self, slot_size: usize) -> Self {
        self.slot_size = slot_size;
        self
    }
    /// Most requests the kernel takes per batch, `1..=capacity` (default: 32, or the
    /// capacity if smaller).
    pub fn batch_size(mut self, batch: usize) -> Self {
        self.batch = Some(batch);
        self
    }
    /// What the kernel loop does when idle (default [`IdleStrategy::kernel_default`]:
    /// spin, yield, then park up to 10 ms at a time; on the CPU backend the host wakes a
    /// parked kernel as soon as it publishes, so the first call after idling does not wait
    /// for the park to end).
    pub fn idle(mut self, idle: IdleStrategy) -> Self {
        self.idle = idle;
        self
    }
    /// What blocking host calls do while waiting (default [`IdleStrategy::default`]: spin,
    /// yield, then park up to 100 µs). A parked caller is unparked when its reply lands
    /// (by the completion driver, or on the CPU backend by the kernel's thread), and
    /// with a deadline (`call_timeout`) it stops parking 300 µs ahead of it and yields
    /// the rest (`gyre_core::idle::WAKE_MARGIN`).
    pub fn host_idle(mut self, idle: IdleStrategy) -> Self {
        self.host_idle = idle;
        self
    }
    /// How long an async call spins on its task for the reply before registering with
    /// the completion driver (default 20 µs; zero disables spinning). Bounds how long one
    /// poll may hold a tokio worker.
    pub fn async_spin(mut self, spin: Duration) -> Self {
        self.async_spin = spin;
        self
    }
    /// Stamps every request's `enqueue_ns` header field with the host clock (default off:
    /// it costs a clock read per request; the field is then 0).
    pub fn timestamps(mut self, on: bool) -> Self {
        self.timestamps = on;
        self
    }
    /// Whether the kernel keeps its telemetry line up to date (default on): once per
    /// batch it answers, and every 1 ms while idle or paused. With `false` the kernel
    /// writes the line only when its state changes (start, pause, resume, stop: the state
    /// and heartbeat; the counters stay at zero), so [`Kernel::telemetry`](crate::Kernel::telemetry)
    /// reports no messages. The CPU backend honours it; the CUDA kernel always writes.
    /// See the cost in `docs/benchmarks.md` ("Telemetry cost").
    pub fn telemetry(mut self, on: bool) -> Self {
        self.telemetry = on;
        self
    }
    /// Publishes the kernel's telemetry and state for other processes (`gyre top`) in
    /// the shared-memory file `/dev/shm/gyre/<service>/<kernel name>` (the directory is
    /// `$GYRE_SHM_DIR` when set), created mode 0600 at launch and removed when the kernel
    /// handle is shut down or dropped. Launch fails if a live process already exports
    /// there; a file left by a dead process is replaced. See `docs/telemetry.md`.
    ///
    /// On the CPU backend a host thread copies the telemetry into the file every
    /// [`KernelSpec::export_interval`] (default 50 ms).
    pub fn export_telemetry(mut self, service: impl Into<String>) -> Self {
        self.export = Some(ExportTarget::Service(service.into()));
        self
    }
    /// [`KernelSpec::export_telemetry`] to an explicit file path.
    pub fn export_telemetry_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.export = Some(ExportTarget::Path(path.into()));
        self
    }
    /// How often the exported telemetry file is refreshed (default 50 ms). At least 1 ms:
    /// a shorter interval fails the launch with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming `export_interval`.
    pub fn export_interval(mut self, interval: Duration) -> Self {
        self.export_interval = interval;
        self
    }
    /// The kernel terminates itself when the host heartbeat stops changing for this long
    /// (default 10 s; zero disables). The completion driver writes the heartbeat.
    pub fn host_timeout(mut self, timeout: Duration) -> Self {
        self.host_timeout = timeout;
        self
    }

    /// The handler's CUDA C++ source, for the CUDA backend: it defines
    /// `__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
    /// unsigned int req_len, unsigned char *reply, unsigned int reply_cap,
    /// unsigned int *reply_len, unsigned int lane, unsigned int lanes)`, or a phase
    /// function over `gyre/handler.h` named by `#define GYRE_HANDLER_PHASE` (both in
    /// `docs/cuda.md`; the port and handler headers are included before it), is compiled
    /// into the ring kernel by NVRTC for the device's architecture and cached by source
    /// hash, architecture and NVRTC version; a compile error fails the launch
    /// with NVRTC's log. The CPU backend keeps running this spec's Rust handler, so give
    /// both the same meaning. `name` labels compiler messages.
    ///
    /// **Where it runs:** with a CUDA source the spec runs on CUDA (where
    /// [`Backend::Auto`](crate::Backend::Auto) found it, Auto launches it there) and, with
    /// its Rust handler, on the CPU backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    ///
    /// const NEGATE: &str = r#"
    /// #include "gyre/abi.h"
    /// __device__ unsigned int gyre_handler(unsigned int t, const unsigned char *req,
    ///     unsigned int len, unsigned char *reply, unsigned int cap, unsigned int *out,
    ///     unsigned int lane, unsigned int lanes) {
    ///     for (unsigned int i = lane; i < len && i < cap; i += lanes) reply[i] = ~req[i];
    ///     *out = len <= cap ? len : 0u;
    ///     return GYRE_ERR_NONE;
    /// }"#;
    /// let spec = KernelSpec::<[u8; 8], [u8; 8]>::from_fn("negate", |r: [u8; 8]| r.map(|b| !b))
    ///     .cuda_handler("negate.cu", NEGATE);
    /// let k = Runtime::builder().backend(Backend::Cpu).build()?.launch(spec)?;
    /// assert_eq!(k.call_blocking([0u8; 8])?, [0xff; 8]);
    /// k.shutdown_blocking()?;
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn cuda_handler(mut self, name: impl Into<String>, source: impl Into<String>) -> Self {
        self.cuda_source = Some(Arc::new(gyre_core::DeviceSource {
            name: name.into(),
            source: source.into(),
        }));
        self
    }

    /// The handler's OpenCL C source, for the OpenCL backend: a phase function over
    /// `gyre/handler.h` named by `#define GYRE_HANDLER_PHASE` (the form of the built-ins,
    /// `cuda/handlers/*.h`), or `unsigned int gyre_handler(unsigned int msg_type,
    /// const __global unsigned char *req, unsigned int req_len, __global unsigned char
    /// *reply, unsigned int reply_cap, unsigned int *reply_len, unsigned int lane,
    /// unsigned int lanes)`, called by every work-item of the group (both in
    /// `docs/opencl.md`; the port and handler headers come before it, and `#include
    /// "gyre/..."` lines are resolved in memory). It is built into the ring kernel at
    /// launch with `-cl-std=CL3.0` and cached per device and source; a build error fails
    /// the launch with [`Error::Launch`](crate::Error::Launch), whose source is the
    /// compiler's log. The CPU backend keeps running this spec's Rust handler, so give
    /// both the same meaning. `name` labels the build log.
    ///
    /// **Where it runs:** with an OpenCL source the spec runs on OpenCL (where
    /// [`Backend::Auto`](crate::Backend::Auto) found an OpenCL GPU, or was given one by
    /// [`RuntimeBuilder::auto_device`](crate::RuntimeBuilder::auto_device), Auto launches
    /// it there) and, with its Rust handler, on the CPU backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    ///
    /// const NEGATE: &str = r#"
    /// unsigned int gyre_handler(unsigned int t, const __global unsigned char *req,
    ///     unsigned int len, __global unsigned char *reply, unsigned int cap,
    ///     unsigned int *out, unsigned int lane, unsigned int lanes) {
    ///     for (unsigned int i = lane; i < len && i < cap; i += lanes) reply[i] = ~req[i];
    ///     *out = len <= cap ? len : 0u;
    ///     return GYRE_ERR_NONE;
    /// }"#;
    /// let spec = KernelSpec::<[u8; 8], [u8; 8]>::from_fn("negate", |r: [u8; 8]| r.map(|b| !b))
    ///     .opencl_handler("negate.cl", NEGATE);
    /// let k = Runtime::builder().backend(Backend::Cpu).build()?.launch(spec)?;
    /// assert_eq!(k.call_blocking([0u8; 8])?, [0xff; 8]);
    /// k.shutdown_blocking()?;
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn opencl_handler(mut self, name: impl Into<String>, source: impl Into<String>) -> Self {
        self.opencl_source = Some(Arc::new(gyre_core::DeviceSource {
            name: name.into(),
            source: source.into(),
        }));
        self
    }

    /// One handler source for every device backend: a phase function over
    /// `gyre/handler.h`, written with the port macros (`GYRE_DEVICE_FN`, `GYRE_GLOBAL`,
    /// `GYRE_SHARED`) as the built-ins in `cuda/handlers/` are, so that it compiles as
    /// CUDA C++ and as OpenCL C. The same as [`KernelSpec::cuda_handler`] and
    /// [`KernelSpec::opencl_handler`] with this source.
    ///
    /// **Where it runs:** CUDA, OpenCL, and (its Rust handler) the CPU backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    ///
    /// const NEGATE: &str = r#"
    /// static inline GYRE_DEVICE_FN uint32_t negate(uint32_t phase, const gyre_hcall *c,
    ///                                              gyre_hlane *l, GYRE_SHARED gyre_hblock *b) {
    ///     for (uint32_t i = c->lane; i < c->req_len; i += c->lanes) c->reply[i] = ~c->req[i];
    ///     if (c->lane == 0u) { b->status = GYRE_ERR_NONE; b->reply_len = c->req_len; }
    ///     return GYRE_PHASE_DONE;
    /// }
    /// #define GYRE_HANDLER_PHASE negate"#;
    /// let spec = KernelSpec::<[u8; 8], [u8; 8]>::from_fn("negate", |r: [u8; 8]| r.map(|b| !b))
    ///     .device_handler("negate.h", NEGATE);
    /// let k = Runtime::builder().backend(Backend::Auto).build()?.launch(spec)?;
    /// assert_eq!(k.call_blocking([0u8; 8])?, [0xff; 8]);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn device_handler(self, name: impl Into<String>, source: impl Into<String>) -> Self {
        let (name, source) = (name.into(), source.into());
        self.cuda_handler(name.clone(), source.clone())
            .opencl_handler(name, source)
    }

    /// Runs a host-side watchdog (default off): when the kernel shows no sign of life —
    /// no kernel heartbeat, no request consumed, no state change — for longer than
    /// `bound`, [`Kernel::state`](crate::Kernel::state) becomes
    /// [`KernelState::Unresponsive`](crate::KernelState::Unresponsive), the kernel is
    /// told to terminate, and every caller waiting on it (and every later one) fails with
    /// [`Error::Unresponsive`](crate::Error::Unresponsive) instead of hanging; shutdown
    /// then returns that error at once and detaches the kernel (on the CPU backend its
    /// thread stays blocked in the handler; if the handler ever returns, the kernel
    /// drains and its thread exits). A request failed this way may still have run.
    ///
    /// `bound` must exceed the longest batch (batch size x the slowest handler) plus one
    /// idle park, or a busy kernel is declared unresponsive; it must be at least 1 ms and
    /// at least twice the kernel's longest idle park or sleep (checked at launch). The
    /// completion driver checks every `bound / 8`, so detection takes at most about
    /// `bound * 9 / 8` plus scheduling delays.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let spec = gyre::KernelSpec::from_fn("inc", |x: u64| x + 1)
    ///     .watchdog(Duration::from_millis(500));
    /// # let _ = spec;
    /// ```
    pub fn watchdog(mut self, bound: Duration) -> Self {
        self.watchdog = Some(bound);
        self
    }
}

impl<Req, Resp> KernelSpec<Req, Resp> {
    /// The same spec with other message types: a pipeline keeps its stages without their
    /// types (`crate::pipeline`), and launches its head with the chain's end types.
    pub(crate) fn retyped<R2, S2>(self) -> KernelSpec<R2, S2> {
        KernelSpec {
            name: self.name,
            capacity: self.capacity,
            slot_size: self.slot_size,
            batch: self.batch,
            idle: self.idle,
            host_idle: self.host_idle,
            async_spin: self.async_spin,
            host_timeout: self.host_timeout,
            watchdog: self.watchdog,
            handler: self.handler,
            builtin: self.builtin,
            msg_type: self.msg_type,
            timestamps: self.timestamps,
            telemetry: self.telemetry,
            export: self.export,
            export_interval: self.export_interval,
            cuda_source: self.cuda_source,
            opencl_source: self.opencl_source,
            lane_handler: self.lane_handler,
            epoch: self.epoch,
            restart: self.restart,
            watch: self.watch,
            loan: self.loan,
            _types: PhantomData,
        }
    }

    /// Creates the telemetry export file the spec asks for (before the launch, so a
    /// backend can let its kernel write the file's telemetry line directly).
    pub(crate) fn export_writer(
        &self,
    ) -> gyre_core::Result<Option<Arc<gyre_core::shm::ExportWriter>>> {
        use gyre_core::shm::ExportWriter;
        let Some(target) = &self.export else {
            return Ok(None);
        };
        let writer = match target {
            ExportTarget::Service(service) => ExportWriter::create(service, &self.name),
            ExportTarget::Path(path) => {
                // The directory's name stands for the service in the header.
                let service = path
                    .parent()
                    .and_then(|d| d.file_name())
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default();
                ExportWriter::create_at(path, &service, &self.name)
            }
        };
        writer
            .map(|w| Some(Arc::new(w)))
            .map_err(|e| gyre_core::Error::Launch {
                backend: "telemetry export",
                kernel: self.name.clone(),
                source: gyre_core::Cause::new(e),
            })
    }

    /// Checks the watchdog bound against the kernel's idle strategy (see
    /// [`KernelSpec::watchdog`]).
    pub(crate) fn validate_watchdog(&self) -> gyre_core::Result<()> {
        let Some(bound) = self.watchdog else {
            return Ok(());
        };
        let park = match self.idle {
            IdleStrategy::BusySpin => Duration::ZERO,
            IdleStrategy::Backoff { max_park, .. } => max_park,
            IdleStrategy::Sleep(d) => d,
        };
        if bound < Duration::from_millis(1) || bound < park * 2 {
            return Err(gyre_core::Error::InvalidArgument {
                name: "watchdog",
                value: format!("{bound:?} (idle park {park:?})"),
                reason: "must be at least 1ms and at least twice the kernel's idle park or sleep",
            });
        }
        Ok(())
    }
}

impl<Req: Pod + crate::DeviceType, Resp: Pod + crate::DeviceType> KernelSpec<Req, Resp> {
    /// A kernel running a handler written once in Rust with `#[gyre::handler]` or its
    /// lane-parallel form `#[gyre::handler(lanes)]` (`docs/handlers.md`): natively on the
    /// CPU backend (a lane-parallel one once per emulated lane), and as the C the macro
    /// generated on OpenCL (built at launch) and CUDA (compiled by NVRTC, cached). The
    /// kernel is named after the function.
    ///
    /// **Where it runs:** every backend; [`Backend::Auto`](crate::Backend::Auto) launches
    /// it on the GPU it found, else on the CPU backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    ///
    /// #[gyre::handler]
    /// fn collatz(x: u64) -> u64 {
    ///     if x % 2 == 0 { x / 2 } else { 3 * x + 1 }
    /// }
    ///
    /// let rt = Runtime::builder().backend(Backend::Auto).build()?;
    /// let k = rt.launch(KernelSpec::portable(collatz))?;
    /// assert_eq!(k.call_blocking(7)?, 22);
    /// assert_eq!(collatz(22), 11); // still a Rust function
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn portable(handler: impl crate::portable::PortableHandler<Req, Resp>) -> Self {
        let name = handler.handler_name();
        let spec = match (handler.single(), handler.lanes()) {
            (Some(f), _) => Self::from_fn(name, f),
            (None, Some(lh)) => {
                let mut s = Self::with_handler(name.into(), lh.for_lanes(1), None, 0);
                s.lane_handler = Some(lh);
                s
            }
            // A handler is one or the other (the trait is sealed).
            (None, None) => Self::with_handler(
                name.into(),
                Arc::new(|_: u32, _: &[u8], _: &mut [u8]| Err(gyre_abi::error::HANDLER_REJECTED)),
                None,
                0,
            ),
        };
        spec.device_handler(format!("{name}.rs.h"), handler.device_source())
    }
}

impl<T: Pod> KernelSpec<T, T> {
    /// The built-in echo kernel: each reply is its request.
    ///
    /// **Where it runs:** every backend, from one device source (`cuda/handlers/`);
    /// [`Backend::Auto`](crate::Backend::Auto) launches it on the GPU it found.
    pub fn echo() -> Self {
        Self::with_handler(
            "echo".into(),
            Arc::new(kernels::echo),
            Some(ids::ECHO),
            ids::ECHO,
        )
    }
}

impl<const N: usize> KernelSpec<VecScale<N>, VecF32<N>> {
    /// The built-in vector-scale kernel (see [`gyre_core::kernels`]).
    ///
    /// **Where it runs:** every backend, from one device source (`cuda/handlers/`);
    /// [`Backend::Auto`](crate::Backend::Auto) launches it on the GPU it found.
    pub fn vec_scale() -> Self {
        Self::with_handler(
            "vec_scale".into(),
            Arc::new(kernels::vec_scale),
            Some(ids::VEC_SCALE),
            ids::VEC_SCALE,
        )
    }
}

impl<const N: usize> KernelSpec<ReduceSum<N>, Sum> {
    /// The built-in reduce-sum kernel (see [`gyre_core::kernels`]).
    ///
    /// **Where it runs:** every backend, from one device source (`cuda/handlers/`);
    /// [`Backend::Auto`](crate::Backend::Auto) launches it on the GPU it found.
    pub fn reduce_sum() -> Self {
        Self::with_handler(
            "reduce_sum".into(),
            Arc::new(kernels::reduce_sum),
            Some(ids::REDUCE_SUM),
            ids::REDUCE_SUM,
        )
    }
}

/// The typed adapter of a Rust handler: a typed kernel takes one message type (0, what
/// its requests carry) and requests of `Req`'s size (another size is a corrupt header: not
/// this handler's type); the reply is `f`'s `Resp`, or its status.
pub(crate) fn typed_call<Req: Pod, Resp: Pod>(
    ty: u32,
    req: &[u8],
    reply: &mut [u8],
    f: impl FnOnce(Req) -> Result<Resp, u32>,
) -> Result<usize, u32> {
    if ty != 0 {
        return Err(gyre_abi::error::UNKNOWN_TYPE);
    }
    if req.len() != core::mem::size_of::<Req>() {
        return Err(gyre_abi::error::HANDLER_REJECTED);
    }
    let out = f(bytemuck::pod_read_unaligned(req))?;
    let bytes = bytemuck::bytes_of(&out);
    // Cannot fail: launch checks that `Resp` fits the payload. Were it to, the kernel
    // reports a reply too long.
    reply
        .get_mut(..bytes.len())
        .ok_or(gyre_abi::error::BAD_LENGTH)?
        .copy_from_slice(bytes);
    Ok(bytes.len())
}

/// Which kind of device a backend runs handlers on, for [`KernelSpec::runs_on`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Device {
    /// Host code: runs every spec (Rust handlers; the built-ins through the C11 loop).
    Cpu,
    /// CUDA: built-ins and CUDA sources.
    Cuda,
    /// OpenCL: built-ins and OpenCL C sources.
    OpenCl,
}

impl<Req, Resp> KernelSpec<Req, Resp> {
    /// Whether a backend of kind `device` can run this spec's handler; if not, the error
    /// to return, naming the kernel, the handler and what would run it.
    pub(crate) fn runs_on(&self, device: Device) -> Result<(), gyre_core::Error> {
        let (backend, source, handler, remedy) = match device {
            Device::Cpu => return Ok(()),
            Device::Cuda => (
                "cuda",
                &self.cuda_source,
                "a Rust handler (KernelSpec::from_fn, try_from_fn or raw) with no CUDA source",
                "write it once with #[gyre::handler] (KernelSpec::portable), add \
                 KernelSpec::cuda_handler or device_handler, use a built-in \
                 (KernelSpec::echo, vec_scale, reduce_sum), or launch it with Backend::Cpu \
                 or Backend::Auto (which runs it on the CPU backend)",
            ),
            Device::OpenCl => (
                "opencl",
                &self.opencl_source,
                "a Rust handler (KernelSpec::from_fn, try_from_fn or raw) with no OpenCL C \
                 source",
                "write it once with #[gyre::handler] (KernelSpec::portable), add \
                 KernelSpec::opencl_handler or device_handler, use a built-in \
                 (KernelSpec::echo, vec_scale, reduce_sum), or launch it with Backend::Cpu \
                 or Backend::Auto (which runs it on the CPU backend)",
            ),
        };
        if self.builtin.is_some() || source.is_some() {
            return Ok(());
        }
        Err(gyre_core::Error::HandlerUnsupported {
            kernel: self.name.clone(),
            backend,
            handler,
            remedy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_backends_run_builtins_and_their_own_sources_only() {
        let closure = KernelSpec::from_fn("c", |x: u32| x);
        assert!(closure.runs_on(Device::Cpu).is_ok());
        for (d, name) in [(Device::Cuda, "cuda"), (Device::OpenCl, "opencl")] {
            match closure.runs_on(d) {
                Err(gyre_core::Error::HandlerUnsupported {
                    kernel,
                    backend,
                    handler,
                    remedy,
                }) => {
                    assert_eq!((kernel.as_str(), backend), ("c", name));
                    assert!(handler.contains("KernelSpec::from_fn"), "{handler}");
                    assert!(remedy.contains("Backend::Cpu"), "{remedy}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        let echo = KernelSpec::<u32, u32>::echo();
        for d in [Device::Cpu, Device::Cuda, Device::OpenCl] {
            assert!(echo.runs_on(d).is_ok(), "{d:?}");
        }
        let cu = closure.clone().cuda_handler("x.cu", "");
        assert!(cu.runs_on(Device::Cuda).is_ok());
        assert!(cu.runs_on(Device::OpenCl).is_err());
        let cl = closure.clone().opencl_handler("x.cl", "");
        assert!(cl.runs_on(Device::OpenCl).is_ok());
        assert!(cl.runs_on(Device::Cuda).is_err());
        let both = closure.device_handler("x.h", "");
        assert!(both.runs_on(Device::Cuda).is_ok() && both.runs_on(Device::OpenCl).is_ok());
    }
}
