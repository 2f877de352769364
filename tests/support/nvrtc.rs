//! NVRTC test support: find NVRTC and the architectures it compiles ring kernels for, or
//! print `SKIP` and return `None`; with `GYRE_REQUIRE_NVRTC=1` (CI) a missing NVRTC
//! panics instead.

#![allow(dead_code)]

use gyre_cuda::toolchain::Toolchain;
use gyre_cuda::Nvrtc;

/// Whether `GYRE_REQUIRE_NVRTC=1`: a missing NVRTC or ptxas fails instead of skipping.
pub fn required() -> bool {
    std::env::var("GYRE_REQUIRE_NVRTC").is_ok_and(|v| v == "1")
}

/// NVRTC, its toolchain and the architectures it offers for ring kernels; `None` (after
/// printing `SKIP <what>: why`) where NVRTC is missing and not required.
pub fn discover_or_skip(what: &str) -> Option<(Nvrtc, Toolchain, Vec<u32>)> {
    let found = Nvrtc::discover().and_then(|(nvrtc, toolchain)| {
        let archs = nvrtc.ring_kernel_archs()?;
        Ok((nvrtc, toolchain, archs))
    });
    match found {
        Ok(f) => Some(f),
        Err(e) if required() => panic!("GYRE_REQUIRE_NVRTC=1 but NVRTC is missing: {e}"),
        Err(e) => {
            eprintln!("SKIP {what}: {e}");
            None
        }
    }
}
