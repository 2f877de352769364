// A loan kernel's spec (`KernelSpec<Loan, Loan>`) and a spec of plain messages are
// different types: neither launches as the other.
use gyre::loan::{LoanBuf, LoanHandle};
use gyre::{Backend, KernelSpec, Runtime};

fn main() {
    let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
    // Raw handles are plain messages: this is not a loan kernel.
    let _ = rt.launch_loans(KernelSpec::<LoanHandle, LoanHandle>::echo());
    // A loan kernel does not launch as a kernel of plain messages.
    let _ = rt.launch(KernelSpec::loans("x", |_: &mut LoanBuf<'_>| Ok(())));
}
