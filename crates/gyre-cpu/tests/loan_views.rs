//! `LoanArena::claim` and the release hook take a kernel-owned block only on the proof that
//! the kernel serving the pool is done with its slot: a reply the pool's own channel
//! published, for that slot. A device kernel holds nothing while it works on a block, so
//! a proof from another channel (another kernel's published reply) or a view whose public
//! fields were rewritten (another index, another payload) would hand the host bytes the
//! device is still using. Here the pool is marked as a device kernel's
//! (`serve_on_device`) and no kernel ever answers the slot the block is bound to.

use std::sync::Arc;

use gyre_core::channel::{Channel, Kind};
use gyre_core::loan::{LoanArena, LoanConfig, LoanHandle};
use gyre_core::memory::HostAllocator;
use gyre_core::ring::Geometry;
use gyre_core::SharedRegion;
use gyre_cpu::Stepper;

fn region() -> Arc<SharedRegion> {
    Arc::new(SharedRegion::new_host(Geometry::new(8, 128, 8).unwrap(), 0).unwrap())
}

fn pool() -> Arc<LoanArena> {
    let a = LoanArena::new(HostAllocator, LoanConfig::new(1 << 16, 1024)).unwrap();
    a.serve_on_device();
    a
}

/// Binds `a` to `own` (`LoanArena::install_release_hook`).
fn bind(a: &Arc<LoanArena>, own: &Arc<Channel>) -> bool {
    // SAFETY: each test's first call binds the channel whose ring carries the pool's
    // blocks; a later call, with another channel, is refused before it binds anything
    // (which is what it checks).
    unsafe { a.install_release_hook(own) }
}

fn bytes(h: &LoanHandle) -> Vec<u8> {
    let mut b = h.offset.to_ne_bytes().to_vec();
    b.extend_from_slice(&h.len.to_ne_bytes());
    b.extend_from_slice(&h.generation.to_ne_bytes());
    b
}

fn publish(ch: &Channel, h: &LoanHandle) -> u64 {
    ch.try_publish(Kind::Send, 0, &bytes(h)).unwrap()
}

#[test]
fn a_reply_of_another_channel_neither_claims_nor_frees_a_block() {
    let a = pool();
    let own = Arc::new(Channel::new(region(), "own"));
    assert!(bind(&a, &own));
    let other_region = region();
    let other = Arc::new(Channel::new(other_region.clone(), "other"));
    assert!(!bind(&a, &other), "a pool is bound to one channel");
    let echo = gyre_core::kernels::echo;
    let mut k = Stepper::new(&other_region, &echo).unwrap();
    // Slot 0 of the pool's own kernel holds the block; that kernel has not answered.
    let h = a.try_loan(100).unwrap().send(0);
    // Slot 0 of another kernel carries the same handle, and is answered (echoed).
    assert_eq!(publish(&other, &h), 0);
    assert_eq!(k.step(), Some(1));
    let r = other.try_recv(|v| Ok(a.claim(&v).map(|l| l.len())));
    assert!(
        matches!(r, Ok(Some(Err(gyre_core::Error::BadLoan { .. })))),
        "another channel's reply claimed the block: {r:?}"
    );
    assert_eq!(
        a.stats().in_use_blocks,
        1,
        "the block is still the kernel's"
    );
}

#[test]
fn a_rewritten_view_claims_nothing() {
    let a = pool();
    let r = region();
    let own = Arc::new(Channel::new(r.clone(), "own"));
    assert!(bind(&a, &own));
    let echo = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &echo).unwrap();
    // The block is bound to slot 1 (its request still in the works); slot 0 carries its
    // handle too, which the kernel answers (echoes).
    let h = a.try_loan(100).unwrap().send(1);
    assert_eq!(publish(&own, &h), 0);
    assert_eq!(k.step(), Some(1));
    let forged: &'static [u8] = Box::leak(bytes(&h).into_boxed_slice());
    let r = own.try_recv(|mut v| {
        v.index = 1; // the slot the block is bound to
        v.payload = forged;
        Ok(a.claim(&v).map(|l| l.len()))
    });
    assert!(
        matches!(r, Ok(Some(Err(gyre_core::Error::BadLoan { .. })))),
        "a rewritten view claimed the block: {r:?}"
    );
    assert_eq!(
        a.stats().in_use_blocks,
        1,
        "the block is still the kernel's"
    );
}

#[test]
fn the_own_channels_reply_claims_its_block() {
    let a = pool();
    let r = region();
    let own = Arc::new(Channel::new(r.clone(), "own"));
    assert!(bind(&a, &own));
    let echo = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &echo).unwrap();
    let h = a.try_loan(100).unwrap().send(0);
    assert_eq!(publish(&own, &h), 0);
    assert_eq!(k.step(), Some(1));
    let got = own.try_recv(|v| Ok(a.claim(&v).map(|l| l.len())));
    assert!(matches!(got, Ok(Some(Ok(100)))), "{got:?}");
    assert_eq!(a.stats().in_use_blocks, 0, "claimed, then dropped");
    // An unclaimed reply's block is freed by the hook when its slot is released.
    let h = a.try_loan(100).unwrap().send(1);
    assert_eq!(publish(&own, &h), 1);
    assert_eq!(k.step(), Some(1));
    assert!(own.try_recv(|_| Ok(())).unwrap().is_some());
    assert_eq!(a.stats().in_use_blocks, 0, "released by the hook");
}
