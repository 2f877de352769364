//! The non-async API of [`Kernel`]: `try_*` methods that never wait, and `*_blocking` /
//! `*_timeout` methods that wait on the calling thread (see "Blocking methods in async
//! code" on [`Kernel`]).

use std::time::{Duration, Instant};

use bytemuck::Pod;
use gyre_abi::command;
use gyre_core::channel::{Kind, PublishError};
use gyre_core::{Error, Result, TrySendError};

use crate::decode::{decode, refused};
use crate::kernel::Kernel;

impl<Req, Resp> Kernel<Req, Resp> {
    /// [`Kernel::publish_blocking`] of whatever `try_once` publishes (one attempt each
    /// call, all or nothing), waiting on this thread while the ring is full.
    pub(crate) fn publish_blocking_by(
        &self,
        kind: Kind,
        timeout: Option<(Instant, Duration)>,
        mut try_once: impl FnMut() -> core::result::Result<u64, PublishError>,
    ) -> Result<u64> {
        let ch = &self.inner().ch;
        let mut idler = self.inner().polling.host_idle.idler();
        let mut polls: u32 = 0;
        loop {
            match try_once() {
                Ok(i) => return Ok(i),
                Err(PublishError::Full) => {
                    polls = polls.wrapping_add(1);
                    // A kernel that stopped frees no more space: refuse rather than wait.
                    if polls % 256 == 0 && ch.check_stopped().is_some() {
                        return Err(refused(ch));
                    }
                    if let Some((start, t)) = timeout {
                        if polls % 16 == 0 && start.elapsed() >= t {
                            return Err(Error::Timeout {
                                op: match kind {
                                    Kind::Send => "send",
                                    Kind::Call => "call",
                                },
                                after: t,
                            });
                        }
                    }
                    idler.idle(false);
                }
                Err(PublishError::Closed) => return Err(refused(ch)),
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
}

impl<Req: Pod, Resp: Pod> Kernel<Req, Resp> {
    fn publish(&self, kind: Kind, req: &Req) -> core::result::Result<u64, PublishError> {
        let inner = self.inner();
        inner
            .ch
            .try_publish(kind, inner.polling.msg_type, bytemuck::bytes_of(req))
    }

    /// Sends `req` if a slot is free, without waiting. Its reply is delivered by `recv`
    /// ([`Kernel::recv_blocking`], [`Kernel::recv`], [`Kernel::replies`]), in order.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the ring is full, [`TrySendError::Closed`] after a
    /// shutdown started, the last handle dropped, or the kernel stopped (fault, watchdog);
    /// either way the message is handed back and was not sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::TrySendError;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.try_send(5).unwrap();
    /// assert_eq!(k.recv_blocking()?, 5);
    /// k.shutdown_blocking()?;
    /// assert_eq!(k.try_send(6), Err(TrySendError::Closed(6)));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn try_send(&self, req: Req) -> core::result::Result<(), TrySendError<Req>> {
        match self.publish(Kind::Send, &req) {
            Ok(_) => Ok(()),
            Err(PublishError::Full) => Err(TrySendError::Full(req)),
            // TooLarge / BatchTooLarge cannot happen: sizes were checked at launch.
            Err(_) => Err(TrySendError::Closed(req)),
        }
    }

    /// Publishes, waiting on this thread while the ring is full, until `timeout` (if any)
    /// has passed since `start`. A refusal is [`Error::Closed`].
    pub(crate) fn publish_blocking(
        &self,
        kind: Kind,
        req: &Req,
        timeout: Option<(Instant, Duration)>,
    ) -> Result<u64> {
        self.publish_blocking_by(kind, timeout, || self.publish(kind, req))
    }

    /// Sends `req`, waiting on this thread while the ring is full. Its reply is delivered
    /// by `recv`, in order.
    ///
    /// Blocks this thread until a slot is free: from async code, use [`Kernel::send`]
    /// (see "Blocking methods in async code" on [`Kernel`]).
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] when the kernel refuses requests (shutdown started, last handle
    /// dropped, or it stopped while this call waited): nothing was sent.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::from_fn("inc", |x: u64| x + 1))?;
    /// k.send_blocking(1)?;
    /// k.send_blocking(2)?;
    /// assert_eq!((k.recv_blocking()?, k.recv_blocking()?), (2, 3));
    /// k.shutdown_blocking()?;
    /// assert!(matches!(k.send_blocking(3), Err(gyre::Error::Closed { .. })));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn send_blocking(&self, req: Req) -> Result<()> {
        self.publish_blocking(Kind::Send, &req, None).map(|_| ())
    }

    /// [`Kernel::send_blocking`] giving up after `timeout` while the ring stays full;
    /// nothing was sent then (`req` is `Copy`: the caller still has it).
    ///
    /// Blocks this thread for up to `timeout`: from async code, use
    /// `tokio::time::timeout(d, k.send(req))` (see "Blocking methods in async code" on
    /// [`Kernel`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (`op: "send"`), and those of [`Kernel::send_blocking`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(2))?;
    /// k.pause(); // nothing is taken while paused
    /// while k.state() != gyre::KernelState::Paused {
    ///     std::thread::yield_now();
    /// }
    /// k.send_timeout(1, Duration::from_secs(10))?;
    /// k.send_timeout(2, Duration::from_secs(10))?;
    /// let e = k.send_timeout(3, Duration::from_millis(10)).unwrap_err();
    /// assert!(matches!(e, gyre::Error::Timeout { op: "send", .. }));
    /// k.resume();
    /// assert_eq!((k.recv_blocking()?, k.recv_blocking()?), (1, 2));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn send_timeout(&self, req: Req, timeout: Duration) -> Result<()> {
        self.publish_blocking(Kind::Send, &req, Some((Instant::now(), timeout)))
            .map(|_| ())
    }

