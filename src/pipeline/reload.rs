//! Reloading one stage of a running chain: a new handler for stage k while the other
//! stages run on (`docs/pipelines.md`, "Reloading a stage").
//!
//! It is a lone kernel's reload (`docs/protocol.md` §8, R1–R6) on one stage's region: the
//! stage is told `HANDOVER`, stops at a batch boundary with every request below its
//! `h2k_tail` answered (passed on to the stage after it), and a successor running the new
//! handler is launched on the same region, continuing from `h2k_tail`. The stages before
//! it keep filling its request ring meanwhile (back-pressure holds them when it is full)
//! and those after it serve what they hold, so nothing is lost or answered twice and the
//! order holds: the old handler answers a prefix of the stage's requests, the new one the
//! rest.
//!
//! Who else writes the stage's command: for the first stage, the host's lifecycle
//! (pause, resume, shutdown), whose commands are held back until the successor's is
//! written ([`HeadHold`](crate::lifecycle::HeadHold)), as for a lone kernel's reload; for
//! a later stage, only the stage feeding it (`TERMINATE`, when that one stops for good:
//! L3) and the host's chain view (the same, for a stage fed by one that stopped). So the
//! reload moves a later stage's command from `RUN` to `HANDOVER` and back by
//! compare-and-swap, and leaves a `TERMINATE` written meanwhile for the successor, which
//! drains and stops.
//!
//! One relaunch of a stage at a time: the reload holds the stage's handover lock, which
//! the stage supervisor (epochs, restarts: [`super::restart`]) tries before it looks at
//! the stage, and the successors of the stage's later epochs and restarts run the new
//! launch spec.

use core::any::TypeId;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;
use gyre_abi::{command, state, ControlBlock};
use gyre_core::{Error, LaunchSpec, Result};

use super::Pipeline;
use crate::lifecycle::{HeadHold, RelaunchKind, ReloadFuture};
use crate::spec::KernelSpec;

