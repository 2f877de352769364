//! Launching a pipeline: where each stage runs, the memory of each stage's region (one
//! that every kernel writing into it can address), the links between stages, and the
//! stages started last first; a launch that fails half way stops what it started.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytemuck::Pod;
use gyre_abi::command;
use gyre_core::chain::{ChainView, LinkTables, LinkTarget, StageLink};
use gyre_core::doorbell::Doorbell;
use gyre_core::shm::ExportPublisher;
use gyre_core::{Error, KernelInstance, LaunchSpec, Result, SharedRegion};

use super::feed::StageFeed;
use super::graph::{route_mode, Out, Plan};
use super::placement::{inner_ring, join_address, joins_meet, Placement};
use super::reload::StageMeta;
use super::{Pipeline, PipelineSpec};
use crate::kernel::{Kernel, Started};
use crate::lifecycle::{Place, RelaunchCounters, StageStart};
use crate::runtime::{Runtime, Target};
use crate::spec::KernelSpec;
use crate::RestartPolicy;

/// How long a launch that failed half way waits for the stages it already started.
const ABANDON_WAIT: Duration = Duration::from_secs(5);

/// The longest park of a CPU stage fed by a device stage, which cannot ring it: the
/// host's default wait (`IdleStrategy::default`).
const DEVICE_FED_MAX_PARK: Duration = Duration::from_micros(100);

/// The idle strategy of a CPU stage fed by a device stage: nobody rings it when requests
/// arrive, so it parks (or sleeps) at most [`DEVICE_FED_MAX_PARK`] at a time, not the
/// kernel default's 10 ms.
pub(super) fn device_fed(idle: gyre_core::IdleStrategy) -> gyre_core::IdleStrategy {
    use gyre_core::IdleStrategy as I;
    match idle {
        I::Backoff {
            spins,
            yields,
            max_park,
        } => I::Backoff {
            spins,
            yields,
            max_park: max_park.min(DEVICE_FED_MAX_PARK),
        },
        I::Sleep(d) => I::Sleep(d.min(DEVICE_FED_MAX_PARK)),
        I::BusySpin => I::BusySpin,
    }
}

