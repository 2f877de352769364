//! Rates from two telemetry snapshots.

use std::time::Duration;

use gyre_abi::TelemetrySnapshot;

/// Per-second rates and ratios between two snapshots of one kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Requests taken per second.
    pub messages_in_per_s: f64,
    /// Replies published per second.
    pub messages_out_per_s: f64,
    /// Error replies per second.
    pub errors_per_s: f64,
    /// Error replies / replies in the interval (0 when there were no replies).
    pub error_ratio: f64,
    /// Busy polls / all polls in the interval, 0..=1 (0 when the kernel did not poll).
    pub busy_ratio: f64,
    /// Handler time / wall time in the interval, 0..=1 (a single-threaded kernel).
    pub handler_utilisation: f64,
}

/// Rates between `prev` and `cur`, taken `dt` apart. A counter that went backwards (a
/// restarted kernel) counts as 0; a zero `dt` gives all zeros.
///
/// # Examples
///
/// ```
/// use gyre_core::telemetry::rates;
/// use std::time::Duration;
/// let a = gyre_abi::TelemetrySnapshot::default();
/// let mut b = a;
/// b.messages_out = 500;
/// b.errors = 5;
/// let r = rates(&a, &b, Duration::from_millis(500));
/// assert_eq!(r.messages_out_per_s, 1000.0);
/// assert_eq!(r.error_ratio, 0.01);
/// ```
#[allow(clippy::cast_precision_loss)]
pub fn rates(prev: &TelemetrySnapshot, cur: &TelemetrySnapshot, dt: Duration) -> Rates {
    let secs = dt.as_secs_f64();
    if secs <= 0.0 {
        return Rates::default();
    }
    let d = |a: u64, b: u64| b.saturating_sub(a) as f64;
    let din = d(prev.messages_in, cur.messages_in);
    let dout = d(prev.messages_out, cur.messages_out);
    let derr = d(prev.errors, cur.errors);
    let dbusy = d(prev.busy_polls, cur.busy_polls);
    let didle = d(prev.idle_polls, cur.idle_polls);
    let dns = d(prev.handler_ns_total, cur.handler_ns_total);
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            (a / b).clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    Rates {
        messages_in_per_s: din / secs,
        messages_out_per_s: dout / secs,
        errors_per_s: derr / secs,
        error_ratio: ratio(derr, dout),
        busy_ratio: ratio(dbusy, dbusy + didle),
        handler_utilisation: ratio(dns, secs * 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_ratios() {
        let a = TelemetrySnapshot {
            messages_in: 100,
            messages_out: 100,
            busy_polls: 10,
            idle_polls: 10,
            ..Default::default()
        };
        let b = TelemetrySnapshot {
            messages_in: 2100,
            messages_out: 2100,
            errors: 20,
            busy_polls: 40,
            idle_polls: 20,
            handler_ns_total: 500_000_000,
            ..Default::default()
        };
        let r = rates(&a, &b, Duration::from_secs(2));
        assert_eq!(r.messages_in_per_s, 1000.0);
        assert_eq!(r.messages_out_per_s, 1000.0);
        assert_eq!(r.errors_per_s, 10.0);
        assert_eq!(r.error_ratio, 0.01);
        assert_eq!(r.busy_ratio, 0.75);
        assert_eq!(r.handler_utilisation, 0.25);
    }

    #[test]
    fn backwards_counters_and_zero_interval_are_zero() {
        let a = TelemetrySnapshot {
            messages_in: 100,
            ..Default::default()
        };
        let b = TelemetrySnapshot::default();
        assert_eq!(rates(&a, &b, Duration::from_secs(1)).messages_in_per_s, 0.0);
        assert_eq!(rates(&b, &a, Duration::ZERO), Rates::default());
    }
}
