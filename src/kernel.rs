//! [`Kernel`]: the typed handle of a running ring kernel — what it is, its state, its
//! telemetry and its commands. Sending and receiving are in `blocking.rs` (this thread
//! waits) and `future/` (async).

use core::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;
use gyre_abi::{command, state};
use gyre_core::bridge::{BridgeAgent, TransferStats};
use gyre_core::channel::driver::Driver;
use gyre_core::strategy::TransferStrategy;
use gyre_core::telemetry::read_consistent;
use gyre_core::{Channel, Error, IdleStrategy, KernelInstance, Result, SharedRegion};

/// What [`crate::Runtime::launch`] made for one kernel: its rings, its first launch and
/// what relaunches it.
pub(crate) struct Started {
    /// The host's view of the head stage's rings.
    pub(crate) region: Arc<SharedRegion>,
    /// Every stage's first launch, head first: one for a lone kernel.
    pub(crate) stages: Vec<StageStart>,
    pub(crate) transfer: Option<Arc<BridgeAgent>>,
    pub(crate) backend: crate::Backend,
    /// The pipeline whose head these rings are (`crate::pipeline`), if any.
    pub(crate) chain: Option<Arc<gyre_core::chain::ChainView>>,
}

use crate::inner::{Inner, Polling};
use crate::keep_alive::KeepAlive;
use crate::lifecycle::{CurrentLiveness, Lifecycle, StageStart, Stages, Supervisor, Watcher};
use crate::spec::KernelSpec;
use crate::state::KernelState;

/// A running ring kernel taking `Req` and answering `Resp`.
///
/// Cheap to clone; all clones drive the same kernel and may be used from many threads
/// (many producers share the request ring). Every accepted request gets exactly one reply
/// or one error: a reply through the `call` that sent it, or through `recv` /
/// [`Kernel::replies`] for `send`, in order. A request the kernel refuses (its ring is
/// full or closed) was never accepted: [`TrySendError::Full`](crate::TrySendError::Full)
/// or [`Error::Closed`].
///
/// # The end of a kernel
///
/// [`Kernel::shutdown`] (or [`Kernel::shutdown_blocking`]) stops it: no new requests,
/// everything accepted is answered, the kernel is joined and its telemetry export file
/// removed. Without a shutdown, the kernel ends when the last `Kernel` clone is dropped
/// (its [`CallFuture`](crate::future::CallFuture), [`SendFuture`](crate::future::SendFuture)
/// and [`ShutdownFuture`](crate::future::ShutdownFuture) borrow a handle, which outlives
/// them). A pending [`RecvFuture`](crate::future::RecvFuture) or a
/// [`RepliesStream`](crate::future::RepliesStream) does **not** keep it alive: it yields the
/// replies the kernel still produces for accepted `send`s, then ends. Dropping the last
/// handle closes the ring at once and never waits for the kernel on the dropping thread:
/// the drain, Terminate and join run on a thread of their own (and a kernel that does not
/// stop within 5 s is detached, as [`Kernel::shutdown_timeout`] would).
///
/// # Blocking methods in async code
///
/// The `*_blocking` and `*_timeout` methods wait on the calling thread (spinning, then
/// yielding and parking per [`KernelSpec::host_idle`]). Called from async code they hold
/// the executor's worker thread for as long as they wait: they still complete (the kernel
/// and its completion driver run on threads of their own), but the worker's other tasks
/// wait meanwhile — on a current-thread runtime, every task does, and a wait for space or
/// a reply that only such a task would free never ends. In async code use the futures
/// ([`Kernel::call`], [`Kernel::send`], [`Kernel::recv`], [`Kernel::replies`],
/// [`Kernel::shutdown`]), or `tokio::task::spawn_blocking`.
///
/// # Examples
///
/// ```
/// use futures_core::Stream;
/// use gyre::{Backend, KernelSpec, Runtime};
///
/// # async fn example() -> Result<(), gyre::Error> {
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let k = rt.launch(KernelSpec::from_fn("double", |x: u64| x * 2))?;
/// // A consumer task: the stream does not keep the kernel alive.
/// let mut replies = Box::pin(k.replies());
/// let consumer = tokio::spawn(async move {
///     let mut sum = 0;
///     while let Some(r) = std::future::poll_fn(|cx| replies.as_mut().poll_next(cx)).await {
///         sum += r?;
///     }
///     Ok::<u64, gyre::Error>(sum)
/// });
/// for i in 1..=3 {
///     k.send(i).await?;
/// }
/// drop(k); // the last handle: the kernel answers what it accepted, then ends
/// assert_eq!(consumer.await.expect("the consumer task")?, 12);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(example()).unwrap();
/// ```
pub struct Kernel<Req, Resp> {
    pub(crate) keep: Arc<KeepAlive>,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Clone for Kernel<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            keep: self.keep.clone(),
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> core::fmt::Debug for Kernel<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Kernel")
            .field("channel", &self.keep.inner.ch)
            .finish()
    }
}

