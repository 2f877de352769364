//! Idle strategies, as in Aeron: what a polling loop does when it found no work.

use std::time::Duration;

/// How much later than asked a park or sleep ends at best: Linux's default timer slack for
/// a normal thread (`PR_GET_TIMERSLACK`, 50 µs). A waiter under `Backoff` never parks for
/// less, and one with a deadline never parks when less than [`WAKE_MARGIN`] plus this is
/// left before it ([`Idler::idle_until`]).
pub const TIMER_SLACK: Duration = Duration::from_micros(50);

/// How far ahead of its deadline a waiter stops parking and yields instead
/// ([`Idler::idle_until`]). A park ends later than asked by the timer's slack at best,
/// and by far more when the core it wakes on was idle: on the development VM
/// (Firecracker, 2 vCPUs, nothing else running) a 0.7 ms sleep overshot by 95 us at the
/// median, 224 us at p99 and 0.9 ms at p99.9. A waiter that parked to within
/// [`TIMER_SLACK`] of its deadline returned more than 200 us late in 3 of 14 runs of 40
/// timeouts; a margin of 300 us turns those cases into a yield loop of at most 300 us, paid
/// only by a call whose reply is about to miss its deadline. A call whose whole timeout is
/// under `WAKE_MARGIN + TIMER_SLACK` (350 us) never parks: it spins and yields until its
/// reply or its deadline.
pub const WAKE_MARGIN: Duration = Duration::from_micros(300);

/// What a polling thread (a CPU kernel, a blocking waiter, the completion driver) does
/// between polls that found nothing.
///
/// # Examples
///
/// ```
/// use gyre_core::IdleStrategy;
/// use std::time::Duration;
/// let s = IdleStrategy::Backoff { spins: 1000, yields: 50, max_park: Duration::from_micros(100) };
/// assert!(s.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleStrategy {
    /// Spin with a pause hint: lowest latency, one core fully used.
    BusySpin,
    /// Spin `spins` times, then yield `yields` times, then park for up to `max_park`
    /// (doubling from 1 µs), restarting from spinning as soon as work is found.
    Backoff {
        /// Polls with a spin hint before yielding.
        spins: u32,
        /// Polls with `yield_now` before parking.
        yields: u32,
        /// Longest single park. Bounds the added latency when idle.
        max_park: Duration,
    },
    /// Sleep a fixed duration after every empty poll. A blocking caller waiting for a
    /// reply parks for that duration instead, so that the completion driver's wake-up
    /// or its deadline ([`Idler::idle_until`]) can end the wait sooner.
    Sleep(Duration),
}

impl Default for IdleStrategy {
    /// `Backoff { spins: 64, yields: 64, max_park: 100 µs }`: the host's default while a
    /// caller waits for a reply. The spin phase is short on purpose: the scheduler often
    /// wakes a parked kernel thread on its caller's core, and a caller that spins there
    /// keeps the kernel from running (measured: about 60 µs more for the first call after
    /// idling with 2000 spins; `benches/idle.rs`).
    fn default() -> Self {
        IdleStrategy::Backoff {
            spins: 64,
            yields: 64,
            max_park: Duration::from_micros(100),
        }
    }
}

impl IdleStrategy {
    /// Longest park or sleep accepted (1 s): a kernel must keep answering commands.
    pub const MAX_PARK: Duration = Duration::from_secs(1);

    /// A kernel's default: `Backoff { spins: 64, yields: 64, max_park: 10 ms }`. On the
    /// CPU backend the kernel's parks end early when the host publishes a request or a
    /// command (its doorbell, `crate::doorbell`), so a long park costs no latency and an
    /// idle kernel costs almost nothing; `max_park` then bounds only how often an idle
    /// kernel refreshes its heartbeat (a watchdog bound must be at least twice it). The
    /// short spin phase matters where the kernel thread shares a core with its caller (the
    /// scheduler often wakes it there): it yields that core back within microseconds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use gyre_core::IdleStrategy;
    /// let k = IdleStrategy::kernel_default();
    /// assert_eq!(k.validate(), Ok(()));
    /// assert!(matches!(k, IdleStrategy::Backoff { max_park, .. } if max_park == Duration::from_millis(10)));
    /// ```
    pub const fn kernel_default() -> Self {
        IdleStrategy::Backoff {
            spins: 64,
            yields: 64,
            max_park: Duration::from_millis(10),
        }
    }

    /// Rejects a zero or over-long park / sleep.
    pub fn validate(&self) -> crate::Result<()> {
        let d = match self {
            IdleStrategy::BusySpin => return Ok(()),
            IdleStrategy::Backoff { max_park, .. } => *max_park,
            IdleStrategy::Sleep(d) => *d,
        };
        if d.is_zero() || d > Self::MAX_PARK {
            return Err(crate::Error::InvalidArgument {
                name: "idle park/sleep duration",
                value: format!("{d:?}"),
                reason: "must be in 1ns..=1s",
            });
        }
        Ok(())
    }

