//! The lifecycle options of a [`KernelSpec`]: epochs, restarts, watching a handler source
//! file; and what launch and reload derive from a spec (its rings, its `LaunchSpec`).

use std::path::PathBuf;
use std::time::Duration;

use gyre_core::ring::Geometry;
use gyre_core::{Error, LaunchSpec, Result};

use crate::spec::KernelSpec;
use crate::RestartPolicy;

/// The shortest epoch: a handover costs a launch, so shorter ones spend the kernel's time
/// relaunching.
pub(crate) const MIN_EPOCH: Duration = Duration::from_micros(100);

impl<Req, Resp> KernelSpec<Req, Resp> {
    /// Bounded epochs: the kernel hands over to a fresh launch of itself (same handler,
    /// same rings, nothing lost; the protocol's handover) at least every `epoch`.
    ///
    /// A GPU that drives a display under Windows (WDDM) or WSL2 kills any kernel that runs
    /// longer than its watchdog (about 2 s), which the device reports as its kernel
    /// execution timeout. **By default** a kernel on such a device runs epochs of a
    /// quarter of that (500 ms); elsewhere (and on the CPU and OpenCL backends) it runs
    /// one launch for its whole life. `gyre doctor` shows the default. `epoch(ZERO)`
    /// turns epochs off even there.
    ///
    /// The kernel checks its epoch after every batch and on its slow path: a handler
    /// that runs longer than the rest of the device's watchdog still gets the kernel
    /// killed (the watchdog bounds one launch, not one request). Requests that arrive
    /// during a handover wait in the ring. Must be zero or at least 100 µs, below 2^32 µs
    /// (checked at launch).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::from_fn("inc", |x: u64| x + 1).epoch(Duration::from_millis(1)))?;
    /// for i in 0..100 {
    ///     assert_eq!(k.call_blocking(i)?, i + 1);
    /// }
    /// // Handovers happen in the background (bounded wait: a loaded machine is slower).
    /// let deadline = std::time::Instant::now() + Duration::from_secs(10);
    /// while k.relaunches().epochs == 0 && std::time::Instant::now() < deadline {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(k.relaunches().epochs > 0);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn epoch(mut self, epoch: Duration) -> Self {
        self.epoch = Some(epoch);
        self
    }

    /// What to do after the kernel faults (a handler panic, a device handler's trap): up
    /// to [`RestartPolicy::max_restarts`] relaunches on the same rings, with backoff. The
    /// request that faulted is answered with its error (`HANDLER_PANIC`); every other
    /// accepted request is answered by the new launch, as if nothing happened. Without a
    /// policy (the default), or once it gave up, a fault fails everything the kernel had
    /// not answered ([`Error::KernelFaulted`]).
    ///
    /// Not restarted: a kernel the device lost without writing a state (a device fault
    /// that breaks the CUDA context breaks every kernel and buffer on it), a kernel the
    /// watchdog declared unresponsive, a fault at launch. [`Kernel::relaunches`] counts
    /// restarts, and so do the telemetry export and `gyre top`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, RestartPolicy, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let spec = KernelSpec::from_fn("checked", |x: u32| if x == 13 { panic!("13") } else { x })
    ///     .restart(RestartPolicy::new(3));
    /// let k = rt.launch(spec)?;
    /// assert!(k.call_blocking(13).is_err()); // its own error: HANDLER_PANIC
    /// assert_eq!(k.call_blocking(14)?, 14); // answered by the restarted kernel
    /// assert_eq!(k.relaunches().restarts, 1);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    ///
    /// [`Kernel::relaunches`]: crate::Kernel::relaunches
    pub fn restart(mut self, policy: RestartPolicy) -> Self {
        self.restart = Some(policy);
        self
    }

    /// Reloads the kernel whenever the file at `path` changes: its content replaces the
    /// spec's device handler source (CUDA C++ on the CUDA backend, OpenCL C on the OpenCL
    /// backend; see [`KernelSpec::cuda_handler`], [`KernelSpec::opencl_handler`],
    /// [`KernelSpec::device_handler`]) through [`Kernel::reload`]: built first, so a build
    /// error is logged (with the compiler's log) and the running handler keeps serving.
    /// The directory is watched (`notify`), so editors that save by renaming work.
    ///
    /// The launch fails with [`Error::InvalidArgument`] when the kernel does not run a
    /// device source (a Rust handler on the CPU backend has no file to reload from).
    ///
    /// [`Kernel::reload`]: crate::Kernel::reload
    pub fn watch(mut self, path: impl Into<PathBuf>) -> Self {
        self.watch = Some(path.into());
        self
    }

    /// The rings this spec asks for, checked.
    pub(crate) fn geometry(&self) -> Result<Geometry> {
        use gyre_core::ring::geometry::{invalid_capacity, invalid_slot_size};
        let capacity = u32::try_from(self.capacity).map_err(|_| invalid_capacity(self.capacity))?;
        let slot_size =
            u32::try_from(self.slot_size).map_err(|_| invalid_slot_size(self.slot_size))?;
        let batch = match self.batch {
            Some(b) => u32::try_from(b).map_err(|_| Error::InvalidBatchSize {
                batch: b,
                capacity: self.capacity,
            })?,
            None => 32.min(capacity),
        };
        Geometry::new(capacity, slot_size, batch)
    }

    /// The epoch of a kernel on a device whose kernels live at most `limit` (`None`: no
    /// limit), in µs for the control block (0: none).
    pub(crate) fn epoch_us(&self, limit: Option<Duration>) -> Result<u32> {
        let epoch = match self.epoch {
            Some(e) => e,
            None => limit.map_or(Duration::ZERO, |l| l / 4),
        };
        if epoch.is_zero() {
            if let Some(l) = limit {
                tracing::warn!(kernel = %self.name, limit = ?l, "epochs are off on a device with a kernel execution timeout: the kernel is killed after it");
            }
            return Ok(0);
        }
        let us = u32::try_from(epoch.as_micros())
            .ok()
            .filter(|_| epoch >= MIN_EPOCH);
        us.ok_or_else(|| Error::InvalidArgument {
            name: "epoch",
            value: format!("{epoch:?}"),
            reason: "must be zero (off) or at least 100us, below 2^32 us",
        })
    }

    /// Checks the restart policy.
    pub(crate) fn validate_restart(&self) -> Result<()> {
        self.restart
            .as_ref()
            .map_or(Ok(()), RestartPolicy::validate)
    }

    /// What a backend launches for this spec (no export file, no doorbell: those belong
    /// to the kernel's rings, and the launch adds them).
    pub(crate) fn launch_spec(&self) -> LaunchSpec {
        LaunchSpec {
            name: self.name.clone(),
            handler: self.handler.clone(),
            builtin: self.builtin,
            idle: self.idle,
            telemetry: self.telemetry,
            cuda_source: self.cuda_source.clone(),
            opencl_source: self.opencl_source.clone(),
            lane_handler: self.lane_handler.clone(),
            export: None,
            doorbell: None,
            reply_bell: None,
            loans: None,
            link: None,
        }
    }

    /// This spec with its device handler source (the one `backend` runs) replaced by
    /// `source`, named after `path` (for the watcher).
    pub(crate) fn with_device_source(
        &self,
        backend: crate::Backend,
        path: &std::path::Path,
        source: String,
    ) -> Self {
        let s = std::sync::Arc::new(gyre_core::DeviceSource {
            name: path.display().to_string(),
            source,
        });
        let mut next = self.clone();
        match backend {
            crate::Backend::Cuda { .. } => next.cuda_source = Some(s),
            _ => next.opencl_source = Some(s),
        }
        next
    }
}
