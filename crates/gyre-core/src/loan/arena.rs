//! [`LoanArena`]: one contiguous allocation of a kernel's memory kind, carved into
//! power-of-two blocks by a buddy allocator, with a per-block owner and generation that
//! every handle is checked against.
//!
//! The ownership protocol is described in the [`loan`](super) module documentation.

use core::ptr::NonNull;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;

use super::buddy::Buddy;
use super::wait::{Mutex, Waiters};
use super::words::{alloc_host, owner, Word, Words};
use super::{slot_tag, Loan, LoanConfig, LoanHandle, LoanStats};
use crate::memory::{MemoryKind, RawAllocator, RawBlock};
use crate::{Error, Result};

/// A loan pool as a device resolver needs it (`gyre_loan_pool` of
/// `cuda/include/gyre/loan.h`): addresses in the kernel's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoanPoolView {
    /// The pool's first byte, where the kernel reads it.
    pub base: u64,
    /// The first state word (unit `u`'s is `u * 64` bytes on).
    pub words: u64,
    /// Bytes of the pool.
    pub bytes: u64,
    /// log2 of the smallest block.
    pub min_shift: u32,
}

/// The allocator and its counters, under one lock (taken once per loan and per return).
struct Book {
    buddy: Buddy,
    hits: u64,
    misses: u64,
    exhausted: u64,
    returns: u64,
    in_use_blocks: u64,
    /// Units out.
    in_use_units: u64,
    peak_in_use_units: u64,
}

/// A loan pool: one allocation of a kernel's memory kind carved into power-of-two
/// blocks, each with an owner and a generation (see the [`loan`](super) module
/// documentation for the ownership protocol).
pub struct LoanArena {
    alloc: Box<dyn RawAllocator>,
    /// The arena's memory; `None` only while dropping.
    block: Option<RawBlock>,
    /// Host address of the arena (every kind the loan pool supports has one).
    base: NonNull<u8>,
    /// The arena's bytes as the kernel addresses them: `block`'s device address under
    /// zero copy; the device side of a [`LoanMirror`](super::LoanMirror) under a copy
    /// strategy.
    kernel_addr: u64,
    /// The kernel's side as host code may touch it (the CPU backend's Rust handlers):
    /// `base` under zero copy, the emulated device memory of a CPU copy strategy; `None`
    /// when the kernel's side is device memory (only a device kernel resolves handles).
    kernel_host: Option<NonNull<u8>>,
    /// Keeps the kernel's side alive when it is not `block`.
    _kernel_mem: Option<Arc<dyn crate::copy::CopyEngine>>,
    /// Set (once, never cleared) when a device kernel serves the pool: it resolves
    /// handles by reading the words only, without holding blocks busy, so host code must
    /// not resolve them ([`LoanArena::serve_on_device`]).
    device_kernel: core::sync::atomic::AtomicBool,
    /// The one channel whose kernel serves the pool, bound once by
    /// [`LoanArena::install_release_hook`]: the only channel whose replies claim its
    /// blocks and whose releases free them. Weak: the allocation (and so the address
    /// compared) stays while the arena lives.
    pub(super) channel: std::sync::OnceLock<std::sync::Weak<crate::channel::Channel>>,
    bytes: usize,
    min_shift: u32,
    book: Mutex<Book>,
    /// One state word per unit; only block starts are meaningful.
    words: Words,
    pub(super) waiters: Waiters,
}

// SAFETY: the arena's memory is reached only through `base` under the ownership protocol
// of the module documentation (a block is touched by its one owner); every other field is
// Sync. `RawAllocator` is Send + Sync.
unsafe impl Send for LoanArena {}
// SAFETY: as above.
unsafe impl Sync for LoanArena {}

impl core::fmt::Debug for LoanArena {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LoanArena")
            .field("kind", &self.alloc.kind())
            .field("bytes", &self.bytes)
            .field("min_block", &(1usize << self.min_shift))
            .finish_non_exhaustive()
    }
}

