//! Shared by gyre's OpenCL test binaries (`tests/conformance_opencl.rs`,
//! `crates/gyre-opencl/tests/device.rs`): which device to use, skip or fail, a per-test
//! watchdog, and the compile check in a child process.
//!
//! * **Skip or fail.** Without a usable OpenCL device every test prints `SKIP` and the
//!   reason, and passes, unless `GYRE_REQUIRE_OPENCL=1` (CI sets it), where it fails.
//! * **One at a time.** Each test holds a process-wide lock: a persistent work-group holds
//!   a compute unit, and PoCL has one per core.
//! * **Watchdog.** Each test arms a watchdog; past its limit it prints which test hung and
//!   aborts the test binary, so a hang fails CI instead of stalling it.
//! * **Compiler in a child.** PoCL's compiler can abort the process on code it does not
//!   expect. Before the first test, the binary re-runs itself on one test (`child_test`)
//!   with `GYRE_OPENCL_CHILD=1`, which builds and launches every ring kernel; a crash there
//!   is reported as a failure with the child's output.

#![allow(dead_code)]

/// One test per case of a shared case module (`tests/loan_cases/`, `pipeline_cases/`,
/// `pool_cases/`) on the OpenCL device: each holds the binary's `guard()` (defined where
/// the macro is used), skips without a device, and calls `$cases::case($target(platform,
/// device))`. (Unused by the binaries without shared cases.)
#[allow(unused_macros)]
macro_rules! device_cases {
    ($cases:ident, $target:path, [$($case:ident),* $(,)?]) => {
        $(#[test]
        fn $case() {
            let _g = guard();
            let Some((p, d)) = support::device_or_skip(stringify!($case)) else {
                return;
            };
            $cases::$case($target(p, d));
        })*
    };
}
#[allow(unused_imports)]
pub(crate) use device_cases;

use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Set to `1` to fail, not skip, when no OpenCL device is usable.
pub const REQUIRE_ENV: &str = "GYRE_REQUIRE_OPENCL";
/// Set (to `1`) in the child process of the compile check.
pub const CHILD_ENV: &str = "GYRE_OPENCL_CHILD";
/// Longest a test may run before the watchdog aborts the binary.
pub const TEST_LIMIT: Duration = Duration::from_secs(300);
/// Longest the compile-check child may run.
pub const CHILD_LIMIT: Duration = Duration::from_secs(300);

/// Whether `GYRE_REQUIRE_OPENCL=1`.
pub fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// Whether this process is the compile-check child.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// The first usable OpenCL device (platform, device), or why there is none.
pub fn usable_device() -> Result<(usize, usize), String> {
    let platforms = gyre_opencl::probe().map_err(|e| e.to_string())?;
    let mut why = Vec::new();
    for p in &platforms {
        for d in &p.devices {
            match d.unusable() {
                None => return Ok((p.index, d.index)),
                Some(e) => why.push(format!("{}:{} {}: {e}", p.index, d.index, d.name)),
            }
        }
    }
    Err(format!("no usable OpenCL device ({})", why.join("; ")))
}

/// The device for `test`: `Some` when usable; `None` after printing `SKIP` when not;
/// panics when not and `GYRE_REQUIRE_OPENCL=1`.
pub fn device_or_skip(test: &str) -> Option<(usize, usize)> {
    match usable_device() {
        Ok(d) => Some(d),
        Err(why) if required() => panic!("{REQUIRE_ENV}=1 but {test} cannot run: {why}"),
        Err(why) => {
            eprintln!("SKIP {test}: {why}");
            None
        }
    }
}

/// Held by a running test: the serialising lock and the armed watchdog.
pub struct Guard {
    done: Arc<(Mutex<bool>, Condvar)>,
    _lock: MutexGuard<'static, ()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let (m, cv) = &*self.done;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}

fn lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serialises the test, runs the compile check once (unless this is the child), and arms
/// a watchdog of `limit` for `test`.
pub fn guard(test: &str, child_test: &str, limit: Duration) -> Guard {
    let lock = lock();
    if !is_child() && usable_device().is_ok() {
        if let Err(e) = compile_check(child_test) {
            panic!("{e}");
        }
    }
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let d = done.clone();
    let name = test.to_owned();
    std::thread::spawn(move || {
        let (m, cv) = &*d;
        let deadline = Instant::now() + limit;
        let mut finished = m.lock().unwrap_or_else(|e| e.into_inner());
        while !*finished {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                eprintln!(
                    "TIMEOUT: {name} ran longer than {limit:?}; aborting the test binary so \
                     that a hang fails instead of stalling CI"
                );
                std::process::abort();
            }
            finished = cv
                .wait_timeout(finished, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    });
    Guard { done, _lock: lock }
}

/// Re-runs this test binary on `child_test` with `GYRE_OPENCL_CHILD=1` (once per process)
/// and reports a crash, a failure or a hang of the child as an error with its output.
pub fn compile_check(child_test: &str) -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT.get_or_init(|| run_child(child_test)).clone()
}

fn run_child(child_test: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(&exe)
        .args([child_test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "spawning {} for the OpenCL compile check: {e}",
                exe.display()
            )
        })?;
    let deadline = Instant::now() + CHILD_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the OpenCL compile check ({child_test} in a child process) hung for \
                     {CHILD_LIMIT:?}"
                ));
            }
            Err(e) => return Err(format!("waiting for the OpenCL compile check: {e}")),
        }
    };
    let out = child
        .wait_with_output()
        .map_err(|e| format!("reading the compile check's output: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if status.success() && text.contains("1 passed") {
        Ok(())
    } else {
        Err(format!(
            "the OpenCL compile check ({child_test}, run in a child process because PoCL's \
             compiler can abort the process) failed with {status}; its output:\n{text}"
        ))
    }
}

/// The compute units of OpenCL device `device` of `platform` (as `gyre doctor` lists
/// them): how many persistent kernels it runs at once.
pub fn compute_units(platform: usize, device: usize) -> usize {
    gyre_opencl::probe()
        .expect("probe")
        .into_iter()
        .find(|p| p.index == platform)
        .and_then(|p| p.devices.into_iter().find(|d| d.index == device))
        .map(|d| d.compute_units as usize)
        .expect("the device")
}
