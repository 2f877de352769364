//! A running ring kernel ([`OpenClKernel`], gyre's `KernelInstance` on OpenCL) and the
//! compute unit it holds ([`Reservation`]).
//!
//! A persistent work-group holds a compute unit until it returns, and OpenCL promises no
//! forward progress to a group that is not resident: PoCL runs as many groups at once as
//! it has worker threads (one per core). So a device runs at most as many ring kernels
//! from this process as it has compute units; one more is [`Error::DeviceFull`], not a
//! kernel that never starts. On a CPU device the same worker threads also run the copy
//! commands of the copy strategies, so while any kernel over device buffers runs, one
//! compute unit is kept free for its copies.

use std::sync::{Arc, Mutex};

use gyre_core::bridge::CopyEngine;
use gyre_core::{KernelInstance, SharedRegion};
use opencl3::command_queue::CommandQueue;
use opencl3::event::{Event, CL_COMPLETE};
use opencl3::kernel::Kernel;

use crate::error::{check, Error, Result};

/// Ring kernels running on one device from this process.
#[derive(Debug, Default)]
pub(crate) struct Occupancy {
    /// Every running ring kernel.
    running: usize,
    /// Those over device buffers (the copy strategies).
    copying: usize,
}

/// A compute unit held by a running ring kernel; released on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    occupancy: Arc<Mutex<Occupancy>>,
    copying: bool,
}

impl Reservation {
    /// Holds a compute unit of a device with `compute_units` (named `device`) for a ring
    /// kernel, over device buffers when `copying`; on a CPU device (`cpu`), one unit stays
    /// free for copies while any such kernel runs.
    ///
    /// # Errors
    ///
    /// [`Error::DeviceFull`] when that many kernels already run.
    pub(crate) fn take(
        occupancy: &Arc<Mutex<Occupancy>>,
        device: &str,
        compute_units: u32,
        cpu: bool,
        copying: bool,
    ) -> Result<Self> {
        let mut o = occupancy.lock().unwrap_or_else(|e| e.into_inner());
        let for_copies = usize::from(cpu && (copying || o.copying > 0));
        if o.running + 1 + for_copies > compute_units.max(1) as usize {
            return Err(Error::DeviceFull {
                device: device.to_owned(),
                running: o.running,
                compute_units,
                kept_for_copies: for_copies == 1,
            });
        }
        o.running += 1;
        o.copying += usize::from(copying);
        Ok(Self {
            occupancy: occupancy.clone(),
            copying,
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut o = self.occupancy.lock().unwrap_or_else(|e| e.into_inner());
        o.running = o.running.saturating_sub(1);
        o.copying = o.copying.saturating_sub(usize::from(self.copying));
    }
}

/// The memory a ring kernel runs over, kept until it has finished.
#[expect(
    dead_code,
    reason = "held, never read: the kernel uses the memory until it ends"
)]
pub(crate) enum Rings {
    /// The shared region in SVM (zero copy).
    Shared(Arc<SharedRegion>),
    /// Device buffers behind a copy engine (the copy strategies).
    Resident(Arc<dyn CopyEngine>),
}

/// Everything a running kernel needs kept alive (dropped in this order once it is over).
pub(crate) struct Running {
    pub(crate) event: Event,
    pub(crate) queue: CommandQueue,
    pub(crate) _kernel: Kernel,
    pub(crate) _rings: Rings,
    pub(crate) _loans: Option<Arc<gyre_core::loan::LoanArena>>,
    /// A pipeline stage's link: the next stage's region, which the kernel writes.
    pub(crate) _link: Option<gyre_core::chain::StageLink>,
    pub(crate) _reservation: Reservation,
}

/// A ring kernel running on an OpenCL device.
pub(crate) struct OpenClKernel {
    pub(crate) device: String,
    /// `None` once joined.
    pub(crate) state: Mutex<Option<Running>>,
}

