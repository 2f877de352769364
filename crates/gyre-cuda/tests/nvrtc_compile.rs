//! Every line of CUDA device code compiled and resource-checked, with no GPU.
//!
//! * The ring kernel (`cuda/ring_kernel.cu` over `gyre/ring.h` + `gyre/port_cuda.h`) with
//!   every built-in handler, for **every architecture this NVRTC supports** from sm_70 on
//!   (`nvrtcGetSupportedArchs`: NVRTC 12.8 and 13.x differ): NVRTC to PTX (the runtime's
//!   fallback route), then `ptxas -v` to CUBIN, asserting 0 bytes of spill stores, spill
//!   loads and stack frame (register counts are printed); and NVRTC straight to CUBIN
//!   (the runtime's first route), checked to be an ELF image.
//! * `gyre/abi.h` alone under NVRTC, so its static_asserts run under NVRTC's front end,
//!   and a deliberately wrong offset to show that they are live.
//! * The visibility probe and the benchmark's peer kernel.
//! * A user handler, a missing handler and a syntax error: typed errors with NVRTC's log.
//!
//! Nothing but gyre's embedded headers is on NVRTC's include path (none at all: they are
//! passed in memory), so this also proves no CCCL or toolkit header is needed. The
//! toolchain is found as the runtime finds it (`Toolchain::discover`: `GYRE_CUDA_VENV`,
//! `CUDA_HOME`, ...); `scripts/test.sh` runs this file against NVRTC 12.8 and 13.x.
//! Without NVRTC or ptxas the tests skip with a message, unless `GYRE_REQUIRE_NVRTC=1`,
//! which makes that a failure (CI).
//!
//! Reports are written straight to stderr (not through the test harness's capture), so
//! they show in a plain `cargo test` run.

use std::io::Write as _;
use std::path::PathBuf;

use gyre_cuda::nvrtc::Target;
use gyre_cuda::ptxas::{parse as parse_ptxas, run as ptxas, Resources};
use gyre_cuda::{CompileOptions, Error, Handler, Nvrtc, Toolchain, RING_KERNEL_ENTRY};

/// Writes a line to stderr, bypassing the harness's output capture.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

struct Env {
    nvrtc: Nvrtc,
    toolchain: Toolchain,
    ptxas: PathBuf,
    archs: Vec<u32>,
}

/// The toolchain, or `None` (after saying why) when it is missing and not required.
fn env(test: &str) -> Option<Env> {
    let required = std::env::var("GYRE_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let found = Nvrtc::discover().and_then(|(nvrtc, toolchain)| {
        let ptxas = toolchain
            .ptxas
            .clone()
            .or_else(|| find_on_path("ptxas"))
            .ok_or_else(|| Error::ToolchainNotFound {
                what: "ptxas (pip: nvidia-cuda-nvcc)",
                searched: format!("{} and PATH", toolchain.origin),
            })?;
        let archs = nvrtc.ring_kernel_archs()?;
        Ok(Env {
            nvrtc,
            toolchain,
            ptxas,
            archs,
        })
    });
    match found {
        Ok(e) => Some(e),
        Err(e) if required => panic!("GYRE_REQUIRE_NVRTC=1 but the CUDA toolchain is missing: {e}"),
        Err(e) => {
            report(&format!(
                "SKIP {test}: {e} (scripts/setup-cuda-venv.sh installs it; \
                 GYRE_REQUIRE_NVRTC=1 makes this a failure)"
            ));
            None
        }
    }
}

fn find_on_path(exe: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(exe))
        .find(|p| p.is_file())
}

fn ptx_of(env: &Env, name: &str, source: &str, arch: u32) -> String {
    let c = env
        .nvrtc
        .compile(name, source, &CompileOptions::new(Target::Ptx(arch)))
        .unwrap_or_else(|e| panic!("sm_{arch}: {e}"));
    c.ptx().expect("PTX text").to_owned()
}

