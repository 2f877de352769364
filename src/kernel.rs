//! [`Kernel`]: the typed handle of a running ring kernel, and its blocking API.

use core::marker::PhantomData;
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytemuck::Pod;
use gyre_abi::{command, error, state};
use gyre_core::bridge::{BridgeAgent, TransferStats};
use gyre_core::channel::driver::Driver;
use gyre_core::channel::{Kind, PublishError, ReplyView};
use gyre_core::shm::{ExportPublisher, ExportWriter};
use gyre_core::strategy::TransferStrategy;
use gyre_core::telemetry::read_consistent;
use gyre_core::{Channel, Error, IdleStrategy, KernelInstance, Result, SharedRegion, TrySendError};
use parking_lot::Mutex;

use crate::futures::{Call, Recv, Replies, Send, Shutdown};
use crate::spec::KernelSpec;

/// Lifecycle state of a kernel, as it last wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelState {
    /// Not started yet.
    Launching,
    /// Processing requests.
    Active,
    /// Alive, consuming nothing.
    Paused,
    /// Answering what was published before shutdown.
    Draining,
    /// Stopped normally (or, with a non-zero code, because the host heartbeat went stale).
    Terminated {
        /// `gyre_abi::error` code, 0 for a commanded shutdown.
        code: u32,
    },
    /// Stopped on an error.
    Faulted {
        /// `gyre_abi::error` code.
        code: u32,
    },
    /// The host-side watchdog ([`KernelSpec::watchdog`]) saw no sign of life from the
    /// kernel within its bound: a handler that never returns, a hung device. Waiters
    /// failed with [`Error::Unresponsive`]; the kernel was told to terminate and is
    /// detached. Reported until the kernel reaches a final state by itself.
    Unresponsive,
}

impl KernelState {
    /// The state from the raw `gyre_abi::state` value and error code (as found in the
    /// control block or a [`TelemetrySnapshot`](crate::TelemetrySnapshot)).
    pub fn from_raw(s: u32, code: u32) -> Self {
        match s {
            state::ACTIVE => KernelState::Active,
            state::PAUSED => KernelState::Paused,
            state::DRAINING => KernelState::Draining,
            state::TERMINATED => KernelState::Terminated { code },
            state::FAULTED => KernelState::Faulted { code },
            _ => KernelState::Launching,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) ch: Arc<Channel>,
    instance: Arc<dyn KernelInstance>,
    driver: Mutex<Option<Driver>>,
    pub(crate) host_idle: IdleStrategy,
    pub(crate) async_spin: Duration,
    pub(crate) msg_type: u32,
    next_id: AtomicU64,
    /// The telemetry export publisher, if the spec asked for one; dropping it removes
    /// the file.
    export: Mutex<Option<ExportPublisher>>,
    /// The bridge to the kernel's device-resident rings under a copy strategy; `None`
    /// for zero copy. Dropped (its copy thread joined) after the kernel stopped.
    transfer: Option<Arc<BridgeAgent>>,
}

impl Inner {
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed)
    }

    /// Whether joining the kernel returns promptly: its loop exited, or it wrote a final
    /// state (it exits right after). A kernel the watchdog declared unresponsive is
    /// neither, and is never joined (it would block forever).
    fn joinable(&self) -> bool {
        self.instance.is_finished() || state::is_final(self.ch.kernel_state().0)
    }

    /// Joins the kernel once it reached a final state; reports a fault. An unresponsive
    /// kernel is detached instead, and reported as [`Error::Unresponsive`].
    pub(crate) fn finish(&self) -> Result<()> {
        if let Some(e) = self.ch.unresponsive() {
            if self.joinable() {
                let _ = self.instance.join();
            } else {
                tracing::warn!(kernel = %self.ch.name(), "shutdown: detaching the unresponsive kernel");
            }
            return Err(e);
        }
        let joined = self.instance.join();
        self.drain_transfer();
        match self.ch.kernel_state() {
            (state::FAULTED, code) => Err(Error::KernelFaulted {
                kernel: self.ch.name().to_owned(),
                code,
                name: error::name(code),
            }),
            // The device ended the kernel (join says how), or it exited without writing
            // a final state: its waiters learn it from the channel too.
            (st, _) => match joined {
                Err(Error::KernelLost { cause, .. }) => Err(self.ch.mark_lost(cause)),
                Err(e) => Err(e),
                Ok(()) if !state::is_final(st) => Err(self
                    .ch
                    .mark_lost("the kernel's execution ended without a final state".into())),
                Ok(()) => Ok(()),
            },
        }
    }

    /// After the kernel stopped: one last blocking pull, so the host rings hold every
    /// reply and the final state before shutdown returns (a copy thread may not have
    /// moved them yet).
    fn drain_transfer(&self) {
        if let Some(t) = &self.transfer {
            t.drain();
        }
    }

    pub(crate) fn is_final(&self) -> bool {
        self.ch.check_stopped().is_some() || self.instance.is_finished()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: stop the kernel if nobody shut it down.
        self.ch.close();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.ch.all_published() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        self.ch.command(command::TERMINATE);
        while !self.is_final() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        if self.joinable() {
            let _ = self.instance.join();
            self.drain_transfer();
        } else {
            tracing::warn!(kernel = %self.ch.name(), "kernel did not stop within 5 s of its last handle dropping; detaching it");
        }
        self.driver.lock().take();
        self.export.lock().take();
    }
}

