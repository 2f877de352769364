//! The shapes of a pipeline: steps of one stage or of a fan-out into branches, and the
//! plan of where each stage's replies go (`docs/pipelines.md`, "Shapes").
//!
//! A pipeline is a sequence of *steps*. A step is one stage, or a *fan-out*: 2 to 8
//! branches, each a chain of one or more stages, fed by the stage before (round-robin or
//! by a key in its replies). The branches of a fan-out meet in the next step, which must
//! be one stage (a *join*: it takes every branch's replies, in request order), or at the
//! end of the pipeline (their replies go to the host, in request order). Nothing else is
//! expressible (a branch has no fan-out of its own) except two fan-outs in a row, which
//! the launch refuses.

use core::marker::PhantomData;

use bytemuck::Pod;
use gyre_abi::{link, route};
use gyre_core::chain::RouteMode;

use super::Stage;
use crate::spec::KernelSpec;

/// How a fan-out spreads the replies of the stage before it over its branches.
///
/// # Examples
///
/// ```
/// use gyre::pipeline::Route;
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// #[repr(C)]
/// struct Order { price: u32, qty: u32, account: u64 }
/// // Every order of one account goes through the same branch, in order.
/// let r = Route::key_at(core::mem::offset_of!(Order, account));
/// assert_eq!(r, Route::Key { offset: 8 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The i-th reply goes to branch `i mod branches`.
    RoundRobin,
    /// The reply goes to branch [`route_branch`](gyre_core::chain::route_branch)`(key,
    /// branches)`, `key` the little-endian `u64` at byte `offset` of the reply: replies
    /// with one key take one branch, in order. An error reply (no payload) goes to the
    /// branch of key 0.
    Key {
        /// Byte offset of the key in the reply type (`core::mem::offset_of!`).
        offset: usize,
    },
}

impl Route {
    /// [`Route::Key`] at byte `offset` of the reply.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(gyre::pipeline::Route::key_at(0), gyre::pipeline::Route::Key { offset: 0 });
    /// ```
    pub fn key_at(offset: usize) -> Self {
        Self::Key { offset }
    }

    /// The branch (0-based) a [`Route::Key`] fan-out of `branches` branches sends `key`
    /// to: the same function the kernels use.
    ///
    /// # Examples
    ///
    /// ```
    /// let b = gyre::pipeline::Route::branch_of(7, 3);
    /// assert!(b < 3 && b == gyre::pipeline::Route::branch_of(7, 3));
    /// ```
    pub fn branch_of(key: u64, branches: usize) -> usize {
        gyre_core::chain::route_branch(key, u32::try_from(branches).unwrap_or(u32::MAX)) as usize
    }
}

/// One branch of a fan-out: a chain of stages from `A` (the fanning stage's reply type) to
/// `B` (what the branches give the join, or the host).
///
/// # Examples
///
/// ```
/// use gyre::{KernelSpec, pipeline::Branch};
/// let b = Branch::new(KernelSpec::from_fn("parse", |x: u32| u64::from(x)))
///     .then(KernelSpec::from_fn("score", |x: u64| x * 3));
/// assert_eq!(b.stages(), 2);
/// ```
pub struct Branch<A, B> {
    pub(super) stages: Vec<Stage>,
    _types: PhantomData<fn(A) -> B>,
}

impl<A, B> Clone for Branch<A, B> {
    fn clone(&self) -> Self {
        Self {
            stages: self.stages.clone(),
            _types: PhantomData,
        }
    }
}

impl<A, B> core::fmt::Debug for Branch<A, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list()
            .entries(self.stages.iter().map(|s| &s.spec.name))
            .finish()
    }
}

impl<A: Pod, B: Pod> Branch<A, B> {
    /// A branch whose first stage is `first`.
    ///
    /// # Examples
    ///
    /// ```
    /// let b = gyre::pipeline::Branch::new(gyre::KernelSpec::<u32, u32>::echo());
    /// assert_eq!(b.stages(), 1);
    /// ```
    pub fn new(first: KernelSpec<A, B>) -> Self {
        Self {
            stages: vec![Stage::of(first)],
            _types: PhantomData,
        }
    }

