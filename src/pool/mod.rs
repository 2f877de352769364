//! Kernel pools: one service spread over several kernels of one spec (`docs/pools.md`).
//!
//! A [`KernelPool`] holds N member kernels launched from one [`KernelSpec`] on the
//! runtime's backend (N kernel threads on the CPU backend, N work-groups on an OpenCL
//! device, each holding a compute unit). A call goes to the member with the fewest calls
//! outstanding through the pool (ties rotate), or, when the caller needs per-key order,
//! to the member its key hashes to: one member answers its requests in the order they
//! were sent, so calls with one key are answered in order.
//!
//! A member that stops for good (faulted without a restart policy, terminated,
//! unresponsive) fails exactly the calls it held, as a lone kernel does; the pool then
//! replaces it with a new kernel of the same spec, or removes it ([`MemberFailure`]). The
//! other members and their calls are untouched.
//!
//! [`Runtime::launch_across`](crate::Runtime::launch_across) spreads members over several runtimes (devices or
//! backends); [`DevicePool`] (`device.rs`) lends runtimes one holder at a time.

pub(crate) mod device;
pub(crate) mod future;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use bytemuck::Pod;
use gyre_core::{Error, Result};

pub use device::{DeviceGuard, DevicePool};
use future::PoolCallFuture;

use crate::spec::ExportTarget;
use crate::{Kernel, KernelSpec, KernelState, Runtime};

/// What a pool does with a member that stopped for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberFailure {
    /// Launch a new member of the same spec in its place, at most `max` times over the
    /// pool's life; after that, remove it. Keyed calls keep their member slot.
    Replace {
        /// Replacements allowed (a spec that faults at once must not relaunch forever).
        max: u32,
    },
    /// Take it out of the pool. Its slot stays empty: its keys go to the next live slot,
    /// every other key keeps its member (and so its order).
    Remove,
}

/// The shape of a pool (see [`Runtime::launch`]).
///
/// # Examples
///
/// ```
/// use gyre::{pool::{MemberFailure, PoolOptions}};
/// let o = PoolOptions::new(4).on_failure(MemberFailure::Remove);
/// assert_eq!(o.members, 4);
/// assert_eq!(PoolOptions::new(2).failure, MemberFailure::Replace { max: 16 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolOptions {
    /// Member kernels, at least 1.
    pub members: usize,
    /// What happens to a member that stops for good.
    pub failure: MemberFailure,
}

impl PoolOptions {
    /// The most members a pool may have.
    pub const MAX_MEMBERS: usize = 1024;

    /// `members` kernels; a failed member is replaced, up to 16 times.
    pub const fn new(members: usize) -> Self {
        Self {
            members,
            failure: MemberFailure::Replace { max: 16 },
        }
    }

    /// What happens to a member that stops for good.
    pub const fn on_failure(mut self, failure: MemberFailure) -> Self {
        self.failure = failure;
        self
    }
}

/// What [`Runtime::launch`] starts as a [`KernelPool`]: `options.members` kernels of
/// `spec`.
///
/// # Examples
///
/// ```
/// use gyre::pool::{PoolOptions, PoolSpec};
/// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
/// let pool = rt.launch(PoolSpec::new(gyre::KernelSpec::<u32, u32>::echo(), PoolOptions::new(2)))?;
/// assert_eq!(pool.call_blocking(3)?, 3);
/// # Ok::<(), gyre::Error>(())
/// ```
pub struct PoolSpec<Req, Resp> {
    /// The members' spec.
    pub spec: KernelSpec<Req, Resp>,
    /// How many, and what happens to one that stops.
    pub options: PoolOptions,
}

impl<Req, Resp> Clone for PoolSpec<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            spec: self.spec.clone(),
            options: self.options,
        }
    }
}

impl<Req, Resp> core::fmt::Debug for PoolSpec<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PoolSpec")
            .field("spec", &self.spec)
            .field("options", &self.options)
            .finish()
    }
}

impl<Req, Resp> PoolSpec<Req, Resp> {
    /// `options.members` kernels of `spec`.
    pub fn new(spec: KernelSpec<Req, Resp>, options: PoolOptions) -> Self {
        Self { spec, options }
    }
}

