//! The device side of loans (`cuda/include/gyre/loan.h`, which OpenCL and CUDA ring
//! kernels run) against its Rust twin (`gyre_core::loan::LoanArena::resolve`, which the
//! CPU backend's Rust handlers use): on pools driven into arbitrary states, for handles
//! of arbitrary bytes in arbitrary slots, both accept exactly the same (handle, slot)
//! pairs and give the same capacity; the C one never writes a word, and the Rust one
//! leaves each word as it found it once its hold is given back.

use std::sync::atomic::{AtomicU64, Ordering};

use gyre_core::loan::{LoanArena, LoanConfig, LoanHandle};
use gyre_core::memory::HostAllocator;
use proptest::prelude::*;

extern "C" {
    fn gyre_c11_loan_resolve(
        base: *mut u8,
        words: *mut u8,
        bytes: u64,
        min_shift: u32,
        offset: u64,
        len: u32,
        generation: u32,
        idx: u64,
        cap: *mut u64,
    ) -> u32;
}

/// The C resolver's answer for `h` read from request slot `idx`: the block's capacity,
/// or `None` (BAD_LOAN).
fn c_resolve(arena: &LoanArena, h: &LoanHandle, idx: u64) -> Option<u64> {
    let v = arena.view();
    let mut cap = 0u64;
    // SAFETY: the view's addresses are the arena's own memory (host memory on the CPU
    // backend), alive while `arena` is; the C code reads only the word of a unit start
    // inside the pool, atomically, and no bytes of the pool.
    let status = unsafe {
        gyre_c11_loan_resolve(
            v.base as *mut u8,
            v.words as *mut u8,
            v.bytes,
            v.min_shift,
            h.offset,
            h.len,
            h.generation,
            idx,
            &mut cap,
        )
    };
    if status != gyre_abi::error::NONE {
        assert_eq!(status, gyre_abi::error::BAD_LOAN);
        return None;
    }
    Some(cap)
}

/// Every unit's state word, read through the view (the words of `gyre_abi::loan`).
fn words(arena: &LoanArena) -> Vec<u64> {
    let v = arena.view();
    let units = v.bytes >> v.min_shift;
    (0..units)
        .map(|u| {
            let p = (v.words + u * u64::from(gyre_abi::loan::WORD_STRIDE)) as *const AtomicU64;
            // SAFETY: unit u's word lies inside the arena's word block (units words,
            // WORD_STRIDE bytes apart, 64-aligned), alive while `arena` is; every access to
            // it is atomic.
            unsafe { &*p }.load(Ordering::Acquire)
        })
        .collect()
}

/// What to do to the pool before probing it.
#[derive(Debug, Clone)]
enum Op {
    /// Loan `len` bytes and keep the loan (host-owned).
    Keep(usize),
    /// Loan `len` bytes and send it in the next slot (kernel-owned; its handle and slot
    /// are a probe seed).
    Send(usize),
    /// Drop the `i`-th kept loan, if any.
    Drop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1usize..20_000).prop_map(Op::Keep),
        (1usize..20_000).prop_map(Op::Send),
        (0usize..8).prop_map(Op::Drop),
    ]
}

