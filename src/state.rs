//! [`KernelState`]: where a kernel is in its life, as the host sees it.

use gyre_abi::state;

/// Lifecycle state of a kernel, as it last wrote it.
///
/// # Examples
///
/// ```
/// use gyre::KernelState;
/// assert_eq!(KernelState::from_raw(gyre_abi::state::ACTIVE, 0), KernelState::Active);
/// assert_eq!(
///     KernelState::from_raw(gyre_abi::state::FAULTED, 1),
///     KernelState::Faulted { code: 1 }
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelState {
    /// Not started yet.
    Launching,
    /// Processing requests.
    Active,
    /// Alive, consuming nothing.
    Paused,
    /// Answering what was published before shutdown.
    Draining,
    /// Stopped normally (or, with a non-zero code, because the host heartbeat went stale).
    Terminated {
        /// [`codes`](crate::codes) code, 0 for a commanded shutdown.
        code: u32,
    },
    /// Stopped on an error.
    Faulted {
        /// [`codes`](crate::codes) code.
        code: u32,
    },
    /// The host-side watchdog ([`KernelSpec::watchdog`](crate::KernelSpec::watchdog)) saw
    /// no sign of life from the kernel within its bound: a handler that never returns, a
    /// hung device. Waiters failed with [`Error::Unresponsive`](crate::Error::Unresponsive);
    /// the kernel was told to terminate and is detached. Reported until the kernel reaches
    /// a final state by itself.
    Unresponsive,
    /// Between two launches on the kernel's rings: it handed over to a successor (a
    /// [`Kernel::reload`](crate::Kernel::reload), or its
    /// [`epoch`](crate::KernelSpec::epoch) ran out), or it faulted and its
    /// [`restart`](crate::KernelSpec::restart) policy relaunches it. Requests wait in the
    /// ring meanwhile; nothing is lost.
    Relaunching,
}

impl KernelState {
    /// The state from the raw `gyre_abi::state` value and error code (as found in the
    /// control block or a [`TelemetrySnapshot`](crate::telemetry::TelemetrySnapshot)).
    ///
    /// # Examples
    ///
    /// ```
    /// let s = gyre::KernelState::from_raw(gyre_abi::state::TERMINATED, 0);
    /// assert_eq!(s, gyre::KernelState::Terminated { code: 0 });
    /// ```
    pub fn from_raw(s: u32, code: u32) -> Self {
        match s {
            state::ACTIVE => KernelState::Active,
            state::PAUSED => KernelState::Paused,
            state::DRAINING => KernelState::Draining,
            state::TERMINATED => KernelState::Terminated { code },
            state::FAULTED => KernelState::Faulted { code },
            state::HANDED_OVER => KernelState::Relaunching,
            _ => KernelState::Launching,
        }
    }
}
