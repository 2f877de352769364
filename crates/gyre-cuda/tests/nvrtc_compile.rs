//! Every line of CUDA device code compiled and resource-checked, with no GPU.
//!
//! * The ring kernel (`cuda/ring_kernel.cu` over `gyre/ring.h` + `gyre/port_cuda.h`) with
//!   every built-in handler, for sm_70, sm_80 and sm_90: NVRTC to PTX (the runtime's own
//!   code path, `Nvrtc::compile_ring_kernel`), then `ptxas -v` to CUBIN, asserting 0 bytes
//!   of spill stores, spill loads and stack frame. The register counts are printed.
//! * `gyre/abi.h` alone under NVRTC, so its static_asserts run under NVRTC's front end,
//!   and a deliberately wrong offset to show that they are live.
//! * A user handler, a missing handler and a syntax error: typed errors with NVRTC's log.
//!
//! The toolchain comes from `GYRE_CUDA_VENV` (default `<repo>/.venv-cuda`, made by
//! `scripts/setup-cuda-venv.sh`) or a CUDA toolkit; libnvrtc is loaded by absolute path, so
//! no `LD_LIBRARY_PATH` is needed. Without NVRTC, the CCCL headers or ptxas the tests skip
//! with a message, unless `GYRE_REQUIRE_NVRTC=1`, which makes that a failure (CI).
//!
//! Reports are written straight to stderr (not through the test harness's capture), so
//! they show in a plain `cargo test` run.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use gyre_cuda::nvrtc::RING_KERNEL_ENTRY;
use gyre_cuda::{CompileOptions, Error, Handler, Nvrtc, Toolchain};

/// Architectures the ring kernel is checked for.
const ARCHS: [u32; 3] = [70, 80, 90];

/// Writes a line to stderr, bypassing the harness's output capture.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

