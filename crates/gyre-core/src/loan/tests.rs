use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::words::owner;
use super::*;
use crate::memory::HostAllocator;

/// [`LoanArena::claim_handles`]: no kernel runs in these tests, so every slot is done.
fn claim(
    a: &Arc<LoanArena>,
    reply: &LoanHandle,
    request: &LoanHandle,
    index: u64,
) -> crate::Result<Loan> {
    // SAFETY: no kernel runs in these tests: nothing works on any slot.
    unsafe { a.claim_handles(reply, request, index) }
}

/// [`LoanArena::release_sent`], as [`claim`].
fn release(a: &LoanArena, h: &LoanHandle, index: u64) -> bool {
    // SAFETY: as in `claim`.
    unsafe { a.release_sent(h, index) }
}

fn arena(pool: usize, min: usize) -> Arc<LoanArena> {
    LoanArena::new(HostAllocator, LoanConfig::new(pool, min)).expect("arena")
}

#[test]
fn a_loan_goes_host_kernel_host_and_back_to_the_pool() {
    let a = arena(1 << 16, 1024);
    let mut l = a.try_loan(1500).unwrap();
    assert_eq!(l.capacity(), 2048);
    l.fill(7);
    let h = l.send(5);
    assert_eq!((h.offset, h.len, h.generation), (0, 1500, slot_tag(5)));
    assert_eq!(a.word(0).owner, owner::KERNEL);
    // The kernel's view from slot 5: the whole block, the bytes the host wrote.
    let mut bytes = a.resolve(&h, 5).unwrap();
    assert_eq!(bytes.len(), 2048);
    assert!(bytes[..1500].iter().all(|&b| b == 7));
    bytes[0] = 9;
    // Busy: nobody else gets it, not a second resolve, not a claim, not a release.
    assert!(a.resolve(&h, 5).is_err());
    assert!(claim(&a, &h, &h, 5).is_err());
    assert!(!release(&a, &h, 5));
    drop(bytes);
    let reply = LoanHandle { len: 10, ..h };
    let back = claim(&a, &reply, &h, 5).unwrap();
    assert_eq!((back.len(), back[0]), (10, 9));
    // Claimed: the release of the request's slot finds nothing to free.
    assert!(!release(&a, &h, 5));
    assert_eq!(a.stats().in_use_blocks, 1);
    drop(back);
    let s = a.stats();
    assert_eq!((s.in_use_blocks, s.returns, s.free_bytes), (0, 1, 1 << 16));
}

#[test]
fn sent_and_claimed_loans_keep_no_reference_to_the_arena() {
    let a = arena(1 << 12, 1024);
    let h = a.try_loan(8).unwrap().send(0);
    assert_eq!(Arc::strong_count(&a), 1, "a sent loan released its Arc");
    let back = claim(&a, &h, &h, 0).unwrap();
    assert_eq!(Arc::strong_count(&a), 2);
    drop(back);
    assert_eq!(Arc::strong_count(&a), 1);
}

#[test]
fn a_handle_resolves_only_in_the_slot_it_was_sent_in() {
    let a = arena(1 << 16, 1024);
    let h = a.try_loan(100).unwrap().send(40);
    // The same bytes in another slot (a duplicate, a replay, a forged copy): refused, and
    // nothing changes, so the real request still resolves.
    for other in [39, 41, 40 + (1 << 32) + 1] {
        assert_eq!(a.resolve(&h, other).unwrap_err(), "not sent in this slot");
        assert!(
            !release(&a, &h, other),
            "the other slot's release frees nothing"
        );
        assert!(claim(&a, &h, &h, other).is_err());
    }
    // Even with the generation rewritten to the other slot's tag.
    let forged = LoanHandle {
        generation: slot_tag(41),
        ..h
    };
    assert!(a.resolve(&forged, 41).is_err());
    assert!(!release(&a, &forged, 41));
    assert!(a.resolve(&h, 40).is_ok());
    assert!(release(&a, &h, 40));
}