/// A pool's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Members now.
    pub members: usize,
    /// Members replaced after they stopped.
    pub replaced: u32,
    /// Members removed after they stopped.
    pub removed: u32,
    /// Calls outstanding through the pool, over all members.
    pub outstanding: usize,
}

/// One member: its kernel and the calls outstanding on it through the pool.
pub(crate) struct Member<Req, Resp> {
    pub(crate) kernel: Kernel<Req, Resp>,
    pub(crate) outstanding: AtomicUsize,
}

/// A member slot: `None` once its member was removed.
type Slot<Req, Resp> = Option<Arc<Member<Req, Resp>>>;

/// A call's hold on its member: counted outstanding until dropped.
pub(crate) struct Outstanding<Req, Resp>(Arc<Member<Req, Resp>>);

impl<Req, Resp> Outstanding<Req, Resp> {
    fn new(m: Arc<Member<Req, Resp>>) -> Self {
        m.outstanding.fetch_add(1, Relaxed);
        Self(m)
    }
}

impl<Req, Resp> Drop for Outstanding<Req, Resp> {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Relaxed);
    }
}

pub(crate) struct Shared<Req, Resp> {
    /// Where the members run: slot `s` on `runtimes[s % len]` (one runtime per device,
    /// or backends of several kinds).
    runtimes: Vec<Runtime>,
    spec: KernelSpec<Req, Resp>,
    failure: MemberFailure,
    /// The member slots, in order; `None`: a member removed (a key's slot is fixed by
    /// the number of slots, so removing one never moves the keys of the others).
    members: RwLock<Vec<Slot<Req, Resp>>>,
    /// Members launched so far (names the next one).
    launched: AtomicUsize,
    replaced: AtomicU32,
    removed: AtomicU32,
    /// Where the next tie-break starts.
    next: AtomicUsize,
    /// `shutdown` started: no call is taken, no member replaced.
    closed: AtomicBool,
}

/// N kernels of one spec serving one service (see [`Runtime::launch`]). Clone it to
/// share it; the members stop when [`KernelPool::shutdown`] is called or the last handle
/// (and every call) is dropped.
///
/// # Examples
///
/// ```
/// use gyre::{Backend, KernelSpec, Runtime, pool::PoolOptions};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let pool = rt.launch(gyre::pool::PoolSpec::new(KernelSpec::from_fn("inc", |x: u64| x + 1), PoolOptions::new(2)))?;
/// assert_eq!(pool.call_blocking(41)?, 42); // the least busy member
/// assert_eq!(pool.call_keyed_blocking(7, 1)?, 2); // the member of key 7
/// assert_eq!(pool.len(), 2);
/// pool.shutdown_blocking()?;
/// # Ok::<(), gyre::Error>(())
/// ```
pub struct KernelPool<Req, Resp> {
    shared: Arc<Shared<Req, Resp>>,
}

impl<Req, Resp> Clone for KernelPool<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<Req, Resp> core::fmt::Debug for KernelPool<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KernelPool")
            .field("name", &self.shared.spec.name)
            .field(
                "members",
                &self
                    .shared
                    .members
                    .read()
                    .map_or(0, |m| m.iter().flatten().count()),
            )
            .finish_non_exhaustive()
    }
}

/// A key's member slot among `n`: a 64-bit mix (splitmix64's finaliser), so nearby keys
/// spread.
fn slot_of(key: u64, n: usize) -> usize {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % n as u64) as usize
}

/// Whether a kernel in state `s` will answer nothing more (a restart policy's relaunch
/// is not the end).
fn stopped_for_good(s: KernelState) -> bool {
    matches!(
        s,
        KernelState::Faulted { .. } | KernelState::Terminated { .. } | KernelState::Unresponsive
    )
}