/// What a reload of one stage checks and needs, fixed at launch.
pub(crate) struct StageMeta {
    /// The backend the stage runs on.
    pub(crate) imp: Arc<dyn gyre_core::Backend>,
    /// Which one.
    pub(crate) backend: crate::Backend,
    /// Its request and reply types.
    pub(crate) req: (TypeId, &'static str),
    pub(crate) resp: (TypeId, &'static str),
    /// The message type its feeding stage writes into its requests.
    pub(crate) msg_type: u32,
    /// A CPU stage fed by a device stage: its idle strategy parks briefly
    /// (`launch::device_fed`).
    pub(crate) fed_by_device: bool,
}

impl<Req: Pod, Resp: Pod> Pipeline<Req, Resp> {
    /// Replaces the handler of stage `stage` of this running chain with the handler of
    /// `spec`, on this thread, while the other stages run on: builds it (NVRTC, OpenCL
    /// build; the CPU backend has nothing to build), has the stage stop at its next
    /// batch boundary, and launches the new handler on the stage's rings, continuing
    /// with the first request the old one did not take.
    ///
    /// What [`Kernel::reload_blocking`](crate::Kernel::reload_blocking) promises of one
    /// kernel holds for the stage: every request the stage takes is answered by exactly
    /// one of the two handlers, in order (the old one answers a prefix, the new one the
    /// rest); requests wait meanwhile (the stages before it keep filling its ring until
    /// back-pressure holds them), callers see added latency only, and nothing is lost.
    /// A paused first stage stays paused; a shutdown that starts meanwhile is carried
    /// out by the new launch. A later epoch's or restart's successor of the stage runs
    /// the new handler.
    ///
    /// What `spec` contributes: its handler and its idle strategy and telemetry setting.
    /// The stage's name, link, restart policy and epoch stay as launched. Its request
    /// and reply types, rings and message type must be the stage's. A chain of one stage
    /// is its head kernel: this is [`Kernel::reload_blocking`](crate::Kernel::reload_blocking).
    ///
    /// # Errors
    ///
    /// Nothing was stopped, and the old handler keeps serving, on:
    /// [`Error::InvalidArgument`] for a stage beyond [`Pipeline::stages`] (or an invalid
    /// idle strategy); [`Error::ReloadMismatch`] (another `request type`, `reply type`,
    /// capacity, slot size, batch size or message type); [`Error::Pipeline`] for a spec
    /// a chain's stage cannot take (a watched source, a loan kernel), or a stage told to
    /// stop; [`Error::HandlerUnsupported`] when the stage's backend cannot run `spec`'s
    /// handler; [`Error::Launch`] when the new handler does not build.
    ///
    /// After the stop: the chain's error if it ended meanwhile ([`Error::KernelFaulted`],
    /// [`Error::KernelTerminated`], ...), or [`Error::Pipeline`] if the stage alone
    /// stopped for good; [`Error::Launch`] if the new handler built but did not launch
    /// (the old one was relaunched and serves again; if that failed too, the stage is
    /// lost, and the chain stops as after a fault).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::from_fn("double", |x: u32| x * 2))
    ///         .then(KernelSpec::from_fn("inc", |x: u32| u64::from(x) + 1)),
    /// )?;
    /// assert_eq!(p.call_blocking(5)?, 11);
    /// p.reload_stage_blocking(1, KernelSpec::from_fn("inc", |x: u32| u64::from(x) + 100))?;
    /// assert_eq!(p.call_blocking(5)?, 110);
    /// assert_eq!(p.stage_relaunches()[1].reloads, 1);
    /// // Another reply type: refused, the running handler keeps serving.
    /// let e = p.reload_stage_blocking(1, KernelSpec::from_fn("inc", |x: u32| x));
    /// assert!(matches!(e, Err(gyre::Error::ReloadMismatch { field: "reply type", .. })));
    /// assert_eq!(p.call_blocking(5)?, 110);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn reload_stage_blocking<A: Pod, B: Pod>(
        &self,
        stage: usize,
        spec: KernelSpec<A, B>,
    ) -> Result<()> {
        match self.reload_stage_spec(stage, &spec)? {
            Next::Lone(spec) => self.kernel.reload_blocking(spec),
            Next::Stage(next) => {
                self.prepare(stage, &next)?;
                self.hand_over(stage, next)
            }
        }
    }

    /// [`Pipeline::reload_stage_blocking`] as a future: the build and the handover run
    /// on a thread of their own (a build can take seconds), and the future resolves
    /// with its result. The checks that need no build fail at once.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop the reload: once started, the build and the
    /// handover run to completion (a half-done handover would leave the stage stopped);
    /// only the result is lost. [`Pipeline::stage_relaunches`] tells whether it
    /// happened.
    ///
    /// # Errors
    ///
    /// As [`Pipeline::reload_stage_blocking`]; [`Error::Launch`] if no thread could be
    /// started (nothing was stopped).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::from_fn("double", |x: u32| x * 2))
    ///         .then(KernelSpec::from_fn("inc", |x: u32| x + 1)),
    /// )?;
    /// p.reload_stage(0, KernelSpec::from_fn("triple", |x: u32| x * 3)).await?;
    /// assert_eq!(p.call(5).await?, 16);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn reload_stage<A: Pod, B: Pod>(
        &self,
        stage: usize,
        spec: KernelSpec<A, B>,
    ) -> ReloadFuture {
        match self.reload_stage_spec(stage, &spec) {
            Err(e) => ReloadFuture::ready(Err(e)),
            Ok(Next::Lone(spec)) => self.kernel.reload(spec),
            Ok(Next::Stage(next)) => {
                // The thread holds the chain like a handle: it is not ended under the
                // reload.
                let me = self.clone();
                ReloadFuture::spawn(&format!("{}.{stage}", self.kernel.name()), move || {
                    me.prepare(stage, &next)?;
                    me.hand_over(stage, next)
                })
            }
        }
    }

    /// Checks `spec` against stage `stage`; its launch spec, with the stage's name,
    /// link, doorbell and export.
    fn reload_stage_spec<A: Pod, B: Pod>(
        &self,
        stage: usize,
        spec: &KernelSpec<A, B>,
    ) -> Result<Next<Req, Resp>> {
        let meta = self.meta.get(stage).ok_or_else(|| no_stage(stage))?;
        let kernel = format!("{}.{stage}", self.kernel.name());
        let mismatch = |field, running: &str, reload: &str| Error::ReloadMismatch {
            kernel: kernel.clone(),
            field,
            running: running.to_owned(),
            reload: reload.to_owned(),
        };
        let (a, b) = (core::any::type_name::<A>(), core::any::type_name::<B>());
        if TypeId::of::<A>() != meta.req.0 {
            return Err(mismatch("request type", meta.req.1, a));
        }
        if TypeId::of::<B>() != meta.resp.0 {
            return Err(mismatch("reply type", meta.resp.1, b));
        }
        if self.meta.len() == 1 {
            // Its types are the chain's (checked above): the head kernel reloads it.
            return Ok(Next::Lone(spec.clone().retyped()));
        }
        let refuse = |reason: &str| Error::Pipeline {
            pipeline: self.kernel.name().to_owned(),
            stage,
            reason: reason.to_owned(),
        };
        if spec.watch.is_some() {
            return Err(refuse(
                "the reload watches a handler source: a chain's stage is reloaded by \
                 Pipeline::reload_stage only",
            ));
        }
        if spec.loan.is_some() || spec.loan_arena.is_some() {
            return Err(refuse(
                "the reload is a loan kernel: pipelines carry slots only",
            ));
        }
        let (Some(region), Some(running)) =
            (self.running.region(stage), self.running.launched(stage))
        else {
            return Err(refuse("the stage is not in the running chain"));
        };
        let g = spec.geometry()?;
        let have = *region.geometry();
        for (field, running, reload) in [
            ("capacity", have.capacity(), g.capacity()),
            ("slot_size", have.slot_size(), g.slot_size()),
            ("batch_size", have.batch(), g.batch()),
            ("message type", meta.msg_type, spec.msg_type),
        ] {
            if running != reload {
                return Err(mismatch(field, &running.to_string(), &reload.to_string()));
            }
        }
        spec.runs_on(meta.backend.device())?;
        spec.idle.validate()?;
        let mut next = spec.launch_spec();
        if meta.fed_by_device {
            next.idle = super::launch::device_fed(next.idle);
        }
        // The first stage's watchdog watches every stage: the stage's idle park, as it
        // will run, must fit its bound (as at the launch).
        let mut watched = spec.clone();
        watched.watchdog = self.kernel.inner().polling.watchdog;
        watched.idle = next.idle;
        watched.validate_watchdog()?;
        next.name = running.name;
        next.link = running.link;
        next.doorbell = running.doorbell;
        next.export = running.export;
        Ok(Next::Stage(next))
    }

