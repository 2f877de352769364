//! The handover of one stage (`docs/protocol.md` §8, R1..R6), written once for every
//! relaunch: a reload on the caller's thread, an epoch's end or a restart on the
//! supervisor's. See the [engine's documentation](super).

use core::sync::atomic::Ordering::{AcqRel, Acquire, Release, SeqCst};
use std::time::{Duration, Instant};

use gyre_abi::{command, state, ControlBlock};
use gyre_core::command_gate::{hold_stage, release_stage};
use gyre_core::{Error, KernelInstance, LaunchSpec, Result};

use super::{Lifecycle, Stage, Why, HANDOVER_DEADLINE};

/// Where a stage stands, from its state and error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// Serving (or not yet started): nothing to relaunch.
    Running,
    /// It handed over at the end of an epoch, or for a reload (`error_code` 0).
    HandedOver,
    /// A handler fault a restart may follow: a chain's stage that handed over with its
    /// code, or a lone kernel's `FAULTED` while its restart is armed.
    Fault,
    /// It stopped for good.
    Final,
}

/// R1's hold on a stage's command, released at R4 (the successor's command) or, when the
/// handover ends early, on drop: the head's gate writes the host's last command, a later
/// stage's `HANDOVER` goes back to `RUN`.
pub(super) struct Held<'a> {
    life: &'a Lifecycle,
    k: usize,
    cb: &'a ControlBlock,
    open: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        if self.k == 0 {
            self.life.release_commands();
        } else {
            release_stage(&self.cb.command);
        }
    }
}

impl Lifecycle {
    /// Builds what `spec` needs on stage `k`'s backend (a device handler's compile), so
    /// that a failure leaves the running stage alone.
    pub(crate) fn prepare(&self, k: usize, spec: &LaunchSpec) -> Result<()> {
        self.stages.get(k)?.imp.prepare(spec)
    }

    /// Replaces stage `k`'s handler with `next` (already prepared): the handover, on
    /// this thread, with the stage's handover lock held throughout.
    pub(crate) fn reload(&self, k: usize, next: LaunchSpec) -> Result<()> {
        let stage = self.stages.get(k)?;
        let _one = stage.hold();
        if self.ended.load(SeqCst) || self.ch.is_closed() {
            return Err(self.ch.closed_error());
        }
        self.hand_over(k, stage, Why::Reload, Some(next))
    }

    /// Stage `k`'s state and error code: the head of a lone kernel through its channel
    /// (which brings a copy strategy's mirror up first), any other from its region.
    pub(super) fn stage_state(&self, k: usize, stage: &Stage) -> (u32, u32) {
        if k == 0 && self.ch.chain().is_none() {
            return self.ch.kernel_state();
        }
        let cb = stage.region.control();
        (cb.state.load(Acquire), cb.error_code.load(Acquire))
    }

    /// Where stage `k` stands, from its state `st` and error code `code`.
    pub(super) fn classify(&self, k: usize, st: u32, code: u32) -> Stop {
        match st {
            state::HANDED_OVER if code == gyre_abi::error::NONE => Stop::HandedOver,
            state::HANDED_OVER => Stop::Fault,
            state::FAULTED if k == 0 && self.ch.restart_armed() => Stop::Fault,
            s if state::is_final(s) => Stop::Final,
            _ => Stop::Running,
        }
    }

    /// R1..R6 on stage `k`, with its handover lock held: `why` is a reload (with `next`),
    /// or the supervisor's relaunch of a stage that stopped by itself (`next` `None`: it
    /// runs what its predecessor ran).
    pub(super) fn hand_over(
        &self,
        k: usize,
        stage: &Stage,
        why: Why,
        next: Option<LaunchSpec>,
    ) -> Result<()> {
        // Epochs end every few milliseconds: their relaunches are traced at debug.
        let _span = if why == Why::Epoch {
            tracing::debug_span!("gyre_relaunch", kernel = %stage.name, why = why.name())
        } else {
            tracing::info_span!("gyre_relaunch", kernel = %stage.name, why = why.name())
        }
        .entered();
        // A stage that handed over counts as running on (not finished) until its
        // successor runs, from before it is told to: shutdowns and the chain's end wait
        // for it.
        let watched = stage.watched();
        stage.watch(true);
        let r = self.hand_over_watched(k, stage, why, next);
        if !watched && !stage.late.load(Acquire) {
            // A supervised stage stays watched (unless the handover gave it up), and so
            // does one a late watch follows.
            stage.watch(false);
        }
        // Waiters on the kernel's state look again (a successor runs, or it is gone).
        self.ch.state_waiters().wake_all(&self.ch);
        r
    }

