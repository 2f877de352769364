//! Pipelines on the host side: how a stage is linked to the next ([`StageLink`], a
//! [`LaunchSpec`](crate::LaunchSpec) field every backend passes to its ring kernel), and
//! how the host sees a chain of stages as one kernel ([`ChainView`]).
//!
//! The device side is `gyre_k0_link` and friends in `cuda/include/gyre/ring.h`: stage k
//! writes its replies into stage k + 1's request ring (request `i` of every stage is the
//! reply `i` of the stage before), waits on stage k + 1's `h2k_tail` for space and
//! publishes to its `h2k_head`; the last stage writes into the reply ring of the first
//! stage (the *head*), whose rings the host's [`Channel`](crate::Channel) uses unchanged.
//! A stage that stops for good tells the next one to terminate (it drains what it was
//! given, then stops and tells its own next one); a stage whose next stage stopped for
//! good stops too (`STAGE_STOPPED`), so a fault anywhere ends the whole chain, and every
//! request the chain did not answer is failed by the host with the first fault's code.
//! `docs/pipelines.md` has the whole picture.

use core::ptr::NonNull;
use core::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

use gyre_abi::{command, error, state};

use crate::doorbell::Doorbell;
use crate::region::SharedRegion;

mod tables;

pub use tables::{route_branch, LinkTables, RouteMode, ENTRY_BYTES};

/// What a [`StageLink`]'s kernel argument points at.
#[derive(Clone)]
pub enum LinkTarget {
    /// A region: the next stage's (its request ring), or with
    /// [`gyre_abi::link::TO_HEAD`] the chain head's (its reply ring). Same geometry as the
    /// stage's own region (the kernel checks it at K0 and faults `BAD_GEOMETRY`
    /// otherwise).
    Region(Arc<SharedRegion>),
    /// An entry of a pipeline's [`LinkTables`]: a route
    /// ([`gyre_abi::link::FAN_OUT`]) or a join ([`gyre_abi::link::BY_ID`]), whose
    /// targets are `regions` (kept alive with it).
    Table {
        /// The tables.
        tables: Arc<LinkTables>,
        /// The entry.
        entry: usize,
        /// The regions the entry names.
        regions: Vec<Arc<SharedRegion>>,
    },
}

/// Where a pipeline stage's replies go: a [`LaunchSpec::link`](crate::LaunchSpec::link).
/// The kernel instance keeps it (and so every region it names) alive while it runs.
#[derive(Clone)]
pub struct StageLink {
    /// The kernel argument: a region, or a link table entry.
    pub next: LinkTarget,
    /// [`gyre_abi::link`] flags.
    pub flags: u32,
    /// The message type the next stage's handler takes: the stage writes it into each
    /// request it passes on (ignored towards the head, whose replies keep the last
    /// stage's request's type, which the host does not check; a route holds one per
    /// branch).
    pub next_msg_type: u32,
    /// The doorbells of the stages this one writes (CPU kernels park on them), rung
    /// after each publication to them or command; none towards the head (the host polls
    /// its replies).
    pub next_doorbells: Vec<Arc<Doorbell>>,
}

impl StageLink {
    /// The kernel argument as host memory: the base of the allocation it lies in and its
    /// offset there (a backend whose kernels use other addresses translates the base).
    pub fn argument(&self) -> (NonNull<u8>, usize) {
        match &self.next {
            LinkTarget::Region(r) => (r.base(), 0),
            LinkTarget::Table { tables, entry, .. } => tables.entry(*entry),
        }
    }
}

impl core::fmt::Debug for StageLink {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StageLink")
            .field("argument", &self.argument())
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

/// The four ring counters of one stage's control block, as last read (each is read on
/// its own: a snapshot of a running stage is not one instant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingCounters {
    /// Requests published into the stage (by the host or the stages before it).
    pub h2k_head: u64,
    /// Requests the stage consumed.
    pub h2k_tail: u64,
    /// Replies published into the stage's reply ring (the head's: the pipeline's replies).
    pub k2h_head: u64,
    /// Replies the host consumed from it.
    pub k2h_tail: u64,
}

/// One stage as the host watches it.
struct Stage {
    region: Arc<SharedRegion>,
    doorbell: Option<Arc<Doorbell>>,
}

