//! loom model of the completion driver's wake path: a future that found no free slot
//! (or no `send` reply, or a running kernel) registers its waker in a [`WakerSet`] and
//! re-checks the condition; the driver, having seen the condition change, calls
//! `wake_all`. No wake-up may be lost: either the future's re-check sees the change, or
//! the driver's `wake_all` sees the registration and wakes it.
//!
//! Run with (CI does):
//!
//! ```text
//! RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p gyre-core --release --test loom_wake
//! ```
//!
//! Under `cfg(gyre_loom)` the `WakerSet` is built on loom's mutex, atomics and fences
//! (`gyre_core::sync`), so this checks the very registration and wake code, SeqCst
//! fences included (drop them and loom finds the lost wake-up). The condition (a
//! released slot: `k2h_tail`) is a loom atomic read with acquire, as `try_claim` and the
//! driver's scan read it.
//!
//! `a_bell_never_loses_a_waiter` restates the reply bell's pair (`channel::bell`) on loom
//! atomics: a waiter's cell and interest against a kernel thread's publication and scan.
#![cfg(gyre_loom)]

use core::sync::atomic::Ordering::{Acquire, Release, SeqCst};
use core::task::Waker;

use gyre_core::channel::Channel;
use gyre_core::ring::Geometry;
use gyre_core::SharedRegion;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::thread;

/// A waker that counts its wake-ups.
struct Count(AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn channel() -> std::sync::Arc<Channel> {
    let g = Geometry::new(2, 128, 1).expect("geometry");
    let region = std::sync::Arc::new(SharedRegion::new_host(g, 0).expect("region"));
    std::sync::Arc::new(Channel::new(region, "loom"))
}

/// A future waiting for space against the driver waking space waiters.
#[test]
fn space_waiter_is_never_left_asleep() {
    loom::model(|| {
        let ch = channel();
        let released = std::sync::Arc::new(AtomicBool::new(false));
        let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());

        // The future: check, register, re-check (as `poll_publish`).
        let (c, r) = (ch.clone(), released.clone());
        let future = thread::spawn(move || {
            if r.load(Acquire) {
                return true;
            }
            c.space_waiters().register(&c, 1, &waker);
            if r.load(Acquire) {
                c.space_waiters().remove(&c, 1);
                return true;
            }
            false
        });
        // A consumer releases a slot.
        let r = released.clone();
        let consumer = thread::spawn(move || r.store(true, Release));
        // The driver: once it sees the release, it wakes the space waiters (once).
        let (c, r) = (ch.clone(), released.clone());
        let driver = thread::spawn(move || {
            while !r.load(Acquire) {
                thread::yield_now();
            }
            c.space_waiters().wake_all(&c);
        });
        let saw_it = future.join().unwrap();
        consumer.join().unwrap();
        driver.join().unwrap();
        assert!(
            saw_it || count.0.load(SeqCst) == 1,
            "lost wake-up: the future sleeps after the release was handled"
        );
    });
}

/// Two futures registering concurrently (one refreshing its waker) against one
/// `wake_all`: each is either woken or saw the change itself.
#[test]
fn concurrent_registrations_are_all_woken() {
    loom::model(|| {
        let ch = channel();
        let released = std::sync::Arc::new(AtomicBool::new(false));
        let counts: Vec<_> = (0..2)
            .map(|_| std::sync::Arc::new(Count(AtomicUsize::new(0))))
            .collect();
        let futures: Vec<_> = counts
            .iter()
            .enumerate()
            .map(|(id, count)| {
                let (c, r) = (ch.clone(), released.clone());
                let waker = Waker::from(count.clone());
                thread::spawn(move || {
                    c.recv_waiters().register(&c, id as u64, &waker);
                    if r.load(Acquire) {
                        c.recv_waiters().remove(&c, id as u64);
                        return true;
                    }
                    false
                })
            })
            .collect();
        released.store(true, Release);
        ch.recv_waiters().wake_all(&ch);
        for (f, count) in futures.into_iter().zip(&counts) {
            let saw_it = f.join().unwrap();
            assert!(saw_it || count.0.load(SeqCst) == 1, "lost wake-up");
        }
    });
}

/// The reply bell's pair (`gyre_core::channel::bell`), restated on loom atomics: a waiter
/// marks its cell waiting and takes a unit of interest with a read-modify-write, then
/// probes its reply; the kernel's thread publishes the reply, reads the interest with a
/// read-modify-write and, if anyone waits, looks at the cell. Either the probe sees the
/// reply or the kernel sees the waiter. (The channel's own counters are `core` atomics
/// over the shared region, which loom cannot track, so this model restates the protocol
/// with the orderings `Channel::add_call_interest` and `Channel::serve_published` use;
/// with a plain load on either side, loom finds the lost wake-up.)
#[test]
fn a_bell_never_loses_a_waiter() {
    use core::sync::atomic::Ordering::AcqRel;
    use loom::sync::atomic::AtomicU64;
    loom::model(|| {
        let seq = std::sync::Arc::new(AtomicU64::new(0));
        let interest = std::sync::Arc::new(AtomicUsize::new(0));
        let waiting = std::sync::Arc::new(AtomicBool::new(false));
        let (s, i, w) = (seq.clone(), interest.clone(), waiting.clone());
        let kernel = thread::spawn(move || {
            s.store(1, Release);
            i.fetch_add(0, AcqRel) > 0 && w.load(Acquire)
        });
        // Another waiter comes and goes meanwhile: the counter's release sequence.
        let other = {
            let i = interest.clone();
            thread::spawn(move || {
                i.fetch_add(1, AcqRel);
                i.fetch_sub(1, AcqRel);
            })
        };
        waiting.store(true, Release);
        interest.fetch_add(1, AcqRel);
        let saw = seq.load(Acquire) == 1;
        let woke = kernel.join().expect("kernel");
        other.join().expect("other");
        assert!(saw || woke, "the waiter sleeps through its reply");
    });
}
