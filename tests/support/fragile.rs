//! A portable handler that panics on some requests, for the device suites' stage restarts
//! (`docs/pipelines.md`, "Relaunching a stage"): what its outcomes must be, and a wait
//! for the restarts they cause.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use gyre::{codes, pipeline::Pipeline, Error};

/// Panics (division by zero) when `x % 16 == 0`: `HANDLER_PANIC` on every backend.
#[gyre::handler]
pub fn fragile(x: u64) -> u64 {
    (x << 8) / (x % 16)
}

/// Checks the outcome of each request `0..` through [`fragile`]: `HANDLER_PANIC` where
/// it panics, its answer otherwise. Returns the faults.
pub fn check(got: &[Result<u64, Error>]) -> u64 {
    let mut faults = 0;
    for (x, r) in (0u64..).zip(got) {
        match (x << 8).checked_div(x % 16) {
            None => {
                faults += 1;
                assert!(
                    matches!(r, Err(Error::Handler { status, .. }) if *status == codes::HANDLER_PANIC),
                    "request {x}: {r:?}"
                );
            }
            Some(want) => assert_eq!(r.as_ref().ok(), Some(&want), "request {x}"),
        }
    }
    faults
}

/// Waits (at most 20 s) until stage `k` of `p` was restarted `n` times.
pub fn until_restarts(p: &Pipeline<u64, u64>, k: usize, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.stage_restarts()[k] != n {
        assert!(Instant::now() < deadline, "{:?}", p.stage_restarts());
        std::thread::sleep(Duration::from_millis(1));
    }
}
