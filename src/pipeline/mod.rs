//! Pipelines: a chain of ring kernels where the replies of stage k are the requests of
//! stage k + 1, moved by the kernels themselves, with no host hop in between
//! (`docs/pipelines.md`).
//!
//! The host sees the chain as one [`Kernel`] taking the first stage's requests and
//! answering the last stage's replies: [`Pipeline`] dereferences to it. Underneath,
//! stage k's kernel writes each reply straight into stage k + 1's request ring (same
//! geometry, same index: request `i` of every stage is reply `i` of the one before) and
//! the last stage writes into the first stage's reply ring, which is where the host's
//! channel reads replies. The algorithm is the ring protocol itself with the reply side
//! pointed elsewhere (`gyre_k0_link` in `cuda/include/gyre/link.h`, part of `ring.h`); the host's view of
//! the chain as one kernel is [`gyre_core::chain::ChainView`].

mod feed;
mod graph;
mod launch;
mod placement;
mod reload;

use core::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::chain::ChainView;
use gyre_core::telemetry::read_consistent;
use gyre_core::{Error, Result};

use crate::kernel::Kernel;
use crate::runtime::{Checked, Target};
use crate::spec::{ExportTarget, KernelSpec};
use crate::state::KernelState;
use graph::{Out, Plan, Step};

pub use graph::{Branch, Route};

/// The most stages a pipeline has.
pub const MAX_STAGES: usize = 64;