/// A running ring kernel taking `Req` and answering `Resp`.
///
/// Cheap to clone; all clones drive the same kernel and may be used from many threads
/// (many producers share the request ring). When the last clone is dropped without
/// [`Kernel::shutdown`], the kernel is told to terminate and joined (bounded to 5 s).
///
/// Every accepted request gets exactly one reply or one error: a reply through the
/// `call` that sent it, or through `recv` / [`Kernel::replies`] for `send`, in order.
pub struct Kernel<Req, Resp> {
    pub(crate) inner: Arc<Inner>,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Clone for Kernel<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> core::fmt::Debug for Kernel<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Kernel")
            .field("channel", &self.inner.ch)
            .finish()
    }
}

/// Decodes a reply into `Resp`, turning an error status into a typed error. A reply
/// shorter than `Resp` is zero-extended; a longer one is [`Error::ReplySize`].
pub(crate) fn decode<Resp: Pod>(kernel: &str, v: ReplyView<'_>) -> Result<Resp> {
    match v.meta.status {
        error::NONE => {}
        s @ (error::BAD_SEQUENCE | error::BAD_LENGTH | error::UNKNOWN_TYPE) => {
            return Err(Error::Protocol {
                ring: "request",
                index: v.meta.correlation_id,
                what: error::name(s),
                expected: 0,
                found: u64::from(s),
            })
        }
        s => {
            return Err(Error::Handler {
                kernel: kernel.to_owned(),
                status: s,
                name: error::name(s),
            })
        }
    }
    let size = core::mem::size_of::<Resp>();
    if v.payload.len() > size {
        return Err(Error::ReplySize {
            expected: size,
            actual: v.payload.len(),
        });
    }
    // A shorter reply (a built-in answering only the used prefix) is zero-extended.
    let mut out = Resp::zeroed();
    bytemuck::bytes_of_mut(&mut out)[..v.payload.len()].copy_from_slice(v.payload);
    Ok(out)
}

impl<Req: Pod, Resp: Pod> Kernel<Req, Resp> {
    pub(crate) fn start(
        region: Arc<SharedRegion>,
        instance: Box<dyn KernelInstance>,
        transfer: Option<Arc<BridgeAgent>>,
        export: Option<Arc<ExportWriter>>,
        spec: &KernelSpec<Req, Resp>,
    ) -> Result<Self> {
        let mut ch = Channel::new(region, spec.name.clone()).with_timestamps(spec.timestamps);
        if let Some(t) = &transfer {
            ch = ch.with_transfer(t.clone());
        }
        let ch = Arc::new(ch);
        let instance: Arc<dyn KernelInstance> = Arc::from(instance);
        // The backend's view of the kernel's execution (a device fault kills a kernel
        // without a final state), consulted without keeping the kernel alive.
        let watched: std::sync::Weak<dyn KernelInstance> = Arc::downgrade(&instance);
        ch.watch_liveness(Arc::new(watched));
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
        let kernel = Self {
            inner: Arc::new(Inner {
                ch,
                instance,
                driver: Mutex::new(Some(driver)),
                host_idle: spec.host_idle,
                async_spin: spec.async_spin,
                msg_type: spec.msg_type,
                next_id: AtomicU64::new(0),
                export: Mutex::new(None),
                transfer,
            }),
            _types: PhantomData,
        };
        // On failure `kernel` drops here, which stops the kernel it already launched.
        if let Some(writer) = export {
            let name = kernel.inner.ch.name().to_owned();
            // The kernel may write the file's telemetry line itself (CUDA); then the
            // publisher keeps to the control line, so the line keeps a single writer.
            let copy_telemetry = !kernel.inner.instance.writes_export_telemetry();
            match ExportPublisher::start(
                kernel.inner.ch.region().clone(),
                writer,
                spec.export_interval,
                copy_telemetry,
            ) {
                Ok(p) => {
                    tracing::info!(
                        path = %p.path().display(),
                        device_writes_telemetry = !copy_telemetry,
                        "telemetry exported"
                    );
                    *kernel.inner.export.lock() = Some(p);
                }
                Err(e) => {
                    return Err(Error::Launch {
                        backend: "telemetry export",
                        kernel: name,
                        reason: e.to_string(),
                    })
                }
            }
        }
        Ok(kernel)
    }