    /// Adds `next` at the end of the branch.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{KernelSpec, pipeline::Branch};
    /// let b = Branch::new(KernelSpec::<u32, u32>::echo()).then(KernelSpec::<u32, u32>::echo());
    /// assert_eq!(b.stages(), 2);
    /// ```
    pub fn then<C: Pod>(self, next: KernelSpec<B, C>) -> Branch<A, C> {
        let mut stages = self.stages;
        stages.push(Stage::of(next));
        Branch {
            stages,
            _types: PhantomData,
        }
    }
}

impl<A, B> Branch<A, B> {
    /// Stages in the branch.
    pub fn stages(&self) -> usize {
        self.stages.len()
    }
}

/// One step of a pipeline, by stage index (stages are numbered in the order they were
/// added: a fan-out's branches one after the other).
#[derive(Debug, Clone)]
pub(super) enum Step {
    One(usize),
    FanOut {
        route: Route,
        branches: Vec<Vec<usize>>,
    },
}

impl Step {
    /// The last stage added in this step.
    fn last_stage(&self) -> usize {
        match self {
            Step::One(k) => *k,
            Step::FanOut { branches, .. } => branches.iter().flatten().copied().max().unwrap_or(0),
        }
    }

    /// The stages that take this step's requests.
    fn entries(&self) -> Vec<usize> {
        match self {
            Step::One(k) => vec![*k],
            Step::FanOut { branches, .. } => {
                branches.iter().filter_map(|b| b.first().copied()).collect()
            }
        }
    }
}

/// Where one stage's replies go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Out {
    /// A single-stage pipeline: its own reply ring.
    Own,
    /// Reply i to request i of stage `to`.
    Direct(usize),
    /// Reply i to reply i of the head (the host).
    Head,
    /// Through route `entry` of the link tables, to the branches' first stages.
    Route {
        entry: usize,
        route: Route,
        branches: Vec<usize>,
    },
    /// By id through join `entry`: into stage `Some(to)`, or the head's replies.
    ById { entry: usize, to: Option<usize> },
}

/// The wiring of a pipeline: each stage's [`Out`], and the link tables it needs.
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    pub(super) outs: Vec<Out>,
    /// Join tables: (entry, target stage or the head's replies, producers).
    pub(super) joins: Vec<(usize, Option<usize>, u32)>,
    /// Whether each stage is in a fan-out's branch (its indices are not the host's).
    pub(super) in_branch: Vec<bool>,
}

impl Plan {
    /// The plan of `steps` over `n` stages; `Err((stage, why))` for a shape that is not
    /// supported.
    pub(super) fn of(steps: &[Step], n: usize) -> Result<Self, (usize, String)> {
        let mut p = Plan {
            outs: vec![Out::Own; n],
            in_branch: vec![false; n],
            ..Plan::default()
        };
        let mut entry = 0;
        for (i, step) in steps.iter().enumerate() {
            let next = steps.get(i + 1);
            match step {
                Step::One(k) => {
                    p.outs[*k] = match next {
                        None if n == 1 => Out::Own,
                        None => Out::Head,
                        Some(Step::One(m)) => Out::Direct(*m),
                        Some(s @ Step::FanOut { route, .. }) => {
                            entry += 1;
                            Out::Route {
                                entry: entry - 1,
                                route: *route,
                                branches: s.entries(),
                            }
                        }
                    };
                }
                Step::FanOut { branches, .. } => {
                    let count = branches.len();
                    // Named in a refusal: the first branch's first stage, or with no
                    // branch at all the stage the fan-out follows.
                    let first = branches
                        .first()
                        .and_then(|b| b.first())
                        .copied()
                        .unwrap_or_else(|| steps[..i].last().map_or(0, Step::last_stage));
                    if !(2..=route::MAX_BRANCHES as usize).contains(&count) {
                        return Err((
                            first,
                            format!(
                                "a fan-out of {count} branches: a fan-out has 2 to {}",
                                route::MAX_BRANCHES
                            ),
                        ));
                    }
                    let to = match next {
                        None => None,
                        Some(Step::One(m)) => Some(*m),
                        Some(Step::FanOut { .. }) => {
                            return Err((
                                first,
                                "a fan-out follows a fan-out: the branches of one must meet \
                                 in a join stage (`.then(stage)`) before the next fans out"
                                    .into(),
                            ))
                        }
                    };
                    p.joins.push((entry, to, count as u32));
                    for b in branches {
                        for &k in b {
                            p.in_branch[k] = true;
                        }
                        for w in b.windows(2) {
                            p.outs[w[0]] = Out::Direct(w[1]);
                        }
                        if let Some(&tail) = b.last() {
                            p.outs[tail] = Out::ById { entry, to };
                        }
                    }
                    entry += 1;
                }
            }
        }
        Ok(p)
    }

