//! What happens to a device's primary context after a sticky error: the decisions of
//! [`crate::registry`] and of a context's `Drop`, written against a small driver trait
//! ([`PrimaryDriver`]) so that they are unit-tested here against a fake driver that
//! returns sticky codes.
//!
//! The rules:
//!
//! * **Close (the last holder is gone).** A poisoned context is *reset before it is
//!   released* (`cuDevicePrimaryCtxReset`, then `cuDevicePrimaryCtxRelease`): the reset
//!   destroys every allocation, module and stream of it, so gyre drops its own handles of
//!   that context without driver calls. The device is then [`Health::Reset`]: the next
//!   context is checked before use.
//! * **Open.** A device marked [`Health::Dead`] is refused at once with
//!   [`Error::ProcessRestartRequired`] naming the *original* fault. A retain that fails
//!   with a sticky code, or a check after a reset that fails with one, is met with
//!   another reset and another try, at most [`RESET_TRIES`] times; when none helps, the
//!   device is dead for the rest of the process. A failure that is not sticky (out of
//!   memory, say) is returned as it is, and the device stays as it was.
//!
//! NVIDIA documents sticky errors (`CUDA_ERROR_ILLEGAL_ADDRESS` and its kin, see
//! [`result::is_sticky`]) as needing a new process. Whether a reset suffices depends on
//! the driver: these rules use it where it does, and say so plainly where it does not.

use crate::error::{Error, Result};
use crate::result;
use crate::sys::{CUcontext, CUdevice};

/// Resets tried after a sticky failure before a device is declared dead.
pub(crate) const RESET_TRIES: usize = 2;

/// A sticky error: its raw code and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    /// The raw CUDA error code.
    pub(crate) code: i32,
    /// The CUDA error name.
    pub(crate) name: String,
}

impl Fault {
    /// The sticky error `e` carries, if it carries one.
    pub(crate) fn of(e: &Error) -> Option<Self> {
        let code = e.cuda_code().filter(|&c| result::is_sticky(c))?;
        Some(Self {
            code,
            name: result::error_name(code),
        })
    }

    /// The error every later use of a dead device gets.
    pub(crate) fn restart_required(&self, ordinal: i32) -> Error {
        Error::ProcessRestartRequired {
            ordinal,
            code: self.code,
            name: self.name.clone(),
        }
    }
}

/// What the process knows of a device's primary context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Health {
    /// No sticky error seen, or the last reset was checked and worked.
    #[default]
    Good,
    /// Reset after `fault`; the next context is checked before use.
    Reset {
        /// The fault that led to the reset.
        fault: Fault,
    },
    /// Unusable for the rest of the process after `fault`.
    Dead {
        /// The original fault.
        fault: Fault,
    },
}

impl Health {
    fn fault(&self) -> Option<&Fault> {
        match self {
            Health::Good => None,
            Health::Reset { fault } | Health::Dead { fault } => Some(fault),
        }
    }
}

/// The driver calls the rules make: the real driver ([`Driver`]) or, in tests, a fake.
pub(crate) trait PrimaryDriver {
    /// `cuDevicePrimaryCtxRetain`.
    fn retain(&self, dev: CUdevice) -> Result<CUcontext>;
    /// `cuDevicePrimaryCtxRelease`.
    ///
    /// # Safety
    ///
    /// Balances one successful `retain`; nothing uses that reference after.
    unsafe fn release(&self, dev: CUdevice) -> Result<()>;
    /// `cuDevicePrimaryCtxReset`.
    ///
    /// # Safety
    ///
    /// No handle made in the device's primary context is used after it.
    unsafe fn reset(&self, dev: CUdevice) -> Result<()>;
    /// A small allocation and a zeroing memset on a fresh stream of `ctx`, waited for:
    /// where a sticky error that survived a reset shows.
    fn check(&self, ctx: CUcontext) -> Result<()>;
}

/// The CUDA driver.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Driver;

impl PrimaryDriver for Driver {
    fn retain(&self, dev: CUdevice) -> Result<CUcontext> {
        result::primary_ctx_retain(dev)
    }