struct Env {
    nvrtc: Nvrtc,
    toolchain: Toolchain,
    ptxas: PathBuf,
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
                what: "ptxas (pip: nvidia-cuda-nvcc-cu12)",
                searched: format!("{} and PATH", toolchain.origin.display()),
            })?;
        Ok(Env {
            nvrtc,
            toolchain,
            ptxas,
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

/// `ptxas -v` resources of one function.
#[derive(Debug, Default, Clone, PartialEq)]
struct Resources {
    function: String,
    registers: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
    smem: u32,
}

/// Parses `ptxas -v` output: for each "Function properties for F" its next line
/// ("N bytes stack frame, N bytes spill stores, N bytes spill loads") and, for entry
/// functions, the "Used N registers, ..., N bytes smem" line.
fn parse_ptxas(out: &str) -> Vec<Resources> {
    let mut res: Vec<Resources> = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        if let Some(f) = l.split("Function properties for ").nth(1) {
            let mut r = Resources {
                function: f.trim().to_owned(),
                ..Default::default()
            };
            if let Some(props) = lines.next() {
                r.stack = number_before(props, "bytes stack frame").unwrap_or(u32::MAX);
                r.spill_stores = number_before(props, "bytes spill stores").unwrap_or(u32::MAX);
                r.spill_loads = number_before(props, "bytes spill loads").unwrap_or(u32::MAX);
            }
            res.push(r);
        } else if l.contains("Used ") && l.contains(" registers") {
            if let Some(r) = res.last_mut() {
                r.registers = number_before(l, "registers").unwrap_or(0);
                r.smem = number_before(l, "bytes smem").unwrap_or(0);
            }
        }
    }
    res
}

/// The integer right before `what` in `line` ("..., 12 bytes smem" -> 12).
fn number_before(line: &str, what: &str) -> Option<u32> {
    let head = &line[..line.find(what)?];
    head.split(|c: char| !c.is_ascii_digit())
        .rfind(|s| !s.is_empty())?
        .parse()
        .ok()
}

/// Assembles `ptx` for `sm_<arch>` with `ptxas -v`; returns its report.
fn ptxas(ptxas: &Path, ptx: &str, arch: u32, stem: &str) -> Result<String, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gyre-cuda-nvrtc");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (src, bin) = (
        dir.join(format!("{stem}.ptx")),
        dir.join(format!("{stem}.cubin")),
    );
    std::fs::write(&src, ptx).map_err(|e| e.to_string())?;
    let out = Command::new(ptxas)
        .arg(format!("-arch=sm_{arch}"))
        .args(["-v", "--warn-on-spills", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(|e| format!("running {}: {e}", ptxas.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("ptxas failed ({}):\n{text}", out.status))
    }
}

#[test]
fn ring_kernel_every_handler_every_arch_has_no_spills_and_no_stack() {
    let Some(env) = env("ring kernel NVRTC + ptxas") else {
        return;
    };
    let (maj, min) = env.nvrtc.version();
    report(&format!(
        "gyre ring kernel, NVRTC {maj}.{min} ({}), ptxas {}",
        env.toolchain.origin.display(),
        env.ptxas.display()
    ));
    let jobs: Vec<(Handler<'static>, u32)> = Handler::BUILTIN
        .iter()
        .flat_map(|&h| ARCHS.iter().map(move |&a| (h, a)))
        .collect();
    // NVRTC and ptxas runs are independent: one thread each.
    let results: Vec<Result<(Vec<Resources>, String), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|&(h, arch)| {
                let env = &env;
                s.spawn(move || {
                    let opts = CompileOptions::new(arch, &env.toolchain);
                    let ptx = env
                        .nvrtc
                        .compile_ring_kernel(&h, &opts)
                        .map_err(|e| e.to_string())?;
                    if !ptx.ptx.contains(&format!(".entry {RING_KERNEL_ENTRY}(")) {
                        return Err(format!("no .entry {RING_KERNEL_ENTRY} in the PTX"));
                    }
                    let stem = format!(
                        "{}_sm{arch}",
                        h.name()
                            .trim_start_matches("handlers/")
                            .trim_end_matches(".cuh")
                    );
                    let out = ptxas(&env.ptxas, &ptx.ptx, arch, &stem)?;
                    Ok((parse_ptxas(&out), ptx.log))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("compile thread panicked".into()))
            })
            .collect()
    });

    report(&format!(
        "{:<24} {:>5} {:>5} {:>6} {:>7} {:>6} {:>5}",
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
                        "{:<24} {:>5} {:>5} {:>6} {:>7} {:>6} {:>5}  {}",
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
    for arch in ARCHS {
        let opts = CompileOptions::new(arch, &env.toolchain);
        let ptx = env
            .nvrtc
            .compile_ptx("abi_probe.cu", ABI_UNIT, &opts)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ptx.ptx.contains(".entry gyre_abi_probe("));
        // The asserts are live: a wrong offsetof must fail them.
        let wrong = format!("#define GYRE_OFFSETOF(type, field) 7ull\n{ABI_UNIT}");
        match env.nvrtc.compile_ptx("abi_probe_wrong.cu", &wrong, &opts) {
            Err(Error::Compile { log, .. }) => {
                assert!(log.contains("gyre_control_block.magic"), "{log}")
            }
            other => panic!("a wrong GYRE_OFFSETOF compiled: {other:?}"),
        }
    }
    report("abi.h: static_asserts hold under NVRTC for sm_70, sm_80, sm_90");
}

#[test]
fn visibility_probe_kernel_compiles_for_every_arch() {
    let Some(env) = env("visibility probe under NVRTC") else {
        return;
    };
    for arch in ARCHS {
        let opts = CompileOptions::new(arch, &env.toolchain);
        let ptx = env
            .nvrtc
            .compile_ptx(
                "gyre_visibility_probe.cu",
                gyre_cuda::visibility_probe::PROBE_SOURCE,
                &opts,
            )
            .unwrap_or_else(|e| panic!("sm_{arch}: {e}"));
        let entry = format!(".entry {}(", gyre_cuda::visibility_probe::PROBE_ENTRY);
        assert!(ptx.ptx.contains(&entry), "sm_{arch}: no {entry}");
        // System-scope acquire/release, as the ring kernel uses.
        assert!(
            ptx.ptx.contains(".acquire.sys"),
            "sm_{arch}: no ld.acquire.sys"
        );
        assert!(
            ptx.ptx.contains(".release.sys"),
            "sm_{arch}: no st.release.sys"
        );
        let out = ptxas(&env.ptxas, &ptx.ptx, arch, "visibility_probe")
            .unwrap_or_else(|e| panic!("sm_{arch}: {e}"));
        assert!(out.contains("gyre_visibility_probe"), "{out}");
    }
    report("visibility probe kernel: compiles and assembles for sm_70, sm_80, sm_90");
}

#[test]
fn user_handler_compiles_and_errors_carry_the_log() {
    let Some(env) = env("NVRTC error paths") else {
        return;
    };
    let opts = CompileOptions::new(80, &env.toolchain);
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
    assert!(ptx.ptx.contains(&format!(".entry {RING_KERNEL_ENTRY}(")));

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
            log, arch, name, ..
        }) => {
            assert_eq!(arch, 80);
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
