//! The conformance suite on the CUDA backend, where a CUDA driver and device are present.
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

conformance_suite!({
    if !cuda_available(module_path!()) {
        return;
    }
    gyre::Backend::Cuda
});
