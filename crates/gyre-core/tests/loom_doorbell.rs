//! loom model of the doorbell (`gyre_core::doorbell`): a kernel that finds nothing to do
//! parks, and the host that publishes afterwards must wake it. No wake-up may be lost:
//! either the kernel's re-check after announcing the park sees the publication, or the
//! host's ring sees the announcement and unparks it (an unpark before the park leaves a
//! token). The park here has no timeout (loom's `park`), so a lost wake-up is a deadlock
//! loom reports.
//!
//! Run with (CI does):
//!
//! ```text
//! RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p gyre-core --release --test loom_doorbell
//! ```
//!
//! Under `cfg(gyre_loom)` the doorbell is built on loom's atomics, fences, park and
//! unpark, so this checks the very code the CPU backend's kernel and the channel run. The
//! kernel's side mirrors the C loop (`cuda/ring_kernel_c11.c`, `gyre_c11_pause` ->
//! `gyre-cpu`'s park callback): poll, find nothing, park with the re-check of the work.
#![cfg(gyre_loom)]

use core::sync::atomic::Ordering::{Acquire, Release, SeqCst};
use std::time::Duration;

use gyre_core::doorbell::Doorbell;
use loom::sync::atomic::{fence, AtomicU64};
use loom::sync::Arc;
use loom::thread;

/// The kernel: polls `head` until it reaches `want`, parking between empty polls.
fn kernel(bell: &Doorbell, head: &AtomicU64, want: u64) {
    bell.register_current_thread();
    loop {
        if head.load(Acquire) >= want {
            return;
        }
        bell.park(Duration::MAX, || head.load(Acquire) >= want);
    }
}

#[test]
fn a_publication_after_the_kernel_decides_to_park_wakes_it() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        let head = Arc::new(AtomicU64::new(0));
        let k = {
            let (bell, head) = (bell.clone(), head.clone());
            thread::spawn(move || kernel(&bell, &head, 1))
        };
        // A producer's publication with an eager head: the store, the SeqCst fence of
        // advance_prefix, then the ring that relies on it (with a lazy head the producer
        // calls `ring`, which for a kernel that may park is this fence and `ring_fenced`;
        // a new doorbell's kernel may park).
        head.store(1, Release);
        fence(SeqCst);
        bell.ring_fenced();
        k.join().expect("the kernel woke up");
    });
}

#[test]
fn two_publications_and_a_command_each_reach_a_parking_kernel() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        let head = Arc::new(AtomicU64::new(0));
        let k = {
            let (bell, head) = (bell.clone(), head.clone());
            thread::spawn(move || kernel(&bell, &head, 2))
        };
        // Two producers on two threads (each: store, fence, ring) ...
        let p = {
            let (bell, head) = (bell.clone(), head.clone());
            thread::spawn(move || {
                head.fetch_add(1, Release);
                fence(SeqCst);
                bell.ring_fenced();
            })
        };
        // ... and a command-like publication with `ring` (which fences itself).
        head.fetch_add(1, Release);
        bell.ring();
        p.join().expect("producer");
        k.join().expect("the kernel saw both");
    });
}
