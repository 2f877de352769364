//! Where a pipeline's memory lives (`docs/pipelines.md`, "How the rings are placed" and
//! "Across devices"): each stage's region, an inner ring apart from its region (device
//! memory; another GPU's through a peer mapping), the link tables; and which stages on
//! which devices may advance one join's ring together.

use std::sync::Arc;

use gyre_core::Result;

use super::graph::Plan;

/// Memory apart from its region for stage `m`'s request ring, which only the kernels of
/// `users` touch (`m` reading it, the others writing it): where `m`'s backend keeps such
/// rings ([`gyre_core::Backend::alloc_kernel_ring`]: CUDA device memory) when every
/// writer runs on that backend, or can write it there
/// ([`gyre_core::Backend::enable_peer_writes`]: another GPU through a peer mapping).
/// `None`: the ring stays inline, in the region's memory, which every user addresses
/// (also when the memory apart or a peer mapping could not be had: logged, since the
/// inline ring serves too, only slower).
pub(super) fn inner_ring(
    imps: &[&Arc<dyn gyre_core::Backend>],
    m: usize,
    users: &[usize],
    bytes: usize,
) -> Option<Box<dyn gyre_core::region::RingMemory>> {
    let reader = imps[m];
    let ring = match reader.alloc_kernel_ring(bytes) {
        Ok(Some(ring)) => ring,
        Ok(None) => return None,
        Err(e) => {
            // The inline ring works too, only slower: a device short of memory for the
            // ring still runs the chain.
            tracing::warn!(stage = m, error = %e, "no memory apart for an inner ring: it stays in its region");
            return None;
        }
    };
    for &w in users.iter().filter(|&&w| w != m) {
        if same(imps[w], reader) {
            continue;
        }
        match imps[w].enable_peer_writes(&**reader) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                // As above: the inline ring serves where a peer mapping does not.
                tracing::warn!(stage = m, writer = w, error = %e, "no peer mapping for an inner ring: it stays in its region");
                return None;
            }
        }
    }
    Some(ring)
}

