//! [`KeepAlive`]: what keeps a kernel running. Every [`Kernel`](crate::Kernel) handle and
//! every `call`, `send` and `shutdown` future holds one; `recv` futures and `replies`
//! streams do not, so a consumer never keeps a kernel alive after its producers are gone.

use std::sync::Arc;

use crate::inner::Inner;

/// Ends the kernel when the last holder drops it, unless a shutdown already did.
pub(crate) struct KeepAlive {
    pub(crate) inner: Arc<Inner>,
}

impl Drop for KeepAlive {
    /// Closes the ring to new requests and removes the telemetry export file at once
    /// (both quick), then hands the rest of the end — wait for the drain, Terminate, join
    /// (bounded to [`crate::inner::UNATTENDED_STOP`]) — to a thread of its own, so dropping
    /// the last handle never blocks the dropping thread (a tokio worker, say) on the
    /// kernel. If no thread can be started, it runs here.
    fn drop(&mut self) {
        if self.inner.ended() {
            return;
        }
        self.inner.ch.close();
        self.inner.unpublish_export();
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("gyre-end-{}", self.inner.ch.name()))
            .spawn(move || inner.end_unattended());
        if let Err(e) = spawned {
            tracing::warn!(kernel = %self.inner.ch.name(), error = %e, "no thread for the kernel's end; ending it on the dropping thread");
            self.inner.end_unattended();
        }
    }
}