impl<Req: Pod, Resp: Pod> Pipeline<Req, Resp> {
    /// The launch of [`Runtime::launch_across`] for a pipeline (its rules are documented
    /// there).
    pub(crate) fn launch_across(
        runtimes: &[Runtime],
        spec: PipelineSpec<Req, Resp>,
    ) -> Result<Self> {
        let targets = spec.targets(runtimes)?;
        for (k, t) in targets.iter().enumerate() {
            let strategy = t.plan.strategy;
            if strategy.copies() {
                return Err(Error::StrategyUnsupported {
                    backend: t.imp.name(),
                    strategy: strategy.name(),
                    reason: format!(
                        "stage {k} of pipeline {:?} (on runtime {}, {:?}): a pipeline's \
                         stages write each other's rings directly, so they need the unified \
                         (zero-copy) strategy",
                        spec.name, spec.stages[k].place, t.backend
                    ),
                });
            }
        }
        let (checked, plan) = spec.check(&targets)?;
        let n = checked.len();
        let imps: Vec<&Arc<dyn gyre_core::Backend>> = targets.iter().map(|t| &t.imp).collect();
        // The producers of a join advance its ring by compare-and-swap: one device, or
        // backends whose atomics are the host's. A fan-out itself crosses devices freely.
        joins_meet(&plan, |k| (targets[k].backend, imps[k].host_atomics()))
            .map_err(|(k, why)| spec.refuse(k, why))?;
        let _span = tracing::info_span!(
            "gyre_launch_pipeline",
            pipeline = %spec.name,
            stages = n,
            backend = imps[0].name(),
            runtimes = runtimes.len()
        )
        .entered();
        // Every stage times the host out as the first does: the host writes all their
        // heartbeats at the pace the first stage's host timeout sets.
        let host_timeout_ms = checked[0].host_timeout_ms;
        let regions = (0..n)
            .map(|m| {
                let place = Placement {
                    bytes: SharedRegion::bytes_for(&checked[m].geometry),
                    users: [m].into_iter().chain(plan.writers_of(m)).collect(),
                };
                let mem = place.memory(&imps)?.map_err(|why| spec.refuse(m, why))?;
                let mut region = SharedRegion::new(mem, checked[m].geometry, host_timeout_ms)?;
                if m != 0 {
                    // An inner ring (not the head's: the host writes that one).
                    let bytes = checked[m].geometry.ring_bytes();
                    if let Some(ring) = inner_ring(&imps, m, &place.users, bytes) {
                        region.place_request_ring(ring)?;
                    }
                }
                Ok(Arc::new(region))
            })
            .collect::<Result<Vec<_>>>()?;
        for (region, c) in regions.iter().zip(&checked) {
            // K0 reads it: a stage in epochs hands over when one runs out.
            region
                .control()
                .epoch_us
                .store(c.epoch_us, core::sync::atomic::Ordering::Release);
        }
        let doorbells: Vec<Arc<Doorbell>> = (0..n).map(|_| Arc::new(Doorbell::new())).collect();
        // A chain's stage with restarts left hands over on a handler fault instead of
        // faulting (`link::RESTARTS`), so no stage around it reads the fault as final; a
        // lone stage is a lone kernel, whose fault the channel holds while a restart
        // follows (`crate::lifecycle`).
        let restarts: Vec<Option<RestartPolicy>> = spec
            .stages
            .iter()
            .map(|st| st.spec.restart.filter(|p| n > 1 && p.max_restarts() > 0))
            .collect();
        let links = links_of(&spec, &plan, &imps, &regions, &doorbells)?;
        let mut launches = Vec::with_capacity(n);
        for ((k, st), link) in spec.stages.iter().enumerate().zip(links) {
            let mut l: LaunchSpec = st.spec.launch_spec();
            l.name = spec.stage_name(k);
            l.doorbell = Some(doorbells[k].clone());
            l.link = link.map(|mut link| {
                if restarts[k].is_some() {
                    link.flags |= gyre_abi::link::RESTARTS;
                }
                link
            });
            launches.push(l);
        }
        // A device stage cannot ring a CPU stage it feeds (`docs/pipelines.md`, "Across
        // devices"): such a stage parks briefly instead.
        let fed_by_device: Vec<bool> = (0..n)
            .map(|k| {
                targets[k].backend == crate::Backend::Cpu
                    && (0..n).any(|p| {
                        plan.writes(p).contains(&k) && targets[p].backend != crate::Backend::Cpu
                    })
            })
            .collect();
        for k in 0..n {
            if fed_by_device[k] {
                launches[k].idle = device_fed(launches[k].idle);
            }
        }
        launches[0].export = spec.export_for(0)?;
        let counters: Vec<Arc<RelaunchCounters>> = (0..n).map(|_| Arc::default()).collect();
        let mut exports = Vec::with_capacity(n.saturating_sub(1));
        for (k, region) in regions.iter().enumerate().skip(1) {
            if let Some(w) = spec.export_for(k)? {
                let p = ExportPublisher::start(
                    region.clone(),
                    w,
                    spec.stages[0].spec.export_interval,
                    Arc::new(StageFeed(counters[k].clone(), checked[k].epoch_us)),
                )
                .map_err(|e| Error::Launch {
                    backend: "telemetry export",
                    kernel: spec.stage_name(k),
                    source: gyre_core::Cause::new(e),
                })?;
                exports.push(p);
            }
        }
        // Every stage's program is built and loaded before the first stage runs: on CUDA
        // a module load next to a running ring kernel can wait for it forever, and is
        // refused (`gyre_cuda::Error::WouldWait`).
        for k in 0..n {
            imps[k].prepare(&launches[k])?;
        }
        // The last stage first: each stage's next is running when it starts.
        let mut running: Vec<Arc<dyn KernelInstance>> = Vec::with_capacity(n);
        for k in (0..n).rev() {
            match imps[k].launch(regions[k].clone(), &launches[k]) {
                Ok(i) => running.push(Arc::from(i)),
                Err(e) => {
                    abandon(&regions[k + 1..], &doorbells[k + 1..], &running);
                    return Err(e);
                }
            }
        }
        running.reverse();
        tracing::info!(
            capacity = checked[0].geometry.capacity(),
            slot_size = checked[0].geometry.slot_size(),
            "pipeline launched"
        );
        let chain = Arc::new(ChainView::graph(
            regions
                .iter()
                .cloned()
                .zip(doorbells.iter().cloned().map(Some))
                .collect(),
            plan.edges(),
        ));
        let mut head: KernelSpec<Req, Resp> = spec.stages[0].spec.clone().retyped();
        head.name = spec.name.clone();
        // Every stage is relaunched in place by the head kernel's lifecycle (a lone stage
        // is the head kernel).
        let stages = running
            .into_iter()
            .enumerate()
            .map(|(k, instance)| StageStart {
                name: if n == 1 {
                    spec.name.clone()
                } else {
                    spec.stage_name(k)
                },
                imp: imps[k].clone(),
                place: Place::Shared(regions[k].clone()),
                region: regions[k].clone(),
                instance,
                launched: launches[k].clone(),
                epoch_us: checked[k].epoch_us,
                restart: spec.stages[k].spec.restart,
                counts: counters[k].clone(),
            })
            .collect();
        let kernel = Kernel::start(
            Started {
                region: regions[0].clone(),
                stages,
                transfer: None,
                backend: targets[0].backend,
                chain: Some(chain.clone()),
            },
            &head,
        )?;
        kernel.inner().keep_exports(exports);
        let meta = spec
            .stages
            .iter()
            .enumerate()
            .map(|(k, st)| StageMeta {
                backend: targets[k].backend,
                req: (st.ids.0, st.req.0),
                resp: (st.ids.1, st.resp.0),
                msg_type: st.spec.msg_type,
                fed_by_device: fed_by_device[k],
            })
            .collect();
        Ok(Pipeline {
            kernel,
            names: spec.stages.iter().map(|s| s.spec.name.clone()).collect(),
            chain,
            meta,
        })
    }
}