impl<Req: Pod, Resp: Pod> KernelPool<Req, Resp> {
    /// The launch of [`Runtime::launch_across`] for a pool (its rules are documented
    /// there).
    pub(crate) fn launch_across(
        runtimes: &[Runtime],
        spec: KernelSpec<Req, Resp>,
        options: PoolOptions,
    ) -> Result<Self> {
        if runtimes.is_empty() {
            return Err(Error::InvalidArgument {
                name: "pool runtimes",
                value: "none".into(),
                reason: "a pool needs at least one runtime to launch its members on",
            });
        }
        if options.members == 0 || options.members > PoolOptions::MAX_MEMBERS {
            return Err(Error::InvalidArgument {
                name: "pool members",
                value: options.members.to_string(),
                reason: "a pool has 1 to 1024 members",
            });
        }
        let shared = Arc::new(Shared {
            runtimes: runtimes.to_vec(),
            spec,
            failure: options.failure,
            members: RwLock::new(Vec::with_capacity(options.members)),
            launched: AtomicUsize::new(0),
            replaced: AtomicU32::new(0),
            removed: AtomicU32::new(0),
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        });
        let mut members = Vec::with_capacity(options.members);
        for slot in 0..options.members {
            match shared.launch_member(slot) {
                Ok(m) => members.push(Some(m)),
                Err(e) => {
                    for m in members.into_iter().flatten() {
                        let _ = m.kernel.shutdown_blocking();
                    }
                    return Err(e);
                }
            }
        }
        *shared.members.write().unwrap_or_else(|p| p.into_inner()) = members;
        tracing::info!(
            pool = %shared.spec.name(),
            members = options.members,
            runtimes = runtimes.len(),
            "kernel pool launched"
        );
        Ok(KernelPool { shared })
    }
}

impl<Req: Pod, Resp: Pod> Shared<Req, Resp> {
    /// Launches the next member, for slot `slot` (on that slot's runtime).
    fn launch_member(&self, slot: usize) -> Result<Arc<Member<Req, Resp>>> {
        let i = self.launched.fetch_add(1, Relaxed);
        let mut spec = self.spec.clone();
        spec.name = format!("{}.{i}", self.spec.name);
        if let Some(ExportTarget::Path(p)) = &mut spec.export {
            let mut s = p.clone().into_os_string();
            s.push(format!(".{i}"));
            *p = s.into();
        }
        Ok(Arc::new(Member {
            kernel: self.runtimes[slot % self.runtimes.len()].launch(spec)?,
            outstanding: AtomicUsize::new(0),
        }))
    }

    /// Marks the pool shut down, under the write lock: a replacement swapped in before
    /// this is among the members the shutdown stops; one after it is dropped.
    fn close(&self) {
        let _members = self.members.write().unwrap_or_else(|p| p.into_inner());
        self.closed.store(true, Relaxed);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Slot<Req, Resp>>> {
        self.members.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot of `key` among `slots`: its own, or the next live one after it.
    fn key_slot(slots: &[Slot<Req, Resp>], key: u64) -> Option<usize> {
        let n = slots.len();
        if n == 0 {
            return None;
        }
        let start = slot_of(key, n);
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| slots[i].is_some())
    }

    /// The member for a call: the one at `keyed`'s slot, or the least outstanding. A
    /// member found stopped for good is replaced or removed first.
    pub(crate) fn pick(&self, keyed: Option<u64>) -> Result<Arc<Member<Req, Resp>>> {
        let closed = || Error::Closed {
            kernel: self.spec.name.clone(),
        };
        // Bounded: each round returns, or replaces or removes a stopped member (at most
        // one removal per slot, at most `max` replacements).
        let rounds = match self.failure {
            MemberFailure::Replace { max } => max as usize,
            MemberFailure::Remove => 0,
        } + self.read().len()
            + 2;
        for _ in 0..rounds {
            let chosen = {
                let slots = self.read();
                if self.closed.load(Relaxed) {
                    return Err(closed());
                }
                let i = match keyed {
                    Some(key) => Self::key_slot(&slots, key),
                    None => {
                        let n = slots.len().max(1);
                        let start = self.next.fetch_add(1, Relaxed) % n;
                        (0..slots.len())
                            .map(|k| (start + k) % n)
                            .filter(|&i| slots[i].is_some())
                            .min_by_key(|&i| {
                                slots[i]
                                    .as_ref()
                                    .map_or(usize::MAX, |m| m.outstanding.load(Relaxed))
                            })
                    }
                };
                match i.and_then(|i| slots[i].clone()) {
                    Some(m) => m,
                    None => return Err(closed()),
                }
            };
            if !stopped_for_good(chosen.kernel.state()) {
                return Ok(chosen);
            }
            self.retire(&chosen)?;
        }
        Err(closed())
    }

    /// Replaces or removes `dead` (if another call has not done it already). The
    /// replacement is launched without the lock (picks go on meanwhile) and swapped in
    /// only if `dead` is still in its slot and the pool is not shut down; a replacement
    /// that lost either race is dropped, which stops it.
    fn retire(&self, dead: &Arc<Member<Req, Resp>>) -> Result<()> {
        let in_slot = |slots: &[Slot<Req, Resp>]| {
            slots
                .iter()
                .position(|m| m.as_ref().is_some_and(|m| Arc::ptr_eq(m, dead)))
        };
        let Some(dead_slot) = in_slot(&self.read()) else {
            return Ok(()); // done by another call
        };
        let name = dead.kernel.name().to_owned();
        let state = dead.kernel.state();
        // Join it: a device kernel gives its compute unit back, so the replacement can
        // have it (a stopped kernel's shutdown returns at once; an unresponsive one's is
        // detached and keeps its unit).
        let _ = dead.kernel.shutdown_blocking();
        // Reserve a replacement before launching it, so racing calls cannot exceed `max`.
        let reserved = match self.failure {
            MemberFailure::Replace { max } => {
                !self.closed.load(Relaxed)
                    && self
                        .replaced
                        .fetch_update(Relaxed, Relaxed, |r| (r < max).then_some(r + 1))
                        .is_ok()
            }
            MemberFailure::Remove => false,
        };
        let fresh = if reserved {
            match self.launch_member(dead_slot) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::error!(pool = %self.spec.name, member = %name, error = %e, "pool member could not be replaced: removed");
                    None
                }
            }
        } else {
            None
        };
        let mut members = self.members.write().unwrap_or_else(|p| p.into_inner());
        let slot = in_slot(&members);
        match (slot, fresh) {
            (Some(i), Some(m)) if !self.closed.load(Relaxed) => {
                members[i] = Some(m);
                tracing::warn!(pool = %self.spec.name, member = %name, ?state, "pool member stopped: replaced");
            }
            (Some(i), None) => {
                if reserved {
                    self.replaced.fetch_sub(1, Relaxed); // the launch failed
                }
                members[i] = None;
                self.removed.fetch_add(1, Relaxed);
                tracing::warn!(pool = %self.spec.name, member = %name, ?state, "pool member stopped: removed");
            }
            // Another call retired it meanwhile, or the pool was shut down: the fresh
            // member is dropped (and so stops) without ever taking a call.
            (_, fresh) => {
                if fresh.is_some() {
                    self.replaced.fetch_sub(1, Relaxed);
                }
            }
        }
        Ok(())
    }
}

