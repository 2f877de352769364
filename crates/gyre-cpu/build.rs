//! Builds the CPU backend's ring kernel: `cuda/ring_kernel_c11.c`, the block loop of
//! `cuda/include/gyre/block.h` (and `ring.h`) over the C11 port (`port_c11.h`) with the
//! built-in handlers of `cuda/handlers/`, compiled with the host's C compiler. Under
//! ThreadSanitizer (`-Zsanitizer=thread` in the Rust flags) the C object is instrumented
//! too, so TSan sees the kernel's side of every shared access.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let cuda = manifest.join("../../cuda");
    let source = cuda.join("ring_kernel_c11.c");
    let include = cuda.join("include");
    for f in [
        "ring_kernel_c11.c",
        "include/gyre/ring.h",
        "include/gyre/link.h",
        "include/gyre/poller.h",
        "include/gyre/tick.h",
        "include/gyre/port_c11.h",
        "include/gyre/abi.h",
        "include/gyre/handler.h",
        "include/gyre/block.h",
        "include/gyre/wave.h",
        "include/gyre/loan.h",
        "handlers/echo.h",
        "handlers/vec_scale.h",
        "handlers/reduce_sum.h",
    ] {
        println!("cargo:rerun-if-changed={}", cuda.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let rustflags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let tsan = rustflags
        .split('\u{1f}')
        .any(|f| f.contains("sanitizer=thread"));
    let mut b = cc::Build::new();
    b.file(&source)
        .include(&include)
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wconversion")
        .flag_if_supported("-fno-strict-aliasing");
    if tsan {
        b.flag("-fsanitize=thread");
    }
    b.compile("gyre_ring_kernel_c11");
}