    /// Sends `req` and waits on this thread for its reply.
    ///
    /// Blocks this thread until the reply arrives: from async code, use [`Kernel::call`]
    /// (see "Blocking methods in async code" on [`Kernel`]).
    ///
    /// # Errors
    ///
    /// Refused (nothing was sent): [`Error::Closed`]. Accepted, the reply is an error:
    /// [`Error::Handler`] (the handler's status), [`Error::Protocol`],
    /// [`Error::ReplyTooLong`] or [`Error::ReplySize`]; or it will never come:
    /// [`Error::KernelFaulted`], [`Error::KernelTerminated`] (the host heartbeat went
    /// stale), [`Error::Unresponsive`] (the watchdog).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::from_fn("double", |x: u64| x * 2))?;
    /// assert_eq!(k.call_blocking(21)?, 42);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn call_blocking(&self, req: Req) -> Result<Resp> {
        let idx = self.publish_blocking(Kind::Call, &req, None)?;
        let inner = self.inner();
        let ch = &inner.ch;
        ch.wait_blocking(idx, &inner.polling.host_idle, None, |v| decode(ch, v))
    }

    /// [`Kernel::call_blocking`] giving up after `timeout`, whether it is still waiting
    /// for a free slot (nothing was sent) or for the reply (the request stays accepted;
    /// its late reply is discarded).
    ///
    /// Blocks this thread for up to `timeout`: from async code, use
    /// `tokio::time::timeout(d, k.call(req))` (see "Blocking methods in async code" on
    /// [`Kernel`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], and those of [`Kernel::call_blocking`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.call_timeout(3, Duration::from_secs(10))?, 3);
    /// k.pause(); // nothing is answered while paused
    /// while k.state() != gyre::KernelState::Paused {
    ///     std::thread::yield_now();
    /// }
    /// let e = k.call_timeout(4, Duration::from_millis(10)).unwrap_err();
    /// assert!(matches!(e, gyre::Error::Timeout { op: "call", .. }));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn call_timeout(&self, req: Req, timeout: Duration) -> Result<Resp> {
        let start = Instant::now();
        let idx = self.publish_blocking(Kind::Call, &req, Some((start, timeout)))?;
        let inner = self.inner();
        let ch = &inner.ch;
        let left = timeout.saturating_sub(start.elapsed());
        ch.wait_blocking(idx, &inner.polling.host_idle, Some(left), |v| decode(ch, v))
    }

    /// Sends a batch of requests with one claim and one publication; their replies are
    /// delivered by `recv`, in order. All or nothing.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when fewer than `reqs.len()` slots are free (or the batch is
    /// larger than the ring), [`TrySendError::Closed`] when the kernel refuses requests;
    /// either way nothing was sent.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.try_send_batch(&[1, 2, 3]).unwrap();
    /// let mut out = Vec::new();
    /// while out.len() < 3 {
    ///     k.try_recv_batch(&mut out, 3)?;
    /// }
    /// assert_eq!(out.into_iter().collect::<Result<Vec<_>, _>>()?, [1, 2, 3]);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn try_send_batch<'a>(
        &self,
        reqs: &'a [Req],
    ) -> core::result::Result<(), TrySendError<&'a [Req]>> {
        let inner = self.inner();
        let size = core::mem::size_of::<Req>();
        let r = if size == 0 {
            let empty: Vec<&[u8]> = vec![&[]; reqs.len()];
            inner
                .ch
                .try_publish_batch(Kind::Send, inner.polling.msg_type, &empty)
        } else {
            inner.ch.try_publish_uniform(
                Kind::Send,
                inner.polling.msg_type,
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
    /// appended (0: nothing ready). Never waits.
    ///
    /// # Errors
    ///
    /// As [`Kernel::try_recv`]: the kernel stopped and every accepted `send` was
    /// delivered.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// let mut out = Vec::new();
    /// assert_eq!(k.try_recv_batch(&mut out, 8)?, 0);
    /// k.send_blocking(7)?;
    /// while k.try_recv_batch(&mut out, 8)? == 0 {}
    /// assert_eq!(out, [Ok(7)]);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn try_recv_batch(&self, out: &mut Vec<Result<Resp>>, max: usize) -> Result<usize> {
        let ch = &self.inner().ch;
        ch.try_recv_batch(max, out, |v| decode(ch, v))
    }

    /// Takes the next `send` reply if one is ready, without waiting; `Ok(None)`: nothing
    /// ready yet.
    ///
    /// # Errors
    ///
    /// The reply is an error (as for [`Kernel::call_blocking`]: the `send` it answers
    /// failed); or the end: the kernel stopped and every accepted `send` was delivered
    /// ([`Error::KernelTerminated`], [`Error::KernelFaulted`] or [`Error::Unresponsive`],
    /// saying how it stopped).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.try_recv()?, None);
    /// k.send_blocking(4)?;
    /// k.shutdown_blocking()?; // drains: the reply is in the ring
    /// assert_eq!(k.try_recv()?, Some(4));
    /// assert!(matches!(k.try_recv(), Err(gyre::Error::KernelTerminated { code: 0, .. })));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn try_recv(&self) -> Result<Option<Resp>> {
        let ch = &self.inner().ch;
        ch.try_recv(|v| decode(ch, v))
    }

    /// Waits on this thread for the next `send` reply.
    ///
    /// Blocks this thread until a reply (or the end) arrives: from async code, use
    /// [`Kernel::recv`] (see "Blocking methods in async code" on [`Kernel`]).
    ///
    /// # Errors
    ///
    /// As [`Kernel::try_recv`].
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::from_fn("neg", |x: i32| -x))?;
    /// k.send_blocking(5)?;
    /// assert_eq!(k.recv_blocking()?, -5);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn recv_blocking(&self) -> Result<Resp> {
        self.recv_deadline(None)
    }

    /// [`Kernel::recv_blocking`] giving up after `timeout`; nothing is taken then.
    ///
    /// Blocks this thread for up to `timeout`: from async code, use
    /// `tokio::time::timeout(d, k.recv())` (see "Blocking methods in async code" on
    /// [`Kernel`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], and those of [`Kernel::try_recv`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// let e = k.recv_timeout(Duration::from_millis(1)).unwrap_err();
    /// assert!(matches!(e, gyre::Error::Timeout { op: "recv", .. }));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Resp> {
        self.recv_deadline(Some(timeout))
    }

    fn recv_deadline(&self, timeout: Option<Duration>) -> Result<Resp> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut idler = self.inner().polling.host_idle.idler();
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

    /// [`Kernel::shutdown`] on this thread: stops accepting requests, lets the kernel
    /// answer everything already accepted, joins it and removes its telemetry export
    /// file. Idempotent.
    ///
    /// Blocks this thread until the kernel stopped: from async code, use
    /// [`Kernel::shutdown`] (see "Blocking methods in async code" on [`Kernel`]).
    ///
    /// # Errors
    ///
    /// [`Error::KernelFaulted`] when the kernel had faulted; [`Error::Unresponsive`] when
    /// the watchdog declared it unresponsive (it is detached, not joined).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.send_blocking(1)?;
    /// k.shutdown_blocking()?; // the accepted send is answered first
    /// assert_eq!(k.recv_blocking()?, 1);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn shutdown_blocking(&self) -> Result<()> {
        self.shutdown_deadline(None)
    }

    /// [`Kernel::shutdown_blocking`] giving up after `timeout` — for a kernel whose
    /// handler never returns. The kernel was still told to terminate; a later shutdown
    /// (or dropping the last handle) finishes the job.
    ///
    /// Blocks this thread for up to `timeout`: from async code, use
    /// `tokio::time::timeout(d, k.shutdown())` (see "Blocking methods in async code" on
    /// [`Kernel`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`], and those of [`Kernel::shutdown_blocking`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.shutdown_timeout(Duration::from_secs(10))?;
    /// # Ok::<(), gyre::Error>(())
    /// ```
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
        let inner = self.inner();
        let ch = &inner.ch;
        ch.close();
        let mut idler = inner.polling.host_idle.idler();
        while !ch.all_published() {
            if let Some(e) = timed_out() {
                return Err(e);
            }
            idler.idle(false);
        }
        inner.life.command(command::TERMINATE);
        idler.reset();
        while !inner.is_final() {
            if let Some(e) = timed_out() {
                return Err(e);
            }
            idler.idle(false);
        }
        inner.complete_shutdown()
    }
}