impl<Req: Pod, Resp: Pod> KernelPool<Req, Resp> {
    /// Calls the member with the fewest calls outstanding through the pool (ties rotate)
    /// and resolves to its reply. The member is picked when the future is first polled,
    /// which is also when the request is sent; if the pick finds a member stopped for
    /// good, its replacement is launched first, on the polling thread (see
    /// [`MemberFailure`]).
    ///
    /// # Errors
    ///
    /// Those of [`Kernel::call`] from the member that took it; [`Error::Closed`] when the
    /// pool has no member left.
    ///
    /// # Cancel safety
    ///
    /// As [`Kernel::call`]'s: dropping the future after the request was sent does not
    /// retract it; the member still answers it. The pool counts a call outstanding until
    /// its future completes or is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let pool = rt.launch(gyre::pool::PoolSpec::new(gyre::KernelSpec::from_fn("sq", |x: u64| x * x), gyre::pool::PoolOptions::new(2)))?;
    /// assert_eq!(pool.call(12).await?, 144);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn call(&self, req: Req) -> PoolCallFuture<Req, Resp> {
        PoolCallFuture::new(self.shared.clone(), None, req)
    }

    /// Calls the member of `key`: every call with one key goes to one member, which
    /// answers in the order the requests were sent (first polled), so such calls keep
    /// their order. A replaced member's slot keeps its keys; a removed member's keys go
    /// to the next live slot, and no other key moves.
    ///
    /// # Errors
    ///
    /// As [`KernelPool::call`].
    ///
    /// # Cancel safety
    ///
    /// As [`KernelPool::call`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let pool = rt.launch(gyre::pool::PoolSpec::new(gyre::KernelSpec::from_fn("id", |x: u64| x), gyre::pool::PoolOptions::new(3)))?;
    /// let (a, b) = tokio::join!(pool.call_keyed(5, 1), pool.call_keyed(5, 2)); // one member, in order
    /// assert_eq!((a?, b?), (1, 2));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn call_keyed(&self, key: u64, req: Req) -> PoolCallFuture<Req, Resp> {
        PoolCallFuture::new(self.shared.clone(), Some(key), req)
    }

    /// [`KernelPool::call`] on this thread.
    ///
    /// # Errors
    ///
    /// As [`KernelPool::call`] (those of [`Kernel::call_blocking`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let pool = rt.launch(gyre::pool::PoolSpec::new(gyre::KernelSpec::from_fn("neg", |x: i32| -x), gyre::pool::PoolOptions::new(2)))?;
    /// assert_eq!(pool.call_blocking(5)?, -5);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn call_blocking(&self, req: Req) -> Result<Resp> {
        let m = Outstanding::new(self.shared.pick(None)?);
        m.0.kernel.call_blocking(req)
    }

    /// [`KernelPool::call_keyed`] on this thread.
    ///
    /// # Errors
    ///
    /// As [`KernelPool::call`].
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let pool = rt.launch(gyre::pool::PoolSpec::new(gyre::KernelSpec::from_fn("neg", |x: i32| -x), gyre::pool::PoolOptions::new(2)))?;
    /// assert_eq!(pool.call_keyed_blocking(9, 5)?, -5);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn call_keyed_blocking(&self, key: u64, req: Req) -> Result<Resp> {
        let m = Outstanding::new(self.shared.pick(Some(key))?);
        m.0.kernel.call_blocking(req)
    }

    /// The index in [`KernelPool::members`] of the member that calls with `key` go to
    /// now.
    pub fn member_for_key(&self, key: u64) -> Option<usize> {
        let slots = self.shared.read();
        let i = Shared::key_slot(&slots, key)?;
        Some(slots[..i].iter().flatten().count())
    }

    fn live(&self) -> Vec<Arc<Member<Req, Resp>>> {
        self.shared.read().iter().flatten().cloned().collect()
    }

    /// The members now (handles for their state, telemetry, pause and resume), in slot
    /// order.
    pub fn members(&self) -> Vec<Kernel<Req, Resp>> {
        self.live().iter().map(|m| m.kernel.clone()).collect()
    }

    /// Calls outstanding through the pool on each member, as [`KernelPool::members`]
    /// lists them.
    pub fn outstanding(&self) -> Vec<usize> {
        self.live()
            .iter()
            .map(|m| m.outstanding.load(Relaxed))
            .collect()
    }

    /// Members now.
    pub fn len(&self) -> usize {
        self.shared.read().iter().flatten().count()
    }

    /// Whether no member is left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        let members = self.live();
        PoolStats {
            members: members.len(),
            replaced: self.shared.replaced.load(Relaxed),
            removed: self.shared.removed.load(Relaxed),
            outstanding: members.iter().map(|m| m.outstanding.load(Relaxed)).sum(),
        }
    }

    /// The pool's name (its spec's; members are `<name>.<i>`).
    pub fn name(&self) -> &str {
        self.shared.spec.name()
    }

    /// Shuts every member down (each drains what it holds, as [`Kernel::shutdown`]),
    /// one after the other. The pool takes no call after it starts ([`Error::Closed`])
    /// and replaces no member.
    ///
    /// # Errors
    ///
    /// The first member's error, after every member was shut down.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the members not yet awaited running until their last
    /// handle is dropped; the shutdowns started are not undone.
    pub async fn shutdown(&self) -> Result<()> {
        self.shared.close();
        let mut first = Ok(());
        for k in self.members() {
            let r = k.shutdown().await;
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// [`KernelPool::shutdown`] on this thread.
    ///
    /// # Errors
    ///
    /// As [`KernelPool::shutdown`].
    pub fn shutdown_blocking(&self) -> Result<()> {
        self.shared.close();
        let mut first = Ok(());
        for k in self.members() {
            let r = k.shutdown_blocking();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::slot_of;

    #[test]
    fn keys_spread_over_every_slot() {
        for n in 1..8usize {
            let mut hits = vec![0usize; n];
            for key in 0..10_000u64 {
                hits[slot_of(key, n)] += 1;
            }
            let expected = 10_000 / n;
            assert!(
                hits.iter().all(|&h| h > expected * 8 / 10),
                "n = {n}: {hits:?}"
            );
        }
    }
}