impl<Req, Resp> Kernel<Req, Resp> {
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.keep.inner
    }

    /// The same kernel seen with other message types (a loan kernel's raw handles).
    pub(crate) fn retyped<R2, S2>(&self) -> Kernel<R2, S2> {
        Kernel {
            keep: self.keep.clone(),
            _types: PhantomData,
        }
    }
}

impl<Req: Pod, Resp: Pod> Kernel<Req, Resp> {
    pub(crate) fn start(started: Started, spec: &KernelSpec<Req, Resp>) -> Result<Self> {
        let Started {
            region,
            stages,
            transfer,
            backend,
            chain,
        } = started;
        let mut ch = Channel::new(region, spec.name.clone()).with_timestamps(spec.timestamps);
        if let Some(t) = &transfer {
            ch = ch.with_transfer(t.clone());
        }
        let ch = Arc::new(ch);
        if let Some(c) = chain {
            ch.set_chain(c);
        }
        let stages = Stages::new(stages);
        // A kernel that parks when idle (the CPU backend) is woken by every publication,
        // command and bridge push; its successors park on the same doorbell.
        if let Some(d) = stages.doorbell() {
            ch.set_doorbell(d.clone());
            if let Some(t) = &transfer {
                t.set_doorbell(d);
            }
        }
        // A kernel on a host thread over these rings wakes their waiters itself (its
        // successors ring the same bell).
        if let Some(b) = stages.reply_bell() {
            b.attach(&ch);
        }
        let export = stages.head().launched().export;
        let life = Lifecycle::new(ch.clone(), stages, transfer.clone());
        // The backend's view of the running launch's execution (a device fault kills a
        // kernel without a final state), consulted without keeping the kernel alive.
        ch.watch_liveness(Arc::new(CurrentLiveness(Arc::downgrade(&life))));
        let hb = if spec.host_timeout.is_zero() {
            Duration::from_secs(1)
        } else {
            (spec.host_timeout / 4).max(Duration::from_millis(1))
        };
        let driver_idle = IdleStrategy::Backoff {
            spins: 256,
            yields: 16,
            max_park: Duration::from_micros(50),
        };
        let driver = Driver::start_with_watchdog(ch.clone(), driver_idle, hb, spec.watchdog)?;
        if let (Some(t), Some(th)) = (&transfer, driver.thread()) {
            t.notify(th);
        }
        let polling = Polling {
            host_idle: spec.host_idle,
            async_spin: spec.async_spin,
            msg_type: spec.msg_type,
            watchdog: spec.watchdog,
        };
        let kernel = Self {
            keep: Arc::new(KeepAlive {
                inner: Arc::new(Inner::new(
                    ch,
                    life.clone(),
                    driver,
                    polling,
                    transfer,
                    backend,
                )),
            }),
            _types: PhantomData,
        };
        // On failure `kernel` drops here, which ends the kernel it already launched.
        if let Some(writer) = export {
            kernel
                .inner()
                .publish_export(writer, spec.export_interval)?;
        }
        let supervisor = Supervisor::start(&life, &spec.name)?;
        let watcher = match &spec.watch {
            Some(path) => Some(kernel.watch(spec, path)?),
            None => None,
        };
        kernel.inner().supervise(supervisor, watcher);
        Ok(kernel)
    }

    /// Starts reloading this kernel whenever `path` changes ([`KernelSpec::watch`]).
    fn watch(&self, spec: &KernelSpec<Req, Resp>, path: &std::path::Path) -> Result<Watcher> {
        let backend = self.backend();
        let initial = match backend {
            crate::Backend::Cuda { .. } => spec.cuda_source.as_ref(),
            crate::Backend::OpenCl { .. } => spec.opencl_source.as_ref(),
            _ => None,
        };
        let Some(initial) = initial.map(|s| s.source.clone()) else {
            return Err(Error::InvalidArgument {
                name: "watch",
                value: path.display().to_string(),
                reason: "needs a kernel that runs a device handler source (CUDA or OpenCL); \
                         this one runs a Rust handler or a built-in",
            });
        };
        let weak = Arc::downgrade(&self.keep);
        let base = spec.clone();
        let file = path.to_owned();
        Watcher::start(&spec.name, path.to_owned(), initial, move |source| {
            let keep = weak.upgrade().ok_or_else(|| Error::Closed {
                kernel: base.name.clone(),
            })?;
            let k = Kernel::<Req, Resp> {
                keep,
                _types: PhantomData,
            };
            k.reload_watched(base.with_device_source(backend, &file, source))
        })
    }
}

