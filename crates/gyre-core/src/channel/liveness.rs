//! Noticing a kernel that died without saying so.
//!
//! A kernel's loop writes a final state into its control line before it exits; waiters
//! and the completion driver watch that line ([`Channel::check_stopped`]). A device can
//! end a kernel's execution without that write: a fault in device code, a display
//! watchdog, a reset. Then the line keeps saying *running* and waiters would wait
//! forever. A backend that can see its kernel's execution (CUDA: a query of the kernel's
//! stream) reports it through [`Liveness`]; the channel consults it while the line says
//! running, at most once every [`LIVENESS_PERIOD_NS`], and on a failure closes the ring,
//! records the cause and wakes every waiter, which then fails with
//! [`Error::KernelLost`] (code `KERNEL_GONE`) naming the cause.

use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;

use gyre_abi::error::KERNEL_GONE;

use super::Channel;
use crate::error::Error;

/// The value of `Channel::stopped` once the kernel is known lost: not a kernel state (those
/// are all below 0x100), a host-side verdict, like the watchdog's.
pub(crate) const LOST: u32 = 0x101;

/// Minimum time between two consultations of a [`Liveness`] (1 ms).
pub const LIVENESS_PERIOD_NS: u64 = 1_000_000;

/// What a backend knows about its kernel's execution (every `gyre_core::KernelInstance`
/// is one, through its `failure` method).
pub trait Liveness: Send + Sync {
    /// `Some(cause)` once the device ended the kernel's execution with an error.
    fn failure(&self) -> Option<String>;
}

impl Channel {
    /// Lets the channel consult `kernel` while the control line says the kernel runs (see
    /// the [module documentation](self)). Set once; later calls are ignored. Pass a weak
    /// handle (`Weak<dyn KernelInstance>` is a `Liveness`) when the channel must not keep
    /// the kernel alive.
    pub fn watch_liveness(&self, kernel: Arc<dyn Liveness>) {
        let _ = self.liveness.set(kernel);
    }

    /// Consults the liveness source (rate-limited); on a failure marks the kernel lost.
    pub(crate) fn check_lost(&self) -> Option<Error> {
        let source = self.liveness.get()?;
        let now = crate::clock::now_ns();
        let last = self.liveness_at.load(Relaxed);
        if now.saturating_sub(last) < LIVENESS_PERIOD_NS
            || self
                .liveness_at
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return None;
        }
        let cause = source.failure()?;
        Some(self.mark_lost(cause))
    }

    /// Records that the kernel is gone (`cause`), closes the ring and wakes every waiter.
    /// A final state the kernel wrote meanwhile takes precedence. Returns the error
    /// waiters get.
    pub fn mark_lost(&self, cause: String) -> Error {
        if self.lost.set(cause).is_ok() {
            tracing::error!(
                kernel = %self.name,
                cause = self.lost.get().map_or("", String::as_str),
                "kernel lost: its execution ended without a final state"
            );
            if self
                .stopped
                .compare_exchange(0, LOST, AcqRel, Acquire)
                .is_ok()
            {
                self.stopped_code.store(KERNEL_GONE, Release);
            }
            self.close();
            self.wake_all();
        }
        let s = self.stopped.load(Acquire);
        self.stopped_error(s, self.stopped_code.load(Acquire))
    }

    /// The error of a kernel marked lost.
    pub(crate) fn lost_error(&self) -> Error {
        Error::KernelLost {
            kernel: self.name.clone(),
            code: KERNEL_GONE,
            cause: self.lost.get().cloned().unwrap_or_else(|| "unknown".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::channel::Kind;
    use crate::region::SharedRegion;
    use crate::ring::Geometry;

    struct Dies(AtomicBool);

    impl Liveness for Dies {
        fn failure(&self) -> Option<String> {
            self.0
                .load(Ordering::Acquire)
                .then(|| "cuStreamQuery failed: CUDA_ERROR_ILLEGAL_ADDRESS (code 700)".into())
        }
    }

    #[test]
    fn a_dead_kernel_fails_its_waiters_with_the_cause() {
        let region =
            Arc::new(SharedRegion::new_host(Geometry::new(4, 128, 1).unwrap(), 0).unwrap());
        let ch = Channel::new(region, "dies");
        let src = Arc::new(Dies(AtomicBool::new(false)));
        ch.watch_liveness(src.clone());
        let i = ch.try_publish(Kind::Call, 1, b"x").unwrap();
        // Alive: nothing happens.
        assert!(ch.check_stopped().is_none());
        src.0.store(true, Ordering::Release);
        let idle = crate::IdleStrategy::default();
        let e = ch
            .wait_blocking(i, &idle, None, |_| Ok(()))
            .expect_err("a lost kernel answers nothing");
        match e {
            Error::KernelLost { code, cause, .. } => {
                assert_eq!(code, KERNEL_GONE);
                assert!(cause.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{cause}");
            }
            other => panic!("{other}"),
        }
        assert!(ch.is_closed());
        assert!(matches!(ch.closed_error(), Error::KernelLost { .. }));
    }
}
