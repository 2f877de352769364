//! The link tables of a pipeline graph: the [`RouteTable`] of each fan-out stage and the
//! [`JoinTable`] of each target written by id (`cuda/include/gyre/link.h`), in one
//! allocation of the memory the stages share (the backend's region memory: host memory,
//! fine-grained SVM or mapped pinned memory), one 320-byte entry each.
//!
//! The host writes an entry before the stages that use it launch; afterwards only the
//! kernels write it (a route's scratch words by its fan-out stage, a join's `stopped`
//! count by its producers), and the host only reads.

use core::ptr::NonNull;
use core::sync::atomic::Ordering::{Acquire, Release};

use gyre_abi::{route, JoinTable, RouteTable};

use crate::error::{Error, Result};
use crate::region::RegionMemory;

/// Bytes of one entry (a [`RouteTable`]; a [`JoinTable`] uses the first 64).
pub const ENTRY_BYTES: usize = core::mem::size_of::<RouteTable>();

/// How a fan-out stage picks the branch of each reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteMode {
    /// The i-th reply goes to branch `i mod branches`.
    RoundRobin,
    /// The reply goes to branch [`route_branch`]`(key, branches)`, `key` the
    /// little-endian `u64` at this byte offset of the reply payload (0 for a reply too
    /// short to hold it, error replies among them).
    Key {
        /// Byte offset of the key in the reply payload.
        offset: u32,
    },
}

/// The branch a key goes to among `branches` (SplitMix64's finaliser, then modulo): the
/// device's `gyre_route_pick`, for callers who need to know where a key lands.
///
/// # Examples
///
/// ```
/// use gyre_core::chain::route_branch;
/// let b = route_branch(42, 3);
/// assert!(b < 3);
/// assert_eq!(b, route_branch(42, 3)); // a key always lands on one branch
/// ```
pub fn route_branch(key: u64, branches: u32) -> u32 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % u64::from(branches.max(1))) as u32
}

/// One allocation of link-table entries.
///
/// Invariant: `mem` holds at least `entries * ENTRY_BYTES` bytes, 128-aligned and zeroed
/// when created ([`RegionMemory`]'s contract), so every entry is a valid, aligned
/// [`RouteTable`] (all-zero is a valid value of every field) and a valid [`JoinTable`].
pub struct LinkTables {
    mem: Box<dyn RegionMemory>,
    entries: usize,
}

impl core::fmt::Debug for LinkTables {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LinkTables")
            .field("base", &self.mem.base())
            .field("entries", &self.entries)
            .finish()
    }
}

impl LinkTables {
    /// Bytes to allocate for `entries` entries.
    pub fn bytes_for(entries: usize) -> usize {
        entries.max(1) * ENTRY_BYTES
    }

    /// Tables over `mem` (from the backend's `alloc_region(bytes_for(entries))`).
    ///
    /// # Errors
    ///
    /// [`Error::Alloc`] when `mem` is too short.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::chain::LinkTables;
    /// use gyre_core::region::HostMemory;
    /// let mem = HostMemory::zeroed(LinkTables::bytes_for(2))?;
    /// let t = LinkTables::new(Box::new(mem), 2)?;
    /// t.set_join(1, 0x1000, 3)?;
    /// assert_eq!(t.join_stopped(1), Some(0));
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn new(mem: Box<dyn RegionMemory>, entries: usize) -> Result<Self> {
        let need = Self::bytes_for(entries);
        if mem.len() < need {
            return Err(Error::Alloc {
                size: need,
                align: 128,
            });
        }
        Ok(Self { mem, entries })
    }

    /// The memory's base and entry `entry`'s offset in it: the kernel argument of a link
    /// through that entry is `base + offset` in the kernel's address space.
    pub fn entry(&self, entry: usize) -> (NonNull<u8>, usize) {
        (self.mem.base(), entry * ENTRY_BYTES)
    }

    fn route(&self, entry: usize) -> Option<&RouteTable> {
        (entry < self.entries).then(|| {
            debug_assert!((entry + 1) * ENTRY_BYTES <= self.mem.len());
            // SAFETY: in bounds (entry < entries and the invariant); 64-aligned, as
            // RouteTable needs (a 128-aligned base plus a multiple of 320, itself a
            // multiple of 64); memory that
            // was zeroed, and all-zero is a valid RouteTable; shared with kernels only
            // through its atomics, and alive as long as `self`.
            unsafe {
                &*self
                    .mem
                    .base()
                    .as_ptr()
                    .add(entry * ENTRY_BYTES)
                    .cast::<RouteTable>()
            }
        })
    }

    fn join(&self, entry: usize) -> Option<&JoinTable> {
        // SAFETY: as `route`: a JoinTable is the first 64 bytes of an entry, 64-aligned.
        self.route(entry)
            .map(|r| unsafe { &*(r as *const RouteTable).cast::<JoinTable>() })
    }

    fn out_of_range(&self, entry: usize) -> Error {
        Error::InvalidArgument {
            name: "link table entry",
            value: format!("{entry} (of {})", self.entries),
            reason: "an entry the tables were allocated with",
        }
    }

    /// Writes entry `entry` as a route over `branches` (each branch's first stage: the
    /// device address of its region and its message type). Before the fan-out stage
    /// launches.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an entry out of range or a branch count outside
    /// `2..=route::MAX_BRANCHES`.
    pub fn set_route(&self, entry: usize, mode: RouteMode, branches: &[(u64, u32)]) -> Result<()> {
        let t = self.route(entry).ok_or_else(|| self.out_of_range(entry))?;
        let n = branches.len();
        if !(2..=route::MAX_BRANCHES as usize).contains(&n) {
            return Err(Error::InvalidArgument {
                name: "fan-out branches",
                value: n.to_string(),
                reason: "2 to gyre_abi::route::MAX_BRANCHES (8) branches",
            });
        }
        let (m, off) = match mode {
            RouteMode::RoundRobin => (route::ROUND_ROBIN, 0),
            RouteMode::Key { offset } => (route::KEY, offset),
        };
        t.mode.store(m, Release);
        t.key_offset.store(off, Release);
        t.rr.store(0, Release);
        for (j, &(addr, msg_type)) in branches.iter().enumerate() {
            t.target[j].store(addr, Release);
            t.msg_type[j].store(msg_type, Release);
            t.head[j].store(0, Release);
            t.released[j].store(0, Release);
            t.ring[j].store(0, Release);
        }
        t.count.store(n as u32, Release);
        Ok(())
    }

    /// Writes entry `entry` as the join of `producers` stages writing the region at
    /// device address `target` by id. Before the producers launch.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an entry out of range.
    pub fn set_join(&self, entry: usize, target: u64, producers: u32) -> Result<()> {
        let t = self.join(entry).ok_or_else(|| self.out_of_range(entry))?;
        t.target.store(target, Release);
        t.stopped.store(0, Release);
        t.producers.store(producers, Release);
        Ok(())
    }

    /// How many producers of join `entry` stopped for good so far (`None` out of range).
    pub fn join_stopped(&self, entry: usize) -> Option<u64> {
        self.join(entry).map(|t| t.stopped.load(Acquire))
    }

    /// Requests fan-out `entry` wrote into each branch so far (`None` out of range).
    pub fn routed(&self, entry: usize) -> Option<Vec<u64>> {
        self.route(entry).map(|t| {
            let n = (t.count.load(Acquire) as usize).min(t.head.len());
            t.head[..n].iter().map(|h| h.load(Acquire)).collect()
        })
    }
}
