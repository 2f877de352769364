//! One way to launch: [`Runtime::launch`] (one runtime) and [`Runtime::launch_across`]
//! (several) take whatever is launched — a kernel's [`KernelSpec`] of plain messages or
//! of loans, a [`PipelineSpec`], a [`PoolSpec`] — and return its handle, chosen by the
//! spec's type ([`Launch::Handle`]). The two impls for
//! `KernelSpec` do not overlap because [`Loan`] is this crate's and not `Pod`.

use bytemuck::Pod;
use gyre_core::{Error, Result};

use crate::loan::{Loan, LoanKernel};
use crate::pipeline::{Pipeline, PipelineSpec};
use crate::pool::{KernelPool, PoolSpec};
use crate::{Kernel, KernelSpec, Runtime};

/// What [`Runtime::launch`] and [`Runtime::launch_across`] launch, and the handle they
/// return. Implemented by
/// [`KernelSpec`] of `Pod` messages ([`Kernel`]), a loan kernel's `KernelSpec<Loan, Loan>`
/// ([`LoanKernel`]), [`PipelineSpec`] ([`Pipeline`]) and [`PoolSpec`] ([`KernelPool`]);
/// sealed.
///
/// # Examples
///
/// ```
/// use gyre::{KernelSpec, Launch};
/// fn handle_of<S: Launch>(_: &S) -> &'static str {
///     std::any::type_name::<S::Handle>()
/// }
/// assert!(handle_of(&KernelSpec::<u8, u8>::echo()).contains("Kernel<u8, u8>"));
/// ```
pub trait Launch: sealed::Sealed + Sized {
    /// The handle a launch returns.
    type Handle;

    /// Launches `self` over `runtimes` (one for [`Runtime::launch`]).
    #[doc(hidden)]
    fn launch_across(self, runtimes: &[Runtime]) -> Result<Self::Handle>;
}

mod sealed {
    pub trait Sealed {}
    impl<Req, Resp> Sealed for crate::KernelSpec<Req, Resp> {}
    impl<Req, Resp> Sealed for crate::pipeline::PipelineSpec<Req, Resp> {}
    impl<Req, Resp> Sealed for crate::pool::PoolSpec<Req, Resp> {}
}

/// The one runtime a lone kernel runs on.
fn one<'a>(runtimes: &'a [Runtime], kernel: &str) -> Result<&'a Runtime> {
    match runtimes {
        [rt] => Ok(rt),
        _ => Err(Error::InvalidArgument {
            name: "runtimes",
            value: format!("{} runtimes for kernel {kernel:?}", runtimes.len()),
            reason: "a kernel runs on one runtime: spread a pool or a pipeline over several",
        }),
    }
}

impl<Req: Pod, Resp: Pod> Launch for KernelSpec<Req, Resp> {
    type Handle = Kernel<Req, Resp>;
    fn launch_across(self, runtimes: &[Runtime]) -> Result<Kernel<Req, Resp>> {
        one(runtimes, &self.name)?.launch_kernel(self, None)
    }
}

impl Launch for KernelSpec<Loan, Loan> {
    type Handle = LoanKernel;
    fn launch_across(self, runtimes: &[Runtime]) -> Result<LoanKernel> {
        one(runtimes, &self.name)?.launch_loans(self)
    }
}

impl<Req: Pod, Resp: Pod> Launch for PipelineSpec<Req, Resp> {
    type Handle = Pipeline<Req, Resp>;
    fn launch_across(self, runtimes: &[Runtime]) -> Result<Pipeline<Req, Resp>> {
        Pipeline::launch_across(runtimes, self)
    }
}

impl<Req: Pod, Resp: Pod> Launch for PoolSpec<Req, Resp> {
    type Handle = KernelPool<Req, Resp>;
    fn launch_across(self, runtimes: &[Runtime]) -> Result<KernelPool<Req, Resp>> {
        KernelPool::launch_across(runtimes, self.spec, self.options)
    }
}

