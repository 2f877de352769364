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

/// The environment variable that marks a test process started by [`isolated`].
pub const CHILD_ENV: &str = "GYRE_ISOLATED_TEST";

/// Runs the test `name` of the current test binary in a process of its own and returns
/// whether this process is that child (then the caller runs the test's body). In the
/// parent, it starts the child (`<exe> --exact <name> --test-threads=1 --nocapture`),
/// forwards its output, and panics if the child fails or runs nothing.
///
/// For tests that end a CUDA context for good (a device fault): NVIDIA documents sticky
/// errors as leaving the process unable to use CUDA, so such a test must not share its
/// process with the rest of a suite.
///
/// # Panics
///
/// In the parent, when the child cannot start, fails, or did not run the test.
pub fn isolated(name: &str) -> bool {
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{name}: current_exe: {e}"));
    let out = std::process::Command::new(exe)
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, name)
        .output()
        .unwrap_or_else(|e| panic!("{name}: starting its own process: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{name} failed in its own process ({})",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{name}: its own process ran no test"
    );
    false
}
