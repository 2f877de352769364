//! One way to launch: [`Runtime::launch`] takes whatever is launched — a kernel's
//! [`KernelSpec`] of plain messages or of loans, a [`PipelineSpec`], a [`PoolSpec`] — and
//! returns its handle, chosen by the spec's type ([`Launch::Handle`]). The two impls for
//! `KernelSpec` do not overlap because [`Loan`] is this crate's and not `Pod`.

use bytemuck::Pod;
#[cfg(doc)]
use gyre_core::Error;
use gyre_core::Result;

use crate::loan::{Loan, LoanKernel};
use crate::pipeline::{Pipeline, PipelineSpec};
use crate::pool::{KernelPool, PoolSpec};
use crate::{Kernel, KernelSpec, Runtime};

/// What [`Runtime::launch`] launches, and the handle it returns. Implemented by
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

    /// Launches `self` on `rt`.
    #[doc(hidden)]
    fn launch_on(self, rt: &Runtime) -> Result<Self::Handle>;
}

mod sealed {
    pub trait Sealed {}
    impl<Req, Resp> Sealed for crate::KernelSpec<Req, Resp> {}
    impl<Req, Resp> Sealed for crate::pipeline::PipelineSpec<Req, Resp> {}
    impl<Req, Resp> Sealed for crate::pool::PoolSpec<Req, Resp> {}
}

impl<Req: Pod, Resp: Pod> Launch for KernelSpec<Req, Resp> {
    type Handle = Kernel<Req, Resp>;
    fn launch_on(self, rt: &Runtime) -> Result<Kernel<Req, Resp>> {
        rt.launch_kernel(self)
    }
}

impl Launch for KernelSpec<Loan, Loan> {
    type Handle = LoanKernel;
    fn launch_on(self, rt: &Runtime) -> Result<LoanKernel> {
        rt.launch_loans(self)
    }
}

impl<Req: Pod, Resp: Pod> Launch for PipelineSpec<Req, Resp> {
    type Handle = Pipeline<Req, Resp>;
    fn launch_on(self, rt: &Runtime) -> Result<Pipeline<Req, Resp>> {
        Pipeline::launch_across(std::slice::from_ref(rt), self)
    }
}

impl<Req: Pod, Resp: Pod> Launch for PoolSpec<Req, Resp> {
    type Handle = KernelPool<Req, Resp>;
    fn launch_on(self, rt: &Runtime) -> Result<KernelPool<Req, Resp>> {
        KernelPool::launch_across(std::slice::from_ref(rt), self.spec, self.options)
    }
}

impl Runtime {
    /// Launches `spec` and returns its handle: a [`KernelSpec`] a [`Kernel`], a loan
    /// kernel's spec ([`KernelSpec::loans`]) a [`LoanKernel`] (its pool allocated first,
    /// see [`KernelSpec::loans`]), a [`PipelineSpec`] a [`Pipeline`] (as [`Pipeline::launch_across`] with this runtime
    /// alone), a [`PoolSpec`] a [`KernelPool`] (as [`KernelPool::launch_across`]). A
    /// kernel's launch validates its spec, allocates its shared region, launches the
    /// kernel and starts its completion driver.
    ///
    /// # Errors
    ///
    /// For a pipeline or a pool, those of [`Pipeline::launch_across`] and
    /// [`KernelPool::launch_across`]; nothing is left running on an error. For a loan
    /// kernel, also [`Error::InvalidArgument`] for a bad
    /// [`LoanConfig`](crate::loan::LoanConfig), [`Error::HandlerUnsupported`] on a device
    /// without a device handler, [`Error::Alloc`] for its pool. For a kernel:
    /// [`Error::HandlerUnsupported`] when the backend cannot run the spec's handler (see
    /// [`Runtime::backend_for`]). Each of the others names the bad value:
    /// [`Error::InvalidCapacity`], [`Error::InvalidSlotSize`],
    /// [`Error::InvalidBatchSize`], [`Error::TypeTooLarge`] (a message type larger than
    /// the payload), [`Error::InvalidArgument`] (an idle duration, `async_spin`,
    /// `host_timeout`, `watchdog`, `export_interval`), or what the backend could not do
    /// ([`Error::Launch`], [`Error::Alloc`], [`Error::StrategyUnsupported`]).
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
        spec.launch_on(self)
    }
}