    /// The file this kernel's telemetry is exported to (see
    /// [`KernelSpec::export_telemetry`]), while it is exported.
    pub fn telemetry_export_path(&self) -> Option<std::path::PathBuf> {
        self.inner
            .export
            .lock()
            .as_ref()
            .map(|p| p.path().to_owned())
    }

    /// Kernel name.
    pub fn name(&self) -> &str {
        self.inner.ch.name()
    }

    /// Slots per ring: at most this many requests are in flight (queued, being
    /// processed, or answered but not yet taken).
    pub fn capacity(&self) -> u64 {
        self.inner.ch.capacity()
    }

    /// Payload bytes per slot.
    pub fn payload(&self) -> usize {
        self.inner.ch.payload()
    }

    /// Bytes per slot (header + payload).
    pub fn slot_size(&self) -> usize {
        self.inner.ch.slot_size()
    }

    /// Most requests the kernel takes per batch.
    pub fn batch_size(&self) -> u32 {
        self.inner.ch.region().geometry().batch()
    }

    fn publish(&self, kind: Kind, req: &Req) -> core::result::Result<u64, PublishError> {
        self.inner
            .ch
            .try_publish(kind, self.inner.msg_type, bytemuck::bytes_of(req))
    }

    /// Sends `req` if a slot is free, without waiting. Its reply is delivered by `recv`.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the ring is full, [`TrySendError::Closed`] after
    /// shutdown or a kernel fault; either way the message is handed back.
    pub fn try_send(&self, req: Req) -> core::result::Result<(), TrySendError<Req>> {
        match self.publish(Kind::Send, &req) {
            Ok(_) => Ok(()),
            Err(PublishError::Full) => Err(TrySendError::Full(req)),
            // TooLarge / BatchTooLarge cannot happen: sizes were checked at launch.
            Err(_) => Err(TrySendError::Closed(req)),
        }
    }

    /// Publishes, waiting on this thread while the ring is full.
    /// Publishes, waiting on this thread while the ring is full, until `timeout` (if any)
    /// has passed since `start`.
    fn publish_blocking(
        &self,
        kind: Kind,
        req: &Req,
        timeout: Option<(Instant, Duration)>,
    ) -> Result<u64> {
        let mut idler = self.inner.host_idle.idler();
        let mut polls: u32 = 0;
        loop {
            match self.publish(kind, req) {
                Ok(i) => return Ok(i),
                Err(PublishError::Full) => {
                    polls = polls.wrapping_add(1);
                    if polls % 256 == 0 {
                        if let Some(e) = self.inner.ch.check_stopped() {
                            return Err(e);
                        }
                    }
                    if let Some((start, t)) = timeout {
                        if polls % 16 == 0 && start.elapsed() >= t {
                            return Err(Error::Timeout {
                                op: "call",
                                after: t,
                            });
                        }
                    }
                    idler.idle(false);
                }
                Err(PublishError::Closed) => return Err(self.inner.ch.closed_error()),
                Err(PublishError::TooLarge { len, payload }) => {
                    return Err(Error::MessageTooLarge { len, payload })
                }
                Err(PublishError::BatchTooLarge { len, capacity }) => {
                    return Err(Error::InvalidArgument {
                        name: "batch length",
                        value: format!("{len} (capacity {capacity})"),
                        reason: "a batch must fit the ring",
                    })
                }
            }
        }
    }

    /// Sends `req`, waiting on this thread while the ring is full. Its reply is delivered
    /// by `recv`.
    pub fn send_blocking(&self, req: Req) -> Result<()> {
        self.publish_blocking(Kind::Send, &req, None).map(|_| ())
    }

