//! Multi-thread stress and a property model of the pool.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::tests::{small_config, Counting};
use super::*;

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Writes a tag into the first 8 bytes; checked before the buffer is dropped, so two live
/// buffers sharing memory would be caught.
fn tag(buf: &mut PooledBuffer<Arc<Counting>>, value: u64) {
    if let Some(bytes) = buf.as_mut_slice() {
        bytes[..8].copy_from_slice(&value.to_le_bytes());
    }
}

fn check_tag(buf: &PooledBuffer<Arc<Counting>>, value: u64) {
    let bytes = buf.as_slice().map(|b| &b[..8]);
    assert_eq!(
        bytes,
        Some(&value.to_le_bytes()[..]),
        "buffer memory shared while live"
    );
}

#[test]
fn stress_four_threads() {
    const THREADS: usize = 4;
    let counting = Counting::new();
    // Tight caps so keep, discard and trim all happen.
    let config = PoolConfig::default()
        .with_buckets(256, 64 << 10)
        .with_retention(4, 256 << 10);
    let pool = MemoryPool::new(Arc::clone(&counting), config).unwrap();
    let deadline = Instant::now() + Duration::from_millis(300);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel()).unzip();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, inbox)| {
            let pool = Arc::clone(&pool);
            let next = senders[(t + 1) % THREADS].clone();
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1);
                let mut held: Vec<(PooledBuffer<Arc<Counting>>, u64)> = Vec::new();
                let mut acquired = 0u64;
                let mut iterations = 0u32;
                while Instant::now() < deadline && iterations < 200_000 {
                    iterations += 1;
                    while let Ok((buf, value)) = inbox.try_recv() {
                        check_tag(&buf, value); // returned on this thread, not its own
                    }
                    let r = xorshift(&mut rng);
                    match r % 16 {
                        0..=7 if held.len() < 16 => {
                            let bytes = 8 + (r >> 8) as usize % ((64 << 10) - 7);
                            let mut buf = pool.acquire(bytes).unwrap();
                            let value = r ^ t as u64;
                            tag(&mut buf, value);
                            held.push((buf, value));
                            acquired += 1;
                        }
                        8 if !held.is_empty() => {
                            let item = held.swap_remove((r >> 8) as usize % held.len());
                            // The receiver may have finished; then drop it here.
                            if let Err(mpsc::SendError((buf, value))) = next.send(item) {
                                check_tag(&buf, value);
                            }
                        }
                        9 if t == 0 && r % 64 == 9 => {
                            pool.trim();
                        }
                        _ if !held.is_empty() => {
                            let (buf, value) = held.swap_remove((r >> 8) as usize % held.len());
                            check_tag(&buf, value);
                        }
                        _ => {}
                    }
                }
                for (buf, value) in held {
                    check_tag(&buf, value);
                }
                drop(next);
                (acquired, inbox)
            })
        })
        .collect();
    drop(senders);
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut acquired = 0;
    for (count, inbox) in results {
        acquired += count;
        for (buf, value) in inbox.try_iter() {
            check_tag(&buf, value);
        }
    }

    let s = pool.stats();
    assert!(acquired > 0);
    assert_eq!(s.hits + s.misses, acquired);
    assert_eq!(s.returns, acquired);
    assert_eq!(s.returns, s.kept + s.discarded);
    assert_eq!((s.live_buffers, s.live_bytes, s.alloc_failures), (0, 0, 0));
    assert!(s.peak_live_bytes >= 256, "{s:?}"); // buffers in channels are live too
    assert!(s.retained_bytes <= 256 << 10);
    assert_eq!(s.kept, s.retained_blocks + s.hits + s.trimmed);
    assert_eq!(counting.allocs.load(SeqCst), s.misses);
    assert_eq!(counting.outstanding(), s.retained_blocks);
    drop(pool);
    assert_eq!(counting.outstanding(), 0, "leak: allocations not freed");
}

#[derive(Debug, Clone)]
enum Op {
    Acquire(usize),
    Release(usize),
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0usize..5000).prop_map(Op::Acquire),
        4 => any::<usize>().prop_map(Op::Release),
        1 => Just(Op::Trim),
    ]
}

/// What the pool should report, computed the simple way.
#[derive(Default)]
struct Model {
    free: [u64; 5], // retained blocks per bucket, 256..=4096
    live: Vec<usize>,
    stats: PoolStats,
}

const PER_BUCKET: u64 = 2;
const TOTAL: u64 = 6144;

impl Model {
    fn bucket(bytes: usize) -> Option<(usize, u64)> {
        let size = bytes.max(256).next_power_of_two();
        (bytes <= 4096).then(|| (size.trailing_zeros() as usize - 8, size as u64))
    }
    fn acquire(&mut self, bytes: usize) -> bool {
        let Some((index, size)) = Self::bucket(bytes) else {
            return false;
        };
        let s = &mut self.stats;
        if self.free[index] > 0 {
            self.free[index] -= 1;
            s.hits += 1;
            s.retained_blocks -= 1;
            s.retained_bytes -= size;
        } else {
            s.misses += 1;
        }
        s.live_buffers += 1;
        s.live_bytes += size;
        s.peak_live_bytes = s.peak_live_bytes.max(s.live_bytes);
        self.live.push(bytes);
        true
    }
    fn release(&mut self, at: usize) {
        let bytes = self.live.swap_remove(at);
        let (index, size) = Self::bucket(bytes).unwrap_or_default();
        let s = &mut self.stats;
        s.returns += 1;
        s.live_buffers -= 1;
        s.live_bytes -= size;
        if s.retained_bytes + size <= TOTAL && self.free[index] < PER_BUCKET {
            self.free[index] += 1;
            s.kept += 1;
            s.retained_blocks += 1;
            s.retained_bytes += size;
        } else {
            s.discarded += 1;
        }
    }
    fn trim(&mut self) {
        self.stats.trimmed += self.stats.retained_blocks;
        (self.stats.retained_blocks, self.stats.retained_bytes) = (0, 0);
        self.free = [0; 5];
    }
}

proptest! {
    #[test]
    fn pool_matches_model(ops in proptest::collection::vec(op(), 0..200)) {
        let counting = Counting::new();
        let config = small_config().with_retention(PER_BUCKET as usize, TOTAL as usize);
        let pool = MemoryPool::new(Arc::clone(&counting), config).unwrap();
        let mut model = Model::default();
        let mut live = Vec::new();
        for op in ops {
            match op {
                Op::Acquire(bytes) => {
                    let got = pool.acquire(bytes);
                    prop_assert_eq!(got.is_ok(), model.acquire(bytes));
                    if let Ok(buf) = got {
                        prop_assert_eq!(buf.len(), bytes);
                        live.push(buf);
                    }
                }
                Op::Release(i) if !live.is_empty() => {
                    let at = i % live.len();
                    drop(live.swap_remove(at));
                    model.release(at);
                }
                Op::Release(_) => {}
                Op::Trim => {
                    let retained = model.stats.retained_bytes;
                    prop_assert_eq!(pool.trim() as u64, retained);
                    model.trim();
                }
            }
            prop_assert_eq!(pool.stats(), model.stats);
            prop_assert_eq!(counting.outstanding(), model.stats.live_buffers + model.stats.retained_blocks);
        }
        drop(live);
        drop(pool);
        prop_assert_eq!(counting.outstanding(), 0);
    }
}