    /// Link table entries needed.
    pub(super) fn entries(&self) -> usize {
        let routes = self
            .outs
            .iter()
            .filter(|o| matches!(o, Out::Route { .. }))
            .count();
        routes + self.joins.len()
    }

    /// Whether later stages write by id (the head then stamps its own index as each
    /// request's correlation id).
    pub(super) fn by_id(&self) -> bool {
        !self.joins.is_empty()
    }

    /// The link flags of stage `k`.
    pub(super) fn flags(&self, k: usize) -> u32 {
        let mut f = match &self.outs[k] {
            Out::Own | Out::Direct(_) => 0,
            Out::Head => link::TO_HEAD,
            Out::Route { .. } => link::FAN_OUT,
            Out::ById { to: None, .. } => link::BY_ID | link::TO_HEAD,
            Out::ById { to: Some(_), .. } => link::BY_ID,
        };
        if k > 0 {
            f |= link::FROM_STAGE;
        }
        if k == 0 && self.by_id() {
            f |= link::OWN_ID;
        }
        if self.in_branch.get(k).copied().unwrap_or(false) {
            f |= link::BRANCH;
        }
        f
    }

    /// The stages stage `k` writes the request rings of (not the head's replies).
    pub(super) fn writes(&self, k: usize) -> Vec<usize> {
        match &self.outs[k] {
            Out::Own | Out::Head | Out::ById { to: None, .. } => Vec::new(),
            Out::Direct(m) | Out::ById { to: Some(m), .. } => vec![*m],
            Out::Route { branches, .. } => branches.clone(),
        }
    }

    /// The stages that write into stage `m`'s region: into its request ring
    /// ([`Plan::writes`]) or, for the head, into its reply ring (the host's replies).
    pub(super) fn writers_of(&self, m: usize) -> Vec<usize> {
        (0..self.outs.len())
            .filter(|&k| {
                self.writes(k).contains(&m)
                    || (m == 0 && matches!(self.outs[k], Out::Head | Out::ById { to: None, .. }))
            })
            .collect()
    }

    /// The stages that write through join `entry` by id (its producers, which advance
    /// its target's head by compare-and-swap).
    pub(super) fn producers_of(&self, entry: usize) -> Vec<usize> {
        (0..self.outs.len())
            .filter(|&k| matches!(self.outs[k], Out::ById { entry: e, .. } if e == entry))
            .collect()
    }

    /// Every `(from, to)` of [`Plan::writes`].
    pub(super) fn edges(&self) -> Vec<(usize, usize)> {
        (0..self.outs.len())
            .flat_map(|k| self.writes(k).into_iter().map(move |m| (k, m)))
            .collect()
    }
}