    unsafe fn release(&self, dev: CUdevice) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::primary_ctx_release(dev) }
    }

    unsafe fn reset(&self, dev: CUdevice) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::primary_ctx_reset(dev) }
    }

    fn check(&self, ctx: CUcontext) -> Result<()> {
        // SAFETY: `ctx` was just retained; every handle made here is released below, in
        // order, before returning.
        unsafe {
            result::ctx_set_current(ctx)?;
            let p = result::mem_alloc(256)?;
            let s = match result::stream_create() {
                Ok(s) => s,
                Err(e) => {
                    let _ = result::mem_free(p);
                    return Err(e);
                }
            };
            let r = result::memset_d8_async(p, 0, 256, s).and_then(|()| {
                result::stream_wait(
                    s,
                    "the check after a context reset",
                    std::time::Duration::from_secs(10),
                )
            });
            let _ = result::stream_destroy(s);
            let _ = result::mem_free(p);
            r
        }
    }
}

/// Retains the primary context of `dev` (device `ordinal`) under the rules of the module
/// docs, updating `health`.
///
/// # Errors
///
/// [`Error::ProcessRestartRequired`] naming the original fault for a dead device (or one
/// that dies here); the driver's error for a failure that is not sticky.
pub(crate) fn open(
    d: &impl PrimaryDriver,
    health: &mut Health,
    dev: CUdevice,
    ordinal: i32,
) -> Result<CUcontext> {
    if let Health::Dead { fault } = health {
        return Err(fault.restart_required(ordinal));
    }
    let mut resets = 0;
    loop {
        let failed = match d.retain(dev) {
            Ok(ctx) => {
                if !matches!(health, Health::Reset { .. }) {
                    return Ok(ctx);
                }
                match d.check(ctx) {
                    Ok(()) => {
                        tracing::info!(
                            device = ordinal,
                            "the CUDA context works again after its reset"
                        );
                        *health = Health::Good;
                        return Ok(ctx);
                    }
                    Err(e) => {
                        // A check that never finishes is a device still broken: reset
                        // again, as for a sticky code.
                        if Fault::of(&e).is_none() && !matches!(e, Error::Timeout { .. }) {
                            // Not the fault: give the retain back, keep the check due.
                            // SAFETY: balances the retain above; nothing of it is kept.
                            let _ = unsafe { d.release(dev) };
                            return Err(e);
                        }
                        // Reset while still retained, then released (module docs).
                        // SAFETY: the check released what it made; nothing else exists.
                        unsafe {
                            let _ = d.reset(dev);
                            let _ = d.release(dev);
                        }
                        resets += 1;
                        e
                    }
                }
            }
            Err(e) => {
                let Some(fault) = Fault::of(&e) else {
                    return Err(e);
                };
                if health.fault().is_none() {
                    *health = Health::Reset { fault };
                }
                if resets >= RESET_TRIES {
                    e
                } else {
                    // SAFETY: gyre holds no context of this device (this is an open: the
                    // registry has no live one), so no handle of it is used after.
                    if let Err(r) = unsafe { d.reset(dev) } {
                        tracing::warn!(device = ordinal, error = %r, "resetting a CUDA primary context whose retain failed");
                    }
                    resets += 1;
                    continue;
                }
            }
        };
        if resets >= RESET_TRIES {
            // Every way here passed through `Reset { fault }` (a sticky retain sets it; a
            // check runs only in it): that fault is the original one.
            let fault = health.fault().cloned().unwrap_or_else(|| {
                let code = failed.cuda_code().unwrap_or(0);
                Fault {
                    code,
                    name: result::error_name(code),
                }
            });
            tracing::error!(
                device = ordinal,
                code = fault.code,
                name = %fault.name,
                last = %failed,
                "the CUDA device is unusable after resets: a new process is needed"
            );
            let e = fault.restart_required(ordinal);
            *health = Health::Dead { fault };
            return Err(e);
        }
    }
}