    fn hand_over_watched(
        &self,
        k: usize,
        stage: &Stage,
        why: Why,
        next: Option<LaunchSpec>,
    ) -> Result<()> {
        let old = stage.current();
        // R1: ask the stage to stop at a batch boundary (an epoch's or a fault's stage
        // stopped by itself).
        let mut held = if why == Why::Reload {
            self.hold(k, stage)?
        } else {
            Held {
                life: self,
                k,
                cb: stage.region.control(),
                open: false,
            }
        };
        // R2: wait until it stopped and its execution ended.
        let code = match self.wait_stopped(k, stage, &*old) {
            Ok(code) => code,
            Err(e @ Error::Timeout { .. }) if why == Why::Reload => {
                // Given up: the hold goes, and the stage serves on when it comes back.
                // It may have read `HANDOVER` just before: a late watch relaunches it
                // then (an unsupervised stage; a supervisor relaunches its own).
                drop(held);
                if !stage.supervised() {
                    self.follow_late(k, stage);
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // R3: join it (its resources go; the region stays).
        if let Err(e) = old.join() {
            tracing::warn!(kernel = %stage.name, error = %e, "joining the kernel handed over");
        }
        if self.ch.chain().is_some_and(|c| c.feeds_a_final_stage(k)) {
            // A stage it writes to stopped for good meanwhile: a successor would stop at
            // once (L4). It stops as L4 would have stopped it.
            self.stop_behind_final(stage);
            return Err(Error::Pipeline {
                pipeline: self.ch.name().to_owned(),
                stage: k,
                reason: "a stage it feeds stopped for good during its relaunch".into(),
            });
        }
        if why == Why::Restart {
            tracing::warn!(kernel = %stage.name, code, name = gyre_abi::error::name(code), "kernel faulted: restarting it");
        }
        let previous = stage.launched();
        let spec = next.unwrap_or_else(|| previous.clone());
        // R4..R6: the successor's command and generation, pushed, then the launch,
        // counted in between (`launch_successor`).
        match self.launch_successor(k, stage, &spec, Some(why), &mut held) {
            Ok(()) => {}
            Err(e) if why == Why::Reload => {
                tracing::warn!(kernel = %stage.name, error = %e, "the reloaded handler did not launch: relaunching the previous one");
                return match self.launch_successor(k, stage, &previous, None, &mut held) {
                    Ok(()) => Err(e),
                    Err(e2) => Err(self.lost(k, stage, &e2)),
                };
            }
            Err(e) => return Err(self.lost(k, stage, &e)),
        }
        let generation = stage.region.control().generation.load(Acquire);
        if why == Why::Epoch {
            tracing::debug!(generation, "kernel relaunched");
        } else {
            tracing::info!(generation, "kernel relaunched");
        }
        Ok(())
    }

    /// R1 of a reload: `HANDOVER` into stage `k`'s command, with the host's commands
    /// held back (the head), or moved from `RUN` (a later stage: one told to stop is not
    /// reloaded).
    fn hold<'a>(&'a self, k: usize, stage: &'a Stage) -> Result<Held<'a>> {
        let cb = stage.region.control();
        if k == 0 {
            self.cmds.hold(|c| self.ch.command(c));
        } else if let Err(c) = hold_stage(&cb.command) {
            return Err(Error::Pipeline {
                pipeline: self.ch.name().to_owned(),
                stage: k,
                reason: format!(
                    "the stage was told to stop (command {c}): there is nothing to reload"
                ),
            });
        } else if let Some(bell) = stage.launched().doorbell {
            // A CPU stage may be parked: wake it to read the command now.
            bell.ring();
        }
        Ok(Held {
            life: self,
            k,
            cb,
            open: true,
        })
    }

    /// R2: polls until stage `k` stopped (handed over, or a fault a restart follows) and
    /// its execution ended; returns its error code. A kernel that ended for good
    /// (terminated, faulted without a restart, lost, unresponsive) is the error its
    /// waiters get; a chain's stage that alone stopped for good is [`Error::Pipeline`].
    ///
    /// Waits at most [`HANDOVER_DEADLINE`]: a stage whose batch never ends (a handler
    /// that never returns, without a watchdog) fails the relaunch with [`Error::Timeout`]
    /// instead of hanging it; the hold on its command is released, so it serves on if it
    /// ever comes back (and is relaunched with the handler it ran if it read `HANDOVER`
    /// just before the release: [`super::late`]).
    fn wait_stopped(&self, k: usize, stage: &Stage, old: &dyn KernelInstance) -> Result<u32> {
        let deadline = deadline();
        let mut pause = Duration::from_micros(1);
        let start = Instant::now();
        loop {
            if let Some(e) = self.ch.check_stopped() {
                return Err(e);
            }
            let (st, code) = self.stage_state(k, stage);
            match self.classify(k, st, code) {
                Stop::HandedOver | Stop::Fault if old.is_finished() => return Ok(code),
                Stop::Final if self.stages.len() == 1 => {
                    // Ended for good since the look above: its waiters' error.
                    return Err(self
                        .ch
                        .check_stopped()
                        .unwrap_or_else(|| self.ch.closed_error()));
                }
                Stop::Final => {
                    return Err(Error::Pipeline {
                        pipeline: self.ch.name().to_owned(),
                        stage: k,
                        reason: format!(
                            "the stage stopped for good (state {st}, {}) before it handed over",
                            gyre_abi::error::name(code)
                        ),
                    })
                }
                _ => {}
            }
            if start.elapsed() >= deadline {
                tracing::error!(kernel = %stage.name, state = st, "the kernel did not stop for its relaunch in time");
                #[cfg(test)]
                tests::at_deadline();
                return Err(Error::Timeout {
                    op: "a relaunch waiting for the kernel to stop at a batch boundary",
                    after: deadline,
                });
            }
            if pause < Duration::from_micros(16) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(pause);
            }
            pause = (pause * 2).min(Duration::from_micros(200));
        }
    }

    /// R4..R6 for one launch of stage `k`: the successor's command and the next
    /// generation into its control block (the head's: the host's last command; a later
    /// stage's: `HANDOVER` back to `RUN`), line 0 pushed to the device (copy strategies),
    /// then the launch on the stage's rings.
    ///
    /// `count`: the relaunch this launch is counted as ([`super::Relaunches`]), or `None`
    /// (a reload's fallback to the previous handler). It is counted after the generation
    /// and before the launch: the successor may answer before `launch` returns, and
    /// whoever saw its answer must see it counted; the times are written before the
    /// count, which is published with release, so a reader that loads the counts first
    /// (with acquire, [`Lifecycle::stage_relaunches`]) sees the generation and the times
    /// that go with them. A launch that fails takes its count, times and generation back.
    fn launch_successor(
        &self,
        k: usize,
        stage: &Stage,
        spec: &LaunchSpec,
        count: Option<Why>,
        held: &mut Held<'_>,
    ) -> Result<()> {
        let cb = stage.region.control();
        if k == 0 {
            self.cmds.hand_to_successor(|c| {
                cb.epoch_us.store(stage.epoch_us, Release);
                cb.generation.fetch_add(1, AcqRel);
                self.write_successor_command(c);
            });
        } else {
            cb.generation.fetch_add(1, AcqRel);
            release_stage(&cb.command);
        }
        held.open = false;
        // The generation counts launches: one that fails takes its count back.
        let ungenerate = || {
            cb.generation.fetch_sub(1, AcqRel);
        };
        if let (0, Some(t)) = (k, &self.transfer) {
            // Synchronous: the successor must not read the old command.
            t.bridge().push().inspect_err(|_| ungenerate())?;
        }
        let counted = count
            .and_then(Why::kind)
            .map(|kind| stage.counts.count(kind));
        stage.launch(spec).inspect_err(|_| {
            if let Some(c) = counted {
                stage.counts.uncount(c);
            }
            ungenerate();
        })
    }

    /// Writes the command held for the head, the user's last `c` (R4, or when a handover
    /// ends early): `TERMINATE` instead once the watchdog declared the kernel
    /// unresponsive. The watchdog writes its own `TERMINATE` past the command gate
    /// (`Channel::mark_unresponsive`), so `c` must never land after it: written, a
    /// fence, then the verdict looked for again, while the watchdog fences between its
    /// verdict and its command. Either this sees the verdict, or its command comes last.
    fn write_successor_command(&self, c: u32) {
        if self.ch.unresponsive().is_some() {
            self.ch.command(command::TERMINATE);
            return;
        }
        self.ch.command(c);
        core::sync::atomic::fence(SeqCst);
        if self.ch.unresponsive().is_some() {
            self.ch.command(command::TERMINATE);
        }
    }

    /// Ends the hold on the head's commands of a handover that stops early: the user's
    /// command goes in (over `HANDOVER`, which the kernel may never read).
    fn release_commands(&self) {
        self.cmds.abandon(|c| self.write_successor_command(c));
    }

    /// No successor could be launched: the stage is gone. A lone kernel's waiters fail
    /// with [`Error::KernelLost`]; a chain's stage faults (`KERNEL_GONE`) and the chain
    /// stops as after any fault.
    fn lost(&self, k: usize, stage: &Stage, e: &Error) -> Error {
        tracing::error!(kernel = %stage.name, error = %e, "no successor could be launched: the stage is lost");
        if self.stages.len() == 1 {
            self.ch.arm_restart(false);
            return self.ch.mark_lost(format!(
                "no successor could be launched after a handover: {e}"
            ));
        }
        self.fault_for_good(k, stage);
        e.clone()
    }

    /// Stage `k`'s fault is final: the host writes `FAULTED` (with `KERNEL_GONE` when it
    /// handed over without a code) for a stage that handed over (its execution ended, so
    /// the host is its line's only writer), disarms a lone kernel's restart, and the
    /// kernel's waiters learn it (a chain's view tells the stages the stage fed to
    /// terminate and wakes the ones feeding it: L3, L4).
    ///
    /// Under a copy strategy the head's mirror is drained first: the replies the kernel
    /// published before it ended reach their callers, who would otherwise fail with the
    /// fault (the copy thread pulls only when asked; seen under `async` on PoCL).
    pub(super) fn fault_for_good(&self, k: usize, stage: &Stage) {
        if let (0, Some(t)) = (k, &self.transfer) {
            t.drain();
        }
        let cb = stage.region.control();
        if cb.state.load(Acquire) != state::FAULTED {
            if cb.error_code.load(Acquire) == gyre_abi::error::NONE {
                cb.error_code.store(gyre_abi::error::KERNEL_GONE, Release);
            }
            cb.state.store(state::FAULTED, Release);
        }
        stage.watch(false);
        if k == 0 {
            self.ch.arm_restart(false);
        }
        let _ = self.ch.check_stopped();
    }

    /// A stage it writes to stopped for good while it waited for its relaunch: it stops
    /// as L4 would have stopped it (`TERMINATED`, `STAGE_STOPPED`, written by the host:
    /// its execution ended), and the chain's view tells the rest.
    pub(super) fn stop_behind_final(&self, stage: &Stage) {
        tracing::info!(kernel = %stage.name, "a stage it feeds stopped for good: not relaunching it");
        let _ = stage.current().join();
        let cb = stage.region.control();
        cb.error_code.store(gyre_abi::error::STAGE_STOPPED, Release);
        cb.state.store(state::TERMINATED, Release);
        stage.watch(false);
        let _ = self.ch.check_stopped();
    }
}

/// R2's deadline: [`HANDOVER_DEADLINE`] (a test's own on its thread).
fn deadline() -> Duration {
    #[cfg(test)]
    if let Some(d) = tests::deadline() {
        return d;
    }
    HANDOVER_DEADLINE
}

#[cfg(test)]
pub(super) mod tests {
    use core::cell::RefCell;
    use std::time::Duration;

    type AtDeadline = (Duration, Box<dyn FnMut()>);

    thread_local! {
        /// A test's R2 deadline for relaunches on this thread, and what runs when it
        /// passes, before the hold is released.
        static AT_DEADLINE: RefCell<Option<AtDeadline>> = const { RefCell::new(None) };
    }

    /// Relaunches on this thread give up after `after`, running `then` first, until the
    /// guard goes.
    #[must_use]
    pub(in crate::lifecycle) fn set_deadline(
        after: Duration,
        then: impl FnMut() + 'static,
    ) -> Deadline {
        AT_DEADLINE.with(|d| *d.borrow_mut() = Some((after, Box::new(then))));
        Deadline
    }

    /// Clears this thread's test deadline when dropped.
    pub(in crate::lifecycle) struct Deadline;

    impl Drop for Deadline {
        fn drop(&mut self) {
            AT_DEADLINE.with(|d| d.borrow_mut().take());
        }
    }

    pub(super) fn deadline() -> Option<Duration> {
        AT_DEADLINE.with(|d| d.borrow().as_ref().map(|(after, _)| *after))
    }

    pub(super) fn at_deadline() {
        AT_DEADLINE.with(|d| {
            if let Some((_, then)) = d.borrow_mut().as_mut() {
                then();
            }
        });
    }
}
