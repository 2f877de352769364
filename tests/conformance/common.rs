//! What every conformance case uses: where it runs ([`Target`]), its runtime, and bounded
//! waits.

use std::time::Duration;

use gyre::{Backend, Runtime, TransferStrategy};

#[path = "../support/wait.rs"]
mod wait;
pub use wait::eventually;

/// Where a case runs: a backend, and the transfer strategy (`None`: the plan's default).
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The backend.
    pub backend: Backend,
    /// The transfer strategy, when the suite pins one.
    pub strategy: Option<TransferStrategy>,
    /// The CPU backend's cost model (checked rings), when the suite asks for it.
    pub cost_model: Option<Duration>,
}

impl Target {
    /// `backend` under `strategy`.
    pub fn new(backend: Backend, strategy: TransferStrategy) -> Self {
        Self {
            backend,
            strategy: Some(strategy),
            cost_model: None,
        }
    }

    /// The CPU backend under its cost model (zero copy over checked rings, read in waves
    /// as a PCIe GPU reads them), charging `emulate` per wave and per fence.
    pub fn checked(emulate: Duration) -> Self {
        Self {
            backend: Backend::Cpu,
            strategy: Some(TransferStrategy::Unified),
            cost_model: Some(emulate),
        }
    }
}

impl From<Backend> for Target {
    fn from(backend: Backend) -> Self {
        Self {
            backend,
            strategy: None,
            cost_model: None,
        }
    }
}

pub fn rt(t: Target) -> Runtime {
    let mut b = Runtime::builder().backend(t.backend);
    if let Some(s) = t.strategy {
        b = b.transfer_strategy(s);
    }
    if let Some(e) = t.cost_model {
        b = b.cost_model(e);
    }
    b.build().expect("runtime")
}

pub fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// Whether `b` runs Rust closure handlers (the CPU backend). Device backends (CUDA,
/// OpenCL) run device-code handlers only, so cases built on closures are skipped there.
pub fn host_handlers(b: Target) -> bool {
    let resolved = rt(b).backend();
    if resolved != Backend::Cpu {
        eprintln!(
            "SKIP: this case uses a Rust closure handler; {resolved} runs device handlers only"
        );
        return false;
    }
    true
}

/// The guard of a suite that needs none.
pub struct NoGuard;