/// Whether two backends are one (the same instance).
fn same(a: &Arc<dyn gyre_core::Backend>, b: &Arc<dyn gyre_core::Backend>) -> bool {
    core::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// A stage's region to place: its size and the stages whose kernels address it (the
/// stage itself first, then those writing into it).
pub(super) struct Placement {
    pub(super) bytes: usize,
    pub(super) users: Vec<usize>,
}

impl Placement {
    /// Memory from the first backend among the users' (the stage's own first) that
    /// every user's backend addresses ([`gyre_core::Backend::device_address`]); when
    /// none does, why not (each candidate's refusal).
    ///
    /// # Errors
    ///
    /// An allocation's error.
    pub(super) fn memory(
        &self,
        imps: &[&Arc<dyn gyre_core::Backend>],
    ) -> Result<std::result::Result<Box<dyn gyre_core::region::RegionMemory>, String>> {
        let mut tried: Vec<&Arc<dyn gyre_core::Backend>> = Vec::new();
        let mut why = Vec::new();
        for &u in &self.users {
            let from = imps[u];
            if tried.iter().any(|t| same(t, from)) {
                continue;
            }
            tried.push(from);
            let mem = from.alloc_region(self.bytes)?;
            let base = mem.base();
            let refused = self.users.iter().find_map(|&v| {
                imps[v].device_address(base).err().map(|e| {
                    format!(
                        "{} memory, which {} cannot address ({e})",
                        from.name(),
                        imps[v].name()
                    )
                })
            });
            match refused {
                None => return Ok(Ok(mem)),
                Some(r) => why.push(r),
            }
        }
        Ok(Err(format!(
            "no backend of the stages using its region allocates memory all of them \
             address: {}",
            why.join("; ")
        )))
    }
}

/// [`atomics_meet`] for the producers of every join of `plan`.
pub(super) fn joins_meet(
    plan: &Plan,
    of: impl Fn(usize) -> (crate::Backend, bool),
) -> std::result::Result<(), (usize, String)> {
    plan.joins
        .iter()
        .try_for_each(|&(entry, _, _)| atomics_meet(&plan.producers_of(entry), &of))
}

/// The one address the `producers` of a join give its target (`addr(p)`: as producer
/// `p`'s kernel addresses it): they share the join's table entry, so they must agree.
/// `Ok(None)` without producers; `Err((stage, why))` names one that differs.
pub(super) fn join_address(
    producers: &[usize],
    addr: impl Fn(usize) -> Result<u64>,
) -> Result<std::result::Result<Option<u64>, (usize, String)>> {
    let mut at: Option<(usize, u64)> = None;
    for &p in producers {
        let a = addr(p)?;
        match at {
            None => at = Some((p, a)),
            Some((q, b)) if b != a => {
                return Ok(Err((
                    p,
                    format!(
                        "its kernel addresses the join's target at {a:#x}, stage {q}'s at \
                         {b:#x}: the producers of one join share its table entry"
                    ),
                )))
            }
            Some(_) => {}
        }
    }
    Ok(Ok(at.map(|(_, a)| a)))
}

/// Whether the `producers` of one join may advance its ring by compare-and-swap
/// together: all on one device, or all on backends whose atomics are the host's
/// ([`gyre_core::Backend::host_atomics`]). `of(k)` is stage k's device and whether its
/// backend's atomics are the host's. `Err((stage, why))` names a producer that may not.
pub(super) fn atomics_meet(
    producers: &[usize],
    of: impl Fn(usize) -> (crate::Backend, bool),
) -> std::result::Result<(), (usize, String)> {
    let Some(&first) = producers.first() else {
        return Ok(());
    };
    let device = of(first).0;
    let Some(&other) = producers.iter().find(|&&k| of(k).0 != device) else {
        return Ok(());
    };
    match producers.iter().find(|&&k| !of(k).1) {
        None => Ok(()),
        Some(&k) => {
            let peer = if of(k).0 == device { other } else { first };
            Err((
                k,
                format!(
                    "it writes a join by compare-and-swap together with stage {peer} on \
                     another device ({:?} and {:?}), and its backend's atomics are not \
                     atomic with the host's (Backend::host_atomics: a CUDA device without \
                     HOST_NATIVE_ATOMIC_SUPPORTED, an OpenCL device without the \
                     all-SVM-devices scope): the branches feeding one join run on one \
                     device, or all on backends whose atomics are the host's",
                    of(k).0,
                    of(peer).0
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gyre_core::region::{HostMemory, RingMemory, SharedRegion};
    use gyre_core::{Error, KernelInstance, LaunchSpec};

    /// A backend that keeps kernel rings (host memory) when `rings`, and whose kernels
    /// write the rings of another `Fake` of the same `group` (a peer mapping); group 0
    /// fails both (an allocation or a peer query that errs).
    struct Fake {
        group: u32,
        rings: bool,
    }

    fn broken() -> Error {
        Error::InvalidArgument {
            name: "fake",
            value: "group 0".into(),
            reason: "fails on purpose",
        }
    }

    impl gyre_core::Backend for Fake {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn launch(&self, _: Arc<SharedRegion>, _: &LaunchSpec) -> Result<Box<dyn KernelInstance>> {
            Err(Error::InvalidArgument {
                name: "launch",
                value: "fake".into(),
                reason: "a placement test launches nothing",
            })
        }
        fn alloc_kernel_ring(&self, bytes: usize) -> Result<Option<Box<dyn RingMemory>>> {
            if self.group == 0 {
                return Err(broken());
            }
            Ok(if self.rings {
                Some(Box::new(HostMemory::zeroed(bytes)?))
            } else {
                None
            })
        }
        fn enable_peer_writes(&self, owner: &dyn gyre_core::Backend) -> Result<bool> {
            if self.group == 0 {
                return Err(broken());
            }
            Ok(owner
                .as_any()
                .and_then(|a| a.downcast_ref::<Fake>())
                .is_some_and(|o| o.group == self.group))
        }
        fn as_any(&self) -> Option<&dyn core::any::Any> {
            Some(self)
        }
    }

    fn fake(group: u32, rings: bool) -> Arc<dyn gyre_core::Backend> {
        Arc::new(Fake { group, rings })
    }

    /// An inner ring goes apart when every writer runs on the reader's backend or can
    /// write its memory (a peer); else, and when the reader keeps no such rings, it stays
    /// inline.
    #[test]
    fn an_inner_ring_is_apart_only_where_every_writer_reaches_it() {
        let (a, a_peer, stranger, plain) =
            (fake(1, true), fake(1, true), fake(2, true), fake(1, false));
        let cpu: Arc<dyn gyre_core::Backend> = Arc::new(gyre_cpu::CpuBackend::new());
        let apart = |imps: &[&Arc<dyn gyre_core::Backend>], users: &[usize]| {
            inner_ring(imps, 1, users, 1024).map(|r| r.len())
        };
        // Reader 1; writer 0.
        assert_eq!(apart(&[&a, &a], &[1, 0]), Some(1024), "one backend");
        assert_eq!(apart(&[&a_peer, &a], &[1, 0]), Some(1024), "a peer of it");
        assert_eq!(apart(&[&stranger, &a], &[1, 0]), None, "no peer mapping");
        assert_eq!(apart(&[&cpu, &a], &[1, 0]), None, "another kind of backend");
        assert_eq!(apart(&[&a, &plain], &[1, 0]), None, "the reader keeps none");
        // A join read by 1, written by 0, 2 and 3: one writer that cannot keeps it inline.
        assert_eq!(apart(&[&a, &a, &a_peer, &a], &[1, 0, 2, 3]), Some(1024));
        assert_eq!(apart(&[&a, &a, &a_peer, &stranger], &[1, 0, 2, 3]), None);
        // Errors leave the ring inline (logged): the allocation's, a peer query's.
        let failing = fake(0, true);
        assert_eq!(apart(&[&a, &failing], &[1, 0]), None, "no memory apart");
        assert_eq!(apart(&[&failing, &a], &[1, 0]), None, "no peer mapping");
        // The CPU backend keeps them for its own stages.
        assert_eq!(apart(&[&cpu, &cpu], &[1, 0]), Some(1024));
    }

    /// The rule over whole plans: the branch tails of each join are its producers
    /// (into a join stage, or the host's replies by id); the fanning stage, the branches'
    /// inner stages and the join itself may be anywhere.
    #[test]
    fn a_plans_joins_are_checked_by_their_producers() {
        use super::super::graph::Step;
        use crate::Backend as B;
        let (gpu0, gpu1) = (B::Cuda { device: 0 }, B::Cuda { device: 1 });
        // 0 fans out into [1 -> 2] and [3], joined by 4.
        let steps = [
            Step::One(0),
            Step::FanOut {
                route: super::super::Route::RoundRobin,
                branches: vec![vec![1, 2], vec![3]],
            },
            Step::One(4),
        ];
        let plan = Plan::of(&steps, 5).expect("plan");
        let on = |devs: [B; 5]| move |k: usize| (devs[k], devs[k] == B::Cpu);
        // Producers 2 and 3 on one PCIe GPU; the rest anywhere.
        assert_eq!(
            joins_meet(&plan, on([B::Cpu, gpu1, gpu0, gpu0, B::Cpu])).map_err(|e| e.0),
            Ok(())
        );
        // Producers on a GPU and the CPU: refused, naming the GPU's.
        assert_eq!(
            joins_meet(&plan, on([gpu0, gpu0, gpu0, B::Cpu, gpu0])).map_err(|e| e.0),
            Err(2)
        );
        // The host's replies by id: the tails 1 and 2.
        let steps = [
            Step::One(0),
            Step::FanOut {
                route: super::super::Route::key_at(0),
                branches: vec![vec![1], vec![2]],
            },
        ];
        let plan = Plan::of(&steps, 3).expect("plan");
        assert_eq!(
            joins_meet(&plan, |k| ([B::Cpu, B::Cpu, gpu1][k], k < 2)).map_err(|e| e.0),
            Err(2)
        );
    }

    #[test]
    fn a_joins_producers_must_address_its_target_alike() {
        let same = join_address(&[1, 2], |_| Ok(0x1000)).expect("addresses");
        assert_eq!(same, Ok(Some(0x1000)));
        let differ = join_address(&[1, 2, 3], |p| Ok(if p == 3 { 0x2000 } else { 0x1000 }))
            .expect("addresses");
        let (stage, why) = differ.expect_err("refused");
        assert_eq!(stage, 3);
        assert!(why.contains("0x2000") && why.contains("stage 1"), "{why}");
        assert_eq!(join_address(&[], |_| Ok(1)).expect("none"), Ok(None));
    }

    #[test]
    fn a_join_is_fed_from_one_device_or_by_host_atomics_only() {
        use crate::Backend as B;
        let (cpu, gpu0, gpu1) = (B::Cpu, B::Cuda { device: 0 }, B::Cuda { device: 1 });
        let cl = B::OpenCl {
            platform: 0,
            device: 0,
        };
        // (device, host atomics) of stages 0..
        let meet = |stages: &[(B, bool)], producers: &[usize]| {
            atomics_meet(producers, |k| stages[k]).map_err(|(k, _)| k)
        };
        // One device: whatever its atomics.
        assert_eq!(meet(&[(gpu0, false), (gpu0, false)], &[0, 1]), Ok(()));
        // The CPU and OpenCL: both the host's.
        assert_eq!(meet(&[(cpu, true), (cl, true)], &[0, 1]), Ok(()));
        // Two PCIe GPUs, or a PCIe GPU and the CPU: refused, naming the GPU stage.
        assert_eq!(meet(&[(gpu0, false), (gpu1, false)], &[0, 1]), Err(0));
        assert_eq!(meet(&[(cpu, true), (gpu1, false)], &[0, 1]), Err(1));
        // GPUs with host-native atomics (NVLink-C2C) and the CPU: allowed.
        assert_eq!(
            meet(&[(gpu0, true), (gpu1, true), (cpu, true)], &[0, 1, 2]),
            Ok(())
        );
        // Only the producers count.
        assert_eq!(
            meet(&[(gpu1, false), (cpu, true), (cpu, true)], &[1, 2]),
            Ok(())
        );
        assert_eq!(meet(&[], &[]), Ok(()));
        // The refusal says why.
        let why = atomics_meet(&[0, 1], |k| [(cpu, true), (gpu1, false)][k])
            .expect_err("refused")
            .1;
        assert!(
            why.contains("compare-and-swap") && why.contains("stage 0"),
            "{why}"
        );
    }
}
