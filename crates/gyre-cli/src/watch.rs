//! `gyre demo --watch FILE`: a kernel whose handler is the device source in FILE, reloaded
//! live whenever FILE changes (`KernelSpec::watch`), called twice a second until SIGINT.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use gyre::{Backend, KernelSpec, Runtime};

use crate::error::Result;
use crate::signal;

/// The handler written into FILE when it does not exist: reply = request + 1 (a phase
/// function over `gyre/handler.h`, which the CUDA and OpenCL backends both build).
pub const STARTER: &str = r#"/* gyre demo --watch: edit ADD and save; the kernel reloads. */
#include "gyre/handler.h"
#define ADD 1u

static inline GYRE_DEVICE_FN uint32_t demo(uint32_t phase, const gyre_hcall *c,
                                           gyre_hlane *l, GYRE_SHARED gyre_hblock *b) {
    (void)phase;
    (void)l;
    if (c->lane == 0u) {
        uint32_t x = (uint32_t)c->req[0] | ((uint32_t)c->req[1] << 8) |
                     ((uint32_t)c->req[2] << 16) | ((uint32_t)c->req[3] << 24);
        x += ADD;
        c->reply[0] = (unsigned char)x;
        c->reply[1] = (unsigned char)(x >> 8);
        c->reply[2] = (unsigned char)(x >> 16);
        c->reply[3] = (unsigned char)(x >> 24);
        b->status = GYRE_ERR_NONE;
        b->reply_len = 4u;
    }
    return GYRE_PHASE_DONE;
}
#define GYRE_HANDLER_PHASE demo
"#;

/// Runs the watch demo on `backend` (a device backend: the CPU backend runs Rust
/// handlers, which have no source file to reload).
pub fn run(backend: Backend, file: &Path, out: &mut dyn Write) -> Result<()> {
    if !file.exists() {
        std::fs::write(file, STARTER)?;
        writeln!(out, "wrote a starter handler to {}", file.display())?;
    }
    let source = std::fs::read_to_string(file)?;
    signal::install_stop_handler()?;
    let rt = Runtime::builder().backend(backend).build()?;
    let spec = KernelSpec::<u32, u32>::from_fn("watch", |x| x.wrapping_add(1))
        .device_handler(file.display().to_string(), source)
        .watch(file);
    let k = rt.launch(spec)?;
    writeln!(
        out,
        "kernel on {} watching {}: edit it and save (Ctrl-C stops)",
        k.backend(),
        file.display()
    )?;
    let mut x = 0u32;
    while !signal::stop_requested() {
        let line = match k.call_blocking(x) {
            Ok(r) => format!("call({x}) = {r}"),
            Err(e) => format!("call({x}) failed: {e}"),
        };
        let r = k.relaunches();
        writeln!(
            out,
            "{line}   (generation {}, reloads {})",
            r.generation, r.reloads
        )?;
        x = x.wrapping_add(1);
        std::thread::sleep(Duration::from_millis(500));
    }
    k.shutdown_blocking()?;
    writeln!(out, "shutdown: ok")?;
    Ok(())
}
