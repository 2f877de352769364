//! User OpenCL C handlers (`KernelSpec::opencl_handler`, `device_handler`) and the
//! per-kernel choice of `Backend::Auto`, on the first OpenCL device with fine-grained SVM
//! and atomics (PoCL's CPU device in CI, given to Auto with `RuntimeBuilder::auto_device`
//! since Auto never picks a CPU device itself).
//!
//! Without one, every case prints `SKIP` and passes, unless `GYRE_REQUIRE_OPENCL=1` (CI),
//! where it fails. Cases run one at a time under a watchdog, after a compile check in a
//! child process (`tests/support/opencl.rs`).

#![cfg(feature = "opencl")]

#[path = "support/opencl.rs"]
mod support;

use gyre::{Backend, Error, KernelSpec, Runtime};

const CHILD: &str = "user_handlers_compile_in_child";

/// A phase function over the port macros: the portable form, as the built-ins are written
/// (NVRTC compiles the same file in `crates/gyre-cuda/tests/nvrtc_compile.rs`).
const NEGATE_PHASE: &str = include_str!("support/negate_phase.h");

/// The classic signature: each 4-byte word plus one; odd first words are rejected with a
/// user status.
const INC_CLASSIC: &str = r#"
unsigned int gyre_handler(unsigned int t, const __global unsigned char *req,
                          unsigned int len, __global unsigned char *reply, unsigned int cap,
                          unsigned int *out, unsigned int lane, unsigned int lanes) {
    const __global unsigned int *in = (const __global unsigned int *)req;
    __global unsigned int *o = (__global unsigned int *)reply;
    if (len != 8u || cap < 8u) { *out = 0u; return GYRE_ERR_HANDLER_REJECTED; }
    if (in[0] % 2u == 1u) { *out = 0u; return GYRE_ERR_USER_BASE + 7u; }
    for (unsigned int i = lane; i < 2u; i += lanes) o[i] = in[i] + 1u;
    *out = 8u;
    return GYRE_ERR_NONE;
}
"#;

/// A Rust handler that must never run where device code was asked for: its replies are
/// recognisably wrong.
fn wrong<T: bytemuck::Pod>(_: T) -> T {
    bytemuck::Zeroable::zeroed()
}

fn device() -> Option<(usize, usize)> {
    support::device_or_skip(CHILD)
}

fn guard(test: &str) -> support::Guard {
    support::guard(test, CHILD, support::TEST_LIMIT)
}

/// The child of the compile check: builds and runs both user handlers once.
#[test]
fn user_handlers_compile_in_child() {
    if !support::is_child() {
        let _g = guard(CHILD);
        device();
        return;
    }
    let Some((platform, device)) = device() else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let k = rt
        .launch(
            KernelSpec::<[u8; 16], [u8; 16]>::from_fn("negate", wrong)
                .opencl_handler("negate.h", NEGATE_PHASE),
        )
        .expect("negate");
    assert_eq!(
        k.call_blocking([0x0f; 16]).expect("negate call"),
        [0xf0; 16]
    );
    k.shutdown_blocking().expect("negate shutdown");
    let k = rt
        .launch(
            KernelSpec::<[u32; 2], [u32; 2]>::from_fn("inc", wrong)
                .opencl_handler("inc.cl", INC_CLASSIC),
        )
        .expect("inc");
    assert_eq!(k.call_blocking([2, 9]).expect("inc call"), [3, 10]);
    k.shutdown_blocking().expect("inc shutdown");
    let bad = rt
        .launch(
            KernelSpec::<u32, u32>::from_fn("broken", wrong)
                .opencl_handler("broken.cl", "this is not C;"),
        )
        .expect_err("a build error fails the launch");
    eprintln!("build error as expected: {bad}");
}