    /// Sends `req` and waits on this thread for its reply.
    pub fn call_blocking(&self, req: Req) -> Result<Resp> {
        let idx = self.publish_blocking(Kind::Call, &req, None)?;
        let name = self.inner.ch.name();
        self.inner
            .ch
            .wait_blocking(idx, &self.inner.host_idle, None, |v| decode(name, v))
    }

    /// [`Kernel::call_blocking`] giving up after `timeout` ([`Error::Timeout`]), whether it
    /// is still waiting for a free slot (nothing was sent) or for the reply (the request
    /// stays accepted; its late reply is discarded).
    pub fn call_timeout(&self, req: Req, timeout: Duration) -> Result<Resp> {
        let start = Instant::now();
        let idx = self.publish_blocking(Kind::Call, &req, Some((start, timeout)))?;
        let name = self.inner.ch.name();
        let left = timeout.saturating_sub(start.elapsed());
        self.inner
            .ch
            .wait_blocking(idx, &self.inner.host_idle, Some(left), |v| decode(name, v))
    }

    /// Sends a batch of requests with one claim and one publication; their replies are
    /// delivered by `recv`, in order. All or nothing.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when fewer than `reqs.len()` slots are free (or the batch is
    /// larger than the ring), [`TrySendError::Closed`] after shutdown.
    pub fn try_send_batch<'a>(
        &self,
        reqs: &'a [Req],
    ) -> core::result::Result<(), TrySendError<&'a [Req]>> {
        let size = core::mem::size_of::<Req>();
        let r = if size == 0 {
            let empty: Vec<&[u8]> = vec![&[]; reqs.len()];
            self.inner
                .ch
                .try_publish_batch(Kind::Send, self.inner.msg_type, &empty)
        } else {
            self.inner.ch.try_publish_uniform(
                Kind::Send,
                self.inner.msg_type,
                bytemuck::cast_slice(reqs),
                size,
            )
        };
        match r {
            Ok(_) => Ok(()),
            Err(PublishError::Full | PublishError::BatchTooLarge { .. }) => {
                Err(TrySendError::Full(reqs))
            }
            Err(_) => Err(TrySendError::Closed(reqs)),
        }
    }

    /// Takes up to `max` ready `send` replies, in order, appending each (a reply or its
    /// error) to `out`; releases them with one index update. Returns how many were
    /// appended (0: nothing ready).
    ///
    /// # Errors
    ///
    /// As [`Kernel::try_recv`]: the kernel stopped and will answer nothing more.
    pub fn try_recv_batch(&self, out: &mut Vec<Result<Resp>>, max: usize) -> Result<usize> {
        let name = self.inner.ch.name();
        self.inner.ch.try_recv_batch(max, out, |v| decode(name, v))
    }

    /// Takes the next `send` reply if one is ready.
    ///
    /// `Ok(None)`: nothing ready yet. Errors: the reply was an error, or the kernel
    /// stopped and will answer nothing more.
    pub fn try_recv(&self) -> Result<Option<Resp>> {
        let name = self.inner.ch.name();
        self.inner.ch.try_recv(|v| decode(name, v))
    }

    /// Waits on this thread for the next `send` reply.
    pub fn recv_blocking(&self) -> Result<Resp> {
        self.recv_deadline(None)
    }

    /// [`Kernel::recv_blocking`] giving up after `timeout` ([`Error::Timeout`]).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Resp> {
        self.recv_deadline(Some(timeout))
    }

    fn recv_deadline(&self, timeout: Option<Duration>) -> Result<Resp> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut idler = self.inner.host_idle.idler();
        loop {
            if let Some(r) = self.try_recv()? {
                return Ok(r);
            }
            if let (Some(d), Some(t)) = (deadline, timeout) {
                if Instant::now() >= d {
                    return Err(Error::Timeout {
                        op: "recv",
                        after: t,
                    });
                }
            }
            idler.idle(false);
        }
    }

    /// Sends `req` and resolves to its reply. See [`Call`] for cancel safety.
    pub fn call(&self, req: Req) -> Call<Req, Resp> {
        Call::new(self.inner.clone(), req)
    }

    /// Sends `req`, waiting for a free slot. See [`Send`] for cancel safety.
    pub fn send(&self, req: Req) -> Send<Req> {
        Send::new(self.inner.clone(), req)
    }

    /// Resolves to the next `send` reply. See [`Recv`] for cancel safety.
    pub fn recv(&self) -> Recv<Resp> {
        Recv::new(self.inner.clone())
    }

    /// A stream of `send` replies, in order; it ends once the kernel stopped and every
    /// reply was delivered.
    pub fn replies(&self) -> Replies<Resp> {
        Replies::new(self.inner.clone())
    }

    /// Stops accepting requests, lets the kernel answer everything already accepted,
    /// and joins it. See [`Shutdown`] for cancel safety.
    pub fn shutdown(&self) -> Shutdown {
        Shutdown::new(self.inner.clone())
    }

    /// [`Kernel::shutdown`] on this thread.
    pub fn shutdown_blocking(&self) -> Result<()> {
        self.shutdown_deadline(None)
    }

    /// [`Kernel::shutdown_blocking`] giving up after `timeout` ([`Error::Timeout`]) —
    /// for a kernel whose handler never returns. The kernel was still told to terminate.
    pub fn shutdown_timeout(&self, timeout: Duration) -> Result<()> {
        self.shutdown_deadline(Some(timeout))
    }

    fn shutdown_deadline(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let timed_out = || match (deadline, timeout) {
            (Some(d), Some(t)) if Instant::now() >= d => Some(Error::Timeout {
                op: "shutdown",
                after: t,
            }),
            _ => None,
        };
        let ch = &self.inner.ch;
        ch.close();
        let mut idler = self.inner.host_idle.idler();
        while !ch.all_published() {
            if let Some(e) = timed_out() {
                return Err(e);
            }
            idler.idle(false);
        }
        ch.command(command::TERMINATE);
        idler.reset();
        while !self.inner.is_final() {
            if let Some(e) = timed_out() {
                return Err(e);
            }
            idler.idle(false);
        }
        let done = self.inner.finish();
        // A clean shutdown unpublishes the telemetry export (removes the file).
        self.inner.export.lock().take();
        done
    }

    /// Asks the kernel to stop consuming requests (they queue up; `try_send` reports
    /// `Full` once the ring is full). Returns at once; see [`Kernel::state`].
    pub fn pause(&self) {
        self.inner.ch.command(command::PAUSE);
    }

    /// Undoes [`Kernel::pause`].
    pub fn resume(&self) {
        self.inner.ch.command(command::RUN);
    }

    /// The kernel's state as it last wrote it, or [`KernelState::Unresponsive`] once the
    /// watchdog fired (until the kernel reaches a final state by itself).
    pub fn state(&self) -> KernelState {
        let (s, c) = self.inner.ch.kernel_state();
        if !state::is_final(s) && self.inner.ch.unresponsive().is_some() {
            return KernelState::Unresponsive;
        }
        KernelState::from_raw(s, c)
    }

    /// The host side of this kernel's rings, for fault injection and diagnostics: tests
    /// write corrupt slots or control-block fields through it to check that the kernel
    /// and the host report them. Not part of the stable API; misuse breaks the protocol
    /// (never memory safety: raw slot writes are `unsafe`).
    #[doc(hidden)]
    pub fn raw_channel(&self) -> &Arc<Channel> {
        &self.inner.ch
    }

    /// A consistent snapshot of the kernel's telemetry (retrying a torn read).
    pub fn telemetry(&self) -> Result<crate::TelemetrySnapshot> {
        if let Some(t) = &self.inner.transfer {
            t.refresh_telemetry();
        }
        read_consistent(self.inner.ch.region().telemetry(), 1024).map_err(|e| {
            Error::TornTelemetry {
                attempts: e.attempts,
            }
        })
    }

    /// The transfer strategy this kernel's bytes move by.
    pub fn transfer_strategy(&self) -> TransferStrategy {
        self.inner
            .transfer
            .as_ref()
            .map_or(TransferStrategy::Unified, |t| t.strategy())
    }

    /// Host <-> device copies and bytes of the bridge so far, under a copy strategy;
    /// `None` under [`TransferStrategy::Unified`] (zero copy: nothing is copied).
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
        self.inner.transfer.as_ref().map(|t| t.stats())
    }

    /// Replies that failed the host's protocol checks so far.
    pub fn protocol_errors(&self) -> u64 {
        self.inner.ch.protocol_errors()
    }
}

#[cfg(test)]
mod export_tests {
    use crate::{Backend, KernelSpec, Runtime};
    use gyre_core::telemetry::TelemetryReader;

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
}
