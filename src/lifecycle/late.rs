//! The late watch: what follows a reload that gave up at R2's deadline.
//!
//! The reload wrote `HANDOVER` (R1) and waited for a stage stuck in a batch; at the
//! deadline it released its hold (`RUN`, or the host's last command for the head) and
//! returned [`Error::Timeout`](gyre_core::Error::Timeout). The stage reads its command
//! at its next batch boundary, which may have come just before the release: then it
//! read `HANDOVER` and hands over, and an unsupervised stage had nobody to launch its
//! successor. It stayed `HANDED_OVER`, and the kernel ended with it.
//!
//! So the stage stays watched (`HANDED_OVER` is then not its end: callers wait) and one
//! thread follows it until one of three things is known:
//!
//! * **It handed over:** it read `HANDOVER`. Its successor runs the handler it ran (the
//!   reload launched nothing), counted only in the generation ([`Why::Resume`]).
//! * **It read the release:** two changes of its heartbeat seen after the release. A
//!   slow tick writes the heartbeat (K9) before it reads the command (K1), and a stage
//!   that reads `HANDOVER` stops in that tick without another heartbeat. The first
//!   change may come from a tick whose K1 read the command from before the release (the
//!   stage's store of the heartbeat and load of the command are not fenced against the
//!   host's release and load); the second comes from a tick after a K1 that did not
//!   stop, and K1 reads the command word in order, so no later K1 reads `HANDOVER`.
//!   A checked ring's K1 reads the command from the copy of the host line its last wave
//!   brought, which the tick after the stall may not have refreshed yet (its copy
//!   predates `HANDOVER`, and the next wave may still bring `HANDOVER`): there a third
//!   change is needed, which comes from a tick whose copy was read after a K1 that did
//!   not stop.
//! * **It ended:** a final state, or the kernel's end.
//!
//! A stage under a supervisor needs none of this: the supervisor relaunches a stage that
//! handed over by itself (as an epoch). Another reload that gives up while the watch
//! runs starts its count again ([`Stage::late_round`]); a reload that succeeds meanwhile
//! relaunches the stage itself and the watch then sees it running, and ends at its
//! heartbeats. While the stage stays stuck (a handler that never returns), the thread
//! looks every 50 ms for as long as the kernel lives; the kernel's end
//! ([`Lifecycle::end`]) stops and joins it.

use core::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::Weak;
use std::time::Duration;

use super::handover::Stop;
use super::{Lifecycle, Stage, Why};

/// The watch's first and longest pause between two looks at the stage.
const FIRST_LOOK: Duration = Duration::from_millis(1);
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// What the watch saw of the stage's heartbeat since the last release.
struct Beats {
    round: u64,
    last: u64,
    changes: u32,
}

impl Lifecycle {
    /// Starts following stage `k` after a reload gave up on it and released its hold
    /// (the caller holds the stage's handover lock). The stage stays watched until the
    /// watch ends.
    pub(super) fn follow_late(&self, k: usize, stage: &Stage) {
        stage.late_round.fetch_add(1, AcqRel);
        if stage.late.swap(true, AcqRel) {
            // A watch runs: it counts from this release on.
            return;
        }
        stage.watch(true);
        let me = self.me.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("gyre-late-{}", stage.name))
            .spawn(move || {
                let _unwinding = Unwinding(&me, k);
                follow(&me, k);
            });
        match spawned {
            Ok(t) => self.late.lock().push(t),
            Err(e) => {
                tracing::error!(kernel = %stage.name, error = %e, "no thread to follow the stage after its reload gave up: if it handed over, it stays stopped");
                stage.late.store(false, Release);
                stage.watch(false);
            }
        }
    }

    /// Stops and joins the late watches (the kernel's end: no relaunch after this). A
    /// watch in the middle of a relaunch finishes it first.
    pub(super) fn stop_late(&self) {
        let watches = std::mem::take(&mut *self.late.lock());
        let me = std::thread::current().id();
        for t in watches {
            t.thread().unpark();
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

/// Ends the watch of a thread that unwinds (a panic in a relaunch): the stage must not
/// stay watched, or a stage that handed over would never count as finished.
struct Unwinding<'a>(&'a Weak<Lifecycle>, usize);

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        if let Some(life) = self.0.upgrade() {
            if let Ok(stage) = life.stages.get(self.1) {
                let _one = stage.hold();
                end(stage);
            }
        }
    }
}

