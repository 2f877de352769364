//! [`ClockScale`]: nanoseconds per device tick, as the ring kernel computes them. Measured
//! by `clock.rs`, passed to the kernel's build by `program.rs`.

/// Nanoseconds per device tick as `int + frac / 2^64`, the form `port_opencl.h` computes
/// with (`ticks * int + mul_hi(ticks, frac)`: no division, no overflow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClockScale {
    /// Whole nanoseconds per tick.
    pub int: u64,
    /// The fraction of a nanosecond per tick, in units of 2^-64.
    pub frac: u64,
}

impl ClockScale {
    /// One nanosecond per tick.
    pub const ONE_NS: ClockScale = ClockScale { int: 1, frac: 0 };

    /// The scale of `ns_per_tick` nanoseconds per tick (positive and finite).
    ///
    /// # Examples
    ///
    /// ```
    /// let s = gyre_opencl::ClockScale::from_ns_per_tick(0.25).unwrap();
    /// assert_eq!((s.int, s.frac), (0, 1 << 62));
    /// assert_eq!(s.ns(4_000), 1_000);
    /// assert!(gyre_opencl::ClockScale::from_ns_per_tick(f64::NAN).is_none());
    /// ```
    pub fn from_ns_per_tick(ns_per_tick: f64) -> Option<Self> {
        if !ns_per_tick.is_finite() || ns_per_tick <= 0.0 || ns_per_tick >= 1e9 {
            return None;
        }
        let int = ns_per_tick.floor();
        let frac = ((ns_per_tick - int) * 18_446_744_073_709_551_616.0).min(u64::MAX as f64);
        Some(Self {
            int: int as u64,
            frac: frac as u64,
        })
    }

    /// `ticks` in nanoseconds, exactly as the device computes it.
    pub fn ns(&self, ticks: u64) -> u64 {
        let hi = ((u128::from(ticks) * u128::from(self.frac)) >> 64) as u64;
        ticks.wrapping_mul(self.int).wrapping_add(hi)
    }

    /// Nanoseconds per tick as a float (for logs).
    pub fn ns_per_tick(&self) -> f64 {
        self.int as f64 + self.frac as f64 / 18_446_744_073_709_551_616.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_matches_float_math() {
        for ns_per_tick in [1.0, 0.385, 2.5, 10.0, 0.001] {
            let s = ClockScale::from_ns_per_tick(ns_per_tick).unwrap();
            for ticks in [0u64, 1, 1_000_000, 1 << 40] {
                let want = ticks as f64 * ns_per_tick;
                let got = s.ns(ticks) as f64;
                assert!(
                    (got - want).abs() <= 1.0 + want * 1e-12,
                    "{ns_per_tick} {ticks}"
                );
            }
        }
        assert!(ClockScale::from_ns_per_tick(0.0).is_none());
        assert!(ClockScale::from_ns_per_tick(-1.0).is_none());
        assert!(ClockScale::from_ns_per_tick(f64::INFINITY).is_none());
    }
}
