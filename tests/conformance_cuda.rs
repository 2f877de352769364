//! The conformance suite on the CUDA backend, where a CUDA driver and device are present,
//! under every placement the backend supports (see `cuda_under!`).
//!
//! Elsewhere every case prints `SKIP` and passes: the backend expression below returns
//! from the generated test before the case runs. Cases whose kernel has a CPU closure
//! handler need a device handler on CUDA and are expected to report that (see
//! docs/cuda.md).

mod conformance;

/// Whether the CUDA backend is usable here; prints why not.
fn cuda_available(test: &str) -> bool {
    let info = gyre::backends().into_iter().find(|b| b.name == "cuda");
    match info.map(|b| b.available) {
        Some(Ok(())) => true,
        Some(Err(why)) => {
            eprintln!("SKIP {test}: {why}");
            false
        }
        None => {
            eprintln!("SKIP {test}: no cuda backend known");
            false
        }
    }
}

/// Each placement the CUDA backend supports: the detected plan (zero copy in mapped
/// pinned memory where the empirical check confirms system scope), and the three copy
/// strategies over `cuMemAlloc` rings (`gyre_cuda::CudaCopyEngine`).
macro_rules! cuda_under {
    ($($module:ident => $strategy:expr),* $(,)?) => {
        $(mod $module {
            use crate::conformance::Target;
            use gyre::{Backend, TransferStrategy};
            crate::conformance_suite!({
                if !crate::cuda_available(module_path!()) {
                    return;
                }
                let s: Option<TransferStrategy> = $strategy;
                Target { backend: Backend::Cuda, strategy: s }
            });
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
