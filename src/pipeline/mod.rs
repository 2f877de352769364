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

mod graph;
mod instance;

use core::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytemuck::Pod;
use gyre_abi::command;
use gyre_core::chain::{ChainView, LinkTables, LinkTarget, StageLink};
use gyre_core::doorbell::Doorbell;
use gyre_core::shm::ExportPublisher;
use gyre_core::telemetry::read_consistent;
use gyre_core::{Error, KernelInstance, LaunchSpec, Result, SharedRegion};

use crate::kernel::{Kernel, Started};
use crate::lifecycle::Place;
use crate::runtime::{Checked, Runtime};
use crate::spec::{ExportTarget, KernelSpec};
use crate::state::KernelState;
use graph::{route_mode, Out, Plan, Step};
use instance::{ChainInstance, StageFeed};

pub use graph::{Branch, Route};

/// The most stages a pipeline has.
pub const MAX_PIPELINE_STAGES: usize = 64;

/// How long a launch that failed half way waits for the stages it already started.
const ABANDON_WAIT: Duration = Duration::from_secs(5);

/// One stage, without its message types (kept for the size checks).
#[derive(Clone)]
struct Stage {
    spec: KernelSpec<(), ()>,
    req: (&'static str, usize),
    resp: (&'static str, usize),
}

impl Stage {
    fn of<A, B>(spec: KernelSpec<A, B>) -> Self {
        Self {
            spec: spec.retyped(),
            req: (core::any::type_name::<A>(), core::mem::size_of::<A>()),
            resp: (core::any::type_name::<B>(), core::mem::size_of::<B>()),
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
/// Stages are launched once: epochs, restart policies, watched sources and loans are
/// refused (see [`Runtime::launch_pipeline`]).
///
/// # Examples
///
/// ```
/// use gyre::{KernelSpec, PipelineSpec};
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
    /// let spec = gyre::PipelineSpec::new("p", gyre::KernelSpec::<u64, u64>::echo());
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
    /// use gyre::{KernelSpec, PipelineSpec};
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
    /// use gyre::{Branch, KernelSpec, PipelineSpec, Route};
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
    /// geometry (batch sizes may differ), stages launched once.
    fn check(&self, target: &crate::runtime::Target) -> Result<(Vec<Checked>, Plan)> {
        if self.stages.len() > MAX_PIPELINE_STAGES {
            return Err(self.refuse(
                self.stages.len() - 1,
                format!("a pipeline has at most {MAX_PIPELINE_STAGES} stages"),
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
        for (k, st) in self.stages.iter().enumerate() {
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
                        "it {what}: a pipeline's stages are launched once (no relaunch of \
                         one stage in a running chain yet)"
                    ),
                )
            };
            if c.epoch_us != 0 {
                return Err(once(&format!(
                    "runs in epochs of {} us (on a device with a kernel time limit, set \
                     KernelSpec::epoch(Duration::ZERO) and accept the limit)",
                    c.epoch_us
                )));
            }
            if st.spec.restart.is_some() {
                return Err(once("has a restart policy"));
            }
            if st.spec.watch.is_some() {
                return Err(once("watches a handler source"));
            }
            if st.spec.loan.is_some() || st.spec.loan_arena.is_some() {
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
/// reaches its caller; a stage that stops for good (a handler panic, a lost device)
/// makes the whole chain stop, the requests past it are answered as usual, and every
/// request the chain did not answer fails with that stage's error. [`Kernel::shutdown`]
/// drains stage by stage. [`Kernel::pause`] pauses the first stage (intake); the others
/// finish what they hold. [`Kernel::reload`] is refused ([`Error::Pipeline`]).
/// [`Kernel::telemetry`] is the first stage's line; [`Pipeline::stage_telemetry`] has
/// every stage's.
///
/// # Examples
///
/// ```
/// use gyre::{Backend, KernelSpec, PipelineSpec, Runtime};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let p = rt.launch_pipeline(
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
}

impl<Req, Resp> Clone for Pipeline<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            kernel: self.kernel.clone(),
            names: self.names.clone(),
            chain: self.chain.clone(),
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
    /// use gyre::{Backend, KernelSpec, PipelineSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch_pipeline(
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
    /// use gyre::{Backend, KernelSpec, KernelState, PipelineSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch_pipeline(
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

    /// Each stage's ring counters, first stage first: requests published into it and
    /// consumed by it, and (the first stage's) replies published to the host and
    /// consumed. What `gyre top` shows as queues, for a look at a graph that is stuck.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, PipelineSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch_pipeline(
    ///     PipelineSpec::new("p", KernelSpec::<u32, u32>::echo()).then(KernelSpec::echo()),
    /// )?;
    /// p.call_blocking(1)?;
    /// p.shutdown_blocking()?;
    /// let r = p.stage_rings();
    /// assert_eq!((r[0].k2h_head, r[1].h2k_head, r[1].h2k_tail), (1, 1, 1));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn stage_rings(&self) -> Vec<gyre_core::chain::RingCounters> {
        self.chain.counters()
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
    /// use gyre::{Backend, KernelSpec, PipelineSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let p = rt.launch_pipeline(
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

impl Runtime {
    /// Launches the stages of `spec` as one chain and returns the host's handle on it.
    ///
    /// Every stage runs on one backend: the runtime's if it runs them all, else (under
    /// [`Backend::Auto`](crate::Backend::Auto)) the CPU backend. The rings between stages
    /// are shared by the two kernels that use them, so the backend's transfer strategy
    /// must be `unified` (zero copy); on the CPU backend they are host memory, on OpenCL
    /// fine-grained SVM, on CUDA mapped pinned memory. All stages run at once: a backend
    /// that cannot run them all (OpenCL: one per compute unit; CUDA: resident blocks)
    /// refuses the launch and the stages already started are stopped.
    ///
    /// # Errors
    ///
    /// Nothing is left running on any error:
    /// [`Error::Pipeline`] (more than [`MAX_PIPELINE_STAGES`] stages; a stage whose capacity or
    /// slot size differs from the first's; a stage with epochs, a restart policy, a
    /// watched source or loans); [`Error::StrategyUnsupported`] under a copy strategy;
    /// those of [`Runtime::launch`] for any stage ([`Error::HandlerUnsupported`],
    /// [`Error::TypeTooLarge`], [`Error::InvalidArgument`], [`Error::Launch`] when a
    /// backend cannot start one more kernel, ...).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, PipelineSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let e = rt
    ///     .launch_pipeline(
    ///         PipelineSpec::new("p", KernelSpec::<u32, u32>::echo())
    ///             .then(KernelSpec::<u32, u32>::echo().capacity(64)),
    ///     )
    ///     .unwrap_err();
    /// assert!(matches!(e, gyre::Error::Pipeline { stage: 1, .. }));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn launch_pipeline<Req: Pod, Resp: Pod>(
        &self,
        spec: PipelineSpec<Req, Resp>,
    ) -> Result<Pipeline<Req, Resp>> {
        let specs: Vec<KernelSpec<(), ()>> = spec.stages.iter().map(|s| s.spec.clone()).collect();
        let target = self.target_for_all(&specs)?;
        let strategy = target.plan.strategy;
        if strategy.copies() {
            return Err(Error::StrategyUnsupported {
                backend: target.imp.name(),
                strategy: strategy.name(),
                reason: "a pipeline's stages write each other's rings directly: it needs the \
                         unified (zero-copy) strategy"
                    .into(),
            });
        }
        let (checked, plan) = spec.check(target)?;
        let n = checked.len();
        let imp = &target.imp;
        let _span = tracing::info_span!(
            "gyre_launch_pipeline",
            pipeline = %spec.name,
            stages = n,
            backend = imp.name()
        )
        .entered();
        // Every stage times the host out as the first does: the host writes all their
        // heartbeats at the pace the first stage's host timeout sets.
        let host_timeout_ms = checked[0].host_timeout_ms;
        let regions = checked
            .iter()
            .map(|c| {
                let mem = imp.alloc_region(SharedRegion::bytes_for(&c.geometry))?;
                Ok(Arc::new(SharedRegion::new(
                    mem,
                    c.geometry,
                    host_timeout_ms,
                )?))
            })
            .collect::<Result<Vec<_>>>()?;
        let doorbells: Vec<Arc<Doorbell>> = (0..n).map(|_| Arc::new(Doorbell::new())).collect();
        let links = links_of(&spec, &plan, imp.as_ref(), &regions, &doorbells)?;
        let mut launches = Vec::with_capacity(n);
        for ((k, st), link) in spec.stages.iter().enumerate().zip(links) {
            let mut l: LaunchSpec = st.spec.launch_spec();
            l.name = spec.stage_name(k);
            l.doorbell = Some(doorbells[k].clone());
            l.link = link;
            launches.push(l);
        }
        launches[0].export = spec.export_for(0)?;
        let mut exports = Vec::with_capacity(n.saturating_sub(1));
        for (k, region) in regions.iter().enumerate().skip(1) {
            if let Some(w) = spec.export_for(k)? {
                let p = ExportPublisher::start(
                    region.clone(),
                    w,
                    spec.stages[0].spec.export_interval,
                    Arc::new(StageFeed),
                )
                .map_err(|e| Error::Launch {
                    backend: "telemetry export",
                    kernel: spec.stage_name(k),
                    source: gyre_core::Cause::new(e),
                })?;
                exports.push(p);
            }
        }
        // The last stage first: each stage's next is running when it starts.
        let mut running: Vec<Arc<dyn KernelInstance>> = Vec::with_capacity(n);
        for k in (0..n).rev() {
            match imp.launch(regions[k].clone(), &launches[k]) {
                Ok(i) => running.push(Arc::from(i)),
                Err(e) => {
                    abandon(&regions[k + 1..], &doorbells[k + 1..], &running);
                    return Err(e);
                }
            }
        }
        running.reverse();
        tracing::info!(
            capacity = checked[0].geometry.capacity(),
            slot_size = checked[0].geometry.slot_size(),
            "pipeline launched"
        );
        let chain = Arc::new(ChainView::graph(
            regions
                .iter()
                .cloned()
                .zip(doorbells.iter().cloned().map(Some))
                .collect(),
            plan.edges(),
        ));
        let mut head: KernelSpec<Req, Resp> = spec.stages[0].spec.clone().retyped();
        head.name = spec.name.clone();
        let kernel = Kernel::start(
            Started {
                region: regions[0].clone(),
                place: Place::Shared(regions[0].clone()),
                imp: imp.clone(),
                instance: Box::new(ChainInstance { stages: running }),
                transfer: None,
                launched: launches[0].clone(),
                epoch_us: 0,
                backend: target.backend,
                chain: Some(chain.clone()),
            },
            &head,
        )?;
        kernel.inner().keep_exports(exports);
        Ok(Pipeline {
            kernel,
            names: spec.stages.iter().map(|s| s.spec.name.clone()).collect(),
            chain,
        })
    }
}

/// Each stage's link, from the plan: regions, or entries of link tables allocated in the
/// backend's region memory and filled with the kernels' addresses of the regions.
fn links_of<Req, Resp>(
    spec: &PipelineSpec<Req, Resp>,
    plan: &Plan,
    imp: &dyn gyre_core::Backend,
    regions: &[Arc<SharedRegion>],
    bells: &[Arc<Doorbell>],
) -> Result<Vec<Option<StageLink>>> {
    let tables = if plan.entries() == 0 {
        None
    } else {
        let mem = imp.alloc_region(LinkTables::bytes_for(plan.entries()))?;
        Some(Arc::new(LinkTables::new(mem, plan.entries())?))
    };
    let addr = |k: usize| imp.device_address(regions[k].base());
    if let Some(t) = &tables {
        for out in &plan.outs {
            let Out::Route {
                entry,
                route,
                branches,
            } = out
            else {
                continue;
            };
            let targets = branches
                .iter()
                .map(|&b| Ok((addr(b)?, spec.stages[b].spec.msg_type)))
                .collect::<Result<Vec<_>>>()?;
            t.set_route(*entry, route_mode(*route), &targets)?;
        }
        for &(entry, to, producers) in &plan.joins {
            t.set_join(entry, addr(to.unwrap_or(0))?, producers)?;
        }
    }
    let table = |entry: usize, targets: Vec<usize>| -> Result<LinkTarget> {
        let tables = tables.clone().ok_or(Error::InvalidArgument {
            name: "pipeline link tables",
            value: "none".into(),
            reason: "allocated for every fan-out and join",
        })?;
        Ok(LinkTarget::Table {
            tables,
            entry,
            regions: targets.into_iter().map(|k| regions[k].clone()).collect(),
        })
    };
    let msg_type = |k: usize| spec.stages[k].spec.msg_type;
    plan.outs
        .iter()
        .enumerate()
        .map(|(k, out)| {
            let (next, next_msg_type) = match out {
                Out::Own => return Ok(None),
                Out::Direct(m) => (LinkTarget::Region(regions[*m].clone()), msg_type(*m)),
                Out::Head => (LinkTarget::Region(regions[0].clone()), msg_type(0)),
                Out::Route {
                    entry, branches, ..
                } => (table(*entry, branches.clone())?, 0),
                Out::ById { entry, to } => (
                    table(*entry, vec![to.unwrap_or(0)])?,
                    msg_type(to.unwrap_or(0)),
                ),
            };
            Ok(Some(StageLink {
                next,
                flags: plan.flags(k),
                next_msg_type,
                next_doorbells: plan
                    .writes(k)
                    .into_iter()
                    .map(|m| bells[m].clone())
                    .collect(),
            }))
        })
        .collect()
}

/// Stops the stages a failed launch already started (they hold no request): Terminate,
/// then a join once each finished (a stage that does not finish in time is detached).
fn abandon(
    regions: &[Arc<SharedRegion>],
    bells: &[Arc<Doorbell>],
    running: &[Arc<dyn KernelInstance>],
) {
    for (r, b) in regions.iter().zip(bells) {
        r.control()
            .command
            .store(command::TERMINATE, core::sync::atomic::Ordering::Release);
        b.ring();
    }
    let deadline = Instant::now() + ABANDON_WAIT;
    for k in running {
        while !k.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        if k.is_finished() {
            let _ = k.join();
        } else {
            tracing::warn!(
                "a stage of a pipeline that failed to launch did not stop; detaching it"
            );
        }
    }
}