impl OpenClKernel {
    /// Flushes the kernel's queue so it starts while the host polls for its state. On an
    /// error `k` is dropped, which leaks its rings if the command might still run.
    pub(crate) fn start(k: Self) -> Result<Self> {
        {
            let g = k.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(r) = g.as_ref() {
                check("clFlush", r.queue.flush(), || {
                    ", the ring kernel's queue".into()
                })?;
            }
        }
        Ok(k)
    }
}

/// The execution status of the kernel command: `CL_COMPLETE` (0), a state (> 0) or an
/// error (< 0).
fn status(event: &Event) -> i32 {
    match event.command_execution_status() {
        Ok(s) => s.0,
        Err(e) => e.0,
    }
}

fn to_core(e: Error) -> gyre_core::Error {
    gyre_core::Error::Launch {
        backend: "opencl",
        kernel: "(join)".to_owned(),
        source: gyre_core::Cause::new(e),
    }
}

impl KernelInstance for OpenClKernel {
    fn is_finished(&self) -> bool {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_ref() {
            None => true,
            // Complete, or failed: `join` reports which.
            Some(r) => status(&r.event) <= CL_COMPLETE,
        }
    }

    fn join(&self) -> gyre_core::Result<()> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(r) = g.as_ref() else {
            return Ok(());
        };
        let waited = check("clWaitForEvents", r.event.wait(), || {
            format!(", the ring kernel on {}", self.device)
        });
        let st = status(&r.event);
        // The command is over (or the queue is broken): release everything.
        *g = None;
        waited.map_err(to_core)?;
        if st < CL_COMPLETE {
            return Err(to_core(crate::error::cl_error(
                "the ring kernel command",
                st,
                format!(", on {}", self.device),
            )));
        }
        Ok(())
    }
}

impl Drop for OpenClKernel {
    fn drop(&mut self) {
        let state = match self.state.get_mut() {
            Ok(s) => s.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(r) = state {
            if status(&r.event) <= CL_COMPLETE {
                drop(r);
            } else {
                // Freeing the rings under a running kernel would let it write freed
                // memory: leak the rings, queue and kernel (and keep the compute unit
                // reserved: the group still occupies it).
                tracing::error!(
                    device = %self.device,
                    "OpenCL ring kernel dropped while running: leaking its rings and queue"
                );
                std::mem::forget(r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(o: &Arc<Mutex<Occupancy>>, cus: u32, cpu: bool, copying: bool) -> Result<Reservation> {
        Reservation::take(o, "dev", cus, cpu, copying)
    }

    #[test]
    fn a_gpu_runs_one_kernel_per_compute_unit_whatever_the_placement() {
        let o = Arc::default();
        let a = take(&o, 2, false, true).unwrap();
        let _b = take(&o, 2, false, false).unwrap();
        assert!(matches!(
            take(&o, 2, false, true),
            Err(Error::DeviceFull {
                running: 2,
                compute_units: 2,
                kept_for_copies: false,
                ..
            })
        ));
        drop(a);
        take(&o, 2, false, true).unwrap();
    }

    #[test]
    fn a_cpu_device_keeps_a_unit_free_for_copies_while_a_copying_kernel_runs() {
        let o = Arc::default();
        // Zero copy alone: every unit.
        let a = take(&o, 2, true, false).unwrap();
        let b = take(&o, 2, true, false).unwrap();
        drop((a, b));
        // A copying kernel leaves one unit for its copies...
        let c = take(&o, 2, true, true).unwrap();
        assert!(take(&o, 2, true, false).is_err());
        assert!(take(&o, 2, true, true).is_err());
        drop(c);
        // ... and cannot take the last unit from a zero-copy kernel.
        let d = take(&o, 2, true, false).unwrap();
        assert!(take(&o, 2, true, true).is_err());
        drop(d);
        // A 1-unit CPU device runs no kernel over buffers, and says why.
        let o1 = Arc::default();
        assert!(matches!(
            take(&o1, 1, true, true),
            Err(Error::DeviceFull {
                running: 0,
                kept_for_copies: true,
                ..
            })
        ));
        let o3 = Arc::default();
        let _e = take(&o3, 3, true, true).unwrap();
        let _f = take(&o3, 3, true, true).unwrap();
        assert!(take(&o3, 3, true, false).is_err());
    }
}
