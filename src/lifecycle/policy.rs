//! [`RestartPolicy`]: how often, and how soon, a faulted kernel is relaunched.

use std::time::Duration;

use gyre_core::{Error, Result};

/// What happens after a kernel faults (a handler panic, a device trap): see
/// [`KernelSpec::restart`](crate::KernelSpec::restart).
///
/// Up to `max_restarts` relaunches on the kernel's rings, the `n`-th (from 0) after a
/// backoff of `initial * 2^n`, at most `max` (default 1 ms doubling up to 1 s). With
/// [`RestartPolicy::reset_after`], a kernel that ran that long without a fault has its
/// count start over, so a long-lived service survives rare faults indefinitely while a
/// handler that faults on every request still gives up.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use gyre::RestartPolicy;
/// let p = RestartPolicy::new(5)
///     .backoff(Duration::from_millis(10), Duration::from_secs(2))
///     .reset_after(Duration::from_secs(60));
/// assert_eq!(p.max_restarts(), 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    max: u32,
    initial: Duration,
    cap: Duration,
    window: Option<Duration>,
}

impl RestartPolicy {
    /// At most `max_restarts` restarts (0: never restart, the default of every kernel),
    /// backoff 1 ms doubling up to 1 s, no reset.
    pub fn new(max_restarts: u32) -> Self {
        Self {
            max: max_restarts,
            initial: Duration::from_millis(1),
            cap: Duration::from_secs(1),
            window: None,
        }
    }

    /// The backoff before the first restart, doubling for each further one up to `max`.
    /// Both at most 60 s, `initial <= max` (checked at launch).
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial = initial;
        self.cap = max;
        self
    }

    /// Starts the count over once the kernel ran `window` since its last restart (or its
    /// launch) without a fault; epoch handovers and reloads do not interrupt it (at least
    /// 1 ms, checked at launch).
    pub fn reset_after(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// The most restarts (before a reset).
    pub fn max_restarts(&self) -> u32 {
        self.max
    }

    /// The reset window, if any.
    pub(crate) fn window(&self) -> Option<Duration> {
        self.window
    }

    /// The backoff before restart number `done` (from 0).
    pub(crate) fn backoff_for(&self, done: u32) -> Duration {
        let factor = 1u32.checked_shl(done.min(31)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.cap)
    }

    /// Checks the durations.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |value: Duration, reason| Error::InvalidArgument {
            name: "restart policy",
            value: format!("{value:?}"),
            reason,
        };
        let limit = Duration::from_secs(60);
        if self.initial > limit || self.cap > limit {
            return Err(bad(self.initial.max(self.cap), "a backoff is at most 60s"));
        }
        if self.initial > self.cap {
            return Err(bad(self.initial, "the first backoff exceeds the largest"));
        }
        if let Some(w) = self.window.filter(|w| *w < Duration::from_millis(1)) {
            return Err(bad(w, "the reset window is at least 1ms"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = RestartPolicy::new(40).backoff(Duration::from_millis(3), Duration::from_millis(20));
        let b: Vec<u128> = (0..6).map(|n| p.backoff_for(n).as_millis()).collect();
        assert_eq!(b, [3, 6, 12, 20, 20, 20]);
        assert_eq!(p.backoff_for(39), Duration::from_millis(20));
        assert!(p.validate().is_ok());
    }

    #[test]
    fn bad_durations_are_refused() {
        let s = Duration::from_secs;
        assert!(RestartPolicy::new(1)
            .backoff(s(2), s(1))
            .validate()
            .is_err());
        assert!(RestartPolicy::new(1)
            .backoff(s(1), s(61))
            .validate()
            .is_err());
        assert!(RestartPolicy::new(1)
            .reset_after(Duration::from_micros(10))
            .validate()
            .is_err());
    }
}
