//! The handlers of the differential suite (`tests/portable/handlers.rs`, run on CPU and
//! OpenCL by `tests/portable_handlers.rs`) compiled as ring kernels by NVRTC for every
//! architecture it supports, then assembled by `ptxas -v`: no spill stores and no spill
//! loads anywhere. Unlike the built-ins (`crates/gyre-cuda/tests/nvrtc_compile.rs`, which
//! also require no stack frame), a generated handler may have one: its request and reply
//! are copied bytewise into local values, and CUDA's `sinf`/`cosf`/`tanf` keep their
//! argument reduction in a local array; the largest frame is printed. On a GPU the same
//! sources run through `KernelSpec::portable` like any device handler.
//!
//! Without NVRTC and ptxas the test prints `SKIP`, unless `GYRE_REQUIRE_NVRTC=1` (CI).

#![cfg(feature = "cuda")]

#[path = "portable/handlers.rs"]
#[allow(dead_code)]
mod handlers;
#[path = "support/nvrtc.rs"]
mod nvrtc_support;

use std::io::Write as _;

use gyre_cuda::nvrtc::Target;
use gyre_cuda::{CompileOptions, Handler, RING_KERNEL_ENTRY};

#[test]
fn portable_handlers_compile_for_every_arch_without_spills() {
    let required = nvrtc_support::required();
    let Some((nvrtc, toolchain, archs)) =
        nvrtc_support::discover_or_skip("portable handlers under NVRTC")
    else {
        return;
    };
    let Some(ptxas) = toolchain.ptxas.clone() else {
        assert!(
            !required,
            "GYRE_REQUIRE_NVRTC=1 but no ptxas in {}",
            toolchain.origin
        );
        eprintln!(
            "SKIP portable handlers under NVRTC: no ptxas in {}",
            toolchain.origin
        );
        return;
    };
    let sources = handlers::all_sources();
    let jobs: Vec<(usize, u32)> = (0..sources.len())
        .flat_map(|h| archs.iter().map(move |&a| (h, a)))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let worst = std::sync::Mutex::new((0u32, String::new(), 0u32, String::new()));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(h, arch)) = jobs.get(i) else {
                    break;
                };
                let (name, src) = &sources[h];
                let label = format!("{name} sm_{arch}");
                let fail = |e: String| failures.lock().unwrap().push(format!("{label}: {e}"));
                let handler = Handler::Custom {
                    name: &format!("{name}.rs.h"),
                    source: src,
                };
                let ptx = match nvrtc
                    .compile_ring_kernel(&handler, &CompileOptions::new(Target::Ptx(arch)))
                {
                    Ok(c) => c.ptx().map(str::to_owned).unwrap_or_default(),
                    Err(e) => {
                        fail(e.to_string());
                        continue;
                    }
                };
                let report =
                    match gyre_cuda::ptxas::run(&ptxas, &ptx, arch, &format!("{name}_{arch}")) {
                        Ok(r) => r,
                        Err(e) => {
                            fail(e);
                            continue;
                        }
                    };
                let funcs = gyre_cuda::ptxas::parse(&report);
                if !funcs.iter().any(|f| f.function == RING_KERNEL_ENTRY) {
                    fail(format!("ptxas reported no {RING_KERNEL_ENTRY}"));
                }
                for f in &funcs {
                    if (f.spill_stores, f.spill_loads) != (0, 0) {
                        fail(format!(
                            "{}: {} bytes spill stores, {} bytes spill loads",
                            f.function, f.spill_stores, f.spill_loads
                        ));
                    }
                    let mut w = worst.lock().unwrap();
                    if f.registers > w.0 {
                        w.0 = f.registers;
                        w.1 = label.clone();
                    }
                    if f.stack > w.2 {
                        w.2 = f.stack;
                        w.3 = label.clone();
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let (regs, at, stack, stack_at) = worst.into_inner().unwrap();
    // Straight to stderr, not through the harness's capture: CI's log keeps the figures
    // docs/handlers.md quotes.
    let _ = writeln!(
        std::io::stderr(),
        "portable handlers under NVRTC {}: {} handlers x {} archs {:?}, no spills; most \
         registers {regs} ({at}), largest stack frame {stack} bytes ({stack_at})",
        nvrtc.version_string(),
        sources.len(),
        archs.len(),
        archs
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
