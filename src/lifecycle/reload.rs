//! [`Kernel::reload`], [`Kernel::reload_blocking`] and [`ReloadFuture`]: a new handler for
//! a running kernel, without losing a request.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use bytemuck::Pod;
use gyre_core::{Error, LaunchSpec, Result};

use super::Relaunches;
use crate::kernel::Kernel;
use crate::spec::KernelSpec;

impl<Req: Pod, Resp: Pod> Kernel<Req, Resp> {
    /// Replaces the handler of this running kernel with the handler of `spec`, on this
    /// thread: builds it (NVRTC, OpenCL build; the CPU backend has nothing to build),
    /// then has the running kernel stop at its next batch boundary and launches the new
    /// handler on the same rings, continuing with the first request the old one did not
    /// take (the protocol's handover, `docs/protocol.md`).
    ///
    /// Every request is answered by exactly one of the two handlers, in order: the old
    /// one answers a prefix, the new one the rest, and once a reply from the new handler
    /// is seen no later request is answered by the old one. Requests that arrive
    /// meanwhile wait in the ring; callers see added latency only (see
    /// `docs/benchmarks.md`). A paused kernel stays paused; a shutdown that starts
    /// meanwhile is carried out by the new launch.
    ///
    /// What `spec` contributes: its handler (closure, portable handler, device sources,
    /// built-in), its idle strategy and telemetry setting. Everything else (name,
    /// telemetry export, watchdog, host settings, epoch, restart policy) stays as
    /// launched. Its rings and message type must be the running kernel's.
    ///
    /// # Errors
    ///
    /// Nothing was stopped, and the old handler keeps serving, on:
    /// [`Error::ReloadMismatch`] (another capacity, slot size, batch size or message
    /// type; for a loan kernel, another pool shape, `loan pool`, or a spec that is not a
    /// loan kernel's, `loans`, and the reverse); [`Error::HandlerUnsupported`] (the
    /// kernel's backend cannot run `spec`'s handler); [`Error::InvalidArgument`] (an
    /// invalid idle strategy); [`Error::Launch`] when the new handler does not build
    /// (its [`source`](std::error::Error::source) chain holds the compiler's log);
    /// [`Error::Closed`] when a shutdown began.
    ///
    /// After the stop: the error the kernel's waiters get if it ended meanwhile by itself
    /// ([`Error::KernelFaulted`], [`Error::KernelTerminated`], [`Error::KernelLost`],
    /// [`Error::Unresponsive`]); [`Error::Launch`] if the new handler built but did not
    /// launch (the old handler was relaunched and serves again; if that failed too, the
    /// kernel is lost and its waiters fail with [`Error::KernelLost`]); [`Error::Timeout`]
    /// when the kernel did not reach a batch boundary within 30 s (a handler that does
    /// not return): the old handler serves on when it comes back (relaunched, if it
    /// stopped for the reload just as the reload gave up: counted only in the
    /// generation, or as an epoch for a kernel with epochs or a restart policy, whose
    /// supervisor relaunches it).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::from_fn("scale", |x: u32| x * 2))?;
    /// assert_eq!(k.call_blocking(5)?, 10);
    /// k.reload_blocking(KernelSpec::from_fn("scale", |x: u32| x * 3))?;
    /// assert_eq!(k.call_blocking(5)?, 15);
    /// // Other rings: refused, the running handler keeps serving.
    /// let e = k.reload_blocking(KernelSpec::from_fn("scale", |x: u32| x).capacity(64));
    /// assert!(matches!(e, Err(gyre::Error::ReloadMismatch { field: "capacity", .. })));
    /// assert_eq!(k.call_blocking(5)?, 15);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn reload_blocking(&self, spec: KernelSpec<Req, Resp>) -> Result<()> {
        let next = self.reload_spec(&spec, false)?;
        let life = &self.inner().life;
        life.prepare(0, &next)?;
        life.reload(0, next)
    }

    /// [`Kernel::reload_blocking`] as a future: the build and the handover run on a
    /// thread of their own (a build can take seconds), and the future resolves with its
    /// result. The checks that need no build (rings, message type, backend) fail at
    /// once.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop the reload: once started, the build and the
    /// handover run to completion (a half-done handover would leave the kernel stopped);
    /// only the result is lost. [`Kernel::relaunches`] tells whether it happened.
    ///
    /// # Errors
    ///
    /// As [`Kernel::reload_blocking`]; [`Error::Launch`] if no thread could be started
    /// (nothing was stopped).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::from_fn("scale", |x: u32| x * 2))?;
    /// k.reload(KernelSpec::from_fn("scale", |x: u32| x * 3)).await?;
    /// assert_eq!(k.call(5).await?, 15);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn reload(&self, spec: KernelSpec<Req, Resp>) -> ReloadFuture {
        let next = match self.reload_spec(&spec, false) {
            Ok(n) => n,
            Err(e) => return ReloadFuture::ready(Err(e)),
        };
        // The thread holds the kernel like a handle: it is not ended under the reload.
        let me = self.clone();
        ReloadFuture::spawn(self.name(), move || {
            let life = &me.inner().life;
            life.prepare(0, &next).and_then(|()| life.reload(0, next))
        })
    }

    /// [`Kernel::reload_blocking`] of the handler source file's change
    /// ([`KernelSpec::watch`]): `spec` is the launch's own, with the file's source.
    pub(crate) fn reload_watched(&self, spec: KernelSpec<Req, Resp>) -> Result<()> {
        let next = self.reload_spec(&spec, true)?;
        let life = &self.inner().life;
        life.prepare(0, &next)?;
        life.reload(0, next)
    }

    /// Checks `spec` against the running kernel; its launch spec, with the kernel's
    /// export file and doorbell. `watched`: `spec` is the launch's own (the file
    /// watcher's), whose handler a loan kernel's launch put over its pool already.
    pub(crate) fn reload_spec(
        &self,
        spec: &KernelSpec<Req, Resp>,
        watched: bool,
    ) -> Result<LaunchSpec> {
        let inner = self.inner();
        // A chain's stages are reloaded one at a time, each with its own types and
        // checks, by `Pipeline::reload_stage`: refused before anything is built. A chain
        // of one stage is this kernel.
        if inner.ch.chain().is_some_and(|c| c.len() > 1) {
            return Err(Error::Pipeline {
                pipeline: self.name().to_owned(),
                stage: 0,
                reason: "a chain's stages are reloaded one at a time with \
                         Pipeline::reload_stage"
                    .into(),
            });
        }
        let mismatch = |field, running: String, reload: String| Error::ReloadMismatch {
            kernel: self.name().to_owned(),
            field,
            running,
            reload,
        };
        // A loan kernel's successor serves the same pool (its blocks are in flight), with
        // the new handler over it; a loan spec reloads only a loan kernel, and the reverse.
        let loans = match (inner.loans.get(), &spec.loan) {
            (Some(arena), Some(setup)) => {
                let have = (arena.pool_bytes(), arena.min_block());
                let want = (setup.config().pool_bytes, setup.config().min_block);
                if have != want {
                    return Err(mismatch(
                        "loan pool",
                        format!("{} bytes in blocks of {} and up", have.0, have.1),
                        format!("{} bytes in blocks of {} and up", want.0, want.1),
                    ));
                }
                Some((arena.clone(), crate::loan::adapter(arena.clone(), setup)))
            }
            // The launch's own spec (the file watcher reloads `KernelSpec::watch`'s changes
            // over it): the loan kernel's launch moved its setup into this pool and the
            // handler over it, which the spec carries already.
            (Some(arena), None) if watched => Some((arena.clone(), spec.handler.clone())),
            (Some(_), None) => {
                return Err(mismatch(
                    "loans",
                    "a loan kernel".into(),
                    "no loan pool".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(mismatch(
                    "loans",
                    "no loan pool".into(),
                    "a loan kernel".into(),
                ))
            }
            (None, None) => None,
        };
        let g = spec.geometry()?;
        let have = *inner.ch.region().geometry();
        for (field, running, reload) in [
            ("capacity", have.capacity(), g.capacity()),
            ("slot_size", have.slot_size(), g.slot_size()),
            ("batch_size", have.batch(), g.batch()),
            ("message type", inner.polling.msg_type, spec.msg_type),
        ] {
            if running != reload {
                return Err(mismatch(field, running.to_string(), reload.to_string()));
            }
        }
        spec.runs_on(inner.backend.device())?;
        spec.idle.validate()?;
        // The watchdog stays as launched: the new idle park must fit its bound.
        let mut watched = spec.clone();
        watched.watchdog = inner.polling.watchdog;
        watched.validate_watchdog()?;
        let running = inner.life.launched();
        let mut next = spec.launch_spec();
        if let Some((arena, handler)) = loans {
            next.loans = Some(arena);
            next.handler = handler;
            if inner.backend == crate::Backend::Cpu {
                // Its Rust closure runs, as at the launch.
                next.cuda_source = None;
                next.opencl_source = None;
            }
        }
        next.name = running.name;
        next.export = running.export;
        next.doorbell = running.doorbell;
        next.reply_bell = running.reply_bell;
        Ok(next)
    }
}

impl<Req, Resp> Kernel<Req, Resp> {
    /// How often this kernel was relaunched on its rings: reloads, epochs' handovers,
    /// restarts after a fault, and the resulting generation.
    ///
    /// # Errors
    ///
    /// None: it reads counters.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.relaunches().generation, 1);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn relaunches(&self) -> Relaunches {
        self.inner().life.relaunches()
    }
}