/// The late watch's thread: looks at stage `k` with a growing pause until it knows.
fn follow(me: &Weak<Lifecycle>, k: usize) {
    let mut pause = FIRST_LOOK;
    let mut beats: Option<Beats> = None;
    loop {
        // Unparked by the kernel's end (`stop_late`).
        std::thread::park_timeout(pause);
        pause = (pause * 2).min(MAX_PAUSE);
        let Some(life) = me.upgrade() else {
            return;
        };
        let Ok(stage) = life.stages.get(k) else {
            return;
        };
        if life.ended.load(Acquire) {
            // The kernel's end is handled: nothing to relaunch. After a relaunch under
            // way, whose end keeps the stage watched while the watch runs.
            let _one = stage.hold();
            return end(stage);
        }
        // A reload under way relaunches the stage itself (or gives up and bumps the
        // round); the watch looks again after it.
        let Some(_one) = stage.try_hold() else {
            continue;
        };
        if life.ch.check_stopped().is_some() {
            // It ended for good: nothing to relaunch.
            return end(stage);
        }
        let round = stage.late_round.load(Acquire);
        // Heartbeat changes that show a K1 after the release (the module documentation).
        let needed = if life.ch.is_checked() { 3 } else { 2 };
        let (st, code) = life.stage_state(k, stage);
        // Read after the state, which brings a copy strategy's mirror up.
        let heartbeat = stage.region.control().kernel_heartbeat.load(Acquire);
        match life.classify(k, st, code) {
            Stop::Final => return end(stage),
            Stop::HandedOver | Stop::Fault => {
                if !stage.current().is_finished() {
                    continue;
                }
                tracing::warn!(kernel = %stage.name, "the stage read the HANDOVER of a reload that gave up: relaunching the handler it ran");
                // An error made the stage's end final (lost): its waiters learn it.
                let _ = life.hand_over(k, stage, Why::Resume, None);
                return end(stage);
            }
            Stop::Running => match &mut beats {
                Some(b) if b.round == round => {
                    if heartbeat != b.last {
                        b.last = heartbeat;
                        b.changes += 1;
                    }
                    if b.changes >= needed {
                        tracing::debug!(kernel = %stage.name, "the stage serves on after its reload gave up");
                        return end(stage);
                    }
                }
                _ => {
                    beats = Some(Beats {
                        round,
                        last: heartbeat,
                        changes: 0,
                    });
                }
            },
        }
    }
}

