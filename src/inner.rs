//! [`Inner`]: what every handle, future and stream of one kernel shares — its channel,
//! the running instance, the completion driver, the telemetry export and the bridge —
//! and the two ways its life ends: a shutdown, or the last handle dropped.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use gyre_abi::{command, error, state};
use gyre_core::bridge::BridgeAgent;
use gyre_core::channel::driver::Driver;
use gyre_core::loan::{LoanArena, LoanStats};
use gyre_core::shm::{ExportPublisher, ExportSource, ExportWriter, LifecycleSnapshot};
use gyre_core::{Channel, Error, IdleStrategy, Result};
use parking_lot::Mutex;

use crate::lifecycle::{Lifecycle, Supervisor, Watcher};

/// How long a kernel whose last handle was dropped (without a shutdown) gets to drain and
/// stop before it is detached; the wait runs on a thread of its own, never on the thread
/// that dropped the handle.
pub(crate) const UNATTENDED_STOP: Duration = Duration::from_secs(5);

/// The host-side polling settings of one kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Polling {
    /// What blocking host calls do while waiting.
    pub(crate) host_idle: IdleStrategy,
    /// How long an async call spins for its reply before registering with the driver.
    pub(crate) async_spin: Duration,
    /// The message type of every request.
    pub(crate) msg_type: u32,
    /// The watchdog's bound, if the spec set one: a reload's idle park must fit it.
    pub(crate) watchdog: Option<Duration>,
}

pub(crate) struct Inner {
    pub(crate) ch: Arc<Channel>,
    /// The running launch and its successors (reloads, epochs, restarts).
    pub(crate) life: Arc<Lifecycle>,
    /// Relaunches a kernel that stopped by itself (epochs, restarts), if it has either;
    /// stopped when the kernel's end is handled.
    supervisor: Mutex<Option<Supervisor>>,
    /// The handler source watch ([`crate::KernelSpec::watch`]), if any.
    watcher: Mutex<Option<Watcher>>,
    /// Stopped and joined when the last reference goes: streams and `recv` futures still
    /// need it to be woken after the kernel ended.
    driver: Mutex<Option<Driver>>,
    pub(crate) polling: Polling,
    /// The telemetry export publisher, if the spec asked for one; dropping it removes
    /// the file.
    export: Mutex<Option<ExportPublisher>>,
    /// A pipeline's other stages' export publishers (the head's is `export`): they go
    /// with it.
    stage_exports: Mutex<Vec<ExportPublisher>>,
    /// The bridge to the kernel's device-resident rings under a copy strategy; `None`
    /// for zero copy. Dropped (its copy thread joined) after the kernel stopped.
    pub(crate) transfer: Option<Arc<BridgeAgent>>,
    /// Whether the kernel's end was handled (a shutdown returned, or the unattended end
    /// ran): nothing is left to wait for.
    ended: AtomicBool,
    /// The backend the kernel runs on (never `Auto`).
    pub(crate) backend: crate::Backend,
    /// A loan kernel's pool (set once, right after the launch): its counters go to the
    /// export file.
    pub(crate) loans: Arc<OnceLock<Arc<LoanArena>>>,
}

/// What the export publisher reads besides the region: the lifecycle's counters and
/// telemetry writer, and the loan pool's counters.
struct ExportFeed {
    life: Arc<Lifecycle>,
    loans: Arc<OnceLock<Arc<LoanArena>>>,
}

impl ExportSource for ExportFeed {
    fn copy_telemetry(&self) -> bool {
        self.life.copy_telemetry()
    }
    fn lifecycle(&self) -> LifecycleSnapshot {
        ExportSource::lifecycle(&*self.life)
    }
    fn loans(&self) -> Option<LoanStats> {
        self.loans.get().map(|a| a.stats())
    }
    fn sync_head(&self) {
        self.life.ch.sync_head();
    }
}

impl Inner {
    pub(crate) fn new(
        ch: Arc<Channel>,
        life: Arc<Lifecycle>,
        driver: Driver,
        polling: Polling,
        transfer: Option<Arc<BridgeAgent>>,
        backend: crate::Backend,
    ) -> Self {
        Self {
            backend,
            ch,
            life,
            supervisor: Mutex::new(None),
            watcher: Mutex::new(None),
            driver: Mutex::new(Some(driver)),
            polling,
            export: Mutex::new(None),
            stage_exports: Mutex::new(Vec::new()),
            transfer,
            ended: AtomicBool::new(false),
            loans: Arc::new(OnceLock::new()),
        }
    }

