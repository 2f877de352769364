//! Exports a kernel's telemetry through the [`metrics`] facade (feature `metrics`).

use core::sync::atomic::Ordering::Acquire;

use bytemuck::Pod;
use gyre_core::Result;

use gyre_abi::TelemetrySnapshot;

use crate::kernel::Kernel;

impl<Req: Pod, Resp: Pod> Kernel<Req, Resp> {
    /// Reads a consistent telemetry snapshot and records it through the `metrics` facade,
    /// labelled `kernel = <name>`: the counters `gyre_messages_in_total`,
    /// `gyre_messages_out_total`, `gyre_errors_total`, `gyre_busy_polls_total`,
    /// `gyre_idle_polls_total`, `gyre_handler_ns_total`, the relaunch counters
    /// `gyre_reloads_total`, `gyre_epochs_total`, `gyre_restarts_total` (set with
    /// `absolute`), and the gauges `gyre_handler_ns_max`, `gyre_kernel_state`
    /// (`gyre_abi::state`), `gyre_generation` ([`Kernel::relaunches`]),
    /// `gyre_queue_depth_requests` and `gyre_queue_depth_replies` (from the control
    /// block's ring indices). Under a copy strategy it adds the bridge's counters
    /// ([`Kernel::transfer_stats`]), labelled also `direction = h2d | d2h`:
    /// `gyre_transfer_copies_total`, `gyre_transfer_bytes_total` and
    /// `gyre_transfer_slots_total`. A loan kernel ([`LoanKernel`](crate::loan::LoanKernel))
    /// adds its pool's: the counters `gyre_loan_{hits,misses,returns,exhausted}_total`
    /// and the gauges `gyre_loan_pool_bytes`, `gyre_loan_in_use_bytes`,
    /// `gyre_loan_in_use_blocks`, `gyre_loan_peak_in_use_bytes`, `gyre_loan_fragmentation`.
    /// Call it periodically (for example before each
    /// scrape); returns the snapshot it recorded. See `docs/telemetry.md` ("Metrics").
    ///
    /// # Errors
    ///
    /// As [`Kernel::telemetry`]: [`Error::TornTelemetry`](crate::Error::TornTelemetry)
    /// when no consistent snapshot could be read; nothing is recorded then.
    ///
    /// # Examples
    ///
    /// ```
    /// // With no recorder installed the metrics go nowhere; the snapshot is returned.
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.call_blocking(1)?;
    /// k.shutdown_blocking()?;
    /// assert_eq!(k.record_metrics()?.messages_out, 1);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn record_metrics(&self) -> Result<TelemetrySnapshot> {
        let t = self.telemetry()?;
        let cb = self.inner().ch.region().control();
        // Tails first: a head read after its tail is never behind it.
        let (h2k_tail, k2h_tail) = (cb.h2k_tail.load(Acquire), cb.k2h_tail.load(Acquire));
        // The request head is lazy: moved here (`Channel::sync_head`).
        let (h2k_head, k2h_head) = (self.inner().ch.sync_head(), cb.k2h_head.load(Acquire));
        let name = self.name().to_owned();
        let r = self.relaunches();
        let counters = [
            ("gyre_reloads_total", r.reloads),
            ("gyre_epochs_total", r.epochs),
            ("gyre_restarts_total", r.restarts),
            ("gyre_messages_in_total", t.messages_in),
            ("gyre_messages_out_total", t.messages_out),
            ("gyre_errors_total", t.errors),
            ("gyre_busy_polls_total", t.busy_polls),
            ("gyre_idle_polls_total", t.idle_polls),
            ("gyre_handler_ns_total", t.handler_ns_total),
        ];
        for (metric, v) in counters {
            metrics::counter!(metric, "kernel" => name.clone()).absolute(v);
        }
        let gauges = [
            ("gyre_handler_ns_max", f64::from(t.handler_ns_max)),
            ("gyre_kernel_state", f64::from(t.state)),
            ("gyre_generation", f64::from(r.generation)),
            (
                "gyre_queue_depth_requests",
                h2k_head.saturating_sub(h2k_tail) as f64,
            ),
            (
                "gyre_queue_depth_replies",
                k2h_head.saturating_sub(k2h_tail) as f64,
            ),
        ];
        for (metric, v) in gauges {
            metrics::gauge!(metric, "kernel" => name.clone()).set(v);
        }
        if let Some(pool) = self.inner().loans.get() {
            let p = pool.stats();
            for (metric, v) in [
                ("gyre_loan_hits_total", p.hits),
                ("gyre_loan_misses_total", p.misses),
                ("gyre_loan_returns_total", p.returns),
                ("gyre_loan_exhausted_total", p.exhausted),
            ] {
                metrics::counter!(metric, "kernel" => name.clone()).absolute(v);
            }
            for (metric, v) in [
                ("gyre_loan_pool_bytes", p.pool_bytes as f64),
                ("gyre_loan_in_use_bytes", p.in_use_bytes as f64),
                ("gyre_loan_in_use_blocks", p.in_use_blocks as f64),
                ("gyre_loan_peak_in_use_bytes", p.peak_in_use_bytes as f64),
                ("gyre_loan_fragmentation", p.fragmentation()),
            ] {
                metrics::gauge!(metric, "kernel" => name.clone()).set(v);
            }
        }
        if let Some(s) = self.transfer_stats() {
            let per_direction = [
                ("gyre_transfer_copies_total", s.h2d_copies, s.d2h_copies),
                ("gyre_transfer_bytes_total", s.h2d_bytes, s.d2h_bytes),
                ("gyre_transfer_slots_total", s.slots_down, s.slots_up),
            ];
            for (metric, down, up) in per_direction {
                for (direction, v) in [("h2d", down), ("d2h", up)] {
                    metrics::counter!(metric, "kernel" => name.clone(), "direction" => direction)
                        .absolute(v);
                }
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use crate::{Backend, KernelSpec, Runtime};

    #[test]
    fn recorded_metrics_equal_the_telemetry() {
        let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
        let k = rt
            .launch(KernelSpec::from_fn("double", |x: u32| x * 2))
            .unwrap();
        for i in 0..1000 {
            assert_eq!(k.call_blocking(i).unwrap(), i * 2);
        }
        k.reload_blocking(KernelSpec::from_fn("double", |x: u32| x + x))
            .unwrap();
        // Stopped, so the telemetry no longer moves and every reply is taken.
        k.shutdown_blocking().unwrap();

        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let t = metrics::with_local_recorder(&recorder, || k.record_metrics()).unwrap();
        assert_eq!(t.messages_out, 1000);

        let got: std::collections::HashMap<String, DebugValue> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, v)| {
                let labels: Vec<_> = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                assert_eq!(labels, [("kernel".to_owned(), "double".to_owned())]);
                (key.key().name().to_owned(), v)
            })
            .collect();
        let counter = |n: &str| match got.get(n) {
            Some(DebugValue::Counter(v)) => *v,
            other => panic!("{n}: {other:?}"),
        };
        let gauge = |n: &str| match got.get(n) {
            Some(DebugValue::Gauge(v)) => v.into_inner(),
            other => panic!("{n}: {other:?}"),
        };
        assert_eq!(counter("gyre_messages_in_total"), t.messages_in);
        assert_eq!(counter("gyre_messages_out_total"), t.messages_out);
        assert_eq!(counter("gyre_errors_total"), t.errors);
        assert_eq!(counter("gyre_busy_polls_total"), t.busy_polls);
        assert_eq!(counter("gyre_idle_polls_total"), t.idle_polls);
        assert_eq!(counter("gyre_handler_ns_total"), t.handler_ns_total);
        assert_eq!(gauge("gyre_handler_ns_max"), f64::from(t.handler_ns_max));
        assert_eq!(
            gauge("gyre_kernel_state"),
            f64::from(gyre_abi::state::TERMINATED)
        );
        assert_eq!(gauge("gyre_queue_depth_requests"), 0.0);
        assert_eq!(gauge("gyre_queue_depth_replies"), 0.0);
        assert_eq!(counter("gyre_reloads_total"), 1);
        assert_eq!(counter("gyre_epochs_total"), 0);
        assert_eq!(counter("gyre_restarts_total"), 0);
        assert_eq!(gauge("gyre_generation"), 2.0);
        assert_eq!(got.len(), 14);
    }