impl<Req, Resp> PipelineSpec<Req, Resp> {
    /// Where each stage runs: the target that `runtimes[place]` picks for all the stages
    /// placed on it (as [`Runtime::launch`] picks one for a whole pipeline).
    fn targets<'r>(&self, runtimes: &'r [Runtime]) -> Result<Vec<&'r Target>> {
        if runtimes.is_empty() {
            return Err(self.refuse(0, "no runtime to launch it on".into()));
        }
        self.stages
            .iter()
            .enumerate()
            .map(|(k, st)| {
                let rt = runtimes.get(st.place).ok_or_else(|| {
                    self.refuse(
                        k,
                        format!(
                            "it is placed on runtime {} of {} given",
                            st.place,
                            runtimes.len()
                        ),
                    )
                })?;
                let group: Vec<KernelSpec<(), ()>> = self
                    .stages
                    .iter()
                    .filter(|s| s.place == st.place)
                    .map(|s| s.spec.clone())
                    .collect();
                rt.target_for_all(&group)
            })
            .collect()
    }
}

/// Each stage's link, from the plan: regions, or entries of link tables filled with the
/// addresses the reading kernels use for the regions. The tables are memory that every
/// stage reading an entry addresses (a [`Placement`] among their backends).
fn links_of<Req, Resp>(
    spec: &PipelineSpec<Req, Resp>,
    plan: &Plan,
    imps: &[&Arc<dyn gyre_core::Backend>],
    regions: &[Arc<SharedRegion>],
    bells: &[Arc<Doorbell>],
) -> Result<Vec<Option<StageLink>>> {
    let readers: Vec<usize> = (0..plan.outs.len())
        .filter(|&k| matches!(plan.outs[k], Out::Route { .. } | Out::ById { .. }))
        .collect();
    let tables = match readers.first() {
        None => None,
        Some(&first) => {
            let place = Placement {
                bytes: LinkTables::bytes_for(plan.entries()),
                users: readers.clone(),
            };
            let mem = place.memory(imps)?.map_err(|why| {
                spec.refuse(
                    first,
                    format!(
                        "the pipeline's link tables, read by stages {readers:?} (one \
                         allocation for every fan-out and join): {why}"
                    ),
                )
            })?;
            Some(Arc::new(LinkTables::new(mem, plan.entries())?))
        }
    };
    // Region `m` as stage `k`'s kernel addresses it.
    let addr = |k: usize, m: usize| imps[k].device_address(regions[m].base());
    if let Some(t) = &tables {
        for (k, out) in plan.outs.iter().enumerate() {
            let Out::Route {
                entry,
                route,
                branches,
            } = out
            else {
                continue;
            };
            let targets = branches
                .iter()
                .map(|&b| Ok((addr(k, b)?, spec.stages[b].spec.msg_type)))
                .collect::<Result<Vec<_>>>()?;
            t.set_route(*entry, route_mode(*route), &targets)?;
        }
        for &(entry, to, producers) in &plan.joins {
            // One entry for all producers: each must address the target alike.
            let target = to.unwrap_or(0);
            let a = match join_address(&plan.producers_of(entry), |p| addr(p, target))? {
                Ok(Some(a)) => a,
                Ok(None) => addr(target, target)?,
                Err((p, why)) => return Err(spec.refuse(p, why)),
            };
            t.set_join(entry, a, producers)?;
        }
    }
    let table = |entry: usize, targets: Vec<usize>| -> Result<LinkTarget> {
        let tables = tables.clone().ok_or(Error::InvalidArgument {
            name: "pipeline link tables",
            value: "none".into(),
            reason: "allocated for every fan-out and join",
        })?;
        Ok(LinkTarget::Table {
            tables,
            entry,
            regions: targets.into_iter().map(|k| regions[k].clone()).collect(),
        })
    };
    let msg_type = |k: usize| spec.stages[k].spec.msg_type;
    plan.outs
        .iter()
        .enumerate()
        .map(|(k, out)| {
            let (next, next_msg_type) = match out {
                Out::Own => return Ok(None),
                Out::Direct(m) => (LinkTarget::Region(regions[*m].clone()), msg_type(*m)),
                Out::Head => (LinkTarget::Region(regions[0].clone()), msg_type(0)),
                Out::Route {
                    entry, branches, ..
                } => (table(*entry, branches.clone())?, 0),
                Out::ById { entry, to } => (
                    table(*entry, vec![to.unwrap_or(0)])?,
                    msg_type(to.unwrap_or(0)),
                ),
            };
            Ok(Some(StageLink {
                next,
                flags: plan.flags(k),
                next_msg_type,
                next_doorbells: plan
                    .writes(k)
                    .into_iter()
                    .map(|m| bells[m].clone())
                    .collect(),
            }))
        })
        .collect()
}

