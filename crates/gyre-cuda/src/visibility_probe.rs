//! The empirical check behind `system-scope` visibility: one round trip between the host
//! and a running kernel through mapped pinned memory, with a timeout on both sides.
//!
//! Detection (`gyre_core::visibility::detect`) reads device attributes, which say what the
//! hardware claims. Some platforms claim mapped memory yet never show a running kernel the
//! host's writes (or the host the kernel's) in time — WSL2 is the known case, and
//! misconfigured IOMMU or virtualised setups can be others. Before the first zero-copy
//! launch the runtime runs [`mapped_round_trip`]: a one-thread kernel spins (with
//! `__nanosleep`) on a mapped word until the host writes it, answers in a second word,
//! and gives up after its own bound; the host waits for the answer up to `timeout`. Only
//! an answer in time confirms `system-scope`; anything else downgrades the plan to
//! `device-scope` (see `gyre_core::visibility::MemoryPlan::downgrade`).
//!
//! **Not validated on a GPU** (none was available when this was written); the probe
//! kernel is compiled by NVRTC for every architecture NVRTC supports in CI
//! (`tests/nvrtc_compile.rs`), and `scripts/gpu-kit.sh` runs it where a GPU is.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::CudaBackend;
use crate::context::Context;
use crate::error::Result;
use crate::memory::PinnedBuffer;
use crate::module::Module;
use crate::stream::StreamPool;

/// Entry point of [`PROBE_SOURCE`].
pub const PROBE_ENTRY: &str = "gyre_visibility_probe";

/// What the host writes, and what the kernel answers (`PING + 1`), or `GAVE_UP`.
const PING: u32 = 0x6079_0001;
const GAVE_UP: u32 = u32::MAX;

/// The probe kernel: one thread; `flags[0]` host -> kernel, `flags[1]` kernel -> host,
/// through the same system-scope acquire/release as the ring kernel (`gyre/port_cuda.h`).
pub const PROBE_SOURCE: &str = r#"
#include "gyre/port_cuda.h"
extern "C" __global__ void gyre_visibility_probe(unsigned int *flags, unsigned long long polls) {
    for (unsigned long long i = 0; i < polls; ++i) {
        const unsigned int v = GYRE_LOAD_ACQUIRE_U32(&flags[0]);
        if (v != 0u) {
            GYRE_STORE_RELEASE_U32(&flags[1], v + 1u);
            return;
        }
        __nanosleep(1000u);
    }
    GYRE_STORE_RELEASE_U32(&flags[1], 0xFFFFFFFFu);
}
"#;

/// The probe's module on `ctx` (compiled and loaded once).
pub(crate) fn module(backend: &CudaBackend, ctx: &Arc<Context>) -> Result<Arc<Module>> {
    backend.load_program(ctx, "gyre_visibility_probe.cu", PROBE_SOURCE, PROBE_ENTRY)
}

/// Why the round trip failed, or how long it took.
pub type ProbeResult = std::result::Result<Duration, String>;

/// Compiles and runs the probe on `ctx`'s device. `Ok(Ok(rtt))`: the kernel saw the
/// host's write and the host saw the answer within `timeout`. `Ok(Err(why))`: mapped
/// memory did not carry the round trip (downgrade). `Err`: the probe itself could not run
/// (compile, load, launch), which says nothing about visibility.
///
/// # Errors
///
/// The driver's or NVRTC's error, naming the call.
pub fn mapped_round_trip(
    backend: &CudaBackend,
    ctx: &Arc<Context>,
    timeout: Duration,
) -> Result<ProbeResult> {
    let module = module(backend, ctx)?;
    let flags = PinnedBuffer::<u32>::zeroed(ctx, 2)?;
    let stream = StreamPool::lease(ctx, "the visibility probe")?;
    let mut dptr = flags.device_ptr();
    // The kernel gives up a little after the host would (about 1 us per poll).
    let mut polls: u64 = (timeout.as_micros() as u64).saturating_mul(2).max(1000);
    let mut params = [
        std::ptr::addr_of_mut!(dptr).cast::<std::ffi::c_void>(),
        std::ptr::addr_of_mut!(polls).cast::<std::ffi::c_void>(),
    ];
    ctx.bind()?;
    // SAFETY: the probe takes (unsigned int*, unsigned long long), passed as the addresses
    // of `dptr` and `polls`; `flags` outlives the kernel (the stream is synchronised below,
    // before `flags` drops); the stream is live and held.
    let launched =
        unsafe { crate::result::launch(module.function(), 1, 1, 0, stream.get(), &mut params) };
    let outcome = launched.map(|()| {
        // SAFETY: `flags` is two live, 4-aligned u32s of mapped pinned memory; the kernel
        // accesses them with system-scope atomics, so atomics here.
        let (ping, pong) = unsafe {
            let p = flags.host_ptr().as_ptr();
            (&*p.cast::<AtomicU32>(), &*p.add(1).cast::<AtomicU32>())
        };
        let t0 = Instant::now();
        ping.store(PING, Release);
        loop {
            match pong.load(Acquire) {
                v if v == PING + 1 => return Ok(t0.elapsed()),
                GAVE_UP => {
                    return Err(format!(
                        "the kernel never saw the host's write to mapped memory \
                         (gave up after {polls} polls)"
                    ))
                }
                _ if t0.elapsed() > timeout => {
                    return Err(format!(
                        "no answer through mapped memory within {timeout:?} (the host never \
                         saw the kernel's write, or the kernel did not run)"
                    ))
                }
                _ => std::hint::spin_loop(),
            }
        }
    });
    // Waits for the probe (it gives up after `polls`, about twice `timeout`) before
    // `flags` goes away, but bounded here too: a probe that never got scheduled would
    // otherwise hold the host forever.
    let outcome = outcome?;
    let limit = timeout.saturating_mul(4) + Duration::from_secs(1);
    let deadline = Instant::now() + limit;
    loop {
        match stream.query() {
            Ok(true) => return Ok(outcome),
            Ok(false) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(100));
            }
            Ok(false) => {
                // Still running: freeing `flags` or reusing the stream under it would be
                // wrong, so both are leaked.
                std::mem::forget(flags);
                std::mem::forget(stream);
                return Ok(Err(format!(
                    "the probe kernel did not finish within {limit:?} (never scheduled, or \
                     stuck); its buffer and stream are leaked"
                )));
            }
            Err(e) => {
                ctx.poison(&e);
                return Err(e);
            }
        }
    }
}