    /// Builds what `next` needs on stage `stage`'s backend, before anything stops.
    fn prepare(&self, stage: usize, next: &LaunchSpec) -> Result<()> {
        match self.meta.get(stage) {
            Some(m) => m.imp.prepare(next),
            None => Err(no_stage(stage)),
        }
    }

    /// R1–R6 on stage `k`, with its handover lock held.
    fn hand_over(&self, k: usize, next: LaunchSpec) -> Result<()> {
        let (Some(meta), Some(region)) = (self.meta.get(k), self.running.region(k).cloned()) else {
            return Err(no_stage(k));
        };
        let name = format!("{}.{k}", self.kernel.name());
        let _span = tracing::info_span!("gyre_reload_stage", stage = %name).entered();
        let _one = self.running.hold(k);
        let ch = &self.kernel.inner().ch;
        // A stage that handed over counts as running on (not finished) until its
        // successor runs, from before it is told to: shutdowns and the chain's end wait
        // for it.
        let watched = self.running.watched(k);
        self.running.watch(k, true);
        let r = self
            .hold_commands(k, region.control())
            .and_then(|mut cmds| self.relaunch(k, meta, &mut cmds, next, &name));
        self.running.watch(k, watched);
        // Waiters on the chain's state look again (a successor runs, or the stage is
        // gone).
        ch.state_waiters().wake_all(ch);
        r
    }

    /// R1: `HANDOVER` into stage `k`'s command `cb`, with the host's commands held back
    /// (the first stage), or moved from `RUN` (a later stage: one told to terminate is
    /// not reloaded).
    fn hold_commands<'a>(&'a self, k: usize, cb: &'a ControlBlock) -> Result<Commands<'a>> {
        if k == 0 {
            return Ok(Commands::Head(self.kernel.inner().life.hold_for_stage()?));
        }
        let ch = &self.kernel.inner().ch;
        if ch.is_closed() {
            return Err(ch.closed_error());
        }
        match cb
            .command
            .compare_exchange(command::RUN, command::HANDOVER, AcqRel, Acquire)
        {
            Ok(_) => {
                // A CPU stage may be parked: wake it to read the command now.
                if let Some(bell) = self.running.launched(k).and_then(|l| l.doorbell) {
                    bell.ring();
                }
                Ok(Commands::Stage(cb))
            }
            Err(c) => Err(Error::Pipeline {
                pipeline: self.kernel.name().to_owned(),
                stage: k,
                reason: format!(
                    "the stage was told to stop (command {c}): there is nothing to reload"
                ),
            }),
        }
    }

