//! A clean stop on SIGINT / SIGTERM: the first signal sets a flag that `demo --serve` and
//! `top` poll; a second one gets the default action.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT / SIGTERM once [`install_stop_handler`] ran.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    STOP.store(true, Ordering::SeqCst);
}

/// Turns the first SIGINT / SIGTERM into [`stop_requested`]; a second one gets the
/// default action (terminates), in case the clean stop hangs.
pub fn install_stop_handler() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic.
        let rc = unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART | libc::SA_RESETHAND;
            libc::sigaction(sig, &sa, core::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGINT / SIGTERM arrived since [`install_stop_handler`].
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