/// Stops the stages a failed launch already started (they hold no request): Terminate,
/// then a join once each finished (a stage that does not finish in time is detached).
fn abandon(
    regions: &[Arc<SharedRegion>],
    bells: &[Arc<Doorbell>],
    running: &[Arc<dyn KernelInstance>],
) {
    for (r, b) in regions.iter().zip(bells) {
        r.control()
            .command
            .store(command::TERMINATE, core::sync::atomic::Ordering::Release);
        b.ring();
    }
    let deadline = Instant::now() + ABANDON_WAIT;
    for k in running {
        while !k.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        if k.is_finished() {
            let _ = k.join();
        } else {
            tracing::warn!(
                "a stage of a pipeline that failed to launch did not stop; detaching it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gyre_core::IdleStrategy as I;

    #[test]
    fn a_cpu_stage_fed_by_a_device_parks_briefly() {
        let ms = Duration::from_millis;
        assert_eq!(
            device_fed(I::Backoff {
                spins: 7,
                yields: 3,
                max_park: ms(10)
            }),
            I::Backoff {
                spins: 7,
                yields: 3,
                max_park: DEVICE_FED_MAX_PARK
            }
        );
        assert_eq!(device_fed(I::Sleep(ms(5))), I::Sleep(DEVICE_FED_MAX_PARK));
        let short = I::Sleep(Duration::from_micros(20));
        assert_eq!(device_fed(short), short, "a shorter wait is kept");
        assert_eq!(device_fed(I::BusySpin), I::BusySpin);
    }
}
