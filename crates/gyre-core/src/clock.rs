//! Clocks: the host clock for timestamps and heartbeats, and a cheap tick counter for
//! timing on hot paths.
//!
//! `Instant::now()` costs 30-40 ns on the VMs gyre is measured on; the TSC costs about a
//! third of that. [`ticks`] reads the TSC on x86_64 when the CPU reports an invariant
//! TSC (constant rate, not stopped in sleep states) and falls back to `Instant`
//! elsewhere; [`ticks_to_ns`] converts with a rate calibrated once per process.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds on a monotonic process-wide clock (never 0 after the first call).
#[inline]
pub fn now_ns() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    // 2^64 ns is 584 years: the cast cannot truncate in practice.
    (epoch.elapsed().as_nanos() as u64).wrapping_add(1)
}

/// Rate of [`ticks`]: nanoseconds per tick, as a 32.32 fixed-point number.
#[derive(Debug, Clone, Copy)]
struct Rate {
    tsc: bool,
    ns_per_tick_q32: u64,
}

static RATE: OnceLock<Rate> = OnceLock::new();

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    // `__cpuid` is a safe function on recent compilers and unsafe on older ones.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 0x8000_0000 reports the highest
    // extended leaf, and we only query 0x8000_0007 when it is supported.
    unsafe {
        if __cpuid(0x8000_0000).eax < 0x8000_0007 {
            return false;
        }
        // EDX bit 8: invariant TSC.
        __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

#[inline(always)]
fn raw_ticks(tsc: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if tsc {
        // SAFETY: RDTSC has no preconditions; `tsc` is true only on x86_64 CPUs that
        // reported an invariant TSC.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    let _ = tsc;
    now_ns()
}

fn rate() -> Rate {
    *RATE.get_or_init(|| {
        if !invariant_tsc() {
            return Rate {
                tsc: false,
                ns_per_tick_q32: 1 << 32,
            };
        }
        // Calibrate against Instant over ~2 ms (once per process).
        let (i0, t0) = (Instant::now(), raw_ticks(true));
        while i0.elapsed() < Duration::from_millis(2) {
            core::hint::spin_loop();
        }
        let (ns, ticks) = (
            i0.elapsed().as_nanos() as u64,
            raw_ticks(true).wrapping_sub(t0),
        );
        if ticks == 0 || ns == 0 {
            return Rate {
                tsc: false,
                ns_per_tick_q32: 1 << 32,
            };
        }
        Rate {
            tsc: true,
            ns_per_tick_q32: ((u128::from(ns) << 32) / u128::from(ticks)) as u64,
        }
    })
}

/// Forces the one-time calibration of [`ticks`] now (about 2 ms) instead of at first use.
pub fn calibrate() {
    let _ = rate();
}

/// A cheap monotonic tick count; only differences are meaningful (see [`ticks_to_ns`]).
#[inline(always)]
pub fn ticks() -> u64 {
    raw_ticks(rate().tsc)
}

/// Converts a difference of [`ticks`] to nanoseconds.
#[inline]
pub fn ticks_to_ns(ticks: u64) -> u64 {
    ((u128::from(ticks) * u128::from(rate().ns_per_tick_q32)) >> 32) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_track_wall_time() {
        calibrate();
        let (i0, t0) = (Instant::now(), ticks());
        std::thread::sleep(Duration::from_millis(20));
        let ns = ticks_to_ns(ticks() - t0) as f64;
        let wall = i0.elapsed().as_nanos() as f64;
        assert!(
            (ns / wall - 1.0).abs() < 0.2,
            "ticks say {ns} ns, wall clock {wall} ns"
        );
    }
}