    /// Starts publishing the telemetry export to `writer` every `interval`.
    pub(crate) fn publish_export(
        &self,
        writer: Arc<ExportWriter>,
        interval: Duration,
    ) -> Result<()> {
        // The kernel may write the file's telemetry line itself (CUDA); then the
        // publisher keeps to the control and lifecycle lines, so the line keeps a single
        // writer. The lifecycle says which, launch by launch.
        let copy_telemetry = !self.life.current().writes_export_telemetry();
        let feed = ExportFeed {
            life: self.life.clone(),
            loans: self.loans.clone(),
        };
        let p = ExportPublisher::start(self.ch.region().clone(), writer, interval, Arc::new(feed))
            .map_err(|e| Error::Launch {
                backend: "telemetry export",
                kernel: self.ch.name().to_owned(),
                source: gyre_core::Cause::new(e),
            })?;
        tracing::info!(
            path = %p.path().display(),
            device_writes_telemetry = !copy_telemetry,
            "telemetry exported"
        );
        *self.export.lock() = Some(p);
        Ok(())
    }

    /// The export file's path, while it is exported.
    pub(crate) fn export_path(&self) -> Option<std::path::PathBuf> {
        self.export.lock().as_ref().map(|p| p.path().to_owned())
    }

    /// Keeps a pipeline's other stages' export publishers until the export ends.
    pub(crate) fn keep_exports(&self, stages: Vec<ExportPublisher>) {
        *self.stage_exports.lock() = stages;
    }

    /// Removes the telemetry export files (stops their publishers), if there are any.
    pub(crate) fn unpublish_export(&self) {
        self.export.lock().take();
        self.stage_exports.lock().clear();
    }