/// A (handle, slot) near a seed: the seed itself, or one field or the slot changed.
fn mutate((idx, seed): (u64, LoanHandle), how: u8, x: u64) -> (u64, LoanHandle) {
    let h = match how % 8 {
        0 => seed,
        6 => return (idx.wrapping_add(1 + x % 3), seed),
        7 => return (idx + (1 << 32), seed),
        1 => LoanHandle {
            offset: seed.offset.wrapping_add(x % 8192),
            ..seed
        },
        2 => LoanHandle {
            len: x as u32,
            ..seed
        },
        3 => LoanHandle {
            generation: seed.generation.wrapping_add((x % 5) as u32),
            ..seed
        },
        4 => LoanHandle { offset: x, ..seed },
        _ => LoanHandle {
            offset: (x % 64) * 1024,
            len: (x >> 8) as u32 % 40_000,
            generation: (x >> 40) as u32 % 8,
        },
    };
    (idx, h)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_c_and_rust_resolvers_agree(
        ops in proptest::collection::vec(op(), 0..24),
        probes in proptest::collection::vec((any::<u8>(), any::<u64>(), 0usize..32), 1..48),
    ) {
        let arena = LoanArena::new(HostAllocator, LoanConfig::new(1 << 16, 1024)).unwrap();
        let mut kept = Vec::new();
        let mut sent = Vec::new();
        let mut next_slot = 3u64;
        for op in ops {
            match op {
                Op::Keep(len) => {
                    if let Ok(l) = arena.try_loan(len) {
                        let offset = (l.as_ptr() as usize - arena.view().base as usize) as u64;
                        sent.push((next_slot, LoanHandle { offset, len: len as u32, generation: next_slot as u32 }));
                        kept.push(l);
                    }
                }
                Op::Send(len) => {
                    if let Ok(l) = arena.try_loan(len) {
                        sent.push((next_slot, l.send(next_slot)));
                        next_slot += 1;
                    }
                }
                Op::Drop(i) => {
                    if i < kept.len() {
                        drop(kept.remove(i));
                    }
                }
            }
        }
        let seeds = if sent.is_empty() {
            vec![(1, LoanHandle { offset: 0, len: 1, generation: 1 })]
        } else {
            sent
        };
        for (how, x, pick) in probes {
            let (idx, h) = mutate(seeds[pick % seeds.len()], how, x);
            let before = words(&arena);
            let rust = arena.resolve(&h, idx).map(|b| b.len() as u64).ok();
            prop_assert_eq!(&words(&arena), &before, "Rust left a word changed: {:?}", h);
            let c = c_resolve(&arena, &h, idx);
            prop_assert_eq!(&words(&arena), &before, "C changed a word: {:?}", h);
            prop_assert_eq!(rust, c, "handle {:?} in slot {}", h, idx);
        }
        // Every block the Rust resolver held went back to the kernel: each seed that
        // resolved once resolves again.
        for (idx, h) in seeds {
            prop_assert_eq!(arena.resolve(&h, idx).is_ok(), c_resolve(&arena, &h, idx).is_some());
        }
    }
}

#[test]
fn a_sent_handle_resolves_in_its_slot_in_both_and_nowhere_else() {
    let arena = LoanArena::new(HostAllocator, LoanConfig::new(1 << 16, 1024)).unwrap();
    let h = arena.try_loan(3000).unwrap().send(9);
    assert_eq!(c_resolve(&arena, &h, 9), Some(4096));
    assert_eq!(arena.resolve(&h, 9).map(|b| b.len()).ok(), Some(4096));
    let held = arena.resolve(&h, 9).unwrap(); // busy: a second Rust hold is refused
    assert!(arena.resolve(&h, 9).is_err());
    assert_eq!(
        c_resolve(&arena, &h, 9),
        None,
        "a held block is not the kernel's"
    );
    drop(held);
    for (bad, idx) in [
        (LoanHandle { len: 4097, ..h }, 9),
        (
            LoanHandle {
                generation: h.generation + 1,
                ..h
            },
            9,
        ),
        (
            LoanHandle {
                generation: h.generation + 1,
                ..h
            },
            10,
        ),
        (h, 10),
        (h, 9 + (1 << 32) + 1),
        (
            LoanHandle {
                offset: 1 << 16,
                ..h
            },
            9,
        ),
        (LoanHandle { offset: 512, ..h }, 9),
    ] {
        assert_eq!(c_resolve(&arena, &bad, idx), None, "{bad:?} in {idx}");
        assert!(arena.resolve(&bad, idx).is_err(), "{bad:?} in {idx}");
    }
    assert_eq!(c_resolve(&arena, &h, 9), Some(4096), "given back each time");
}