/// The device-side form of a route.
pub(super) fn route_mode(r: Route) -> RouteMode {
    match r {
        Route::RoundRobin => RouteMode::RoundRobin,
        Route::Key { offset } => RouteMode::Key {
            offset: u32::try_from(offset).unwrap_or(u32::MAX),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_direct_then_to_the_head() {
        let p = Plan::of(&[Step::One(0), Step::One(1), Step::One(2)], 3).unwrap();
        assert_eq!(p.outs, [Out::Direct(1), Out::Direct(2), Out::Head]);
        assert_eq!(p.entries(), 0);
        assert_eq!(p.flags(0), 0);
        assert_eq!(p.flags(2), link::TO_HEAD | link::FROM_STAGE);
        assert_eq!(p.edges(), [(0, 1), (1, 2)]);
        assert_eq!(
            (0..3).map(|m| p.writers_of(m)).collect::<Vec<_>>(),
            [vec![2], vec![0], vec![1]],
            "the head's reply ring is written by the last stage"
        );
    }

    #[test]
    fn a_fan_out_into_a_join() {
        // 0 -> {1 -> 2, 3} -> 4 -> head
        let steps = [
            Step::One(0),
            Step::FanOut {
                route: Route::RoundRobin,
                branches: vec![vec![1, 2], vec![3]],
            },
            Step::One(4),
        ];
        let p = Plan::of(&steps, 5).unwrap();
        assert_eq!(
            p.outs,
            [
                Out::Route {
                    entry: 0,
                    route: Route::RoundRobin,
                    branches: vec![1, 3]
                },
                Out::Direct(2),
                Out::ById {
                    entry: 1,
                    to: Some(4)
                },
                Out::ById {
                    entry: 1,
                    to: Some(4)
                },
                Out::Head,
            ]
        );
        assert_eq!(p.joins, [(1, Some(4), 2)]);
        assert_eq!(p.flags(0), link::FAN_OUT | link::OWN_ID);
        assert_eq!(p.flags(2), link::BY_ID | link::FROM_STAGE | link::BRANCH);
        assert_eq!(p.flags(1), link::FROM_STAGE | link::BRANCH);
        assert_eq!(p.flags(4), link::TO_HEAD | link::FROM_STAGE);
        assert_eq!(p.edges(), [(0, 1), (0, 3), (1, 2), (2, 4), (3, 4)]);
    }

    #[test]
    fn a_fan_out_at_the_end_answers_the_host_by_id() {
        let steps = [
            Step::One(0),
            Step::FanOut {
                route: Route::key_at(0),
                branches: vec![vec![1], vec![2], vec![3]],
            },
        ];
        let p = Plan::of(&steps, 4).unwrap();
        assert_eq!(p.outs[3], Out::ById { entry: 1, to: None });
        assert_eq!(
            p.flags(1),
            link::BY_ID | link::TO_HEAD | link::FROM_STAGE | link::BRANCH
        );
        assert_eq!(p.joins, [(1, None, 3)]);
        assert_eq!(p.writers_of(0), [1, 2, 3]);
        assert_eq!(p.writers_of(2), [0]);
    }

    #[test]
    fn unsupported_shapes_are_refused() {
        let fan = |b: Vec<Vec<usize>>| Step::FanOut {
            route: Route::RoundRobin,
            branches: b,
        };
        let e = Plan::of(&[Step::One(0), fan(vec![vec![1]])], 2).unwrap_err();
        assert_eq!(e.0, 1);
        let e = Plan::of(&[Step::One(0), Step::One(1), fan(Vec::new())], 2).unwrap_err();
        assert_eq!(e.0, 1, "no branch: the stage the fan-out follows");
        let e = Plan::of(
            &[
                Step::One(0),
                fan(vec![vec![1], vec![2]]),
                fan(vec![vec![3], vec![4]]),
            ],
            5,
        )
        .unwrap_err();
        assert!(e.1.contains("join"), "{}", e.1);
        let nine: Vec<Vec<usize>> = (1..=9).map(|k| vec![k]).collect();
        assert!(Plan::of(&[Step::One(0), fan(nine)], 10).is_err());
    }
}
