//! [`ExportPublisher`]: the host thread that copies a region's control block, its
//! telemetry, the kernel's relaunch counters and its loan pool's into an export file.

use core::sync::atomic::AtomicBool;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::error::ExportError;
use super::layout::{
    write_control, write_lifecycle, write_loans, ControlSnapshot, LifecycleSnapshot,
};
use super::paths::unix_ms;
use super::writer::ExportWriter;
use crate::loan::LoanStats;
use crate::region::SharedRegion;
use crate::telemetry::{read_consistent, TelemetryWriter};

/// Default period of the [`ExportPublisher`].
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);

/// What an [`ExportPublisher`] asks its owner once per period, besides the region.
pub trait ExportSource: Send + Sync {
    /// Whether the publisher writes the file's telemetry line: `false` while the running
    /// kernel writes it itself (CUDA), so the line keeps a single writer. The owner must
    /// make sure a kernel that writes the line never runs while this returns `true`.
    fn copy_telemetry(&self) -> bool;
    /// The relaunch counters of the lifecycle line (`seq` is ignored).
    fn lifecycle(&self) -> LifecycleSnapshot;
    /// The loan pool's counters, if the kernel has a pool (the loan line stays zero
    /// otherwise).
    fn loans(&self) -> Option<LoanStats> {
        None
    }
    /// Called before each copy: moves the region's lazy `h2k_head`
    /// ([`Channel::sync_head`](crate::channel::Channel::sync_head)), so the exported head
    /// is current. The default does nothing (a region whose head is eager).
    fn sync_head(&self) {}
}

/// An [`ExportSource`] of a kernel that is never relaunched: a fixed telemetry-copy
/// choice, generation 1, no relaunches.
#[derive(Debug, Clone, Copy)]
pub struct SingleLaunch {
    /// See [`ExportSource::copy_telemetry`].
    pub copy_telemetry: bool,
}

impl ExportSource for SingleLaunch {
    fn copy_telemetry(&self) -> bool {
        self.copy_telemetry
    }
    fn lifecycle(&self) -> LifecycleSnapshot {
        LifecycleSnapshot {
            generation: 1,
            ..LifecycleSnapshot::default()
        }
    }
}

/// Copies a region's control block, telemetry and relaunch counters into an
/// [`ExportWriter`] periodically on its own thread; a final copy, then the file's removal,
/// on drop.
#[derive(Debug)]
pub struct ExportPublisher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

struct Copier {
    region: Arc<SharedRegion>,
    writer: Arc<ExportWriter>,
    /// Whether this thread writes the telemetry line (asked each period), and the
    /// relaunch counters.
    source: Arc<dyn ExportSource>,
    last_lifecycle: Option<LifecycleSnapshot>,
    last_loans: Option<LoanStats>,
    tw: TelemetryWriter,
    last_hb: u64,
    hb_ms: u64,
}

impl Copier {
    fn copy(&mut self) {
        self.source.sync_head();
        let cb = self.region.control();
        let now = unix_ms();
        let hb = cb.kernel_heartbeat.load(Acquire);
        if hb != self.last_hb {
            self.last_hb = hb;
            self.hb_ms = now;
        }
        let v = ControlSnapshot {
            seq: 0,
            state: cb.state.load(Acquire),
            error_code: cb.error_code.load(Acquire),
            capacity: cb.capacity.load(Relaxed),
            h2k_head: cb.h2k_head.load(Acquire),
            h2k_tail: cb.h2k_tail.load(Acquire),
            k2h_head: cb.k2h_head.load(Acquire),
            k2h_tail: cb.k2h_tail.load(Acquire),
            heartbeat_unix_ms: self.hb_ms,
            published_unix_ms: now,
        };
        let ex = self.writer.export();
        write_control(&ex.control, &v);
        let l = self.source.lifecycle();
        if self.last_lifecycle != Some(l) {
            // Rarely changes: written only then, so readers seldom retry.
            write_lifecycle(&ex.lifecycle, &l);
            self.last_lifecycle = Some(l);
        }
        if let Some(p) = self.source.loans() {
            if self.last_loans != Some(p) {
                write_loans(&ex.loans, &p);
                self.last_loans = Some(p);
            }
        }
        if !self.source.copy_telemetry() {
            return;
        }
        if let Ok(t) = read_consistent(self.region.telemetry(), 1024) {
            self.tw.acc = t;
            self.tw.publish(&ex.telemetry);
        }
    }
}

impl ExportPublisher {
    /// Starts copying `region` into `writer` every `interval` (at least 1 ms): the control
    /// and lifecycle lines always, the telemetry line while `source` says so (not while
    /// the kernel writes the file's telemetry line itself, which must then have no other
    /// writer).
    ///
    /// # Errors
    ///
    /// [`ExportError::Io`] when the thread cannot be spawned.
    pub fn start(
        region: Arc<SharedRegion>,
        writer: Arc<ExportWriter>,
        interval: Duration,
        source: Arc<dyn ExportSource>,
    ) -> Result<Self, ExportError> {
        let path = writer.path().to_owned();
        let interval = interval.max(Duration::from_millis(1));
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = Copier {
            last_hb: region.control().kernel_heartbeat.load(Acquire),
            hb_ms: unix_ms(),
            region,
            writer,
            source,
            last_lifecycle: None,
            last_loans: None,
            tw: TelemetryWriter::default(),
        };
        c.copy();
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gyre-telemetry-export".into())
            .spawn(move || {
                while !s2.load(Acquire) {
                    std::thread::park_timeout(interval);
                    c.copy();
                }
                // `c` (and with it the writer) drops here: the file is removed.
            })
            .map_err(|e| ExportError::io("spawn publisher for", &path, e))?;
        Ok(Self {
            stop,
            thread: Some(thread),
            path,
        })
    }

    /// The export file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ExportPublisher {
    fn drop(&mut self) {
        self.stop.store(true, Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod publisher_tests {
    use super::*;
    use crate::ring::Geometry;
    use crate::shm::reader::TelemetryReader;
    use std::fs;

    fn temp_path(tag: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("gyre-shm-{tag}-{}", std::process::id()))
            .join("svc")
            .join("k")
    }

    /// When the kernel writes the file's telemetry line itself (CUDA), the publisher
    /// keeps to the control line: the line keeps its single writer.
    #[test]
    fn publisher_leaves_a_kernel_written_telemetry_line_alone() {
        let path = temp_path("direct");
        let region =
            Arc::new(SharedRegion::new_host(Geometry::new(4, 128, 1).unwrap(), 0).unwrap());
        region.control().h2k_head.store(3, Release);
        let mut host_side = TelemetryWriter::default();
        host_side.acc.messages_in = 111; // what a copy would bring
        host_side.publish(region.telemetry());
        let file = Arc::new(ExportWriter::create_at(&path, "svc", "k").unwrap());
        // "The kernel" writes the file's line directly.
        let mut device_side = TelemetryWriter::default();
        device_side.acc.messages_in = 7;
        device_side.publish(&file.export().telemetry);
        let p = ExportPublisher::start(
            region,
            file.clone(),
            Duration::from_millis(1),
            Arc::new(SingleLaunch {
                copy_telemetry: false,
            }),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let snap = TelemetryReader::open(&path).unwrap().snapshot().unwrap();
        assert_eq!(snap.control.h2k_head, 3, "the control line is published");
        assert_eq!(
            snap.telemetry.messages_in, 7,
            "the kernel's line is not overwritten"
        );
        drop(p);
        drop(file);
        assert!(!path.exists(), "removed when the last owner drops");
        let _ = fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }
}