    #[test]
    fn transfer_counters_are_recorded_under_a_copy_strategy() {
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .transfer_strategy(crate::TransferStrategy::Sync)
            .build()
            .unwrap();
        let k = rt
            .launch(KernelSpec::from_fn("inc", |x: u64| x + 1))
            .unwrap();
        for i in 0..100 {
            assert_eq!(k.call_blocking(i).unwrap(), i + 1);
        }
        k.shutdown_blocking().unwrap();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || k.record_metrics()).unwrap();
        let s = k.transfer_stats().unwrap();
        let mut seen = 0;
        for (key, _, _, v) in snapshotter.snapshot().into_vec() {
            let name = key.key().name().to_owned();
            let Some(dir) = key.key().labels().find(|l| l.key() == "direction") else {
                continue;
            };
            let want = match (name.as_str(), dir.value()) {
                ("gyre_transfer_copies_total", "h2d") => s.h2d_copies,
                ("gyre_transfer_copies_total", "d2h") => s.d2h_copies,
                ("gyre_transfer_bytes_total", "h2d") => s.h2d_bytes,
                ("gyre_transfer_bytes_total", "d2h") => s.d2h_bytes,
                ("gyre_transfer_slots_total", "h2d") => s.slots_down,
                ("gyre_transfer_slots_total", "d2h") => s.slots_up,
                other => panic!("unexpected {other:?}"),
            };
            assert_eq!(v, DebugValue::Counter(want), "{name} {}", dir.value());
            seen += 1;
        }
        assert_eq!(seen, 6);
        assert_eq!((s.slots_down, s.slots_up), (100, 100));
    }
}