impl Runtime {
    /// Launches `spec` on this runtime and returns its handle, picked by the spec's type
    /// ([`Launch`]): a [`KernelSpec`] gives a [`Kernel`], a loan kernel's spec
    /// ([`KernelSpec::loans`]) a [`LoanKernel`] (its pool allocated first), a
    /// [`PipelineSpec`] a [`Pipeline`], a [`PoolSpec`] a [`KernelPool`]. This is
    /// [`Runtime::launch_across`] with this runtime alone.
    ///
    /// A kernel's launch validates its spec, allocates its shared region, launches the
    /// kernel and starts its completion driver.
    ///
    /// A [`PipelineSpec`] launches its stages as one chain. Every stage runs on one
    /// backend: the runtime's if it runs them all, else (under
    /// [`Backend::Auto`](crate::Backend::Auto)) the CPU backend. The rings between stages
    /// are shared by the two kernels that use them, so the backend's transfer strategy
    /// must be `unified` (zero copy); on the CPU backend they are host memory, on OpenCL
    /// fine-grained SVM, on CUDA mapped pinned memory. All stages run at once: a backend
    /// that cannot run them all (OpenCL: one per compute unit; CUDA: resident blocks)
    /// refuses the launch and the stages already started are stopped.
    ///
    /// A [`PoolSpec`] launches `options.members` kernels of `spec` as one pool, on the
    /// backend `spec` would run on alone. Members are named `<name>.0`, `<name>.1`, ...
    /// (and so are their telemetry export files: a service's directory gets one file per
    /// member, an explicit path gets `.0`, `.1`, ... appended).
    ///
    /// # Errors
    ///
    /// For a kernel: [`Error::HandlerUnsupported`] when the backend cannot run the spec's handler (see
    /// [`Runtime::backend_for`]). Each of the others names the bad value:
    /// [`Error::InvalidCapacity`], [`Error::InvalidSlotSize`],
    /// [`Error::InvalidBatchSize`], [`Error::TypeTooLarge`] (a message type larger than
    /// the payload), [`Error::InvalidArgument`] (an idle duration, `async_spin`,
    /// `host_timeout`, `watchdog`, `export_interval`), or what the backend could not do
    /// ([`Error::Launch`], [`Error::Alloc`], [`Error::StrategyUnsupported`]).
    ///
    /// For a loan kernel, also [`Error::InvalidArgument`] for a bad
    /// [`LoanConfig`](crate::loan::LoanConfig), [`Error::HandlerUnsupported`] on a device
    /// without a device handler, [`Error::Alloc`] for its pool.
    ///
    /// For a pipeline (nothing is left running on any error):
    /// [`Error::Pipeline`] (more than [`MAX_STAGES`](crate::pipeline::MAX_STAGES)
    /// stages; a stage whose capacity or slot size differs from the first's; a stage with
    /// a watched source or loans; a stage placed with [`PipelineSpec::on`] on a runtime
    /// other than 0); [`Error::StrategyUnsupported`] under a copy strategy;
    /// those of [`Runtime::launch`] for any stage ([`Error::HandlerUnsupported`],
    /// [`Error::TypeTooLarge`], [`Error::InvalidArgument`], [`Error::Launch`] when a
    /// backend cannot start one more kernel, ...).
    ///
    /// For a pool: [`Error::InvalidArgument`] for no runtime, 0 members or more than
    /// [`PoolOptions::MAX_MEMBERS`](crate::pool::PoolOptions::MAX_MEMBERS); those of [`Runtime::launch`] for any member (members
    /// launched before it are shut down). On OpenCL each member holds a compute unit:
    /// more members than the device has are [`Error::Launch`].
    ///
    /// A kernel whose last handle was dropped holds its device's room (an OpenCL compute
    /// unit, CUDA's co-residency) until its end, which runs on a thread of its own, is
    /// over. A launch the backend refuses while such ends are under way waits for them
    /// (at most 5 s) and is tried once more, so `drop(k)` then a launch works.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(64))?;
    /// assert_eq!(k.capacity(), 64);
    /// let e = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(100)).unwrap_err();
    /// assert!(matches!(e, gyre::Error::InvalidCapacity { capacity: 100, .. }));
    ///
    /// let p = rt.launch(gyre::pipeline::PipelineSpec::new("p", gyre::KernelSpec::from_fn("inc", |x: u64| x + 1))
    ///     .then(gyre::KernelSpec::from_fn("dbl", |x: u64| x * 2)))?;
    /// assert_eq!(p.call_blocking(3)?, 8);
    /// let pool = rt.launch(gyre::pool::PoolSpec::new(
    ///     gyre::KernelSpec::<u64, u64>::echo(),
    ///     gyre::pool::PoolOptions::new(2),
    /// ))?;
    /// assert_eq!(pool.members().len(), 2);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn launch<S: Launch>(&self, spec: S) -> Result<S::Handle> {
        spec.launch_across(std::slice::from_ref(self))
    }

    /// Launches `spec` over several runtimes (devices, or backends) and returns its
    /// handle, as [`Runtime::launch`] does over one. A pipeline or a pool spreads over
    /// them; a lone kernel runs on one runtime, so it takes exactly one.
    ///
    /// A pipeline's stage runs on the runtime [`PipelineSpec::on`] placed it on:
    /// `runtimes[i]` for a stage's last `.on(i)`, `runtimes[0]` for a stage never placed
    /// (one runtime per device: `Backend::Cuda { device }` for each GPU,
    /// `Backend::OpenCl { .. }` for each OpenCL device, or different backends).
    ///
    /// The stages placed on one runtime run on one of its backends (picked as
    /// [`Runtime::launch`] picks it). A stage's region (its rings and control block) must be memory that every kernel writing into it can address: it comes
    /// from the stage's own backend if that memory will do, else from the backend of a
    /// stage that writes into it (a GPU stage followed by a CPU stage: the CPU stage's
    /// region is the GPU backend's mapped pinned memory, which the host addresses too);
    /// when none will do, the launch is refused. Between two GPUs that is mapped pinned
    /// host memory, which both reach over their buses; the request ring itself goes into
    /// the reading GPU's memory where the writing GPU has peer access to it with native
    /// peer-to-peer atomics (NVLink), else it stays in that host memory
    /// (`docs/pipelines.md`, "Peer-to-peer"). A fan-out may cross devices too: the fanning
    /// stage writes each branch's ring with loads and stores. The branches feeding one
    /// join (or the head's replies, by id) advance its ring by compare-and-swap, so they
    /// run on one device, or on backends whose atomics are atomic with the host's
    /// ([`gyre_core::Backend::host_atomics`]: the CPU, OpenCL; CUDA only with
    /// `HOST_NATIVE_ATOMIC_SUPPORTED`).
    ///
    /// A pool's member slot `s` runs on `runtimes[s % runtimes.len()]`: one
    /// runtime per device (`Backend::OpenCl { platform, device }` for each OpenCL device)
    /// spreads one service over devices, and runtimes of different backends make a mixed
    /// pool (the spec must run on each: a built-in, or a Rust handler with device
    /// sources). A replacement runs where its slot does.
    ///
    /// # Errors
    ///
    /// Those of [`Runtime::launch`];
    /// [`Error::InvalidArgument`] for a kernel's spec with other than one runtime.
    /// For a pipeline, also [`Error::Pipeline`] for no runtime, a
    /// stage placed beyond `runtimes`, branches feeding one join from several devices
    /// whose atomics are not all the host's, or a stage whose region (or a link table)
    /// no backend of its users can place where all of them address it;
    /// [`Error::StrategyUnsupported`] names the stage and its runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, pipeline::PipelineSpec};
    /// use gyre::pool::{PoolOptions, PoolSpec};
    /// let gpu0 = Runtime::builder().backend(Backend::Cpu).build()?; // say Backend::Cuda { device: 0 }
    /// let gpu1 = Runtime::builder().backend(Backend::Cpu).build()?; // say Backend::Cuda { device: 1 }
    /// let both = [gpu0, gpu1];
    /// let p = Runtime::launch_across(
    ///     &both,
    ///     PipelineSpec::new("p", KernelSpec::<u64, u64>::echo())
    ///         .then(KernelSpec::<u64, u64>::echo())
    ///         .on(1),
    /// )?;
    /// assert_eq!(p.call_blocking(7)?, 7);
    /// p.shutdown_blocking()?;
    /// let pool = Runtime::launch_across(
    ///     &both,
    ///     PoolSpec::new(KernelSpec::<u32, u32>::echo(), PoolOptions::new(4)),
    /// )?;
    /// assert_eq!(pool.call_blocking(9)?, 9);
    /// assert!(Runtime::launch_across(&both, KernelSpec::<u32, u32>::echo()).is_err());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn launch_across<S: Launch>(runtimes: &[Runtime], spec: S) -> Result<S::Handle> {
        spec.launch_across(runtimes)
    }
}