/// The host's view of a chain of stages as one kernel: its state (final once every stage
/// stopped for good; faulted with the first faulted stage's code) and the host heartbeat
/// of every stage. A [`Channel`](crate::Channel) over the head's region consults it
/// ([`Channel::set_chain`](crate::Channel::set_chain)).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use gyre_abi::{error, state};
/// use gyre_core::chain::ChainView;
/// use gyre_core::{ring::Geometry, SharedRegion};
///
/// let g = Geometry::new(8, 128, 4).unwrap();
/// let a = Arc::new(SharedRegion::new_host(g, 0).unwrap());
/// let b = Arc::new(SharedRegion::new_host(g, 0).unwrap());
/// let chain = ChainView::new(vec![(a.clone(), None), (b.clone(), None)]);
/// let set = |r: &SharedRegion, s, c| {
///     r.control().error_code.store(c, std::sync::atomic::Ordering::Release);
///     r.control().state.store(s, std::sync::atomic::Ordering::Release);
/// };
/// set(&a, state::ACTIVE, 0);
/// set(&b, state::FAULTED, error::HANDLER_PANIC);
/// assert_eq!(chain.state().0, state::ACTIVE); // the first stage still runs
/// set(&a, state::TERMINATED, error::STAGE_STOPPED);
/// assert_eq!(chain.state(), (state::FAULTED, error::HANDLER_PANIC));
/// ```
pub struct ChainView {
    stages: Vec<Stage>,
    /// `(from, to)`: stage `from` writes stage `to`'s request ring (not towards the head).
    edges: Vec<(usize, usize)>,
}

impl core::fmt::Debug for ChainView {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ChainView")
            .field("stages", &self.stages.len())
            .finish()
    }
}

impl ChainView {
    /// The chain of `stages` (region and doorbell of each, head first), each stage
    /// writing the next.
    pub fn new(stages: Vec<(Arc<SharedRegion>, Option<Arc<Doorbell>>)>) -> Self {
        let edges = (1..stages.len()).map(|k| (k - 1, k)).collect();
        Self::graph(stages, edges)
    }

    /// A pipeline graph: `stages` (head first) and `edges` (`(from, to)`: stage `from`
    /// writes stage `to`'s request ring; a fan-out has an edge to each branch, a join one
    /// from each producer). Edges out of range are ignored.
    pub fn graph(
        stages: Vec<(Arc<SharedRegion>, Option<Arc<Doorbell>>)>,
        edges: Vec<(usize, usize)>,
    ) -> Self {
        let n = stages.len();
        Self {
            stages: stages
                .into_iter()
                .map(|(region, doorbell)| Stage { region, doorbell })
                .collect(),
            edges: edges.into_iter().filter(|&(a, b)| a < n && b < n).collect(),
        }
    }

    /// Stages in the chain.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether the chain has no stage.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Each stage's region, head first.
    pub fn regions(&self) -> impl Iterator<Item = &Arc<SharedRegion>> {
        self.stages.iter().map(|s| &s.region)
    }

    /// Each stage's state and error code, head first.
    pub fn stage_states(&self) -> Vec<(u32, u32)> {
        self.stages
            .iter()
            .map(|s| {
                let cb = s.region.control();
                (cb.state.load(Acquire), cb.error_code.load(Acquire))
            })
            .collect()
    }

    /// Whether stage `k` writes the request ring of a stage that stopped for good (L4 of
    /// `docs/protocol.md` §9: what `k` holds can never be passed on). Never for the
    /// head's reply ring.
    pub fn feeds_a_final_stage(&self, k: usize) -> bool {
        self.edges.iter().any(|&(from, to)| {
            from == k && state::is_final(self.stages[to].region.control().state.load(Acquire))
        })
    }

    /// Each stage's ring counters, head first.
    pub fn counters(&self) -> Vec<RingCounters> {
        self.stages
            .iter()
            .map(|s| {
                let cb = s.region.control();
                RingCounters {
                    h2k_head: cb.h2k_head.load(Acquire),
                    h2k_tail: cb.h2k_tail.load(Acquire),
                    k2h_head: cb.k2h_head.load(Acquire),
                    k2h_tail: cb.k2h_tail.load(Acquire),
                }
            })
            .collect()
    }