#[test]
fn stale_foreign_and_oversized_handles_are_refused() {
    let a = arena(1 << 16, 1024);
    let l = a.try_loan(100).unwrap();
    let h = l.send(7);
    let resolve = |h: LoanHandle| a.resolve(&h, 7).map(|b| b.len());
    assert!(resolve(h).is_ok());
    for (bad, why) in [
        (
            LoanHandle {
                generation: h.generation + 1,
                ..h
            },
            "slot",
        ),
        (
            LoanHandle {
                generation: h.generation - 1,
                ..h
            },
            "slot",
        ),
        (
            LoanHandle {
                offset: 1 << 16,
                ..h
            },
            "outside",
        ),
        (
            LoanHandle {
                offset: u64::MAX,
                ..h
            },
            "outside",
        ),
        (LoanHandle { offset: 512, ..h }, "block start"),
        (LoanHandle { offset: 1024, ..h }, "slot"), // a free unit
        (LoanHandle { len: 1025, ..h }, "beyond"),
        (LoanHandle { len: u32::MAX, ..h }, "beyond"),
    ] {
        let e = resolve(bad).unwrap_err();
        assert!(e.contains(why), "{bad:?}: {e}");
        assert!(
            claim(&a, &bad, &h, 7).is_err() || bad.len as usize > 1024,
            "{bad:?}"
        );
    }
    // A reply naming another block than its request's is refused, and changes nothing.
    let other = a.try_loan(10).unwrap().send(8);
    let e = claim(&a, &other, &h, 7).unwrap_err();
    assert!(
        e.to_string().contains("not the block of its request"),
        "{e}"
    );
    assert!(release(&a, &h, 7) && release(&a, &other, 8));
    assert!(!release(&a, &h, 7), "released once");
    // Once released, the old handle is stale for the kernel too.
    assert!(resolve(h).is_err());
    assert_eq!(a.stats().in_use_blocks, 0);
}

#[test]
fn each_send_binds_the_block_to_its_new_slot() {
    let a = arena(1 << 12, 1024);
    let h1 = a.try_loan(8).unwrap().send(1);
    let l = claim(&a, &h1, &h1, 1).unwrap();
    let h2 = l.send(2);
    assert_eq!(h1.offset, h2.offset);
    assert_ne!(h1.generation, h2.generation);
    // A stale copy of the first send (a slot from an earlier lap) frees nothing.
    assert!(!release(&a, &h1, 1));
    assert!(a.resolve(&h1, 1).is_err());
    assert!(release(&a, &h2, 2));
}

#[test]
fn too_large_and_exhausted_are_typed() {
    let a = arena(1 << 12, 1024);
    assert!(matches!(
        a.try_loan(5000),
        Err(crate::Error::LoanTooLarge {
            len: 5000,
            max: 4096
        })
    ));
    let x = a.try_loan(2048).unwrap();
    let _y = a.try_loan(1024).unwrap();
    match a.try_loan(2048) {
        Err(crate::Error::PoolExhausted {
            len: 2048,
            free: 1024,
            largest_free: 1024,
        }) => {}
        other => panic!("{other:?}"),
    }
    drop(x);
    assert!(a.try_loan(2048).is_ok());
    let s = a.stats();
    assert_eq!(s.exhausted, 1);
    assert!(s.peak_in_use_bytes >= 3072);
}

#[test]
fn a_blocked_loan_wakes_when_a_block_returns() {
    let a = arena(1 << 12, 1024);
    let all = a.try_loan(4096).unwrap();
    let a2 = a.clone();
    let t = std::thread::spawn(move || a2.loan_blocking(1024, None).map(|l| l.capacity()));
    std::thread::sleep(Duration::from_millis(20));
    drop(all);
    assert_eq!(t.join().unwrap().unwrap(), 1024);
    // With a deadline and nothing returned: exhausted.
    let _all = a.try_loan(4096).unwrap();
    let t0 = Instant::now();
    let e = a.loan_blocking(1, Some(t0 + Duration::from_millis(20)));
    assert!(
        matches!(e, Err(crate::Error::PoolExhausted { .. })),
        "{e:?}"
    );
    assert!(t0.elapsed() >= Duration::from_millis(20));
}

