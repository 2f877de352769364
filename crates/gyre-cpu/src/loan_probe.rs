//! The device side of loans (`cuda/include/gyre/loan.h`, which OpenCL and CUDA ring
//! kernels run) against its Rust twin (`gyre_core::loan::LoanArena::resolve`, which the
//! CPU backend's Rust handlers use): on pools driven into arbitrary states and handles
//! of arbitrary bytes, both accept exactly the same handles, give the same capacity, and
//! leave the state word as they found it once the block is given back.

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
        cap: *mut u64,
    ) -> u32;
    fn gyre_c11_loan_unhold(words: *mut u8, min_shift: u32, offset: u64);
}

/// The C resolver's answer for `h`: the block's capacity, or `None` (BAD_LOAN). A
/// resolved block is given back at once.
fn c_resolve(arena: &LoanArena, h: &LoanHandle) -> Option<u64> {
    let v = arena.view();
    let mut cap = 0u64;
    // SAFETY: the view's addresses are the arena's own memory (host memory on the CPU
    // backend), alive while `arena` is; the C code touches only the word of a unit start
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
            &mut cap,
        )
    };
    if status != gyre_abi::error::NONE {
        assert_eq!(status, gyre_abi::error::BAD_LOAN);
        return None;
    }
    // SAFETY: as above; the block was resolved (busy) by this thread just now.
    unsafe { gyre_c11_loan_unhold(v.words as *mut u8, v.min_shift, h.offset) };
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
    /// Loan `len` bytes and send it (kernel-owned; its handle is a probe seed).
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

/// A handle near a seed: the seed itself or one field changed.
fn mutate(seed: LoanHandle, how: u8, x: u64) -> LoanHandle {
    match how % 6 {
        0 => seed,
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
    }
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
        for op in ops {
            match op {
                Op::Keep(len) => {
                    if let Ok(l) = arena.try_loan(len) {
                        sent.push(LoanHandle { offset: (l.as_ptr() as usize - arena.view().base as usize) as u64, len: len as u32, generation: 0 });
                        kept.push(l);
                    }
                }
                Op::Send(len) => {
                    if let Ok(l) = arena.try_loan(len) {
                        sent.push(l.into_handle());
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
            vec![LoanHandle { offset: 0, len: 1, generation: 1 }]
        } else {
            sent
        };
        for (how, x, pick) in probes {
            let h = mutate(seeds[pick % seeds.len()], how, x);
            let before = words(&arena);
            let rust = arena.resolve(&h).map(|b| b.len() as u64).ok();
            prop_assert_eq!(&words(&arena), &before, "Rust left a word changed: {:?}", h);
            let c = c_resolve(&arena, &h);
            prop_assert_eq!(&words(&arena), &before, "C left a word changed: {:?}", h);
            prop_assert_eq!(rust, c, "handle {:?}", h);
        }
        // Every block both resolvers held went back to the kernel: each seed that resolved
        // once resolves again.
        for h in seeds {
            prop_assert_eq!(arena.resolve(&h).is_ok(), c_resolve(&arena, &h).is_some());
        }
    }
}

#[test]
fn a_sent_handle_resolves_in_both_and_others_in_neither() {
    let arena = LoanArena::new(HostAllocator, LoanConfig::new(1 << 16, 1024)).unwrap();
    let h = arena.try_loan(3000).unwrap().into_handle();
    assert_eq!(c_resolve(&arena, &h), Some(4096));
    assert_eq!(arena.resolve(&h).map(|b| b.len()).ok(), Some(4096));
    let held = arena.resolve(&h).unwrap(); // busy: the C resolver is refused
    assert_eq!(c_resolve(&arena, &h), None);
    drop(held);
    for bad in [
        LoanHandle { len: 4097, ..h },
        LoanHandle {
            generation: h.generation + 1,
            ..h
        },
        LoanHandle {
            offset: 1 << 16,
            ..h
        },
        LoanHandle { offset: 512, ..h },
    ] {
        assert_eq!(c_resolve(&arena, &bad), None, "{bad:?}");
        assert!(arena.resolve(&bad).is_err(), "{bad:?}");
    }
    assert_eq!(c_resolve(&arena, &h), Some(4096), "given back each time");
}
