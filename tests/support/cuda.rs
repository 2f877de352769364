//! CUDA test support for the facade's suites: skip (or, with `GYRE_REQUIRE_CUDA=1`, fail)
//! where CUDA is unusable, and one CUDA case at a time per process (see
//! `gyre_cuda::testing`).

#![allow(dead_code)]

pub use gyre_cuda::testing::serial;

/// Whether the CUDA backend is usable here. Prints why not and returns `false`; panics
/// instead with `GYRE_REQUIRE_CUDA=1`.
pub fn available(test: &str) -> bool {
    let info = gyre::backends().into_iter().find(|b| b.name == "cuda");
    let usable = match info.map(|b| b.available) {
        Some(r) => r,
        None => Err("no cuda backend known".to_owned()),
    };
    gyre_cuda::testing::require_cuda(test, usable).is_some()
}