    /// Whether the kernel's end was handled already.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Acquire)
    }

    /// Whether joining the kernel returns promptly: its loop exited, or it wrote a final
    /// state (it exits right after). A kernel the watchdog declared unresponsive is
    /// neither, and is never joined (it would block forever).
    fn joinable(&self) -> bool {
        self.life.current().is_finished() || state::is_final(self.ch.kernel_state().0)
    }

    /// Starts the supervisor and the watch, if the kernel has them.
    pub(crate) fn supervise(&self, supervisor: Option<Supervisor>, watcher: Option<Watcher>) {
        *self.supervisor.lock() = supervisor;
        *self.watcher.lock() = watcher;
    }

    /// No relaunch from now on: stops the supervisor and the watch (the kernel's end is
    /// being handled). Must not run on the supervisor's thread.
    fn end_relaunches(&self) {
        self.life.end();
        self.watcher.lock().take();
        self.supervisor.lock().take();
    }

    /// Joins the kernel once it reached a final state; reports a fault. An unresponsive
    /// kernel is detached instead, and reported as [`Error::Unresponsive`].
    pub(crate) fn finish(&self) -> Result<()> {
        if let Some(e) = self.ch.unresponsive() {
            if self.joinable() {
                let _ = self.life.current().join();
            } else {
                tracing::warn!(kernel = %self.ch.name(), "shutdown: detaching the unresponsive kernel");
            }
            return Err(e);
        }
        let joined = self.life.current().join();
        self.drain_transfer();
        match self.ch.kernel_state() {
            (state::FAULTED, code) => Err(Error::KernelFaulted {
                kernel: self.ch.name().to_owned(),
                code,
                name: error::name(code),
            }),
            // It wrote its final state: it ended well. A join error then concerns what
            // came after (on CUDA, another kernel's fault that broke the shared context).
            (st, _) if state::is_final(st) => {
                if let Err(e) = joined {
                    tracing::warn!(kernel = %self.ch.name(), error = %e, "joining a kernel that ended well");
                }
                Ok(())
            }
            // The device ended the kernel (join says how), or it exited without writing
            // a final state: its waiters learn it from the channel too.
            _ => Err(match joined {
                Err(Error::KernelLost { cause, .. }) => self.ch.mark_lost(cause),
                Err(e) => self.ch.mark_lost(e.to_string()),
                Ok(()) => self
                    .ch
                    .mark_lost("the kernel's execution ended without a final state".into()),
            }),
        }
    }

    /// The last step of every shutdown, once the kernel is final: [`Inner::finish`], then
    /// the telemetry export is unpublished (its file removed), whatever `finish` reports.
    pub(crate) fn complete_shutdown(&self) -> Result<()> {
        self.end_relaunches();
        let done = self.finish();
        self.unpublish_export();
        self.ended.store(true, Release);
        done
    }

    /// After the kernel stopped: one last blocking pull, so the host rings hold every
    /// reply and the final state before shutdown returns (a copy thread may not have
    /// moved them yet).
    fn drain_transfer(&self) {
        if let Some(t) = &self.transfer {
            t.drain();
        }
    }

    pub(crate) fn is_final(&self) -> bool {
        self.ch.check_stopped().is_some() || self.life.current_gone()
    }

    /// The end of a kernel whose last handle was dropped without a shutdown. Runs on a
    /// thread of its own ([`crate::keep_alive`]): closes the ring, waits (up to
    /// [`UNATTENDED_STOP`]) until every accepted request is published, commands
    /// Terminate, waits for the kernel to drain and stop, joins it and unpublishes the
    /// export. A kernel that does not stop in time is detached (it still drains and stops
    /// by itself once its handler returns). Replies already produced stay readable by
    /// `recv` futures and `replies` streams, which then end.
    pub(crate) fn end_unattended(&self) {
        if self.ended() {
            return;
        }
        let ch = &self.ch;
        ch.close();
        let deadline = Instant::now() + UNATTENDED_STOP;
        while !ch.all_published() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        self.life.command(command::TERMINATE);
        while !self.is_final() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.end_relaunches();
        if self.joinable() {
            if let Err(e) = self.life.current().join() {
                // Nobody is left to report it to but the log (and any waiter, below).
                tracing::warn!(kernel = %ch.name(), error = %e, "kernel ended with an error after its last handle dropped");
                if let Error::KernelLost { cause, .. } = e {
                    ch.mark_lost(cause);
                }
            }
            self.drain_transfer();
            // Notices the final state (and wakes every waiter) now that the bridge moved it.
            let _ = ch.check_stopped();
        } else {
            tracing::warn!(kernel = %ch.name(), "kernel did not stop within {UNATTENDED_STOP:?} of its last handle dropping; detaching it");
        }
        self.unpublish_export();
        self.ended.store(true, Release);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Every handle, future and stream is gone, and the kernel's end was handled (by a
        // shutdown or by `end_unattended`): stop the driver and unpublish the export.
        self.watcher.lock().take();
        self.supervisor.lock().take();
        self.driver.lock().take();
        self.unpublish_export();
    }
}

/// An id for a future that may wait in a channel's waiter sets, unique in the process:
/// each thread takes a block of `BLOCK` ids from one counter and hands them out itself,
/// so a call's future costs no read-modify-write of a line that every caller's core
/// shares (one per call was 4% of the samples of `benches/waiters.rs`'s 64 tasks on two
/// workers). A thread whose thread-locals are being destroyed takes its id from the
/// counter.
pub(crate) fn next_waiter_id() -> u64 {
    const BLOCK: u64 = 1 << 16;
    static NEXT_BLOCK: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        /// This thread's next id and the end of its block.
        static IDS: core::cell::Cell<(u64, u64)> = const { core::cell::Cell::new((0, 0)) };
    }
    IDS.try_with(|ids| {
        let (mut next, mut end) = ids.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(BLOCK, Relaxed);
            end = next + BLOCK;
        }
        ids.set((next + 1, end));
        next
    })
    .unwrap_or_else(|_| NEXT_BLOCK.fetch_add(BLOCK, Relaxed))
}

#[cfg(test)]
mod tests {
    use super::next_waiter_id;
    use std::collections::HashSet;

    /// Ids from many threads, each past a block boundary, never repeat.
    #[test]
    fn waiter_ids_are_unique_across_threads() {
        let per_thread = (1usize << 16) + 10;
        let all: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..per_thread).map(|_| next_waiter_id()).collect()))
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let mut seen = HashSet::new();
        for ids in &all {
            for &id in ids {
                assert!(seen.insert(id), "id {id} handed out twice");
            }
        }
        assert_eq!(seen.len(), 4 * per_thread);
    }
}