/// What every kernel reports and accepts whatever its payload: plain messages or loans.
impl<Req, Resp> Kernel<Req, Resp> {
    /// The file this kernel's telemetry is exported to (see
    /// [`KernelSpec::export_telemetry`]), while it is exported: `None` when the spec
    /// exports nothing, and after a shutdown (which removes the file).
    ///
    /// # Errors
    ///
    /// None: it reads the kernel's handle.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let dir = std::env::temp_dir().join(format!("gyre-doc-path-{}", std::process::id()));
    /// let path = dir.join("svc").join("echo");
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::<u64, u64>::echo().export_telemetry_to(&path))?;
    /// assert_eq!(k.telemetry_export_path().as_deref(), Some(path.as_path()));
    /// k.shutdown_blocking()?;
    /// assert_eq!(k.telemetry_export_path(), None);
    /// assert!(!path.exists());
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn telemetry_export_path(&self) -> Option<std::path::PathBuf> {
        self.inner().export_path()
    }

    /// Kernel name (see [`KernelSpec::named`]).
    ///
    /// # Errors
    ///
    /// None: it is fixed at launch.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::from_fn("double", |x: u32| x * 2))?;
    /// assert_eq!(k.name(), "double");
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.inner().ch.name()
    }

    /// The backend this kernel runs on (never [`Backend::Auto`](crate::Backend::Auto)).
    /// Under `Auto` it is decided per kernel at launch: the GPU backend the runtime found
    /// for built-ins and specs with device code for it, the CPU backend for Rust
    /// handlers (see [`Runtime::backend_for`](crate::Runtime::backend_for)).
    ///
    /// # Errors
    ///
    /// None: it is fixed at launch.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Auto).build()?;
    /// let k = rt.launch(KernelSpec::from_fn("double", |x: u32| x * 2))?;
    /// assert_eq!(k.backend(), Backend::Cpu);
    /// let e = rt.launch(KernelSpec::<u32, u32>::echo())?;
    /// assert_eq!(e.backend(), rt.backend());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn backend(&self) -> crate::Backend {
        self.inner().backend
    }

    /// Slots per ring: at most this many requests are in flight (queued, being
    /// processed, or answered but not yet taken). See [`KernelSpec::capacity`].
    ///
    /// # Errors
    ///
    /// None: it is fixed at launch.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(256).batch_size(8))?;
    /// assert_eq!((k.capacity(), k.batch_size(), k.payload()), (256, 8, 64));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        // At most 2^24: fits every usize.
        self.inner().ch.capacity() as usize
    }

    /// Payload bytes per slot: `slot_size - 64`, the largest request or reply.
    ///
    /// # Errors
    ///
    /// None: it is fixed at launch.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo().slot_size(256))?;
    /// assert_eq!(k.payload(), 192);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn payload(&self) -> usize {
        self.inner().ch.payload()
    }

    /// Bytes per slot (64-byte header + payload). See [`KernelSpec::slot_size`].
    ///
    /// # Errors
    ///
    /// None: it is fixed at launch.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.slot_size(), k.payload() + 64);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn slot_size(&self) -> usize {
        self.inner().ch.slot_size()
    }

    /// Most requests the kernel takes per batch. See [`KernelSpec::batch_size`].
    ///
    /// # Errors
    ///
    /// None: it is fixed at launch.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(16))?;
    /// assert_eq!(k.batch_size(), 16); // the default: 32, or the capacity if smaller
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn batch_size(&self) -> usize {
        self.inner().ch.region().geometry().batch() as usize
    }

    /// Asks the kernel to stop consuming requests (they queue up; `try_send` reports
    /// `Full` once the ring is full). Returns at once; [`Kernel::state`] becomes
    /// [`KernelState::Paused`] when the kernel sees the command.
    ///
    /// # Errors
    ///
    /// None: it writes a command. A kernel that already stopped ignores it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{KernelState, TrySendError};
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(2))?;
    /// k.pause();
    /// while k.state() != KernelState::Paused {
    ///     std::thread::yield_now();
    /// }
    /// k.try_send(1).unwrap();
    /// k.try_send(2).unwrap();
    /// assert_eq!(k.try_send(3), Err(TrySendError::Full(3)));
    /// k.resume();
    /// assert_eq!((k.recv_blocking()?, k.recv_blocking()?), (1, 2));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn pause(&self) {
        self.inner().life.command(command::PAUSE);
    }

    /// Undoes [`Kernel::pause`].
    ///
    /// # Errors
    ///
    /// None: it writes a command. A kernel that already stopped ignores it.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.pause();
    /// k.send_blocking(9)?; // queued while paused
    /// k.resume();
    /// assert_eq!(k.recv_blocking()?, 9);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn resume(&self) {
        self.inner().life.command(command::RUN);
    }

    /// The kernel's state as it last wrote it, or [`KernelState::Unresponsive`] once the
    /// watchdog fired (until the kernel reaches a final state by itself).
    ///
    /// # Errors
    ///
    /// None: a fault is a state ([`KernelState::Faulted`]), not an error of this call.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::KernelState;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.call_blocking(1)?; // answered: the kernel is running
    /// assert_eq!(k.state(), KernelState::Active);
    /// k.shutdown_blocking()?;
    /// assert_eq!(k.state(), KernelState::Terminated { code: 0 });
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn state(&self) -> KernelState {
        let ch = &self.inner().ch;
        let (s, c) = ch.kernel_state();
        if !state::is_final(s) && ch.unresponsive().is_some() {
            return KernelState::Unresponsive;
        }
        if s == state::FAULTED && ch.restart_armed() && ch.check_stopped().is_none() {
            return KernelState::Relaunching;
        }
        KernelState::from_raw(s, c)
    }

    /// The host side of this kernel's rings, for fault injection and diagnostics: tests
    /// write corrupt slots or control-block fields through it to check that the kernel
    /// and the host report them. Not part of the stable API; misuse breaks the protocol
    /// (never memory safety: raw slot writes are `unsafe`).
    ///
    /// # Errors
    ///
    /// None: it lends the channel.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.call_blocking(1)?;
    /// assert_eq!(k.raw_channel().claimed(), 1);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn raw_channel(&self) -> &Arc<Channel> {
        &self.inner().ch
    }

    /// A consistent snapshot of the kernel's telemetry (retrying a torn read).
    ///
    /// # Errors
    ///
    /// [`Error::TornTelemetry`] when no consistent read succeeded within 1024 attempts
    /// (the kernel stopped mid-write, or writes faster than this thread reads).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// for i in 0..10 {
    ///     k.call_blocking(i)?;
    /// }
    /// k.shutdown_blocking()?; // the last telemetry write comes with the final state
    /// let t = k.telemetry()?;
    /// assert_eq!((t.messages_in, t.messages_out), (10, 10));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn telemetry(&self) -> Result<gyre_abi::TelemetrySnapshot> {
        let inner = self.inner();
        if let Some(t) = &inner.transfer {
            t.refresh_telemetry();
        }
        read_consistent(inner.ch.region().telemetry(), 1024).map_err(|e| Error::TornTelemetry {
            attempts: e.attempts,
        })
    }

    /// The transfer strategy this kernel's bytes move by (the runtime's
    /// [`MemoryPlan`](crate::memory::MemoryPlan)).
    ///
    /// # Errors
    ///
    /// None: it is fixed at launch.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, TransferStrategy};
    /// let rt = Runtime::builder()
    ///     .backend(Backend::Cpu)
    ///     .transfer_strategy(TransferStrategy::Async)
    ///     .build()?;
    /// let k = rt.launch(KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.transfer_strategy(), TransferStrategy::Async);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn transfer_strategy(&self) -> TransferStrategy {
        self.inner()
            .transfer
            .as_ref()
            .map_or(TransferStrategy::Unified, |t| t.strategy())
    }

    /// Host <-> device copies and bytes of the bridge so far, under a copy strategy;
    /// `None` under [`TransferStrategy::Unified`] (zero copy: nothing is copied).
    ///
    /// # Errors
    ///
    /// None: it reads the bridge's counters.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, TransferStrategy};
    ///
    /// let rt = Runtime::builder()
    ///     .backend(Backend::Cpu)
    ///     .transfer_strategy(TransferStrategy::Sync)
    ///     .build()?;
    /// let k = rt.launch(KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.call_blocking(7)?, 7);
    /// let s = k.transfer_stats().expect("a copy strategy");
    /// assert_eq!((s.slots_down, s.slots_up), (1, 1));
    /// k.shutdown_blocking()?;
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn transfer_stats(&self) -> Option<TransferStats> {
        self.inner().transfer.as_ref().map(|t| t.stats())
    }

    /// What the kernel's loop has paid for so far in the terms of a PCIe GPU: read waves,
    /// system fences, remote loads and stores, telemetry writes, batches
    /// (`docs/protocol.md`, "Checked slots"). Counted by the CPU backend under
    /// [`RuntimeBuilder::cost_model`](crate::RuntimeBuilder::cost_model) only: `None`
    /// elsewhere (a GPU does not count them). Since the kernel's launch (a relaunched
    /// kernel starts again from zero).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// assert!(k.device_cost().is_none());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn device_cost(&self) -> Option<gyre_core::cost::DeviceCost> {
        self.inner().life.current().cost()
    }

    /// Replies that failed the host's protocol checks so far (each was reported to its
    /// caller as [`Error::Protocol`] with `ring: "reply"`).
    ///
    /// # Errors
    ///
    /// None: it reads a counter.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.call_blocking(1)?;
    /// assert_eq!(k.protocol_errors(), 0);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn protocol_errors(&self) -> u64 {
        self.inner().ch.protocol_errors()
    }
}

