//! The conformance suite on the CUDA backend, where a CUDA driver and device are present,
//! under every placement the backend supports (see `cuda_under!`).
//!
//! Elsewhere every case prints `SKIP` and passes (fails with `GYRE_REQUIRE_CUDA=1`): the
//! backend expression below returns from the generated test before the case runs. The
//! cases of this binary run one at a time (they share the process's CUDA context). Cases
//! whose kernel has a CPU closure handler need a device handler on CUDA and skip, saying
//! so (see docs/cuda.md).

#![cfg(feature = "cuda")]

mod conformance;
#[path = "support/cuda.rs"]
mod support;

/// Each placement the CUDA backend supports: the detected plan (zero copy in mapped
/// pinned memory where the empirical check confirms system scope), and the three copy
/// strategies over `cuMemAlloc` rings (`gyre_cuda::CudaCopyEngine`).
macro_rules! cuda_under {
    ($($module:ident => $strategy:expr),* $(,)?) => {
        $(mod $module {
            use crate::conformance::Target;
            use gyre::{Backend, TransferStrategy};
            crate::conformance_suite!({
                if !crate::support::available(module_path!()) {
                    return;
                }
                let s: Option<TransferStrategy> = $strategy;
                Target { backend: Backend::Cuda { device: 0 }, strategy: s, cost_model: None }
            }, guard = crate::support::serial());
        })*
    };
}

cuda_under! {
    planned => None,
    sync => Some(TransferStrategy::Sync),
    async_copy => Some(TransferStrategy::Async),
    dma_polling => Some(TransferStrategy::DmaPolling {
        poll_interval: gyre_core::strategy::DEFAULT_POLL_INTERVAL,
    }),
}