impl LoanArena {
    /// An arena of `config.pool_bytes` from `alloc`, in blocks of `config.min_block` bytes
    /// and up.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad `config` or an allocator without host access
    /// (device memory needs the copy strategies' staging, not built yet), and the
    /// allocator's [`Error::Alloc`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::loan::{LoanArena, LoanConfig};
    /// use gyre_core::memory::HostAllocator;
    /// let arena = LoanArena::new(HostAllocator, LoanConfig::new(1 << 20, 1024))?;
    /// let mut loan = arena.try_loan(3000)?; // a 4 KiB block
    /// assert_eq!((loan.len(), loan.capacity()), (3000, 4096));
    /// loan[..5].copy_from_slice(b"hello");
    /// drop(loan); // back to the pool
    /// assert_eq!(arena.stats().returns, 1);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn new(alloc: impl RawAllocator + 'static, config: LoanConfig) -> Result<Arc<Self>> {
        config.validate()?;
        if !alloc.kind().is_host_accessible() {
            return Err(Error::InvalidArgument {
                name: "loan pool memory",
                value: alloc.kind().name().into(),
                reason: "the loan pool needs host-addressable memory",
            });
        }
        // Blocks are aligned to their size up to a page (what every allocator promises).
        let align = config.min_block.min(4096);
        let (block, base) = alloc_host(&alloc, config.pool_bytes, align)?;
        let kernel_addr = block.device_addr();
        let min_shift = config.min_block.trailing_zeros();
        let max_order = (config.pool_bytes.trailing_zeros() - min_shift) as u8;
        let units = config.pool_bytes >> min_shift;
        let words = match Words::new(&alloc, units) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: `block` came from `alloc` just now and nothing uses it.
                unsafe { alloc.free(block) };
                return Err(e);
            }
        };
        Ok(Arc::new(Self {
            alloc: Box::new(alloc),
            block: Some(block),
            base,
            kernel_addr,
            kernel_host: Some(base),
            _kernel_mem: None,
            device_kernel: core::sync::atomic::AtomicBool::new(false),
            channel: std::sync::OnceLock::new(),
            bytes: config.pool_bytes,
            min_shift,
            book: Mutex::new(Book {
                buddy: Buddy::new(max_order),
                hits: 0,
                misses: 0,
                exhausted: 0,
                returns: 0,
                in_use_blocks: 0,
                in_use_units: 0,
                peak_in_use_units: 0,
            }),
            words,
            waiters: Waiters::default(),
        }))
    }

    /// An arena whose host side comes from `alloc` (the staging side the host writes)
    /// and whose kernel side is `device` (the CPU backend's emulated device memory, which
    /// the kernel works on in place), for the copy strategies; move bytes between them
    /// with a [`LoanMirror`](super::LoanMirror) over `device`.
    ///
    /// # Errors
    ///
    /// As [`LoanArena::new`], and [`Error::InvalidArgument`] when `device` is smaller
    /// than the pool.
    pub fn new_split(
        alloc: impl RawAllocator + 'static,
        config: LoanConfig,
        device: Arc<crate::copy::HostDeviceArena>,
    ) -> Result<Arc<Self>> {
        let host = device.kernel_ptr();
        Self::split(alloc, config, host.as_ptr() as u64, Some(host), device)
    }

    /// An arena whose host side comes from `alloc` (the staging side the host writes,
    /// and the state words, which the kernel reads where the host wrote them: `alloc`
    /// must give memory the kernel addresses, such as mapped pinned memory) and whose
    /// bytes the kernel reads in `device` (device memory), at device address
    /// `kernel_addr`. For a device kernel under a copy strategy: move bytes with a
    /// [`LoanMirror`](super::LoanMirror) over `device`. Host code never resolves a handle
    /// of such an arena ([`LoanArena::resolve`] refuses).
    ///
    /// # Errors
    ///
    /// As [`LoanArena::new_split`].
    pub fn new_split_device(
        alloc: impl RawAllocator + 'static,
        config: LoanConfig,
        device: Arc<dyn crate::copy::CopyEngine>,
        kernel_addr: u64,
    ) -> Result<Arc<Self>> {
        Self::split(alloc, config, kernel_addr, None, device)
    }

    fn split(
        alloc: impl RawAllocator + 'static,
        config: LoanConfig,
        kernel_addr: u64,
        kernel_host: Option<NonNull<u8>>,
        device: Arc<dyn crate::copy::CopyEngine>,
    ) -> Result<Arc<Self>> {
        if device.len() < config.pool_bytes {
            return Err(Error::InvalidArgument {
                name: "loan pool device memory",
                value: format!("{} bytes", device.len()),
                reason: "smaller than the pool",
            });
        }
        let arena = Self::new(alloc, config)?;
        let mut arena = Arc::into_inner(arena).ok_or(Error::InvalidArgument {
            name: "loan pool",
            value: "shared".into(),
            reason: "a new arena has one owner",
        })?;
        arena.kernel_addr = kernel_addr;
        arena.kernel_host = kernel_host;
        arena._kernel_mem = Some(device);
        Ok(Arc::new(arena))
    }

    /// Marks the pool as served by a device kernel, before that kernel is launched: a
    /// device resolver only reads state words and never holds a block busy, so from now
    /// on [`LoanArena::resolve`] refuses every handle (host code would otherwise reach
    /// bytes the device is working on). Never undone.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::loan::{LoanArena, LoanConfig};
    /// use gyre_core::memory::HostAllocator;
    /// let arena = LoanArena::new(HostAllocator, LoanConfig::default())?;
    /// let h = arena.try_loan(10)?.send(0);
    /// arena.serve_on_device();
    /// assert!(arena.resolve(&h, 0).is_err());
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn serve_on_device(&self) {
        self.device_kernel.store(true, Release);
    }

    /// Whether the kernel works on a side of its own that a mirror keeps in step
    /// ([`LoanArena::new_split`], [`LoanArena::new_split_device`]).
    pub fn is_split(&self) -> bool {
        self._kernel_mem.is_some()
    }

    /// The memory kind of the arena.
    pub fn kind(&self) -> MemoryKind {
        self.alloc.kind()
    }

    /// Bytes of the arena (also the largest loan).
    pub fn pool_bytes(&self) -> usize {
        self.bytes
    }

    /// The smallest block.
    pub fn min_block(&self) -> usize {
        1 << self.min_shift
    }

    /// The pool as a device resolver sees it (`gyre_loan_pool`, `cuda/include/gyre/loan.h`):
    /// the kernel's side of the bytes and the state words, at the device addresses
    /// their allocations report (the host address for host memory and fine-grained SVM,
    /// `cuMemHostGetDevicePointer` for mapped pinned memory). A backend passes it to its
    /// ring kernel.
    pub fn view(&self) -> LoanPoolView {
        LoanPoolView {
            base: self.kernel_addr,
            words: self.words.device_addr(),
            bytes: self.bytes as u64,
            min_shift: self.min_shift,
        }
    }

    pub(super) fn order_for(&self, len: usize) -> Result<u8> {
        if len > self.bytes {
            return Err(Error::LoanTooLarge {
                len,
                max: self.bytes,
            });
        }
        let units = len.max(1).div_ceil(1 << self.min_shift);
        Ok(units.next_power_of_two().trailing_zeros() as u8)
    }

    /// A block for `len` bytes now, or [`Error::PoolExhausted`] (or
    /// [`Error::LoanTooLarge`]). The loan's bytes are whatever the block held last
    /// (zeros at first): initialised, not cleared.
    ///
    /// # Errors
    ///
    /// As above.
    pub fn try_loan(self: &Arc<Self>, len: usize) -> Result<Loan> {
        let order = self.order_for(len)?;
        match self.take_block(order) {
            Some(unit) => Ok(Loan::new(self.clone(), unit, order, len)),
            None => {
                let mut b = self.book.lock();
                b.exhausted += 1;
                Err(Error::PoolExhausted {
                    len,
                    free: b.buddy.free_units() << self.min_shift,
                    largest_free: b.buddy.largest_free_units() << self.min_shift,
                })
            }
        }
    }

    /// Takes a free block of `order` (free -> host; the generation means something only
    /// while the block is kernel-owned, bound to a slot).
    pub(super) fn take_block(&self, order: u8) -> Option<u32> {
        let unit = {
            let mut b = self.book.lock();
            let (unit, exact) = b.buddy.alloc(order)?;
            if exact {
                b.hits += 1;
            } else {
                b.misses += 1;
            }
            b.in_use_blocks += 1;
            b.in_use_units += 1 << order;
            b.peak_in_use_units = b.peak_in_use_units.max(b.in_use_units);
            unit
        };
        let w = &self.words.at(unit);
        let old = Word::unpack(w.load(Acquire));
        debug_assert_eq!(old.owner, owner::FREE);
        w.store(
            Word {
                generation: old.generation,
                owner: owner::HOST,
                order,
            }
            .pack(),
            Release,
        );
        Some(unit)
    }

    /// Gives a block back to the buddy allocator (its word already says free).
    fn put_block(&self, unit: u32, order: u8) {
        {
            let mut b = self.book.lock();
            b.buddy.free(unit, order);
            b.returns += 1;
            b.in_use_blocks -= 1;
            b.in_use_units -= 1 << order;
        }
        self.wake_waiters();
    }

    /// Moves the block at `unit` from owner `from` to `to` if its word says `from` (and,
    /// when given, `generation`); the new word keeps the order and the generation.
    fn transition(&self, unit: u32, from: u64, generation: Option<u32>, to: u64) -> Option<Word> {
        let w = self.words.get(unit as usize)?;
        let cur = w.load(Acquire);
        let old = Word::unpack(cur);
        if old.owner != from || generation.is_some_and(|g| g != old.generation) {
            return None;
        }
        let new = old.moved(to);
        w.compare_exchange(cur, new.pack(), AcqRel, Acquire)
            .ok()
            .map(|_| new)
    }

    /// The unit a handle's offset names, if it is a unit start inside the arena.
    fn unit_of(&self, h: &LoanHandle) -> Option<u32> {
        let off = usize::try_from(h.offset).ok()?;
        if off >= self.bytes || off & ((1 << self.min_shift) - 1) != 0 {
            return None;
        }
        u32::try_from(off >> self.min_shift).ok()
    }

    /// Host -> kernel, bound to request slot `index`: the word's generation becomes the
    /// slot's tag ([`slot_tag`]) and the handle that slot carries is returned. Called by
    /// the [`Loan`] being sent, with the block host-owned by it and slot `index` claimed
    /// but not yet published, so this release store is ordered before the publication.
    pub(crate) fn send_at(&self, unit: u32, len: usize, index: u64) -> LoanHandle {
        let w = self.words.at(unit);
        let old = Word::unpack(w.load(Relaxed));
        debug_assert_eq!(old.owner, owner::HOST, "only the owner sends a block");
        let new = Word {
            generation: slot_tag(index),
            owner: owner::KERNEL,
            order: old.order,
        };
        w.store(new.pack(), Release);
        LoanHandle {
            offset: u64::from(unit) << self.min_shift,
            len: len as u32,
            generation: new.generation,
        }
    }

    /// A transition only the current owner can make (busy under one [`KernelBlock`]): no
    /// other party moves the word away from `from`, so a plain release store does what a
    /// compare-and-swap would.
    fn store_from(&self, unit: u32, from: u64, to: u64) -> Word {
        let w = &self.words.at(unit);
        let old = Word::unpack(w.load(Acquire));
        debug_assert_eq!(old.owner, from, "only the owner leaves this state");
        let new = old.moved(to);
        w.store(new.pack(), Release);
        new
    }

    /// The kernel's view of the handle carried by request slot `index`: the block's bytes
    /// (its whole capacity), held busy until the returned guard drops, if the block is
    /// kernel-owned and bound to that slot (the handle's generation and the word's are
    /// [`slot_tag`]`(index)`) and the length fits; otherwise why not (answered
    /// `BAD_LOAN`). The device kernels' twin, `gyre_loan_resolve`, makes the same checks
    /// but only reads the word.
    ///
    /// # Errors
    ///
    /// A short reason: `offset outside the pool or not at a block start`, `not sent in
    /// this slot` (free, host-owned, held, or bound to another slot), `length beyond the
    /// block`.
    pub fn resolve(&self, h: &LoanHandle, index: u64) -> Result<KernelBlock<'_>, &'static str> {
        let Some(kernel_host) = self.kernel_host else {
            return Err("the pool's kernel side is device memory");
        };
        if self.device_kernel.load(Acquire) {
            return Err("a device kernel resolves this pool's handles");
        }
        let (unit, cap) = self.hold(h, index)?;
        let off = (unit as usize) << self.min_shift;
        debug_assert!(off + cap <= self.bytes);
        // SAFETY: the block [off, off + cap) lies inside the arena (buddy blocks never
        // cross its end), on its kernel side as host code reaches it (`kernel_host`: the
        // arena itself, or emulated device memory of at least the pool's size that
        // `_kernel_mem` keeps alive); this
        // call moved it to busy, which no other party can take (every other transition
        // starts from another owner; a mirror copies a block only while it holds it busy
        // itself), so the bytes are ours until the guard gives them back; both sides are
        // initialised (zeroed) memory.
        let bytes = unsafe { core::slice::from_raw_parts_mut(kernel_host.as_ptr().add(off), cap) };
        Ok(KernelBlock {
            arena: self,
            unit,
            bytes,
        })
    }

    /// The host takes a reply's block back as a [`Loan`] of `reply.len` bytes: `reply`
    /// must name the block `request` was sent in (same offset and generation) by request
    /// slot `index`, still kernel-owned and bound to that slot, with a length that fits.
    /// [`LoanArena::claim`] is the safe form, for a reply the channel delivered.
    ///
    /// # Errors
    ///
    /// [`Error::BadLoan`] (the request's block stays kernel-owned; the channel's release
    /// of the request frees it).
    ///
    /// # Safety
    ///
    /// The kernel is done with slot `index`: its reply has been published, or the kernel
    /// has stopped for good. (A device kernel does not hold the block while it works on
    /// it, so nothing else keeps a claim from taking bytes it is still writing.)
    pub unsafe fn claim_handles(
        self: &Arc<Self>,
        reply: &LoanHandle,
        request: &LoanHandle,
        index: u64,
    ) -> Result<Loan> {
        let bad = |why| Error::BadLoan {
            side: "from the kernel",
            offset: reply.offset,
            len: reply.len,
            generation: reply.generation,
            why,
        };
        if reply.offset != request.offset || reply.generation != request.generation {
            return Err(bad("not the block of its request"));
        }
        if request.generation != slot_tag(index) {
            return Err(bad("its request was not sent in this slot"));
        }
        let unit = self
            .unit_of(reply)
            .ok_or(bad("offset outside the pool or not at a block start"))?;
        let w = Word::unpack(self.words.at(unit).load(Acquire));
        let cap = self.block_bytes(w.order);
        if reply.len as usize > cap {
            return Err(bad("length beyond the block"));
        }
        let taken = self.transition(unit, owner::KERNEL, Some(reply.generation), owner::HOST);
        match taken {
            Some(w) => Ok(Loan::new(self.clone(), unit, w.order, reply.len as usize)),
            None => Err(bad("no block sent in this slot")),
        }
    }

    /// The kernel is done with request slot `index`, which carried `h`, and nobody
    /// claimed its block: kernel -> free. `false` if `h` names no kernel-owned block
    /// bound to that slot (claimed already, a handle the slot's sender did not bind, or
    /// not a loan at all). The runtime calls it through the channel's release hook
    /// ([`LoanArena::install_release_hook`]) and
    /// [`LoanArena::release_unanswered`].
    ///
    /// # Safety
    ///
    /// As [`LoanArena::claim_handles`]: the kernel is done with slot `index`.
    pub unsafe fn release_sent(&self, h: &LoanHandle, index: u64) -> bool {
        if h.generation != slot_tag(index) {
            return false;
        }
        let Some(unit) = self.unit_of(h) else {
            return false;
        };
        match self.transition(unit, owner::KERNEL, Some(h.generation), owner::FREE) {
            Some(w) => {
                self.put_block(unit, w.order);
                true
            }
            None => false,
        }
    }

    /// Host-owned -> free: a [`Loan`] dropped. A compare-and-swap, not a store: a loan
    /// whose send moved its block (a batch interrupted by a panic between the send and
    /// the loan's release) finds it kernel-owned and leaves it to the slot's release.
    pub(crate) fn drop_loan(&self, unit: u32, order: u8) {
        if self
            .transition(unit, owner::HOST, None, owner::FREE)
            .is_some()
        {
            self.put_block(unit, order);
        }
    }

    /// The bytes of a host-owned block.
    pub(crate) fn host_ptr(&self, unit: u32) -> *mut u8 {
        // SAFETY: unit < units, so the offset is inside the arena.
        unsafe { self.base.as_ptr().add((unit as usize) << self.min_shift) }
    }

    /// The host address of arena offset `off` (for a mirror's copies).
    pub(crate) fn host_ptr_at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.bytes);
        // SAFETY: callers pass offsets inside the arena (`sent_capacity` checked them).
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Holds the block that request slot `index`'s handle `h` names busy for a mirror's
    /// copy, if it is kernel-owned, bound to that slot, and `h.len` fits it: its unit and
    /// capacity. Nobody else touches it until [`LoanArena::unhold`] (not a CPU kernel,
    /// which refuses a held block, nor a claim or a release; a device kernel reads only
    /// the word, and never reaches a block outside its request's run, which the bridge's
    /// copies come before or after); a second hold of the same block fails.
    pub(crate) fn hold_sent(&self, h: &LoanHandle, index: u64) -> Option<(u32, usize)> {
        self.hold(h, index).ok()
    }

    /// Kernel -> busy for the block `h` names, if slot `index` carries it: the checks of
    /// [`LoanArena::resolve`], all made on the word the compare-and-swap then confirms,
    /// so a handle that fails never moves the word, not even for a moment.
    fn hold(&self, h: &LoanHandle, index: u64) -> Result<(u32, usize), &'static str> {
        const NOT_SENT: &str = "not sent in this slot";
        let unit = self
            .unit_of(h)
            .ok_or("offset outside the pool or not at a block start")?;
        if h.generation != slot_tag(index) {
            return Err(NOT_SENT);
        }
        let w = self.words.at(unit);
        let cur = w.load(Acquire);
        let old = Word::unpack(cur);
        if old.owner != owner::KERNEL || old.generation != h.generation {
            return Err(NOT_SENT);
        }
        let cap = self.block_bytes(old.order);
        if h.len as usize > cap {
            return Err("length beyond the block");
        }
        w.compare_exchange(cur, old.moved(owner::BUSY).pack(), AcqRel, Acquire)
            .map_err(|_| NOT_SENT)?;
        Ok((unit, cap))
    }

    /// Busy -> kernel: the end of a [`LoanArena::hold_sent`].
    pub(crate) fn unhold(&self, unit: u32) {
        self.store_from(unit, owner::BUSY, owner::KERNEL);
    }

    /// The block size of `order`.
    pub(crate) fn block_bytes(&self, order: u8) -> usize {
        (1usize << order) << self.min_shift
    }

    /// Current counters, all taken together.
    pub fn stats(&self) -> LoanStats {
        let b = self.book.lock();
        LoanStats {
            pool_bytes: self.bytes as u64,
            hits: b.hits,
            misses: b.misses,
            exhausted: b.exhausted,
            returns: b.returns,
            in_use_blocks: b.in_use_blocks,
            in_use_bytes: b.in_use_units << self.min_shift,
            peak_in_use_bytes: b.peak_in_use_units << self.min_shift,
            free_bytes: b.buddy.free_units() << self.min_shift,
            largest_free_bytes: b.buddy.largest_free_units() << self.min_shift,
        }
    }

    /// Whether `h` names a kernel-owned block under its generation (tests).
    #[cfg(test)]
    pub(crate) fn sent_capacity_for_tests(&self, h: &LoanHandle) -> bool {
        self.unit_of(h).is_some_and(|u| {
            let w = self.word(u);
            w.owner == owner::KERNEL && w.generation == h.generation
        })
    }

    #[cfg(test)]
    pub(crate) fn word(&self, unit: u32) -> Word {
        Word::unpack(self.words.at(unit).load(Acquire))
    }
}

impl Drop for LoanArena {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            // SAFETY: `b` came from `self.alloc`; every Loan holds an Arc of the arena and
            // a kernel holds one through its handler (a device kernel through its launch
            // spec, until it has finished), so nothing reaches the memory now.
            unsafe { self.alloc.free(b) };
        }
        #[cfg(not(gyre_loom))]
        if let Some(b) = self.words.block.take() {
            // SAFETY: as above, for the state words.
            unsafe { self.alloc.free(b) };
        }
    }
}

/// A kernel-owned block held busy by the kernel's handler ([`LoanArena::resolve`]): its
/// whole capacity, writable. Dropping it hands the block back (kernel-owned), so the
/// reply can be claimed.
#[derive(Debug)]
pub struct KernelBlock<'a> {
    arena: &'a LoanArena,
    unit: u32,
    bytes: &'a mut [u8],
}

impl core::ops::Deref for KernelBlock<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

impl core::ops::DerefMut for KernelBlock<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

impl Drop for KernelBlock<'_> {
    fn drop(&mut self) {
        // The release orders the handler's writes before the reply's publication, and
        // so before the host's claim.
        self.arena.store_from(self.unit, owner::BUSY, owner::KERNEL);
    }
}
