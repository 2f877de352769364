//! loom model of the loan pool's ownership protocol (`gyre_core::loan`): the kernel's
//! busy hold, the host's claim of a reply, the channel's release of a request and a
//! loan returned to the pool race each other on one block's state word.
//!
//! Checked in every interleaving:
//!
//! * the host and the kernel never hold one block at once (the kernel's hold and a
//!   host-owned `Loan` are two values of one word);
//! * a block is freed at most once (a claim and a release of the same send exclude each
//!   other) and every block ends free or owned by exactly one party;
//! * a handle in a slot other than the one its block is bound to (a duplicate, a forged
//!   copy with that slot's tag) never resolves and never frees the block, while the live
//!   request holds it;
//! * a task waiting for a block is woken by the return that frees one (no lost wake-up:
//!   loom reports the deadlock when the re-check after registering is removed);
//! * a refused handle naming a live block (a length beyond it) never moves the block's
//!   word, so it cannot make the kernel refuse, or a bridge's copy skip, the request that
//!   really holds the block (both fail when the resolver holds the block before it checks
//!   the length, as it once did: the CPU backend then served a request whose bytes were
//!   never copied down).
//!
//! Run with (CI does):
//!
//! ```text
//! RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p gyre-core --release --test loom_loans
//! ```
#![cfg(gyre_loom)]

use core::sync::atomic::Ordering::SeqCst;

use gyre_core::copy::HostDeviceArena;
use gyre_core::loan::{LoanArena, LoanConfig, LoanHandle, LoanMirror};
use gyre_core::memory::HostAllocator;
use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;

/// [`LoanArena::claim_handles`] as the model's host calls it: the claims below that race
/// a Rust kernel thread are forged early ones, which the busy hold must refuse (the
/// contract is the runtime's; the model checks what breaking it can and cannot do to a
/// host-side kernel, whose resolver holds the block).
fn claim(
    a: &std::sync::Arc<LoanArena>,
    reply: &LoanHandle,
    request: &LoanHandle,
    index: u64,
) -> gyre_core::Result<gyre_core::loan::Loan> {
    // SAFETY: broken on purpose where a model claims while its kernel thread may still
    // resolve: the kernels here are Rust resolvers, which hold a block busy while they
    // use it, and the model checks that an early claim then fails instead of sharing the
    // bytes (no device kernel, which holds nothing, takes part).
    unsafe { a.claim_handles(reply, request, index) }
}

/// [`LoanArena::release_sent`], as [`claim`].
fn release(a: &LoanArena, h: &LoanHandle, index: u64) -> bool {
    // SAFETY: as in `claim`.
    unsafe { a.release_sent(h, index) }
}

/// The request slot every model's loan is sent in.
const SLOT: u64 = 5;

fn arena() -> std::sync::Arc<LoanArena> {
    // Two blocks of 64 bytes.
    LoanArena::new(HostAllocator, LoanConfig::new(128, 64)).expect("arena")
}

#[test]
fn the_kernel_hold_and_the_host_claim_never_overlap() {
    loom::model(|| {
        let a = arena();
        let h = a.try_loan(8).expect("loan").send(SLOT);
        let kernel_inside = Arc::new(AtomicBool::new(false));
        let k = {
            let (a, inside) = (a.clone(), kernel_inside.clone());
            thread::spawn(move || {
                if let Ok(mut b) = a.resolve(&h, SLOT) {
                    inside.store(true, SeqCst);
                    b[0] = 1;
                    inside.store(false, SeqCst);
                }
            })
        };
        // The host claims (a forged early reply) while the kernel may be in its handler.
        let claimed = claim(&a, &h, &h, SLOT);
        if let Ok(l) = &claimed {
            assert!(
                !kernel_inside.load(SeqCst),
                "host and kernel hold the block at once"
            );
            assert_eq!(l.len(), 8);
        }
        k.join().expect("kernel");
        let released = release(&a, &h, SLOT);
        assert!(!(claimed.is_ok() && released), "freed and claimed");
        drop(claimed);
        assert_eq!(a.stats().in_use_blocks, 0);
    });
}