    /// A fresh idler for one polling loop.
    pub fn idler(&self) -> Idler {
        Idler {
            strategy: *self,
            step: 0,
            park: Duration::from_micros(1),
        }
    }
}

/// How long a waiter with `left` before its deadline (`None`: no deadline) parks when its
/// strategy asks for `park`: never into the last [`WAKE_MARGIN`], never less than
/// [`TIMER_SLACK`]; `None` when it should yield instead.
fn park_before(park: Duration, left: Option<Duration>) -> Option<Duration> {
    match left {
        None => Some(park),
        Some(left) => match left.checked_sub(WAKE_MARGIN) {
            Some(room) if room >= TIMER_SLACK => Some(park.min(room)),
            _ => None,
        },
    }
}

/// The state of one polling loop's idle strategy.
#[derive(Debug, Clone)]
pub struct Idler {
    strategy: IdleStrategy,
    step: u32,
    park: Duration,
}

impl Idler {
    /// Call after every poll; `worked` says whether the poll found work.
    #[inline]
    pub fn idle(&mut self, worked: bool) {
        if worked {
            self.reset();
            return;
        }
        match self.strategy {
            IdleStrategy::BusySpin => core::hint::spin_loop(),
            IdleStrategy::Sleep(d) => std::thread::sleep(d),
            IdleStrategy::Backoff {
                spins,
                yields,
                max_park,
            } => {
                if self.step < spins {
                    self.step += 1;
                    core::hint::spin_loop();
                } else if self.step < spins.saturating_add(yields) {
                    self.step += 1;
                    std::thread::yield_now();
                } else {
                    std::thread::park_timeout(self.park);
                    self.park = (self.park * 2).min(max_park);
                }
            }
        }
    }

    /// [`Idler::idle`] for a waiter with a `deadline`: a park or sleep ends
    /// [`WAKE_MARGIN`] ahead of the deadline, and from there on the waiter yields instead
    /// (a park ends late by the timer's slack at best, and by hundreds of microseconds
    /// when its core was idle). Under `Backoff` a park is never shorter than
    /// [`TIMER_SLACK`], the least the timer can honour; `Sleep(d)` parks for `d`. Without
    /// a deadline, `Backoff` and `BusySpin` behave as [`Idler::idle`], and `Sleep` parks
    /// (the completion driver unparks a registered waiter).
    #[inline]
    pub fn idle_until(&mut self, deadline: Option<std::time::Instant>) {
        let (park, max_park) = match self.strategy {
            IdleStrategy::Backoff { max_park, .. } if self.is_parking() => (
                self.park.max(TIMER_SLACK).min(max_park.max(TIMER_SLACK)),
                Some(max_park),
            ),
            IdleStrategy::Sleep(d) => (d, None),
            _ => return self.idle(false),
        };
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let Some(park) = park_before(park, left) else {
            std::thread::yield_now();
            return;
        };
        // A park, under `Sleep` too: the completion driver unparks a registered waiter
        // when its reply lands.
        std::thread::park_timeout(park);
        if let Some(max_park) = max_park {
            self.park = (park * 2).min(max_park);
        }
    }

    /// Back to the first (spinning) phase.
    #[inline]
    pub fn reset(&mut self) {
        self.step = 0;
        self.park = Duration::from_micros(1);
    }

    /// Whether the loop has reached the parking phase (the completion driver uses it to
    /// decide that a spin budget is spent).
    pub fn is_parking(&self) -> bool {
        match self.strategy {
            IdleStrategy::Backoff { spins, yields, .. } => {
                self.step >= spins.saturating_add(yields)
            }
            IdleStrategy::Sleep(_) => true,
            IdleStrategy::BusySpin => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_waiter_stops_parking_a_margin_ahead_of_its_deadline() {
        // No deadline: the strategy's park.
        assert_eq!(park_before(100 * US, None), Some(100 * US));
        // Far from the deadline: the strategy's park.
        assert_eq!(park_before(100 * US, Some(10_000 * US)), Some(100 * US));
        // A park that would reach into the margin is cut to end where it begins.
        assert_eq!(park_before(1_000 * US, Some(700 * US)), Some(400 * US));
        // Less room before the margin than the timer honours, or inside it: yield.
        assert_eq!(park_before(1_000 * US, Some(WAKE_MARGIN + 49 * US)), None);
        assert_eq!(park_before(1_000 * US, Some(WAKE_MARGIN)), None);
        assert_eq!(park_before(1_000 * US, Some(Duration::ZERO)), None);
        assert_eq!(
            park_before(1_000 * US, Some(WAKE_MARGIN + TIMER_SLACK)),
            Some(TIMER_SLACK)
        );
    }
}