/// One stage, without its message types (kept for the size checks).
#[derive(Clone)]
struct Stage {
    spec: KernelSpec<(), ()>,
    req: (&'static str, usize),
    resp: (&'static str, usize),
    /// The request and reply types, which a reload of the stage must keep.
    ids: (core::any::TypeId, core::any::TypeId),
    /// The index of the runtime it runs on, among those given to
    /// [`Runtime::launch_across`] (0 under [`Runtime::launch`]).
    ///
    /// [`Runtime::launch`]: crate::Runtime::launch
    /// [`Runtime::launch_across`]: crate::Runtime::launch_across
    place: usize,
}

impl Stage {
    fn of<A: 'static, B: 'static>(spec: KernelSpec<A, B>) -> Self {
        Self {
            spec: spec.retyped(),
            req: (core::any::type_name::<A>(), core::mem::size_of::<A>()),
            resp: (core::any::type_name::<B>(), core::mem::size_of::<B>()),
            ids: (core::any::TypeId::of::<A>(), core::any::TypeId::of::<B>()),
            place: 0,
        }
    }
}

/// Describes a pipeline: a name and its stages, each a [`KernelSpec`] whose request type
/// is the previous stage's reply type (checked by the compiler).
///
/// What each stage's spec contributes: its handler, its rings' batch size, idle strategy,
/// telemetry and message type. Every stage's capacity and slot size must be the first
/// stage's. The first stage's spec also gives the host-side settings of the whole
/// pipeline (host idle, async spin, timestamps, telemetry export, the watchdog, which
/// watches every stage, and the host
/// timeout of every stage: the host writes every stage's heartbeat at the pace the first
/// stage's timeout sets).
/// A stage's [`KernelSpec::restart`] policy restarts that stage alone, in place, after
/// its handler faults, and a stage in epochs ([`KernelSpec::epoch`], or on a device with
/// a kernel time limit) is relaunched in place at the end of each, while the others run
/// on (`docs/pipelines.md`, "Relaunching a stage"). Watched sources and loans are
/// refused (see [`Runtime::launch`]). [`on`](Self::on) places a stage on
/// another runtime (another device) for [`Runtime::launch_across`](crate::Runtime::launch_across).
///
/// [`Runtime::launch`]: crate::Runtime::launch
///
/// # Examples
///
/// ```
/// use gyre::{KernelSpec, pipeline::PipelineSpec};
/// let spec = PipelineSpec::new("double-then-add", KernelSpec::from_fn("double", |x: u32| x * 2))
///     .then(KernelSpec::from_fn("add", |x: u32| u64::from(x) + 1));
/// assert_eq!(spec.stages(), 2);
/// ```
pub struct PipelineSpec<Req, Resp> {
    name: String,
    /// Every stage, numbered in the order added (a fan-out's branches one after another).
    stages: Vec<Stage>,
    steps: Vec<Step>,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Clone for PipelineSpec<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            stages: self.stages.clone(),
            steps: self.steps.clone(),
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> core::fmt::Debug for PipelineSpec<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PipelineSpec")
            .field("name", &self.name)
            .field(
                "stages",
                &self.stages.iter().map(|s| &s.spec.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<Req: Pod, Resp: Pod> PipelineSpec<Req, Resp> {
    /// A pipeline named `name` whose first stage is `first`.
    ///
    /// # Examples
    ///
    /// ```
    /// let spec = gyre::pipeline::PipelineSpec::new("p", gyre::KernelSpec::<u64, u64>::echo());
    /// assert_eq!((spec.name(), spec.stages()), ("p", 1));
    /// ```
    pub fn new(name: impl Into<String>, first: KernelSpec<Req, Resp>) -> Self {
        Self {
            name: name.into(),
            stages: vec![Stage::of(first)],
            steps: vec![Step::One(0)],
            _types: PhantomData,
        }
    }

    /// Adds `next` as the last stage: it takes this pipeline's replies as its requests.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{KernelSpec, pipeline::PipelineSpec};
    /// let spec = PipelineSpec::new("p", KernelSpec::from_fn("len", |x: [u8; 8]| x.len() as u32))
    ///     .then(KernelSpec::from_fn("square", |n: u32| n * n));
    /// assert_eq!(spec.stages(), 2);
    /// ```
    ///
    /// After a [`fan_out`](Self::fan_out), `next` is the *join*: it takes the replies of
    /// every branch, in request order.
    pub fn then<Next: Pod>(self, next: KernelSpec<Resp, Next>) -> PipelineSpec<Req, Next> {
        let (mut stages, mut steps) = (self.stages, self.steps);
        steps.push(Step::One(stages.len()));
        stages.push(Stage::of(next));
        PipelineSpec {
            name: self.name,
            stages,
            steps,
            _types: PhantomData,
        }
    }

    /// Adds a fan-out: each reply of the last stage goes to one of `branches` (2 to 8,
    /// picked by `route`), whose replies meet in the next stage added with
    /// [`then`](Self::then) (a join), or at the host if none is. Either way they arrive
    /// in request order: the branches write by request index, not by arrival. Shapes
    /// the launch refuses ([`Error::Pipeline`]): fewer than 2 or more than 8 branches, a
    /// fan-out right after a fan-out (join first), a [`Route::Key`] outside the reply.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{KernelSpec, pipeline::{Branch, PipelineSpec, Route}};
    /// let spec = PipelineSpec::new("p", KernelSpec::<u64, u64>::echo())
    ///     .fan_out(
    ///         Route::key_at(0),
    ///         [
    ///             Branch::new(KernelSpec::from_fn("a", |x: u64| x + 1)),
    ///             Branch::new(KernelSpec::from_fn("b", |x: u64| x + 1)),
    ///         ],
    ///     )
    ///     .then(KernelSpec::from_fn("join", |x: u64| x * 2));
    /// assert_eq!(spec.stages(), 4);
    /// ```
    pub fn fan_out<Out: Pod>(
        self,
        route: Route,
        branches: impl IntoIterator<Item = Branch<Resp, Out>>,
    ) -> PipelineSpec<Req, Out> {
        let (mut stages, mut steps) = (self.stages, self.steps);
        let mut ids = Vec::new();
        for b in branches {
            ids.push((stages.len()..stages.len() + b.stages.len()).collect());
            stages.extend(b.stages);
        }
        steps.push(Step::FanOut {
            route,
            branches: ids,
        });
        PipelineSpec {
            name: self.name,
            stages,
            steps,
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> PipelineSpec<Req, Resp> {
    /// Runs the stage added last on `runtimes[runtime]` of [`Runtime::launch_across`](crate::Runtime::launch_across)
    /// (every stage runs on runtime 0 until placed; after a
    /// [`fan_out`](PipelineSpec::fan_out), the stage added last is the last branch's
    /// last stage). A placement beyond the runtimes given is refused at launch
    /// ([`Error::Pipeline`]), as is a fan-out whose stages do not all run on one backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::{Pipeline, PipelineSpec}};
    /// let a = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let b = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let spec = PipelineSpec::new("p", KernelSpec::from_fn("double", |x: u32| x * 2))
    ///     .then(KernelSpec::from_fn("inc", |x: u32| x + 1))
    ///     .on(1);
    /// let p = Runtime::launch_across(&[a, b], spec)?;
    /// assert_eq!(p.call_blocking(20)?, 41);
    /// p.shutdown_blocking()?;
    /// # Ok::<(), gyre::Error>(())
    /// ```
    #[must_use]
    pub fn on(mut self, runtime: usize) -> Self {
        if let Some(last) = self.stages.last_mut() {
            last.place = runtime;
        }
        self
    }

    /// The pipeline's name (the name of the kernel the host sees; stage k's kernel is
    /// `<name>.<k>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stages so far.
    pub fn stages(&self) -> usize {
        self.stages.len()
    }

    /// Stage k's kernel name.
    fn stage_name(&self, k: usize) -> String {
        format!("{}.{k}", self.name)
    }

    fn refuse(&self, stage: usize, reason: String) -> Error {
        Error::Pipeline {
            pipeline: self.name.clone(),
            stage,
            reason,
        }
    }

    /// What [`Runtime::launch`] checks of each stage, plus what a chain needs: one ring
    /// geometry (batch sizes may differ), no stage relaunched but by a restart.
    ///
    /// `targets[k]` is where stage k runs.
    fn check(&self, targets: &[&Target]) -> Result<(Vec<Checked>, Plan)> {
        if self.stages.len() > MAX_STAGES {
            return Err(self.refuse(
                self.stages.len() - 1,
                format!("a pipeline has at most {MAX_STAGES} stages"),
            ));
        }
        let plan = Plan::of(&self.steps, self.stages.len())
            .map_err(|(stage, why)| self.refuse(stage, why))?;
        for (k, o) in plan.outs.iter().enumerate() {
            if let Out::Route {
                route: Route::Key { offset },
                ..
            } = o
            {
                self.check_key(k, *offset)?;
            }
        }
        let mut out: Vec<Checked> = Vec::with_capacity(self.stages.len());
        let watchdog = self.stages[0].spec.watchdog;
        for ((k, st), target) in self.stages.iter().enumerate().zip(targets) {
            let c = Checked::of(&st.spec, target)?;
            if k > 0 && watchdog.is_some() {
                // The first stage's watchdog watches every stage: its bound must fit each
                // stage's idle park too.
                let mut watched = st.spec.clone();
                watched.watchdog = watchdog;
                watched.validate_watchdog()?;
            }
            let payload = c.geometry.payload();
            for (role, (type_name, size)) in [("request", st.req), ("reply", st.resp)] {
                if size > payload {
                    return Err(Error::TypeTooLarge {
                        role,
                        type_name,
                        size,
                        payload,
                    });
                }
            }
            if let Some(first) = out.first() {
                let (a, b) = (&first.geometry, &c.geometry);
                if a.capacity() != b.capacity() || a.slot_size() != b.slot_size() {
                    return Err(self.refuse(
                        k,
                        format!(
                            "its rings are {} slots of {} bytes, the first stage's {} slots \
                             of {} bytes: every stage of a chain has the same capacity and \
                             slot size (stage k writes into stage k + 1's ring)",
                            b.capacity(),
                            b.slot_size(),
                            a.capacity(),
                            a.slot_size()
                        ),
                    ));
                }
            }
            let once = |what: &str| {
                self.refuse(
                    k,
                    format!(
                        "it {what}: a chain's stage is reloaded by Pipeline::reload_stage, \
                         not by a watcher"
                    ),
                )
            };
            if st.spec.watch.is_some() {
                return Err(once("watches a handler source"));
            }
            if st.spec.loan.is_some() {
                return Err(
                    self.refuse(k, "it is a loan kernel: pipelines carry slots only".into())
                );
            }
            out.push(c);
        }
        Ok((out, plan))
    }

    /// A keyed fan-out after stage `k` reads its key (a `u64` at byte `offset`) inside
    /// `k`'s reply type.
    fn check_key(&self, k: usize, offset: usize) -> Result<()> {
        let (type_name, size) = self.stages[k].resp;
        if offset.checked_add(8).is_some_and(|end| end <= size) {
            return Ok(());
        }
        Err(self.refuse(
            k,
            format!(
                "its fan-out routes by the u64 at byte {offset} of its reply, a {type_name} \
                 of {size} bytes"
            ),
        ))
    }

    /// Stage k's telemetry export file, if the first stage's spec exports: next to the
    /// others, named after the stage.
    fn export_for(&self, k: usize) -> Result<Option<Arc<gyre_core::shm::ExportWriter>>> {
        let head = &self.stages[0].spec;
        let mut s = head.clone();
        s.name = self.stage_name(k);
        s.export = match &head.export {
            None => return Ok(None),
            Some(ExportTarget::Path(p)) if k > 0 => {
                let mut file = p.clone().into_os_string();
                file.push(format!(".{k}"));
                Some(ExportTarget::Path(file.into()))
            }
            Some(t) => Some(t.clone()),
        };
        s.export_writer()
    }
}

/// A running pipeline: to the host, one [`Kernel`] taking the first stage's requests and
/// answering the last stage's replies (it dereferences to it), plus a view of each stage.
///
/// Semantics (`docs/pipelines.md`): replies come back in request order, one per request;
/// at most `capacity` requests are in the whole chain at once (back-pressure reaches the
/// callers; nothing is dropped); an error reply of one stage (a handler's status,
/// `BAD_LENGTH`) is passed on by the stages after it without running their handlers and
/// reaches its caller; a stage whose handler panics under a restart policy is relaunched
/// in place, so the request that faulted is the only one that fails
/// ([`Pipeline::stage_restarts`]); a stage that stops for good (a handler panic with no
/// restart left, a lost device) makes the whole chain stop, the requests past it are
/// answered as usual, and every request the chain did not answer fails with that
/// stage's error. [`Kernel::shutdown`]
/// drains stage by stage. [`Kernel::pause`] pauses the first stage (intake); the others
/// finish what they hold. [`Pipeline::reload_stage`] replaces one stage's handler while
/// the others run on; [`Kernel::reload`] of a chain of several stages is refused
/// ([`Error::Pipeline`]).
/// [`Kernel::telemetry`] is the first stage's line; [`Pipeline::stage_telemetry`] has
/// every stage's.
///
/// # Examples
///
/// ```
/// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let p = rt.launch(
///     PipelineSpec::new("p", KernelSpec::from_fn("double", |x: u32| x * 2))
///         .then(KernelSpec::from_fn("widen", |x: u32| u64::from(x) << 32)),
/// )?;
/// assert_eq!(p.call_blocking(3)?, 6u64 << 32);
/// assert_eq!(p.stages(), 2);
/// p.shutdown_blocking()?;
/// # Ok::<(), gyre::Error>(())
/// ```
pub struct Pipeline<Req, Resp> {
    kernel: Kernel<Req, Resp>,
    names: Arc<[String]>,
    chain: Arc<ChainView>,
    /// What a reload of each stage checks ([`reload`]), head first.
    meta: Arc<[reload::StageMeta]>,
}

impl<Req, Resp> Clone for Pipeline<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            kernel: self.kernel.clone(),
            names: self.names.clone(),
            chain: self.chain.clone(),
            meta: self.meta.clone(),
        }
    }
}

impl<Req, Resp> core::fmt::Debug for Pipeline<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pipeline")
            .field("kernel", &self.kernel)
            .field("stages", &self.names)
            .finish()
    }
}

impl<Req, Resp> core::ops::Deref for Pipeline<Req, Resp> {
    type Target = Kernel<Req, Resp>;
    fn deref(&self) -> &Kernel<Req, Resp> {
        &self.kernel
    }
}

impl<Req, Resp> Pipeline<Req, Resp> {
    /// The kernel the host sees (the pipeline dereferences to it too).
    pub fn kernel(&self) -> &Kernel<Req, Resp> {
        &self.kernel
    }

    /// The kernel the host sees, without the stage view.
    pub fn into_kernel(self) -> Kernel<Req, Resp> {
        self.kernel
    }

    /// Stages in the chain.
    pub fn stages(&self) -> usize {
        self.names.len()
    }

    /// Each stage's spec name, first stage first (its kernel is `<pipeline>.<k>`).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo().named("a"))
    ///         .then(KernelSpec::<u32, u32>::echo().named("b")),
    /// )?;
    /// assert_eq!(p.stage_names(), ["a", "b"]);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_names(&self) -> &[String] {
        &self.names
    }

    /// Each stage's state, first stage first (the chain's own is [`Kernel::state`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, KernelState, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo()).then(KernelSpec::echo()),
    /// )?;
    /// p.shutdown_blocking()?;
    /// assert!(p.stage_states().iter().all(|s| *s == KernelState::Terminated { code: 0 }));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_states(&self) -> Vec<KernelState> {
        self.chain
            .stage_states()
            .into_iter()
            .map(|(s, c)| KernelState::from_raw(s, c))
            .collect()
    }

    /// How often each stage was restarted after its handler faulted, first stage first
    /// (a stage with a [`KernelSpec::restart`] policy is relaunched in place while the
    /// others run on: `docs/pipelines.md`, "Relaunching a stage").
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, Error, KernelSpec, RestartPolicy, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo()).then(
    ///         KernelSpec::from_fn("picky", |x: u32| {
    ///             assert!(x != 13, "unlucky");
    ///             x + 1
    ///         })
    ///         .restart(RestartPolicy::new(3)),
    ///     ),
    /// )?;
    /// let e = p.call_blocking(13).unwrap_err(); // this request alone fails
    /// assert!(matches!(e, Error::Handler { status: gyre::codes::HANDLER_PANIC, .. }));
    /// assert_eq!(p.call_blocking(1)?, 2); // served by the restarted stage
    /// assert_eq!(p.stage_restarts(), [0, 1]);
    /// # p.shutdown_blocking()?;
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_restarts(&self) -> Vec<u64> {
        self.stage_relaunches()
            .into_iter()
            .map(|r| r.restarts)
            .collect()
    }

    /// Each stage's relaunches, first stage first: restarts after a fault, and
    /// handovers at the end of an epoch (a stage with [`KernelSpec::epoch`], or on a
    /// device with a kernel time limit, is relaunched in place at the end of each; no
    /// request is lost or repeated). `generation` counts the stage's launches.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo())
    ///         .then(KernelSpec::<u32, u32>::echo().epoch(Duration::from_millis(1))),
    /// )?;
    /// assert_eq!(p.call_blocking(7)?, 7); // answered by whichever launch took it
    /// let r = p.stage_relaunches(); // stage 1 hands over every millisecond
    /// assert_eq!((r[0].epochs, r[1].restarts), (0, 0));
    /// # p.shutdown_blocking()?;
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_relaunches(&self) -> Vec<crate::telemetry::Relaunches> {
        let life = &self.kernel.inner().life;
        life.stages
            .iter()
            .map(|s| life.stage_relaunches(s))
            .collect()
    }

    /// Each stage's ring counters, first stage first: requests published into it and
    /// consumed by it, and (the first stage's) replies published to the host and
    /// consumed. What `gyre top` shows as queues, for a look at a graph that is stuck.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo()).then(KernelSpec::echo()),
    /// )?;
    /// p.call_blocking(1)?;
    /// p.shutdown_blocking()?;
    /// let r = p.stage_rings();
    /// assert_eq!((r[0].k2h_head, r[1].h2k_head, r[1].h2k_tail), (1, 1, 1));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_rings(&self) -> Vec<gyre_core::chain::RingCounters> {
        // The first stage's request head is the host's, and lazy: moved first.
        self.kernel.inner().ch.sync_head();
        self.chain.counters()
    }

