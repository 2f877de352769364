//! The device clock: OpenCL C has no wall clock, so the ring kernel reads a tick counter
//! (`GYRE_CL_TICKS()` in `port_opencl.h`) and the host tells it, at build time, how many
//! nanoseconds a tick is. `calibrate` measures that with a one-work-item probe kernel
//! read twice, some milliseconds apart, against the host's monotonic clock. The
//! result is a [`ClockScale`] (`scale.rs`, shared with the program builder); a
//! calibration that agrees with the one kept from an earlier process uses that one
//! (`clock_cache.rs`), so that the build options, and the driver's program cache, stay
//! the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::kernel::Kernel;

use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_WRITE};
use opencl3::types::CL_BLOCKING;

use crate::clock_cache;
use crate::error::{check, Error, Result};
use crate::probe::DeviceInfo;
use crate::program::{self, CLOCK_PROBE_ENTRY};
pub use crate::scale::ClockScale;

/// Host time between the two probe readings.
const CALIBRATION_GAP: Duration = Duration::from_millis(20);

/// One reading of the device counter: (ticks, host time at the middle of the command).
/// `out` is a buffer (any device has those, SVM or not), read back by a blocking read.
fn read_ticks(
    queue: &CommandQueue,
    kernel: &Kernel,
    out: &Buffer<u8>,
    t0: Instant,
) -> Result<(u64, f64)> {
    let global = [1usize];
    let before = t0.elapsed().as_nanos() as f64;
    // SAFETY: the probe kernel's one argument is the buffer `out` (by handle), which
    // outlives the command (finish below waits for it); one work-item.
    let event = unsafe {
        check("clSetKernelArg", kernel.set_arg(0, &out.get()), || {
            ", clock probe".into()
        })?;
        check(
            "clEnqueueNDRangeKernel",
            queue.enqueue_nd_range_kernel(
                kernel.get(),
                1,
                std::ptr::null(),
                global.as_ptr(),
                global.as_ptr(),
                &[],
            ),
            || ", clock probe, 1 work-item".into(),
        )?
    };
    check("clFinish", queue.finish(), || ", clock probe".into())?;
    drop(event);
    let after = t0.elapsed().as_nanos() as f64;
    let mut ticks = [0u8; 8];
    // SAFETY: a blocking read of the first 8 bytes of `out` (8 or more bytes long) into a
    // live local array, after the kernel finished.
    unsafe {
        check(
            "clEnqueueReadBuffer",
            opencl3::command_queue::enqueue_read_buffer(
                queue.get(),
                out.get(),
                CL_BLOCKING,
                0,
                ticks.len(),
                ticks.as_mut_ptr().cast(),
                0,
                std::ptr::null(),
            )
            .map(|e| drop(opencl3::event::Event::new(e)))
            .map_err(opencl3::error_codes::ClError),
            || ", the clock probe's reading".into(),
        )?;
    }
    Ok((u64::from_ne_bytes(ticks), (before + after) / 2.0))
}

/// Measures the device clock's rate: builds the probe kernel, reads the counter twice
/// [`CALIBRATION_GAP`] apart and divides by the host time between the readings.
pub(crate) fn calibrate(ctx: &Arc<Context>, info: &DeviceInfo) -> Result<ClockScale> {
    let fail = |reason: String| Error::Clock {
        device: info.name.clone(),
        reason,
    };
    let program = program::build(
        ctx,
        info,
        "clock_probe.cl",
        &program::clock_probe_source(),
        &program::language_options(info.legacy_atomics(), info.nvidia_ptx()),
    )?;
    let kernel = check(
        "clCreateKernel",
        Kernel::create(&program, CLOCK_PROBE_ENTRY),
        || format!(", {CLOCK_PROBE_ENTRY}"),
    )?;
    let queue = check(
        "clCreateCommandQueueWithProperties",
        CommandQueue::create_default_with_properties(ctx, 0, 0),
        || ", in-order, for the clock probe".into(),
    )?;
    // SAFETY: a valid context, no host pointer.
    let out = check(
        "clCreateBuffer",
        unsafe { Buffer::<u8>::create(ctx, CL_MEM_READ_WRITE, 128, std::ptr::null_mut()) },
        || ", 128 bytes for the clock probe".into(),
    )?;
    let t0 = Instant::now();
    // A first run warms the kernel up (PoCL finishes compiling on first launch).
    read_ticks(&queue, &kernel, &out, t0)?;
    let (a, ha) = read_ticks(&queue, &kernel, &out, t0)?;
    std::thread::sleep(CALIBRATION_GAP);
    let (b, hb) = read_ticks(&queue, &kernel, &out, t0)?;
    if b <= a {
        return Err(fail(format!(
            "the tick counter did not advance ({a} then {b}) over {CALIBRATION_GAP:?}"
        )));
    }
    let measured = (hb - ha) / (b - a) as f64;
    ClockScale::from_ns_per_tick(measured)
        .ok_or_else(|| fail(format!("implausible rate: {measured} ns per tick")))?;
    // The kept calibration when this one agrees with it: the same build options as the
    // last process, so the driver's program cache serves the ring kernels.
    let ns_per_tick = clock_cache::settle(clock_cache::path_for(info).as_deref(), measured);
    let scale = ClockScale::from_ns_per_tick(ns_per_tick)
        .ok_or_else(|| fail(format!("implausible rate: {ns_per_tick} ns per tick")))?;
    tracing::info!(device = %info.name, measured, ns_per_tick, "OpenCL device clock calibrated");
    Ok(scale)
}
