//! The cost model of checked rings (`gyre_core::cost`, `docs/protocol.md` "Checked
//! slots"): the C11 port runs a checked ring's loop as a PCIe GPU would, counting its read
//! waves, fences, remote stores and telemetry writes. These tests hold the fast path to
//! its budget under zero copy:
//!
//! * an idle poll is one read wave, and no fence;
//! * a batch of any size up to the kernel batch costs at most 2 read waves and at most 2
//!   system fences (a step of the stepper runs the slow tick too: its one fence counts);
//! * the telemetry line is written at most once per millisecond (and on state changes);
//! * a running kernel fences only on its slow ticks (and in each telemetry write).
//!
//! Counts, never times: the emulated latency is zero here (`gyre bench --backend cpu
//! --emulate-remote-ns N` measures the times).

use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre_abi::{command, host_flags, state};
use gyre_core::channel::{Channel, Kind};
use gyre_core::cost::{CostCounters, DeviceCost};
use gyre_core::kernels::ids;
use gyre_core::ring::Geometry;
use gyre_core::{IdleStrategy, SharedRegion};
use gyre_cpu::{CpuHandler, Stepper};

/// A fresh region with checked slots (the flag set before the channel and the kernel).
fn checked(capacity: u32, slot: u32, batch: u32) -> Arc<SharedRegion> {
    let r = SharedRegion::new_host(Geometry::new(capacity, slot, batch).expect("geometry"), 0)
        .expect("region");
    r.control()
        .host_flags
        .fetch_or(host_flags::CHECKED, Release);
    Arc::new(r)
}

fn echo() -> CpuHandler<'static> {
    CpuHandler::Builtin {
        id: ids::ECHO,
        lanes: 1,
    }
}

/// Steps `k` once and returns what the step cost.
fn step(k: &mut Stepper<'_>, c: &CostCounters) -> (Option<u64>, DeviceCost) {
    let before = c.snapshot();
    let n = k.step();
    (n, c.snapshot().since(&before))
}

#[test]
fn an_idle_poll_is_one_read_wave() {
    let r = checked(64, 128, 32);
    let c = CostCounters::new(Duration::ZERO);
    let mut k = Stepper::with_cost(&r, echo(), &c).expect("K0");
    for _ in 0..10 {
        let (n, d) = step(&mut k, &c);
        assert_eq!(n, Some(0));
        assert_eq!((d.waves, d.empty_polls, d.batches), (1, 1, 0), "{d:?}");
        // The stepper forces the slow tick on every step: its one fence, and the
        // telemetry seqlock's where a millisecond has passed since the last write (a slow
        // machine, or ThreadSanitizer, crosses it between two steps).
        assert!(d.telemetry_writes <= 1, "{d:?}");
        assert_eq!(d.fences, 1 + d.telemetry_writes, "{d:?}");
        // The host line (4 units) and the one slot of an idle window (8 units of 128 B).
        assert_eq!(d.loads, 12, "{d:?}");
        assert_eq!(d.stores, 0, "{d:?}");
    }
}

#[test]
fn a_batch_costs_at_most_two_waves_and_two_fences() {
    for (slot, len) in [(128u32, 64usize), (512, 64), (512, 300), (4096, 3000)] {
        for count in [1usize, 2, 7, 32, 64] {
            let r = checked(256, slot, 64);
            let c = CostCounters::new(Duration::ZERO);
            let mut k = Stepper::with_cost(&r, echo(), &c).expect("K0");
            let ch = Channel::new(r.clone(), "cost");
            assert!(ch.is_checked());
            let msgs: Vec<Vec<u8>> = (0..count)
                .map(|i| (0..len).map(|b| (i * 31 + b) as u8).collect())
                .collect();
            let first = ch.try_publish_batch(Kind::Call, 1, &msgs).expect("publish");
            let mut answered = 0u64;
            let mut steps = 0;
            while answered < count as u64 {
                let (n, d) = step(&mut k, &c);
                let n = n.expect("running");
                steps += 1;
                assert!(steps < 200, "{count} requests not answered");
                if n == 0 {
                    continue;
                }
                answered += n;
                assert_eq!(d.batches, 1, "{d:?}");
                assert!(
                    d.waves <= 2,
                    "slot {slot}, len {len}: a batch of {n}: {d:?}"
                );
                assert!(
                    d.fences <= 2,
                    "slot {slot}, len {len}: a batch of {n}: {d:?}"
                );
                // A long message (past the first wave's prefix) is a batch alone.
                if len + 64 > 256.min(slot as usize) {
                    assert_eq!((n, d.waves), (1, 2), "{d:?}");
                }
            }
            for (i, m) in msgs.iter().enumerate() {
                let got = ch
                    .wait_blocking(first + i as u64, &IdleStrategy::BusySpin, None, |v| {
                        Ok(v.payload.to_vec())
                    })
                    .expect("reply");
                assert_eq!(&got, m, "slot {slot}, message {i}");
            }
        }
    }
}

/// Runs a kernel thread over `r` counting into `c` until `f` returns, then terminates it.
fn with_running_kernel(r: &Arc<SharedRegion>, c: &Arc<CostCounters>, f: impl FnOnce(&Channel)) {
    let ch = Channel::new(r.clone(), "running");
    let (region, counters) = (r.clone(), c.clone());
    let t = std::thread::spawn(move || {
        gyre_cpu::kernel_loop_linked(
            &region,
            echo(),
            IdleStrategy::BusySpin,
            true,
            None,
            None,
            Some(&counters),
        );
    });
    f(&ch);
    ch.close();
    ch.command(command::TERMINATE);
    t.join().expect("kernel thread");
    assert_eq!(r.control().state.load(Acquire), state::TERMINATED);
}

#[test]
fn telemetry_at_most_once_a_millisecond_and_fences_only_on_slow_ticks() {
    let r = checked(1024, 128, 32);
    let c = Arc::new(CostCounters::new(Duration::ZERO));
    let start = Instant::now();
    let mut sent = 0u64;
    with_running_kernel(&r, &c, |ch| {
        // Load, then idle, for about 200 ms. The load phase runs at least four batches,
        // whatever the machine: under ThreadSanitizer on a loaded machine the set-up
        // alone once took the whole 100 ms, and nothing was sent.
        let load = Instant::now();
        while load.elapsed() < Duration::from_millis(100) || sent < 64 {
            let msgs = [[7u8; 64]; 16];
            if let Ok(i) = ch.try_publish_batch(Kind::Call, 1, &msgs) {
                for j in i..i + 16 {
                    ch.wait_blocking(j, &IdleStrategy::BusySpin, None, |_| Ok(()))
                        .expect("reply");
                }
                sent += 16;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    let ms = start.elapsed().as_millis() as u64;
    let d = c.snapshot();
    assert!(sent > 0 && d.batches > 0, "{d:?}");
    // One write per elapsed millisecond at most, plus the state changes (start, stop).
    assert!(
        d.telemetry_writes <= ms + 4,
        "{} writes in {ms} ms",
        d.telemetry_writes
    );
    // A fence per slow tick (every 128 polls) and per telemetry write (its seqlock's),
    // plus the end's; none per batch.
    let polls = d.batches + d.empty_polls;
    assert!(
        d.fences <= polls / 128 + d.telemetry_writes + 4,
        "{} fences for {polls} polls and {} telemetry writes",
        d.fences,
        d.telemetry_writes
    );
    // Every poll is one wave (no message here is long; the last, which found the drain
    // done, counted no poll).
    assert!(d.waves == polls || d.waves == polls + 1, "{d:?}");
}