#[test]
fn a_handle_in_another_slot_never_reaches_the_block() {
    loom::model(|| {
        let a = arena();
        let h = a.try_loan(8).expect("loan").send(SLOT);
        let forged = LoanHandle {
            generation: gyre_core::loan::slot_tag(SLOT + 1),
            ..h
        };
        let dup = {
            let a = a.clone();
            thread::spawn(move || {
                // A duplicate and a forged copy, resolved and released from slot SLOT + 1
                // while the live request's kernel holds the block.
                let reached =
                    a.resolve(&h, SLOT + 1).is_ok() || a.resolve(&forged, SLOT + 1).is_ok();
                reached || release(&a, &h, SLOT + 1) || release(&a, &forged, SLOT + 1)
            })
        };
        let held = a.resolve(&h, SLOT).map(|mut b| b[0] = 1).is_ok();
        assert!(
            !dup.join().expect("duplicate"),
            "another slot reached the block"
        );
        assert!(held, "the live request was refused");
        let back = claim(&a, &h, &h, SLOT).expect("the live reply's claim");
        assert_eq!(back[0], 1);
        drop(back);
        assert_eq!(a.stats().in_use_blocks, 0);
    });
}

#[test]
fn a_claim_and_a_release_of_one_send_exclude_each_other() {
    loom::model(|| {
        let a = arena();
        let h = a.try_loan(8).expect("loan").send(SLOT);
        let r = {
            let a = a.clone();
            thread::spawn(move || release(&a, &h, SLOT))
        };
        let claimed = claim(&a, &h, &h, SLOT).ok();
        let released = r.join().expect("release");
        assert!(claimed.is_some() != released, "exactly one takes the block");
        drop(claimed);
        let s = a.stats();
        assert_eq!((s.in_use_blocks, s.returns), (0, 1));
    });
}

#[test]
fn a_waiting_loan_is_woken_by_a_return() {
    loom::model(|| {
        let a = arena();
        let first = a.try_loan(64).expect("first");
        let second = a.try_loan(64).expect("second");
        let w = {
            let a = a.clone();
            thread::spawn(move || {
                loom::future::block_on(core::future::poll_fn(|cx| a.poll_loan(64, cx)))
                    .expect("a block")
            })
        };
        drop(first);
        let got = w.join().expect("waiter");
        drop((got, second));
        assert_eq!(a.stats().in_use_blocks, 0);
    });
}

/// A split arena (host side + emulated device side) with its mirror, and a live loan of
/// 8 bytes of 0x33 sent in its first block (64 bytes): the handle, and the same handle
/// with a length beyond the block.
fn sent_split() -> (
    std::sync::Arc<LoanArena>,
    LoanMirror,
    LoanHandle,
    LoanHandle,
) {
    let dev = std::sync::Arc::new(HostDeviceArena::new(128).expect("device side"));
    let a =
        LoanArena::new_split(HostAllocator, LoanConfig::new(128, 64), dev.clone()).expect("arena");
    let m = LoanMirror::new(a.clone(), dev).expect("mirror");
    let mut l = a.try_loan(8).expect("loan");
    l.fill(0x33);
    let h = l.send(SLOT);
    (a, m, h, LoanHandle { len: 4096, ..h })
}

#[test]
fn a_refused_handle_never_stops_the_live_requests_copy() {
    loom::model(|| {
        let (a, m, h, too_long) = sent_split();
        let k = {
            let a = a.clone();
            // The kernel refuses a forged handle naming the block, while the bridge
            // moves the live request's bytes down.
            thread::spawn(move || a.resolve(&too_long, SLOT).is_err())
        };
        let moved = m.down(&mut [(SLOT, h)].into_iter(), false).expect("down");
        assert!(k.join().expect("kernel"), "a length beyond the block");
        assert_eq!(moved.loans, 1, "the live request's bytes were not copied");
        let b = a.resolve(&h, SLOT).expect("the live request");
        assert!(b[..8].iter().all(|&x| x == 0x33));
    });
}

#[test]
fn a_refused_copy_never_stops_the_kernel() {
    loom::model(|| {
        let (a, m, h, too_long) = sent_split();
        // The bridge skips a forged handle's copy while the kernel takes the live one.
        let c = thread::spawn(move || {
            m.down(&mut [(SLOT, too_long)].into_iter(), false)
                .expect("down")
                .loans
        });
        let held = a.resolve(&h, SLOT).is_ok();
        assert_eq!(c.join().expect("bridge"), 0);
        assert!(held, "the kernel refused the live request");
    });
}