#[test]
fn ring_kernel_every_handler_every_arch_has_no_spills_and_no_stack() {
    let Some(env) = env("ring kernel NVRTC + ptxas") else {
        return;
    };
    report(&format!(
        "gyre ring kernel, NVRTC {} ({}, {}), ptxas {}, archs {:?}",
        env.nvrtc.version_string(),
        env.nvrtc.path(),
        env.toolchain.origin,
        env.ptxas.display(),
        env.archs
    ));
    assert!(
        env.archs.contains(&80) && env.archs.contains(&90),
        "NVRTC supports neither sm_80 nor sm_90? {:?}",
        env.archs
    );
    let jobs: Vec<(Handler<'static>, u32)> = Handler::BUILTIN
        .iter()
        .flat_map(|&h| env.archs.iter().map(move |&a| (h, a)))
        .collect();
    // NVRTC and ptxas runs are independent: a few threads (the machine may have 2 cores).
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let results: Vec<Result<(Vec<Resources>, String), String>> = {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let out = std::sync::Mutex::new(vec![None; jobs.len()]);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(h, arch)) = jobs.get(i) else {
                        break;
                    };
                    let r = one_job(&env, h, arch);
                    out.lock().unwrap()[i] = Some(r);
                });
            }
        });
        out.into_inner()
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err("not run".into())))
            .collect()
    };

    report(&format!(
        "{:<24} {:>6} {:>5} {:>6} {:>7} {:>6} {:>5}",
        "handler", "arch", "regs", "stack", "spill-st", "spill-ld", "smem"
    ));
    let mut failures = Vec::new();
    for ((h, arch), r) in jobs.iter().zip(results) {
        let label = format!("{} sm_{arch}", h.name());
        match r {
            Err(e) => failures.push(format!("{label}: {e}")),
            Ok((funcs, log)) => {
                if !log.trim().is_empty() {
                    report(&format!("  nvrtc log for {label}: {}", log.trim()));
                }
                if !funcs.iter().any(|f| f.function == RING_KERNEL_ENTRY) {
                    failures.push(format!("{label}: ptxas reported no {RING_KERNEL_ENTRY}"));
                }
                for f in &funcs {
                    report(&format!(
                        "{:<24} {:>6} {:>5} {:>6} {:>7} {:>6} {:>5}  {}",
                        h.name(),
                        format!("sm_{arch}"),
                        f.registers,
                        f.stack,
                        f.spill_stores,
                        f.spill_loads,
                        f.smem,
                        f.function
                    ));
                    if (f.stack, f.spill_stores, f.spill_loads) != (0, 0, 0) {
                        failures.push(format!(
                            "{label}: {} has {} bytes stack frame, {} bytes spill stores, {} \
                             bytes spill loads (all must be 0)",
                            f.function, f.stack, f.spill_stores, f.spill_loads
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One handler x arch: PTX through ptxas (resources), and a CUBIN straight from NVRTC.
fn one_job(env: &Env, h: Handler<'static>, arch: u32) -> Result<(Vec<Resources>, String), String> {
    let ptx = env
        .nvrtc
        .compile_ring_kernel(&h, &CompileOptions::new(Target::Ptx(arch)))
        .map_err(|e| e.to_string())?;
    let text = ptx.ptx().ok_or("PTX is not text")?;
    if !text.contains(&format!(".entry {RING_KERNEL_ENTRY}(")) {
        return Err(format!("no .entry {RING_KERNEL_ENTRY} in the PTX"));
    }
    let cubin = env
        .nvrtc
        .compile_ring_kernel(&h, &CompileOptions::new(Target::Cubin(arch)))
        .map_err(|e| format!("CUBIN: {e}"))?;
    if !cubin.image.starts_with(b"\x7fELF") {
        return Err("NVRTC's CUBIN is not an ELF image".into());
    }
    let stem = format!(
        "{}_sm{arch}",
        h.name()
            .trim_start_matches("handlers/")
            .trim_end_matches(".h")
    );
    let out = ptxas(&env.ptxas, text, arch, &stem)?;
    Ok((parse_ptxas(&out), ptx.log))
}

/// A unit including `gyre/abi.h`: its GYRE_STATIC_ASSERTs (sizes, alignments, every
/// field offset via NVRTC's `__INTADDR__` offsetof) are evaluated by NVRTC itself.
const ABI_UNIT: &str = r#"
#include "gyre/abi.h"
extern "C" __global__ void gyre_abi_probe(gyre_control_block *cb, gyre_slot_header *s,
                                          gyre_telemetry_buffer *t) {
    cb->k2h_head = s->sequence + t->seq + GYRE_STATE_IS_FINAL(cb->state);
}
"#;

#[test]
fn abi_header_static_asserts_hold_under_nvrtc() {
    let Some(env) = env("abi.h under NVRTC") else {
        return;
    };
    for &arch in &env.archs {
        let ptx = ptx_of(&env, "abi_probe.cu", ABI_UNIT, arch);
        assert!(ptx.contains(".entry gyre_abi_probe("));
        // The asserts are live: a wrong offsetof must fail them.
        let wrong = format!("#define GYRE_OFFSETOF(type, field) 7ull\n{ABI_UNIT}");
        let opts = CompileOptions::new(Target::Ptx(arch));
        match env.nvrtc.compile("abi_probe_wrong.cu", &wrong, &opts) {
            Err(Error::Compile { log, .. }) => {
                assert!(log.contains("gyre_control_block.magic"), "{log}")
            }
            other => panic!("a wrong GYRE_OFFSETOF compiled: {other:?}"),
        }
    }
    report(&format!(
        "abi.h: static_asserts hold under NVRTC {} for {:?}",
        env.nvrtc.version_string(),
        env.archs
    ));
}

#[test]
fn visibility_probe_and_peer_kernels_compile_for_every_arch() {
    let Some(env) = env("visibility probe and peer under NVRTC") else {
        return;
    };
    for &arch in &env.archs {
        let ptx = ptx_of(
            &env,
            "gyre_visibility_probe.cu",
            gyre_cuda::visibility_probe::PROBE_SOURCE,
            arch,
        );
        let entry = format!(".entry {}(", gyre_cuda::visibility_probe::PROBE_ENTRY);
        assert!(ptx.contains(&entry), "sm_{arch}: no {entry}");
        // System-scope acquire/release, as the ring kernel uses (inline PTX).
        assert!(
            ptx.contains("ld.acquire.sys"),
            "sm_{arch}: no ld.acquire.sys"
        );
        assert!(
            ptx.contains("st.release.sys"),
            "sm_{arch}: no st.release.sys"
        );
        let out = ptxas(&env.ptxas, &ptx, arch, "visibility_probe")
            .unwrap_or_else(|e| panic!("sm_{arch}: {e}"));
        assert!(out.contains("gyre_visibility_probe"), "{out}");
        let peer = ptx_of(
            &env,
            "gyre_peer_echo.cu",
            gyre_cuda::peer::PEER_SOURCE,
            arch,
        );
        assert!(peer.contains(&format!(".entry {}(", gyre_cuda::peer::PEER_ENTRY)));
    }
    report(&format!(
        "visibility probe and peer kernels: compile and assemble for {:?}",
        env.archs
    ));
}

#[test]
fn the_ring_kernel_uses_system_scope_acquire_release_and_no_cccl() {
    let Some(env) = env("system-scope PTX") else {
        return;
    };
    let ptx = env
        .nvrtc
        .compile_ring_kernel(&Handler::Echo, &CompileOptions::new(Target::Ptx(90)))
        .unwrap_or_else(|e| panic!("{e}"));
    let text = ptx.ptx().expect("text");
    for op in ["ld.acquire.sys", "st.release.sys", "ld.relaxed.sys"] {
        assert!(text.contains(op), "no {op} in the ring kernel's PTX");
    }
    // __threadfence_system(): `membar.sys` (the PTX spelling of fence.sc.sys).
    assert!(
        text.contains("membar.sys") || text.contains("fence.sc.sys"),
        "no system-scope fence in the ring kernel's PTX"
    );
    // A unit including a CCCL header fails: none is on the include path, and none is
    // needed.
    let cccl = "#include <cuda/atomic>\nextern \"C\" __global__ void k() {}\n";
    assert!(matches!(
        env.nvrtc
            .compile("cccl.cu", cccl, &CompileOptions::new(Target::Ptx(90))),
        Err(Error::Compile { .. })
    ));
}

#[test]
fn user_handler_compiles_and_errors_carry_the_log() {
    let Some(env) = env("NVRTC error paths") else {
        return;
    };
    let opts = CompileOptions::new(Target::Ptx(80));
    // A user's own handler, same signature.
    let user = Handler::Custom {
        name: "negate.cu",
        source: r#"
#include "gyre/abi.h"
__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
                                     unsigned int req_len, unsigned char *reply,
                                     unsigned int reply_cap, unsigned int *reply_len,
                                     unsigned int lane, unsigned int lanes) {
    if (msg_type != 7u) return GYRE_ERR_USER_BASE + 1u;
    for (unsigned int i = lane; i < req_len; i += lanes) reply[i] = (unsigned char)~req[i];
    *reply_len = req_len <= reply_cap ? req_len : 0u;
    return GYRE_ERR_NONE;
}
"#,
    };
    let ptx = env
        .nvrtc
        .compile_ring_kernel(&user, &opts)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ptx
        .ptx()
        .unwrap()
        .contains(&format!(".entry {RING_KERNEL_ENTRY}(")));

    // A user's phase function (gyre/handler.h), two phases and block-shared words: the
    // port and handler headers come before the user's source.
    let phased = Handler::Custom {
        name: "count_zeros.cu",
        source: r#"
static __device__ uint32_t count_zeros(uint32_t phase, const gyre_hcall *c, gyre_hlane *l,
                                       gyre_hblock *b) {
    if (phase == 0u) {
        uint32_t n = 0u;
        for (uint32_t i = c->lane; i < c->req_len; i += c->lanes) n += c->req[i] == 0u;
        b->words[c->lane] = n;
        (void)l;
        return 1u;
    }
    if (c->lane == 0u) {
        uint32_t n = 0u;
        for (uint32_t i = 0u; i < c->lanes; ++i) n += b->words[i];
        ((uint32_t *)c->reply)[0] = n;
        b->status = GYRE_ERR_NONE;
        b->reply_len = 4u;
    }
    return GYRE_PHASE_DONE;
}
#define GYRE_HANDLER_PHASE count_zeros
"#,
    };
    let ptx = env
        .nvrtc
        .compile_ring_kernel(&phased, &opts)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ptx
        .ptx()
        .unwrap()
        .contains(&format!(".entry {RING_KERNEL_ENTRY}(")));

    // A portable phase function (the port macros, `#include "gyre/handler.h"`): the same
    // file the OpenCL tests run through `KernelSpec::device_handler`.
    let portable = Handler::Custom {
        name: "negate_phase.h",
        source: include_str!("../../../tests/support/negate_phase.h"),
    };
    let ptx = env
        .nvrtc
        .compile_ring_kernel(&portable, &opts)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ptx
        .ptx()
        .unwrap()
        .contains(&format!(".entry {RING_KERNEL_ENTRY}(")));

    // No handler: a clear error naming gyre_handler in ring_kernel.cu.
    let none = Handler::Custom {
        name: "empty.cu",
        source: "",
    };
    match env.nvrtc.compile_ring_kernel(&none, &opts) {
        Err(e @ Error::Compile { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("gyre_handler") && msg.contains("ring_kernel.cu"),
                "{msg}"
            );
        }
        other => panic!("a ring kernel without a handler compiled: {other:?}"),
    }

    // A syntax error in a user handler: the log names the user's file and line.
    let bad = Handler::Custom {
        name: "broken.cu",
        source: "\n__device__ unsigned int gyre_handler( {\n",
    };
    match env.nvrtc.compile_ring_kernel(&bad, &opts) {
        Err(Error::Compile {
            log, target, name, ..
        }) => {
            assert_eq!(target, "compute_80");
            assert!(name.contains("broken.cu"), "{name}");
            assert!(log.contains("broken.cu(2)"), "{log}");
        }
        other => panic!("a broken handler compiled: {other:?}"),
    }
}

#[test]
fn ptxas_report_parser() {
    let out = "ptxas info    : 5243 bytes gmem\n\
        ptxas info    : Compiling entry function 'gyre_ring_kernel' for 'sm_80'\n\
        ptxas info    : Function properties for gyre_ring_kernel\n    \
        8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
        ptxas info    : Used 80 registers, used 1 barriers, 44 bytes smem, 360 bytes cmem[0]\n";
    assert_eq!(
        parse_ptxas(out),
        [Resources {
            function: "gyre_ring_kernel".into(),
            registers: 80,
            stack: 8,
            spill_stores: 4,
            spill_loads: 12,
            smem: 44,
        }]
    );
}
