// A loan kernel's spec is a `KernelSpec<Loan, Loan>`, and `Loan` is not `Pod`: the spec's
// type picks the handle `Runtime::launch` returns (a `Kernel<Loan, Loan>`), and a loan kernel is
// never taken for a kernel of plain messages, a pool's member or a pipeline's stage.
use gyre::loan::{LoanBuf, LoanHandle};
use gyre::pipeline::PipelineSpec;
use gyre::pool::{PoolOptions, PoolSpec};
use gyre::{Backend, Kernel, KernelSpec, Runtime};

fn main() {
    let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
    let loans = || KernelSpec::loans("x", |_: &mut LoanBuf<'_>| Ok(()));
    // Its handle is a Kernel<Loan, Loan>, not a kernel of raw handles.
    let _: Kernel<LoanHandle, LoanHandle> = rt.launch(loans()).unwrap();
    // Loan kernels are not pooled, nor chained.
    let _ = rt.launch(PoolSpec::new(loans(), PoolOptions::new(2)));
    let _ = rt.launch(PipelineSpec::new("p", loans()));
}
