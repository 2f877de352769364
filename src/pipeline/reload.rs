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
//! The handover is the one every relaunch runs (`crate::lifecycle`): a chain's stages
//! are its head kernel's, and a lone kernel is a chain of one stage. This file checks a
//! reload's spec against the stage and hands it to that engine.

use core::any::TypeId;

use bytemuck::Pod;
use gyre_core::{Error, LaunchSpec, Result};

use super::Pipeline;
use crate::lifecycle::ReloadFuture;
use crate::spec::KernelSpec;

/// What a reload of one stage checks and needs, fixed at launch.
pub(crate) struct StageMeta {
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
    /// stopped for good; [`Error::Timeout`] if the stage did not reach a batch boundary
    /// within 30 s (it gets `RUN` back and serves on); [`Error::Launch`] if the new handler built but did not launch
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
                let life = &self.kernel.inner().life;
                life.prepare(stage, &next)?;
                life.reload(stage, next)
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
                    let life = &me.kernel.inner().life;
                    life.prepare(stage, &next)?;
                    life.reload(stage, next)
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
        if spec.loan.is_some() {
            return Err(refuse(
                "the reload is a loan kernel: pipelines carry slots only",
            ));
        }
        let Ok(running) = self.kernel.inner().life.stages.get(stage) else {
            return Err(refuse("the stage is not in the running chain"));
        };
        let region = running.region.clone();
        let running = running.launched();
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