#[test]
fn concurrent_loans_never_share_a_block() {
    let a = arena(1 << 16, 256);
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                for i in 0..2000usize {
                    let len = 1 + (i * 37 + usize::from(t) * 101) % 3000;
                    let mut l = a.loan_blocking(len, None).unwrap();
                    l.fill(t);
                    std::thread::yield_now();
                    assert!(l.iter().all(|&b| b == t), "another thread wrote my block");
                    if i % 3 == 0 {
                        let slot = (u64::from(t) << 40) + i as u64;
                        let h = l.send(slot);
                        assert!(release(&a, &h, slot));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = a.stats();
    assert_eq!(
        (s.in_use_blocks, s.free_bytes, s.largest_free_bytes),
        (0, 1 << 16, 1 << 16)
    );
    assert_eq!(s.hits + s.misses, s.returns);
}

proptest! {
    /// Handle decoding and resolution are total: any 16 bytes in any slot either name
    /// the one block sent in that slot, within the pool, or are refused; nothing panics
    /// and no resolved range leaves the pool.
    #[test]
    fn any_handle_bytes_resolve_safely(bytes in proptest::collection::vec(any::<u8>(), 0..40), sends in 0usize..6, slot in 0u64..8) {
        let a = arena(1 << 14, 256);
        let sent: Vec<LoanHandle> = (0..sends).map(|i| a.try_loan(100 * (i + 1)).unwrap().send(i as u64)).collect();
        let Some(h) = LoanHandle::decode(&bytes) else {
            prop_assert!(bytes.len() < 16);
            return Ok(());
        };
        if let Ok(block) = a.resolve(&h, slot) {
            let s = sent.get(slot as usize);
            prop_assert!(s.is_some_and(|s| s.offset == h.offset && s.generation == h.generation), "resolved a block not sent in slot {slot}: {h:?}");
            prop_assert!(h.offset as usize + block.len() <= 1 << 14);
            prop_assert!(h.len as usize <= block.len());
        }
        let base = sent.first().copied().unwrap_or(h);
        let _ = claim(&a, &h, &base, slot);
    }

    /// Mutated copies of a real handle resolve only when they equal it in offset and
    /// generation and keep the length within the block.
    #[test]
    fn mutated_handles_are_refused(off_delta in any::<i64>(), gen_delta in any::<i32>(), len in any::<u32>()) {
        let a = arena(1 << 14, 256);
        let h = a.try_loan(700).unwrap().send(3);
        let m = LoanHandle {
            offset: h.offset.wrapping_add(off_delta as u64),
            generation: h.generation.wrapping_add(gen_delta as u32),
            len,
        };
        let ok = a.resolve(&m, 3).is_ok();
        prop_assert_eq!(ok, off_delta == 0 && gen_delta == 0 && len <= 1024);
    }
}

#[test]
fn a_mirror_moves_adjacent_blocks_in_one_copy_and_skips_what_it_may_not_touch() {
    use crate::copy::{CopyEngine, HostDeviceArena};
    let dev = Arc::new(HostDeviceArena::new(1 << 14).unwrap());
    let a =
        LoanArena::new_split(HostAllocator, LoanConfig::new(1 << 14, 1024), dev.clone()).unwrap();
    let m = LoanMirror::new(a.clone(), dev.clone()).unwrap();
    let mut sent = Vec::new();
    for i in 0..3u8 {
        let mut l = a.try_loan(1024).unwrap();
        l.fill(i + 1);
        sent.push((u64::from(i), l.send(u64::from(i))));
    }
    // Host-owned (the lowest free block: offset 3072): never copied.
    let held = a.try_loan(10).unwrap();
    let held_h = LoanHandle {
        offset: 3072,
        len: 10,
        generation: 9,
    };
    let stale = LoanHandle {
        generation: 99,
        ..sent[0].1
    };
    // A handle in a slot other than its own (a duplicate) is skipped.
    let mut hs = sent
        .iter()
        .copied()
        .chain([(99, stale), (9, held_h), (5, sent[1].1)]);
    let moved = m.down(&mut hs, false).unwrap();
    assert_eq!((moved.loans, moved.copies, moved.bytes), (3, 1, 3072));
    // Let go after the copy: the kernel can take them.
    assert!(sent.iter().all(|(_, h)| a.sent_capacity_for_tests(h)));
    // The kernel sees the bytes on its side, and answers in place.
    for (i, (slot, h)) in sent.iter().enumerate() {
        let mut b = a.resolve(h, *slot).unwrap();
        assert!(b[..1024].iter().all(|&x| x == i as u8 + 1));
        b[0] = 0xAA;
    }
    let moved = m
        .up(
            &mut sent
                .iter()
                .map(|(slot, h)| (*slot, LoanHandle { len: 1, ..*h })),
            false,
        )
        .unwrap();
    assert_eq!(
        (moved.copies, moved.bytes),
        (3, 24),
        "1 byte rounds up to a word; gaps split"
    );
    let back = claim(
        &a,
        &LoanHandle {
            len: 1,
            ..sent[1].1
        },
        &sent[1].1,
        1,
    )
    .unwrap();
    assert_eq!(&back[..], &[0xAA]);
    assert!(dev.len() >= a.pool_bytes());
    drop((back, held));
}

#[test]
fn a_mirror_needs_a_split_arena_and_a_device_pool_refuses_host_resolves() {
    use crate::copy::HostDeviceArena;
    let a = arena(1 << 14, 1024);
    let dev = Arc::new(HostDeviceArena::new(1 << 14).unwrap());
    // The kernel reads this arena in place: a mirror would copy over live bytes.
    assert!(LoanMirror::new(a.clone(), dev).is_err());
    let h = a.try_loan(10).unwrap().send(3);
    a.serve_on_device();
    assert_eq!(
        a.resolve(&h, 3).unwrap_err(),
        "a device kernel resolves this pool's handles"
    );
    assert!(release(&a, &h, 3));
}

/// One step of [`the_arena_follows_a_model_of_owners`].
#[derive(Debug, Clone)]
enum Op {
    /// Take a loan of this many bytes (host-owned).
    Take(usize),
    /// Send the `i`-th host loan in the next slot (kernel-owned, bound to it).
    Send(usize),
    /// Resolve the `i`-th sent handle in its slot, or (`true`) in the next slot.
    Resolve(usize, bool),
    /// Claim the `i`-th sent handle's reply (of this length) in its slot, or in another.
    Claim(usize, u32, bool),
    /// Release the `i`-th sent handle's slot, or another slot with its handle.
    Release(usize, bool),
    /// Drop the `i`-th host loan.
    Drop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1usize..5000).prop_map(Op::Take),
        (0usize..8).prop_map(Op::Send),
        (0usize..8, any::<bool>()).prop_map(|(i, o)| Op::Resolve(i, o)),
        (0usize..8, 0u32..5000, any::<bool>()).prop_map(|(i, n, o)| Op::Claim(i, n, o)),
        (0usize..8, any::<bool>()).prop_map(|(i, o)| Op::Release(i, o)),
        (0usize..8).prop_map(Op::Drop),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The protocol against a model: every block is free, one host loan's, or bound to
    /// exactly one slot. A handle resolves, is claimed or is released only in the slot
    /// it is bound to, claims and releases move it exactly once, nothing leaks, and no
    /// two live loans share a byte.
    #[test]
    fn the_arena_follows_a_model_of_owners(ops in proptest::collection::vec(op(), 1..60)) {
        let a = arena(1 << 15, 1024);
        let mut host: Vec<Loan> = Vec::new();
        // (slot, handle) of each block the kernel holds.
        let mut sent: Vec<(u64, LoanHandle)> = Vec::new();
        let mut next_slot = 100u64;
        for op in ops {
            match op {
                Op::Take(len) => {
                    if let Ok(l) = a.try_loan(len) {
                        prop_assert!(l.len() == len && l.capacity() >= len);
                        host.push(l);
                    }
                }
                Op::Send(i) if i < host.len() => {
                    let h = host.remove(i).send(next_slot);
                    prop_assert_eq!(h.generation, slot_tag(next_slot));
                    sent.push((next_slot, h));
                    next_slot += 1;
                }
                Op::Resolve(i, other) if i < sent.len() => {
                    let (slot, h) = sent[i];
                    let at = if other { next_slot } else { slot };
                    let r = a.resolve(&h, at).map(|b| b.len());
                    prop_assert_eq!(r.is_ok(), !other, "{:?} in {}", h, at);
                }
                Op::Claim(i, n, other) if i < sent.len() => {
                    let (slot, h) = sent[i];
                    let at = if other { slot + 1 } else { slot };
                    let reply = LoanHandle { len: n, ..h };
                    let fits = (n as usize) <= a.block_bytes(a.word((h.offset >> 10) as u32).order);
                    match claim(&a, &reply, &h, at) {
                        Ok(l) => {
                            prop_assert!(!other && fits);
                            prop_assert_eq!(l.len(), n as usize);
                            sent.remove(i);
                            host.push(l);
                        }
                        Err(_) => prop_assert!(other || !fits),
                    }
                }
                Op::Release(i, other) if i < sent.len() => {
                    let (slot, h) = sent[i];
                    let at = if other { slot + 1 } else { slot };
                    prop_assert_eq!(release(&a, &h, at), !other);
                    if !other {
                        sent.remove(i);
                    }
                }
                Op::Drop(i) if i < host.len() => drop(host.remove(i)),
                _ => {}
            }
            let st = a.stats();
            prop_assert_eq!(st.in_use_blocks as usize, host.len() + sent.len());
            // No two live loans (host-owned or sent) share a byte.
            let mut ranges: Vec<(usize, usize)> = host
                .iter()
                .map(|l| (l.as_ptr() as usize - a.view().base as usize, l.capacity()))
                .chain(sent.iter().map(|(_, h)| {
                    let unit = (h.offset >> 10) as u32;
                    (h.offset as usize, a.block_bytes(a.word(unit).order))
                }))
                .collect();
            ranges.sort_unstable();
            for w in ranges.windows(2) {
                prop_assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {:?}", w);
            }
            let used: usize = ranges.iter().map(|r| r.1).sum();
            prop_assert_eq!(used as u64 + st.free_bytes, 1 << 15);
        }
        // Everything back: the sent blocks by their slots' releases, the loans by drops.
        for (slot, h) in sent.drain(..) {
            prop_assert!(release(&a, &h, slot));
        }
        host.clear();
        let st = a.stats();
        prop_assert_eq!((st.in_use_blocks, st.free_bytes, st.largest_free_bytes), (0, 1 << 15, 1 << 15));
    }
}