/// `device_handler` and `opencl_handler` sources run on the device: the replies are the
/// device code's, not the Rust handler's, and user statuses come back typed.
#[test]
fn opencl_user_handlers_answer_from_device_code() {
    let _g = guard("opencl_user_handlers_answer_from_device_code");
    let Some((platform, device)) = device() else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let k = rt
        .launch(
            KernelSpec::<[u8; 16], [u8; 16]>::from_fn("negate", wrong)
                .device_handler("negate.h", NEGATE_PHASE),
        )
        .expect("negate");
    assert_eq!(k.backend(), Backend::OpenCl { platform, device });
    for b in [0u8, 1, 0x5a, 0xff] {
        let mut req = [b; 16];
        req[15] = b.wrapping_add(3);
        let want = req.map(|x| !x);
        assert_eq!(k.call_blocking(req).expect("negate call"), want);
    }
    k.shutdown_blocking().expect("negate shutdown");

    let k = rt
        .launch(
            KernelSpec::<[u32; 2], [u32; 2]>::from_fn("inc", wrong)
                .opencl_handler("inc.cl", INC_CLASSIC),
        )
        .expect("inc");
    assert_eq!(k.call_blocking([4, u32::MAX]).expect("inc call"), [5, 0]);
    match k.call_blocking([3, 0]) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, gyre::codes::USER_BASE + 7),
        other => panic!("expected the handler's user status, got {other:?}"),
    }
    // The kernel keeps serving after a rejected request.
    assert_eq!(k.call_blocking([0, 1]).expect("inc call"), [1, 2]);
    k.shutdown_blocking().expect("inc shutdown");
}

/// A build error fails the launch with the compiler's log, naming the source.
#[test]
fn opencl_user_handler_build_error_is_a_launch_error_with_the_log() {
    let _g = guard("opencl_user_handler_build_error_is_a_launch_error_with_the_log");
    let Some((platform, device)) = device() else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let e = rt
        .launch(
            KernelSpec::<u32, u32>::from_fn("broken", wrong)
                .opencl_handler("broken.cl", "this is not C;"),
        )
        .expect_err("a build error fails the launch");
    match &e {
        Error::Launch {
            backend, kernel, ..
        } => assert_eq!((*backend, kernel.as_str()), ("opencl", "broken")),
        other => panic!("expected Error::Launch, got {other:?}"),
    }
    let text = format!("{e}");
    assert!(
        text.contains("broken.cl"),
        "the log names the source: {text}"
    );
}

/// An explicit OpenCL backend refuses a Rust handler with no OpenCL source, before
/// allocating anything, naming the kernel, the backend and what would run it.
#[test]
fn explicit_opencl_refuses_a_rust_handler() {
    let _g = guard("explicit_opencl_refuses_a_rust_handler");
    let Some((platform, device)) = device() else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let spec = KernelSpec::from_fn("double", |x: u32| x * 2);
    let check = |e: Error| match e {
        Error::HandlerUnsupported {
            kernel,
            backend,
            handler,
            remedy,
        } => {
            assert_eq!((kernel.as_str(), backend), ("double", "opencl"));
            assert!(handler.contains("from_fn"), "{handler}");
            assert!(
                remedy.contains("opencl_handler") && remedy.contains("Backend::Auto"),
                "{remedy}"
            );
        }
        other => panic!("expected HandlerUnsupported, got {other:?}"),
    };
    check(rt.backend_for(&spec).expect_err("backend_for"));
    check(rt.launch(spec.clone()).expect_err("launch"));
    // A CUDA source does not make it runnable on OpenCL.
    let cu = spec.cuda_handler("double.cu", "");
    check(rt.launch(cu).expect_err("launch with a CUDA source only"));
}