/// Future of [`Kernel::reload`]: resolves once the new handler serves, or with why not.
///
/// # Cancel safety
///
/// See [`Kernel::reload`]: dropping it does not stop the reload.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ReloadFuture {
    rx: Option<tokio::sync::oneshot::Receiver<Result<()>>>,
    ready: Option<Result<()>>,
}

impl ReloadFuture {
    pub(crate) fn ready(r: Result<()>) -> Self {
        Self {
            rx: None,
            ready: Some(r),
        }
    }

    /// Runs `reload` (a build, then a handover) on a thread named after `kernel`; the
    /// future resolves with its result.
    pub(crate) fn spawn(
        kernel: &str,
        reload: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Self {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("gyre-reload-{kernel}"))
            .spawn(move || {
                let _ = tx.send(reload());
            });
        match spawned {
            Ok(_) => ReloadFuture {
                rx: Some(rx),
                ready: None,
            },
            Err(e) => ReloadFuture::ready(Err(Error::Launch {
                backend: "reload",
                kernel: kernel.to_owned(),
                source: gyre_core::Cause::context("spawning the reload thread", e),
            })),
        }
    }
}

impl Future for ReloadFuture {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(r) = this.ready.take() {
            return Poll::Ready(r);
        }
        let Some(rx) = this.rx.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        match Pin::new(rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                this.rx = None;
                Poll::Ready(r.unwrap_or_else(|_| {
                    Err(Error::Launch {
                        backend: "reload",
                        kernel: String::new(),
                        source: gyre_core::Cause::msg("the reload thread ended without a result"),
                    })
                }))
            }
        }
    }
}