    /// R2–R6 of [`Pipeline::hand_over`], with the command held.
    fn relaunch(
        &self,
        k: usize,
        meta: &StageMeta,
        cmds: &mut Commands<'_>,
        next: LaunchSpec,
        name: &str,
    ) -> Result<()> {
        let (Some(old), Some(region), Some(previous)) = (
            self.running.get(k),
            self.running.region(k),
            self.running.launched(k),
        ) else {
            return Err(no_stage(k));
        };
        let cb = region.control();
        // R2: wait until it handed over (by itself too: an epoch's end, a fault under a
        // restart policy) and its execution ended.
        let mut pause = Duration::from_micros(1);
        loop {
            if let Some(e) = self.kernel.inner().ch.check_stopped() {
                return Err(e);
            }
            let st = cb.state.load(Acquire);
            if state::is_final(st) {
                return Err(self.refuse_stopped(k, st, cb));
            }
            if st == state::HANDED_OVER && old.is_finished() {
                break;
            }
            if pause < Duration::from_micros(16) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(pause);
            }
            pause = (pause * 2).min(Duration::from_micros(200));
        }
        // R3: join it (its resources go; the region stays).
        if let Err(e) = old.join() {
            tracing::warn!(stage = %name, error = %e, "joining the stage handed over");
        }
        if self.chain.feeds_a_final_stage(k) {
            // A stage it writes to stopped for good meanwhile: a successor would stop at
            // once (L4). The stage stops as L4 would have stopped it.
            cb.error_code.store(gyre_abi::error::STAGE_STOPPED, Release);
            cb.state.store(state::TERMINATED, Release);
            let _ = self.chain.state();
            return Err(Error::Pipeline {
                pipeline: self.kernel.name().to_owned(),
                stage: k,
                reason: "a stage it feeds stopped for good during the reload".into(),
            });
        }
        // R4: the successor's command and generation.
        cmds.hand_to_successor();
        // R6, counted before the launch: the successor may answer before it returns.
        let counters = self.counters.get(k);
        let counted = counters.map(|c| c.count(RelaunchKind::Reload));
        match self.running.launch_successor(k, &*meta.imp, &next) {
            Ok(()) => {
                tracing::info!(
                    generation = cb.generation.load(Acquire),
                    "pipeline stage reloaded"
                );
                Ok(())
            }
            Err(e) => {
                if let (Some(c), Some(counted)) = (counters, counted) {
                    c.uncount(counted);
                }
                tracing::warn!(stage = %name, error = %e, "the reloaded handler did not launch: relaunching the previous one");
                match self.running.launch_successor(k, &*meta.imp, &previous) {
                    Ok(()) => Err(e),
                    Err(e2) => {
                        tracing::error!(stage = %name, error = %e2, "the stage's previous handler did not launch again: the stage is lost");
                        // No launch after all: the generation R4 counted goes back.
                        cb.generation.fetch_sub(1, AcqRel);
                        if cb.error_code.load(Acquire) == gyre_abi::error::NONE {
                            cb.error_code.store(gyre_abi::error::KERNEL_GONE, Release);
                        }
                        cb.state.store(state::FAULTED, Release);
                        let _ = self.chain.state();
                        Err(e2)
                    }
                }
            }
        }
    }

    /// The error of a reload whose stage stopped for good before it handed over.
    fn refuse_stopped(&self, k: usize, st: u32, cb: &ControlBlock) -> Error {
        let code = cb.error_code.load(Acquire);
        Error::Pipeline {
            pipeline: self.kernel.name().to_owned(),
            stage: k,
            reason: format!(
                "the stage stopped for good (state {st}, {}) before it handed over",
                gyre_abi::error::name(code)
            ),
        }
    }
}

/// A stage index beyond the chain (checked before any reload starts; kept typed).
fn no_stage(k: usize) -> Error {
    Error::InvalidArgument {
        name: "pipeline stage",
        value: k.to_string(),
        reason: "below Pipeline::stages()",
    }
}

/// What a reload launches: a stage's successor, or (a chain of one stage) the head
/// kernel's reload.
enum Next<Req, Resp> {
    Lone(KernelSpec<Req, Resp>),
    Stage(LaunchSpec),
}

/// Who holds a reloaded stage's command: the head kernel's lifecycle (the first stage),
/// or the reload itself (a later stage, moved from `RUN` to `HANDOVER`).
enum Commands<'a> {
    Head(HeadHold<'a>),
    Stage(&'a ControlBlock),
}

impl Commands<'_> {
    /// R4: the successor's command and the next generation into the stage's control
    /// block.
    fn hand_to_successor(&mut self) {
        match self {
            Commands::Head(h) => h.hand_to_successor(),
            Commands::Stage(cb) => {
                cb.generation.fetch_add(1, AcqRel);
                back_to_run(cb);
            }
        }
    }
}

/// `HANDOVER` back to `RUN`, unless a `TERMINATE` came in meanwhile: the successor (if
/// any) obeys it, draining what it was given, then stopping.
fn back_to_run(cb: &ControlBlock) {
    let _ = cb
        .command
        .compare_exchange(command::HANDOVER, command::RUN, AcqRel, Acquire);
}

impl Drop for Commands<'_> {
    /// A handover that ended early leaves no `HANDOVER` behind (the first stage's
    /// [`HeadHold`] does the same for the host's commands).
    fn drop(&mut self) {
        if let Commands::Stage(cb) = self {
            back_to_run(cb);
        }
    }
}
