//! Waiting for a condition in a test, with a deadline: a condition that never comes true
//! fails the test with a message instead of hanging it (and CI with it).

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// How long [`eventually`] waits.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Polls `f` every 200 us until it is true; panics naming `what` after [`LIMIT`].
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}