    /// The chain's state and error code, as one kernel's:
    ///
    /// - every stage stopped for good: `FAULTED` with the first faulted stage's code if
    ///   one faulted, else `TERMINATED` with the first code that says why (a stale host
    ///   heartbeat), else `TERMINATED` with 0;
    /// - otherwise the head's state while it runs, `DRAINING` once it stopped (the stages
    ///   after it still pass on what they hold).
    ///
    /// It also makes sure a stage whose producers all stopped was told to terminate: the
    /// kernels do so themselves, but a stage that never ran its loop (the host failed it
    /// before K0) could not, and a device stage cannot wake a parked CPU stage it feeds,
    /// so such a stage is rung here; and it wakes a parked stage a stage it writes to
    /// stopped, so that it stops at once (the kernel that stopped rings only the stages
    /// it writes).
    pub fn state(&self) -> (u32, u32) {
        let states = self.stage_states();
        let fin = |k: usize| state::is_final(states[k].0);
        for &(from, to) in &self.edges {
            if fin(to) && !fin(from) {
                // A stage whose next stage stopped stops at its next slow path (L4): wake
                // it if it parked (a CPU stage), so the chain ends now, not after a park.
                if let Some(d) = &self.stages[from].doorbell {
                    d.ring();
                }
            }
        }
        for (to, next) in self.stages.iter().enumerate() {
            let mut producers = self.edges.iter().filter(|e| e.1 == to).peekable();
            if fin(to) || producers.peek().is_none() || !producers.all(|e| fin(e.0)) {
                continue;
            }
            let cb = next.region.control();
            if cb.command.load(Acquire) != command::TERMINATE {
                cb.command.store(command::TERMINATE, Release);
            }
            // Ring whoever wrote Terminate: a device stage that stopped (L3) cannot ring
            // a CPU stage it feeds (a pipeline across backends), which would otherwise
            // notice only after its park. A ring of a running stage costs one wake-up.
            if let Some(d) = &next.doorbell {
                d.ring();
            }
        }
        Self::combine(&states)
    }

    /// [`ChainView::state`]'s rule over stage states (head first).
    pub fn combine(states: &[(u32, u32)]) -> (u32, u32) {
        let Some(&(head, head_code)) = states.first() else {
            return (state::TERMINATED, error::NONE);
        };
        if !states.iter().all(|&(s, _)| state::is_final(s)) {
            return if state::is_final(head) {
                (state::DRAINING, error::NONE)
            } else {
                (head, head_code)
            };
        }
        if let Some(&(_, code)) = states.iter().find(|&&(s, _)| s == state::FAULTED) {
            return (state::FAULTED, code);
        }
        let why = states
            .iter()
            .map(|&(_, c)| c)
            .find(|&c| c != error::NONE && c != error::STAGE_STOPPED);
        (state::TERMINATED, why.unwrap_or(error::NONE))
    }

    /// Writes the host heartbeat `now` into every stage after the head (the channel
    /// writes the head's): a host that goes away stops every stage, not only the first.
    pub fn heartbeat(&self, now: u64) {
        for s in self.stages.iter().skip(1) {
            s.region.control().host_heartbeat.store(now, Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gyre_abi::state::*;

    #[test]
    fn a_chain_is_final_only_when_every_stage_is() {
        let c = ChainView::combine;
        assert_eq!(c(&[(ACTIVE, 0), (ACTIVE, 0)]), (ACTIVE, 0));
        assert_eq!(c(&[(PAUSED, 0), (ACTIVE, 0)]), (PAUSED, 0));
        assert_eq!(c(&[(TERMINATED, 0), (ACTIVE, 0)]), (DRAINING, 0));
        assert_eq!(c(&[(TERMINATED, 0), (DRAINING, 0)]), (DRAINING, 0));
        assert_eq!(c(&[(TERMINATED, 0), (TERMINATED, 0)]), (TERMINATED, 0));
        let stopped = error::STAGE_STOPPED;
        assert_eq!(
            c(&[(TERMINATED, stopped), (FAULTED, 1), (TERMINATED, 0)]),
            (FAULTED, 1)
        );
        assert_eq!(
            c(&[(TERMINATED, stopped), (FAULTED, 1), (ACTIVE, 0)]),
            (DRAINING, 0)
        );
        let stale = error::HOST_HEARTBEAT_STALE;
        assert_eq!(
            c(&[(TERMINATED, stopped), (TERMINATED, stale)]),
            (TERMINATED, stale)
        );
        assert_eq!(c(&[]), (TERMINATED, 0));
    }

    #[test]
    fn a_stopped_stage_s_next_is_told_to_terminate() {
        let g = crate::ring::Geometry::new(8, 128, 4).unwrap();
        let a = Arc::new(SharedRegion::new_host(g, 0).unwrap());
        let b = Arc::new(SharedRegion::new_host(g, 0).unwrap());
        let chain = ChainView::new(vec![(a.clone(), None), (b.clone(), None)]);
        a.control().state.store(FAULTED, Release);
        b.control().state.store(ACTIVE, Release);
        assert_eq!(chain.state(), (DRAINING, 0));
        assert_eq!(b.control().command.load(Acquire), command::TERMINATE);
        assert_eq!(a.control().command.load(Acquire), command::RUN);
        chain.heartbeat(42);
        assert_eq!(b.control().host_heartbeat.load(Acquire), 42);
    }
}
