//! [`Watcher`]: reloads a kernel when its handler source file changes
//! ([`KernelSpec::watch`](crate::KernelSpec::watch)).
//!
//! `notify` watches the file's directory (editors that save by writing a new file and
//! renaming it replace the watched inode); events for the file wake a thread of our own,
//! which waits until the file has been quiet for [`SETTLE`], reads it and, when its content
//! changed, reloads. A build error is logged with the compiler's log and the running
//! handler keeps serving; the next change tries again.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use gyre_core::{Cause, Error, Result};
use notify::{RecursiveMode, Watcher as _};

/// How long a file must be quiet after a change before it is read (an editor's save is
/// often several writes).
pub(crate) const SETTLE: Duration = Duration::from_millis(50);

/// A watch on one file; stops (and its thread ends) on drop.
pub(crate) struct Watcher {
    _watch: notify::RecommendedWatcher,
}

impl Watcher {
    /// Watches `path`; calls `reload(new content)` on a thread of its own after each
    /// change that alters the content. `initial` is the content the kernel runs now.
    pub(crate) fn start(
        kernel: &str,
        path: PathBuf,
        initial: String,
        reload: impl Fn(String) -> Result<()> + Send + 'static,
    ) -> Result<Self> {
        let fail = |what: &'static str, e: notify::Error| Error::Launch {
            backend: "watch",
            kernel: kernel.to_owned(),
            source: Cause::context(what, e),
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        let name = path.file_name().map(ToOwned::to_owned);
        let (tx, rx) = mpsc::channel::<()>();
        let mut watch = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev {
                let ours = ev.paths.iter().any(|p| p.file_name() == name.as_deref());
                if ours && !matches!(ev.kind, notify::EventKind::Access(_)) {
                    let _ = tx.send(());
                }
            }
        })
        .map_err(|e| fail("creating the file watcher", e))?;
        watch
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| fail("watching the handler's directory", e))?;
        let thread_path = path.clone();
        std::thread::Builder::new()
            .name(format!("gyre-watch-{kernel}"))
            .spawn(move || run(&thread_path, initial, &rx, &reload))
            .map_err(|e| Error::Launch {
                backend: "watch",
                kernel: kernel.to_owned(),
                source: Cause::context("spawning the watch thread", e),
            })?;
        tracing::info!(path = %path.display(), "watching the handler source");
        Ok(Self { _watch: watch })
    }
}

/// The watch thread: ends when the watcher (the sender's owner) is dropped.
fn run(
    path: &Path,
    mut current: String,
    rx: &mpsc::Receiver<()>,
    reload: &dyn Fn(String) -> Result<()>,
) {
    while rx.recv().is_ok() {
        // Settle: wait until no event came for SETTLE.
        loop {
            match rx.recv_timeout(SETTLE) {
                Ok(()) => continue,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let source = match std::fs::read_to_string(path) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "reading the watched handler");
                continue;
            }
        };
        if source == current {
            continue;
        }
        match reload(source.clone()) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "handler reloaded");
                current = source;
            }
            Err(e) => {
                // The chain holds the compiler's log for a build error.
                let mut msg = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg.push_str(": ");
                    msg.push_str(&s.to_string());
                    src = s.source();
                }
                tracing::error!(path = %path.display(), error = %msg, "reload failed: the running handler keeps serving");
                // A kernel that ended has nothing left to reload.
                if matches!(e, Error::Closed { .. } | Error::KernelTerminated { .. }) {
                    return;
                }
                current = source;
            }
        }
    }
}