#[cfg(test)]
mod export_tests {
    use crate::telemetry::TelemetryReader;
    use crate::{Backend, KernelSpec, Runtime};

    /// A kernel exported to a path: readable while it runs, a second exporter to the same
    /// path is refused, and a clean shutdown removes the file.
    #[test]
    fn exported_telemetry_follows_the_kernel_and_is_removed_on_shutdown() {
        let dir = std::env::temp_dir().join(format!(
            "gyre-export-{}-{}",
            std::process::id(),
            gyre_core::shm::unix_ms()
        ));
        let path = dir.join("svc").join("double");
        let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
        let spec = KernelSpec::from_fn("double", |x: u32| x * 2)
            .export_telemetry_to(&path)
            .export_interval(std::time::Duration::from_millis(1));
        let k = rt.launch(spec.clone()).unwrap();
        assert_eq!(k.telemetry_export_path().as_deref(), Some(path.as_path()));
        for i in 0..100 {
            assert_eq!(k.call_blocking(i).unwrap(), i * 2);
        }
        let r = TelemetryReader::open(&path).unwrap();
        assert_eq!(
            (r.info().service.as_str(), r.info().kernel.as_str()),
            ("svc", "double")
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while r.snapshot().unwrap().telemetry.messages_out < 100 {
            assert!(
                std::time::Instant::now() < deadline,
                "export never caught up"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let s = r.snapshot().unwrap();
        assert_eq!(s.control.state, gyre_abi::state::ACTIVE);
        assert_eq!(s.control.capacity, 1024);

        let e = rt.launch(spec).unwrap_err();
        assert!(e.to_string().contains("already exported"), "{e}");

        k.shutdown_blocking().unwrap();
        assert!(k.telemetry_export_path().is_none());
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The lifecycle line of the export counts a restart after a fault, with its time.
    #[test]
    fn exported_lifecycle_line_counts_restarts() {
        let dir = std::env::temp_dir().join(format!(
            "gyre-export-restart-{}-{}",
            std::process::id(),
            gyre_core::shm::unix_ms()
        ));
        let path = dir.join("svc").join("fragile");
        let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
        let spec = KernelSpec::from_fn("fragile", |x: u32| {
            assert!(x != 13, "injected fault");
            x
        })
        .restart(crate::RestartPolicy::new(3))
        .export_telemetry_to(&path)
        .export_interval(std::time::Duration::from_millis(1));
        let k = rt.launch(spec).unwrap();
        let r = TelemetryReader::open(&path).unwrap();
        let first = r.snapshot().unwrap().lifecycle;
        assert_eq!((first.generation, first.restarts), (1, 0));
        assert!(k.call_blocking(13).is_err(), "the handler panicked");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let l = loop {
            let l = r.snapshot().unwrap().lifecycle;
            if l.restarts == 1 {
                break l;
            }
            assert!(std::time::Instant::now() < deadline, "no restart exported");
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        assert_eq!((l.generation, l.reloads, l.epochs), (2, 0, 0));
        assert!(l.last_restart_unix_ms >= gyre_core::shm::unix_ms() - 10_000);
        assert_eq!(l.last_relaunch_unix_ms, l.last_restart_unix_ms);
        assert_eq!(
            k.call_blocking(7).unwrap(),
            7,
            "the restarted kernel serves"
        );
        k.shutdown_blocking().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