/// The watch is over (under the stage's handover lock, or once the kernel ended).
fn end(stage: &Stage) {
    stage.late.store(false, Release);
    stage.watch(false);
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::AtomicBool;
    use core::sync::atomic::Ordering::{Acquire, Release};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use gyre_abi::state;

    use crate::lifecycle::handover::tests::set_deadline;
    use crate::lifecycle::Lifecycle;
    use crate::{Backend, Error, Kernel, KernelSpec, Runtime};

    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out: {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A kernel whose handler blocks on request 7 until `go`; `inside` once it does.
    fn stuck_kernel(rt: &Runtime) -> (Kernel<u32, u32>, Arc<AtomicBool>, Arc<AtomicBool>) {
        let (inside, go) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (i, g) = (inside.clone(), go.clone());
        let k = rt
            .launch(KernelSpec::from_fn("late", move |x: u32| {
                if x == 7 {
                    i.store(true, Release);
                    while !g.load(Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                x + 1
            }))
            .expect("launch");
        (k, inside, go)
    }

    /// A runtime, a kernel whose handler is blocked in request 7 (its `go` unblocks it),
    /// and the thread of that call.
    fn stuck_call() -> (
        Runtime,
        Kernel<u32, u32>,
        Arc<AtomicBool>,
        std::thread::JoinHandle<crate::Result<u32>>,
    ) {
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .build()
            .expect("runtime");
        let (k, inside, go) = stuck_kernel(&rt);
        let caller = k.clone();
        let stuck = std::thread::spawn(move || caller.call_blocking(7));
        until("the handler blocks", || inside.load(Acquire));
        (rt, k, go, stuck)
    }

    /// A reload that gives up at the test's deadline.
    fn give_up(k: &Kernel<u32, u32>) {
        let e = k.reload_blocking(KernelSpec::from_fn("late", |x: u32| x + 2));
        assert!(matches!(e, Err(Error::Timeout { .. })), "{e:?}");
    }

    fn watch_ended(life: &Lifecycle) -> bool {
        let s = life.stages.head();
        !s.late.load(Acquire) && !s.watched()
    }

    /// The race the watch exists for: the stuck batch ends just before the reload gives
    /// up, and the stage reads the `HANDOVER` that is about to be released. Without the
    /// watch the stage stayed `HANDED_OVER` and the kernel ended with it.
    #[test]
    fn a_stage_that_read_a_given_up_handover_is_relaunched_with_its_handler() {
        let (_rt, k, go, stuck) = stuck_call();
        let life = k.inner().life.clone();
        let at = life.clone();
        let _deadline = set_deadline(Duration::from_millis(200), move || {
            go.store(true, Release);
            until("the stage reads HANDOVER", || {
                at.stages.head().region.control().state.load(Acquire) == state::HANDED_OVER
            });
        });
        give_up(&k);
        assert_eq!(stuck.join().expect("caller").expect("call"), 8);
        // The handler it ran serves again: the reload's was never launched.
        assert_eq!(k.call_timeout(1, Duration::from_secs(10)).expect("call"), 2);
        let r = k.relaunches();
        assert_eq!((r.generation, r.reloads), (2, 0), "{r:?}");
        until("the watch ends", || watch_ended(&life));
        k.shutdown_blocking().expect("shutdown");
    }

    /// The usual end of a reload that gave up: the stage comes back after the release,
    /// reads `RUN` and serves on; the watch ends at its heartbeats.
    #[test]
    fn a_stage_that_comes_back_after_a_given_up_reload_serves_on() {
        let (_rt, k, go, stuck) = stuck_call();
        let _deadline = set_deadline(Duration::from_millis(100), || {});
        give_up(&k);
        let life = k.inner().life.clone();
        assert!(
            !watch_ended(&life),
            "the stage is followed until it is known"
        );
        go.store(true, Release);
        assert_eq!(stuck.join().expect("caller").expect("call"), 8);
        assert_eq!(k.call_timeout(1, Duration::from_secs(10)).expect("call"), 2);
        until("the watch ends", || watch_ended(&life));
        assert_eq!(k.relaunches().generation, 1);
        k.shutdown_blocking().expect("shutdown");
    }

    /// A shutdown while the watch follows the stage stops and joins the watch.
    #[test]
    fn the_kernels_end_stops_the_watch() {
        let (_rt, k, go, stuck) = stuck_call();
        let _deadline = set_deadline(Duration::from_millis(50), || {});
        give_up(&k);
        let life = k.inner().life.clone();
        assert_eq!(life.late.lock().len(), 1, "one watch follows the stage");
        go.store(true, Release);
        k.shutdown_blocking().expect("shutdown");
        assert_eq!(stuck.join().expect("caller").expect("call"), 8);
        assert!(life.late.lock().is_empty(), "joined at the kernel's end");
        assert!(watch_ended(&life));
    }
}
