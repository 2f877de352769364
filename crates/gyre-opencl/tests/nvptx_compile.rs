//! The OpenCL C 1.2 form of the ring kernel as an NVIDIA GPU gets it (`-cl-std=CL1.2
//! -DGYRE_CL_LEGACY_ATOMICS -DGYRE_CL_NVIDIA`: volatile accesses, `membar.gl` and
//! `%globaltimer` through inline PTX), compiled by clang for the NVPTX target: every
//! built-in handler and the clock probe. This is not NVIDIA's OpenCL compiler (only a GPU
//! machine has that; the GPU kit's `opencl` step), but it checks that the legacy form is
//! valid OpenCL C 1.2 for a GPU target and that the PTX it asks for is what comes out.
//!
//! Needs `clang-15` (or `clang`) on the PATH: Debian's PoCL depends on it, so
//! `scripts/test.sh` has it wherever it installed PoCL. Without one the test prints `SKIP`
//! and passes, unless `GYRE_REQUIRE_OPENCL=1`.

use std::process::Command;

use gyre_core::kernels::ids;
use gyre_opencl::program::{clock_probe_source, language_options, ring_kernel_source};
use gyre_opencl::Handler;

fn clang() -> Option<&'static str> {
    ["clang-15", "clang"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Compiles `source` for nvptx64 with the NVIDIA legacy options; returns the PTX.
fn ptx(clang: &str, name: &str, source: &str) -> String {
    let dir = std::env::temp_dir().join(format!("gyre-nvptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.cl"));
    let out = dir.join(format!("{name}.ptx"));
    std::fs::write(&src, source).unwrap();
    let mut cmd = Command::new(clang);
    cmd.args(["-x", "cl", "-target", "nvptx64-nvidia-nvcl", "-O2", "-S"])
        .args(["-Xclang", "-finclude-default-header"])
        // NVIDIA's OpenCL offers the 64-bit atomics; clang's NVPTX target does not
        // declare them by default.
        .args([
            "-Xclang",
            "-cl-ext=+cl_khr_int64_base_atomics,+cl_khr_int64_extended_atomics",
        ])
        .args(language_options(true, true).split_whitespace())
        .args([
            "-DGYRE_CL_LANES=64",
            "-DGYRE_CL_NS_PER_TICK_INT=1ul",
            "-DGYRE_CL_NS_PER_TICK_FRAC=0ul",
        ])
        .arg("-o")
        .arg(&out)
        .arg(&src);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{name}: {clang} failed for nvptx64 with the NVIDIA legacy options:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    text
}

#[test]
fn the_legacy_form_compiles_for_nvptx_with_device_scope_fences() {
    let Some(clang) = clang() else {
        if std::env::var("GYRE_REQUIRE_OPENCL").is_ok_and(|v| v == "1") {
            panic!("GYRE_REQUIRE_OPENCL=1 but no clang-15 or clang on the PATH");
        }
        eprintln!("SKIP the_legacy_form_compiles_for_nvptx_with_device_scope_fences: no clang");
        return;
    };
    assert!(language_options(true, true).starts_with("-cl-std=CL1.2 "));
    for id in [ids::ECHO, ids::VEC_SCALE, ids::REDUCE_SUM] {
        let h = Handler::builtin(id).expect("a built-in");
        let text = ptx(clang, &format!("ring_{id}"), &ring_kernel_source(h));
        assert!(
            text.contains(".entry gyre_ring_kernel"),
            "built-in {id}: no entry"
        );
        // Every protocol fence is the device-scope one, never a work-group fence.
        assert!(text.contains("membar.gl"), "built-in {id}: no membar.gl");
        assert!(
            !text.contains("membar.cta"),
            "built-in {id}: a block-scope fence"
        );
        assert!(
            text.contains("%globaltimer"),
            "built-in {id}: no %globaltimer"
        );
        assert!(
            text.contains("ld.volatile"),
            "built-in {id}: no volatile loads"
        );
    }
    let probe = ptx(clang, "clock_probe", &clock_probe_source());
    assert!(
        probe.contains("%globaltimer"),
        "the clock probe reads another clock"
    );
}
