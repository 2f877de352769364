//! Test support shared by gyre's CUDA tests (this crate's and the facade's): whether a
//! test that needs a GPU runs, skips or fails, and running such tests one at a time.
//!
//! * [`require_cuda`]: `GYRE_REQUIRE_CUDA=1` turns every "no GPU here, skipping" into a
//!   failure, so a GPU run cannot pass by skipping (the GPU kit sets it).
//! * [`serial`]: the tests of one binary share the process's primary context; each
//!   takes this lock, so they run one at a time whatever `--test-threads` says (ring
//!   kernels of concurrent tests would share the context's stream and kernel limits, and
//!   its frees wait for all of them).

use std::sync::{Mutex, MutexGuard};

/// The environment variable that makes a CUDA skip a failure.
pub const REQUIRE_ENV: &str = "GYRE_REQUIRE_CUDA";

/// Whether `GYRE_REQUIRE_CUDA=1`.
pub fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// `Ok(value)` passes through; `Err(why)` prints `SKIP test: why` and returns `None`, or
/// panics when [`required`].
///
/// # Panics
///
/// With `GYRE_REQUIRE_CUDA=1` and an `Err`.
pub fn require_cuda<T, E: std::fmt::Display>(test: &str, r: Result<T, E>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if required() => panic!("{test}: {REQUIRE_ENV}=1 but CUDA is unusable: {e}"),
        Err(e) => {
            eprintln!("SKIP {test}: {e} ({REQUIRE_ENV}=1 makes this a failure)");
            None
        }
    }
}

/// One CUDA test at a time in this process; hold the guard for the whole test.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