/// Gives back a context of `dev` that nothing uses any more: reset first when it is
/// `poisoned` (then the device is [`Health::Reset`], checked at the next open), then
/// released. Failures are logged. Returns whether it was reset.
pub(crate) fn close(
    d: &impl PrimaryDriver,
    health: &mut Health,
    dev: CUdevice,
    ordinal: i32,
    poisoned: Option<Fault>,
) -> bool {
    let mut reset = false;
    if let Some(fault) = poisoned {
        // SAFETY: the caller (the context's Drop) uses no handle of the context after.
        match unsafe { d.reset(dev) } {
            Ok(()) => {
                reset = true;
                tracing::warn!(
                    device = ordinal,
                    code = fault.code,
                    name = %fault.name,
                    "CUDA primary context reset after a sticky error"
                );
            }
            Err(e) => tracing::error!(error = %e, "resetting a poisoned CUDA context"),
        }
        // A failed reset leaves the check to find out: the next open resets again.
        if !matches!(health, Health::Dead { .. }) {
            *health = Health::Reset { fault };
        }
    }
    // SAFETY: balances the retain of `open`; the caller uses nothing of it after.
    if let Err(e) = unsafe { d.release(dev) } {
        if reset || health.fault().is_some() {
            tracing::debug!(error = %e, "releasing a reset CUDA primary context");
        } else {
            tracing::warn!(error = %e, "releasing the CUDA primary context");
        }
    }
    reset
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    const ILLEGAL_ADDRESS: i32 = 700;
    const OUT_OF_MEMORY: i32 = 2;

    /// A driver whose calls answer from scripts (`Ok` once each is empty) and are logged.
    #[derive(Default)]
    struct Fake {
        retains: RefCell<VecDeque<i32>>,
        checks: RefCell<VecDeque<i32>>,
        resets: RefCell<VecDeque<i32>>,
        log: RefCell<Vec<&'static str>>,
    }

    /// A scripted answer: 0 (or nothing left) is success, -1 a check that timed out,
    /// another value that driver code.
    fn answer(script: &RefCell<VecDeque<i32>>, op: &'static str) -> Result<()> {
        match script.borrow_mut().pop_front() {
            None | Some(0) => Ok(()),
            Some(-1) => Err(Error::Timeout {
                what: op.to_owned(),
                after: std::time::Duration::from_secs(10),
            }),
            Some(code) => Err(Error::driver(op, code, String::new())),
        }
    }

    impl Fake {
        fn with(retains: &[i32], checks: &[i32], resets: &[i32]) -> Self {
            Self {
                retains: RefCell::new(retains.iter().copied().collect()),
                checks: RefCell::new(checks.iter().copied().collect()),
                resets: RefCell::new(resets.iter().copied().collect()),
                log: RefCell::default(),
            }
        }
        fn log(&self) -> Vec<&'static str> {
            self.log.borrow().clone()
        }
    }

    impl PrimaryDriver for Fake {
        fn retain(&self, _: CUdevice) -> Result<CUcontext> {
            self.log.borrow_mut().push("retain");
            answer(&self.retains, "cuDevicePrimaryCtxRetain")
                .map(|()| std::ptr::NonNull::<u8>::dangling().as_ptr().cast())
        }
        unsafe fn release(&self, _: CUdevice) -> Result<()> {
            self.log.borrow_mut().push("release");
            Ok(())
        }
        unsafe fn reset(&self, _: CUdevice) -> Result<()> {
            self.log.borrow_mut().push("reset");
            answer(&self.resets, "cuDevicePrimaryCtxReset")
        }
        fn check(&self, _: CUcontext) -> Result<()> {
            self.log.borrow_mut().push("check");
            answer(&self.checks, "cuMemsetD8Async")
        }
    }

    fn fault(code: i32) -> Fault {
        Fault {
            code,
            name: result::error_name(code),
        }
    }

    fn restart_code(e: &Error) -> Option<i32> {
        match e {
            Error::ProcessRestartRequired { code, .. } => Some(*code),
            _ => None,
        }
    }

    #[test]
    fn a_healthy_device_is_retained_and_released_without_resets() {
        let d = Fake::default();
        let mut h = Health::Good;
        assert!(open(&d, &mut h, 0, 0).is_ok());
        assert!(!close(&d, &mut h, 0, 0, None));
        assert_eq!(d.log(), ["retain", "release"]);
        assert_eq!(h, Health::Good);
    }

    #[test]
    fn a_poisoned_context_is_reset_before_it_is_released_and_checked_at_the_next_open() {
        let d = Fake::default();
        let mut h = Health::Good;
        assert!(close(&d, &mut h, 0, 0, Some(fault(ILLEGAL_ADDRESS))));
        assert_eq!(d.log(), ["reset", "release"]);
        assert_eq!(
            h,
            Health::Reset {
                fault: fault(ILLEGAL_ADDRESS)
            }
        );
        assert!(open(&d, &mut h, 0, 0).is_ok());
        assert_eq!(d.log(), ["reset", "release", "retain", "check"]);
        assert_eq!(h, Health::Good);
    }

    #[test]
    fn a_refused_retain_is_reset_and_retried_and_then_works() {
        // The driver refuses the retain with the sticky code once (a process that faulted
        // without gyre noticing), then the reset clears it.
        let d = Fake::with(&[ILLEGAL_ADDRESS], &[], &[]);
        let mut h = Health::Good;
        assert!(open(&d, &mut h, 0, 0).is_ok());
        assert_eq!(d.log(), ["retain", "reset", "retain", "check"]);
        assert_eq!(h, Health::Good);
    }

    #[test]
    fn a_sticky_code_that_survives_the_resets_is_process_restart_required_naming_the_first_fault() {
        // Poisoned by an illegal address; every retain after it fails with the launch
        // failure code (as the driver reports it), and resets do not help.
        let d = Fake::with(&[719, 719, 719, 719], &[], &[]);
        let mut h = Health::Good;
        close(&d, &mut h, 0, 3, Some(fault(ILLEGAL_ADDRESS)));
        let e = open(&d, &mut h, 0, 3).unwrap_err();
        assert_eq!(restart_code(&e), Some(ILLEGAL_ADDRESS), "{e}");
        assert!(e.to_string().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{e}");
        assert!(e.to_string().contains("device 3"), "{e}");
        let resets = d.log().iter().filter(|&&c| c == "reset").count();
        assert_eq!(resets, 1 + RESET_TRIES, "{:?}", d.log());
        assert!(matches!(h, Health::Dead { .. }));
        // Dead stays dead, and costs no driver call.
        let calls = d.log().len();
        let again = open(&d, &mut h, 0, 3).unwrap_err();
        assert_eq!(restart_code(&again), Some(ILLEGAL_ADDRESS));
        assert_eq!(d.log().len(), calls);
    }

    #[test]
    fn a_failing_check_resets_again_and_dies_when_resets_do_not_help() {
        let d = Fake::with(&[], &[ILLEGAL_ADDRESS; 4], &[]);
        let mut h = Health::Good;
        close(&d, &mut h, 0, 0, Some(fault(ILLEGAL_ADDRESS)));
        let e = open(&d, &mut h, 0, 0).unwrap_err();
        assert_eq!(restart_code(&e), Some(ILLEGAL_ADDRESS), "{e}");
        // Every failed check: reset while retained, then release.
        assert_eq!(
            d.log(),
            [
                "reset", "release", "retain", "check", "reset", "release", "retain", "check",
                "reset", "release"
            ]
        );
    }

    #[test]
    fn a_check_that_fails_once_is_followed_by_a_reset_and_a_working_context() {
        let d = Fake::with(&[], &[ILLEGAL_ADDRESS], &[]);
        let mut h = Health::Reset {
            fault: fault(ILLEGAL_ADDRESS),
        };
        assert!(open(&d, &mut h, 0, 0).is_ok());
        assert_eq!(
            d.log(),
            ["retain", "check", "reset", "release", "retain", "check"]
        );
        assert_eq!(h, Health::Good);
    }

    #[test]
    fn a_failure_that_is_not_sticky_is_returned_as_is_and_changes_nothing() {
        let d = Fake::with(&[OUT_OF_MEMORY], &[], &[]);
        let mut h = Health::Good;
        let e = open(&d, &mut h, 0, 0).unwrap_err();
        assert_eq!(e.cuda_code(), Some(OUT_OF_MEMORY));
        assert_eq!(h, Health::Good);
        assert_eq!(d.log(), ["retain"]);
        // A check failing for another reason keeps the check due.
        let d = Fake::with(&[], &[OUT_OF_MEMORY], &[]);
        let mut h = Health::Reset {
            fault: fault(ILLEGAL_ADDRESS),
        };
        let e = open(&d, &mut h, 0, 0).unwrap_err();
        assert_eq!(e.cuda_code(), Some(OUT_OF_MEMORY));
        assert!(matches!(h, Health::Reset { .. }));
        assert_eq!(d.log(), ["retain", "check", "release"]);
    }

    #[test]
    fn a_check_that_never_finishes_is_a_broken_device() {
        let d = Fake::with(&[], &[-1, -1, -1], &[]);
        let mut h = Health::Reset {
            fault: fault(ILLEGAL_ADDRESS),
        };
        let e = open(&d, &mut h, 0, 0).unwrap_err();
        assert_eq!(restart_code(&e), Some(ILLEGAL_ADDRESS), "{e}");
        assert!(matches!(h, Health::Dead { .. }));
    }

    #[test]
    fn a_failed_reset_at_close_leaves_the_next_open_to_reset_again() {
        let d = Fake::with(&[ILLEGAL_ADDRESS], &[], &[ILLEGAL_ADDRESS]);
        let mut h = Health::Good;
        assert!(!close(&d, &mut h, 0, 0, Some(fault(ILLEGAL_ADDRESS))));
        assert!(open(&d, &mut h, 0, 0).is_ok());
        assert_eq!(
            d.log(),
            ["reset", "release", "retain", "reset", "retain", "check"]
        );
    }
}
