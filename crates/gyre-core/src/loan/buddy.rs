//! [`Buddy`]: the binary buddy allocator (Knowlton 1965) that carves a loan arena into
//! power-of-two blocks. Pure bookkeeping over unit indices: it never touches the arena's
//! memory (which may be device memory), so its state lives in host vectors.
//!
//! The arena is `1 << max_order` units; a block of order `k` is `1 << k` units starting
//! at a multiple of `1 << k`. Allocation takes the lowest-addressed free block of the
//! smallest order that fits and splits it down; freeing merges a block with its buddy
//! (`index ^ (1 << k)`) while the buddy is free and of the same order. Free lists are
//! ordered sets, so allocation prefers low addresses (less fragmentation), and a buddy is
//! found free in O(1) through `free_order`.

use std::collections::BTreeSet;

/// Marks a unit that does not start a free block.
const NOT_FREE: u8 = u8::MAX;

/// See the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Buddy {
    max_order: u8,
    /// `free[k]`: start units of the free blocks of order `k`.
    free: Vec<BTreeSet<u32>>,
    /// Per unit: the order of the free block starting there, or [`NOT_FREE`].
    free_order: Vec<u8>,
    /// Units in free blocks.
    free_units: u64,
}

impl Buddy {
    /// An allocator of `1 << max_order` units, all free. `max_order` at most 31.
    pub(crate) fn new(max_order: u8) -> Self {
        debug_assert!(max_order <= 31);
        let units = 1usize << max_order;
        let mut free = vec![BTreeSet::new(); usize::from(max_order) + 1];
        free[usize::from(max_order)].insert(0);
        let mut free_order = vec![NOT_FREE; units];
        free_order[0] = max_order;
        Self {
            max_order,
            free,
            free_order,
            free_units: units as u64,
        }
    }

    /// Allocates a block of `order`: its first unit, and whether a free block of exactly
    /// that order was there (no split). `None` when no block of `order` or above is free.
    pub(crate) fn alloc(&mut self, order: u8) -> Option<(u32, bool)> {
        if order > self.max_order {
            return None;
        }
        let from = (order..=self.max_order).find(|&k| !self.free[usize::from(k)].is_empty())?;
        let start = self.free[usize::from(from)].pop_first()?;
        self.free_order[start as usize] = NOT_FREE;
        // Split down: keep the lower half, free the upper one.
        let mut k = from;
        while k > order {
            k -= 1;
            let upper = start + (1u32 << k);
            self.free[usize::from(k)].insert(upper);
            self.free_order[upper as usize] = k;
        }
        self.free_units -= 1u64 << order;
        Some((start, from == order))
    }

    /// Frees the block of `order` at `start`, merging it with its free buddies.
    ///
    /// The caller passes a block `alloc` returned and has not freed since (checked with
    /// `debug_assert!`).
    pub(crate) fn free(&mut self, start: u32, order: u8) {
        debug_assert!(order <= self.max_order);
        debug_assert_eq!(start % (1u32 << order), 0, "misaligned block");
        debug_assert_eq!(self.free_order[start as usize], NOT_FREE, "double free");
        self.free_units += 1u64 << order;
        let (mut start, mut k) = (start, order);
        while k < self.max_order {
            let buddy = start ^ (1u32 << k);
            if self.free_order[buddy as usize] != k {
                break;
            }
            self.free[usize::from(k)].remove(&buddy);
            self.free_order[buddy as usize] = NOT_FREE;
            start = start.min(buddy);
            k += 1;
        }
        self.free[usize::from(k)].insert(start);
        self.free_order[start as usize] = k;
    }

    /// Units in free blocks.
    pub(crate) fn free_units(&self) -> u64 {
        self.free_units
    }

    /// Units in the largest free block (0 when none is free).
    pub(crate) fn largest_free_units(&self) -> u64 {
        (0..=self.max_order)
            .rev()
            .find(|&k| !self.free[usize::from(k)].is_empty())
            .map_or(0, |k| 1u64 << k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_and_merges_back_to_one_block() {
        let mut b = Buddy::new(4); // 16 units
        let (a, exact) = b.alloc(0).unwrap();
        assert_eq!((a, exact), (0, false));
        let (c, exact) = b.alloc(0).unwrap();
        assert_eq!((c, exact), (1, true), "the buddy left by the split");
        let (d, _) = b.alloc(2).unwrap();
        assert_eq!(d, 4);
        assert_eq!(b.free_units(), 16 - 6);
        assert_eq!(b.largest_free_units(), 8);
        b.free(a, 0);
        b.free(d, 2);
        b.free(c, 0);
        assert_eq!((b.free_units(), b.largest_free_units()), (16, 16));
        assert!(b.alloc(5).is_none(), "beyond the arena");
        assert_eq!(b.alloc(4), Some((0, true)));
        assert!(b.alloc(0).is_none(), "exhausted");
    }

    proptest! {
        /// Against a model (a set of allocated unit ranges): blocks never overlap, stay
        /// inside the arena and are aligned; the free count is exact; freeing all
        /// restores one whole block.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..6, any::<bool>(), any::<u16>()), 1..300)) {
            let mut b = Buddy::new(6);
            let mut live: Vec<(u32, u8)> = Vec::new();
            for (order, do_alloc, pick) in ops {
                if do_alloc || live.is_empty() {
                    let used: u64 = live.iter().map(|&(_, k)| 1u64 << k).sum();
                    match b.alloc(order) {
                        Some((s, _)) => {
                            prop_assert_eq!(s % (1 << order), 0);
                            prop_assert!(u64::from(s) + (1 << order) <= 64);
                            for &(t, k) in &live {
                                let (a0, a1) = (s, s + (1 << order));
                                let (b0, b1) = (t, t + (1 << k));
                                prop_assert!(a1 <= b0 || b1 <= a0, "overlap");
                            }
                            live.push((s, order));
                        }
                        // Refused only if no aligned free run of that size exists.
                        None => prop_assert!(b.largest_free_units() < 1 << order || used + (1 << order) > 64),
                    }
                } else {
                    let (s, k) = live.swap_remove(usize::from(pick) % live.len());
                    b.free(s, k);
                }
                let used: u64 = live.iter().map(|&(_, k)| 1u64 << k).sum();
                prop_assert_eq!(b.free_units(), 64 - used);
            }
            for (s, k) in live.drain(..) {
                b.free(s, k);
            }
            prop_assert_eq!(b.largest_free_units(), 64);
        }
    }
}