/// Auto decides per kernel: built-ins and OpenCL sources go to the device, Rust handlers
/// to the CPU backend; every kernel answers.
#[test]
fn auto_routes_each_kernel_to_a_backend_that_runs_it() {
    let _g = guard("auto_routes_each_kernel_to_a_backend_that_runs_it");
    let Some((platform, device)) = device() else {
        return;
    };
    let dev = Backend::OpenCl { platform, device };
    let rt = Runtime::builder()
        .backend(Backend::Auto)
        .auto_device(dev)
        .build()
        .expect("Auto runtime with an OpenCL device");
    assert_eq!(rt.backend(), dev);

    let closure = rt
        .launch(KernelSpec::from_fn("double", |x: u64| x * 2))
        .expect("closure");
    assert_eq!(closure.backend(), Backend::Cpu);
    assert_eq!(closure.call_blocking(21).expect("closure call"), 42);

    let echo = rt.launch(KernelSpec::<u64, u64>::echo()).expect("echo");
    assert_eq!(echo.backend(), dev);
    assert_eq!(echo.call_blocking(7).expect("echo call"), 7);

    let negate = rt
        .launch(
            KernelSpec::<[u8; 16], [u8; 16]>::from_fn("negate", wrong)
                .opencl_handler("negate.h", NEGATE_PHASE),
        )
        .expect("negate");
    assert_eq!(negate.backend(), dev);
    assert_eq!(
        negate.call_blocking([1; 16]).expect("negate call"),
        [0xfe; 16]
    );

    // Only a CUDA source: OpenCL cannot run it, so the CPU backend runs its Rust handler.
    let cu_only = KernelSpec::<u32, u32>::from_fn("plus1", |x| x + 1).cuda_handler("plus1.cu", "");
    assert_eq!(rt.backend_for(&cu_only).expect("backend_for"), Backend::Cpu);
    let k = rt.launch(cu_only).expect("plus1");
    assert_eq!(k.call_blocking(1).expect("plus1 call"), 2);

    for k in [closure, echo] {
        k.shutdown_blocking().expect("shutdown");
    }
    negate.shutdown_blocking().expect("shutdown");
    k.shutdown_blocking().expect("shutdown");
}

/// `auto_device(Auto)` is not a device.
#[test]
fn auto_device_must_name_a_backend() {
    let e = Runtime::builder()
        .backend(Backend::Auto)
        .auto_device(Backend::Auto)
        .build()
        .expect_err("auto is not a device");
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                name: "auto_device",
                ..
            }
        ),
        "{e:?}"
    );
}

/// `KernelSpec::watch`: a change of the handler's file reloads the kernel; a file that
/// does not build is logged and the running handler keeps serving.
#[test]
fn watched_source_reloads_on_change() {
    let Some((platform, device)) = device() else {
        return;
    };
    let _g = guard("watched_source_reloads_on_change");
    let dir = std::env::temp_dir().join(format!("gyre-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("negate.h");
    std::fs::write(&file, NEGATE_PHASE).expect("write the handler");
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let k = rt
        .launch(
            KernelSpec::<[u8; 16], [u8; 16]>::from_fn("watched", wrong)
                .opencl_handler("negate.h", NEGATE_PHASE)
                .watch(&file),
        )
        .expect("launch");
    assert_eq!(k.call_blocking([0x0f; 16]).expect("negate"), [0xf0; 16]);
    // Replace the file (as an editor does): the copy handler answers from now on.
    let copy = NEGATE_PHASE.replace("(unsigned char)~c->req[i]", "c->req[i]");
    let tmp = dir.join("negate.h.tmp");
    std::fs::write(&tmp, &copy).expect("write");
    std::fs::rename(&tmp, &file).expect("rename");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while k.relaunches().reloads < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload after the change"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(k.call_blocking([0x0f; 16]).expect("copy"), [0x0f; 16]);
    // A file that does not build: logged, nothing reloaded, the copy handler serves.
    std::fs::write(&file, "this is not a handler {").expect("write");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(k.relaunches().reloads, 1);
    assert_eq!(k.call_blocking([0x0f; 16]).expect("still copy"), [0x0f; 16]);
    k.shutdown_blocking().expect("shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