    /// Where each stage's request ring lives, first stage first: `Some(address)` (the
    /// address its kernels use) for an inner ring placed apart from the stage's region,
    /// in memory only the kernels touch (device memory on CUDA; a host allocation of its
    /// own on the CPU backend), `None` for a ring inline in the region. The first stage's
    /// ring, which the host writes, is always inline; so is every ring on OpenCL, and
    /// every ring a stage of another backend instance writes, unless that one can write
    /// the reader's memory (another runtime of the same GPU; another GPU with peer access
    /// and native peer-to-peer atomics: `docs/pipelines.md`, "How the rings are placed",
    /// "Peer-to-peer").
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo()).then(KernelSpec::echo()),
    /// )?;
    /// let at = p.stage_request_rings();
    /// assert!(at[0].is_none() && at[1].is_some());
    /// assert_eq!(p.call_blocking(7)?, 7);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_request_rings(&self) -> Vec<Option<u64>> {
        self.chain
            .regions()
            .map(|r| r.request_ring_apart())
            .collect()
    }

    /// Each stage's telemetry line, first stage first: its messages, errors it produced
    /// (not the ones it passed on), polls and handler time.
    ///
    /// # Errors
    ///
    /// [`Error::TornTelemetry`] when a line could not be read consistently.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo()).then(KernelSpec::echo()),
    /// )?;
    /// p.call_blocking(1)?;
    /// p.shutdown_blocking()?; // the last telemetry of each stage is written
    /// assert!(p.stage_telemetry()?.iter().all(|t| t.messages_out == 1));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_telemetry(&self) -> Result<Vec<gyre_abi::TelemetrySnapshot>> {
        self.chain
            .regions()
            .map(|r| {
                read_consistent(r.telemetry(), 1024).map_err(|e| Error::TornTelemetry {
                    attempts: e.attempts,
                })
            })
            .collect()
    }
}
