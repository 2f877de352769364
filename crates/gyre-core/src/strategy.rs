//! [`TransferStrategy`]: how the host-side and device-side rings are kept in step.
//!
//! The default strategy follows the platform's [`MemoryVisibility`]
//! (see [`crate::visibility::default_strategy`]); the builder and `GYRE_TRANSFER_STRATEGY`
//! override it ([`crate::plan`]).
//!
//! The copy strategies ([`TransferStrategy::Sync`], [`TransferStrategy::Async`],
//! [`TransferStrategy::DmaPolling`]) are performed by [`crate::bridge`]: the kernel's rings
//! are device-resident and the bridge copies slots and control lines. On the CPU backend
//! the "device" is a separate allocation reached only by an emulated copy engine.
//!
//! [`MemoryVisibility`]: crate::visibility::MemoryVisibility

use std::time::Duration;

use crate::error::{Error, Result};

/// Shortest legal [`TransferStrategy::DmaPolling`] interval.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_micros(1);
/// Longest legal [`TransferStrategy::DmaPolling`] interval.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The [`TransferStrategy::DmaPolling`] interval when none is given. A starting point, not
/// a measured optimum: the bridge's benchmarks will revisit it.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_micros(10);

/// The names [`TransferStrategy`] parses, for error messages.
pub const VALID_STRATEGIES: &str = "valid values: sync, async, unified, dma-polling";
/// What a legal poll interval looks like, for error messages.
pub const POLL_INTERVAL_RANGE: &str = "must be in 1us..=1s";

/// How ring contents move between host and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransferStrategy {
    /// Blocking copies of the written slot ranges, one direction at a time.
    Sync,
    /// Copies on a stream, overlapped with host work; completion is awaited before a
    /// range is published. The default for [`ExplicitDma`](crate::visibility::MemoryVisibility::ExplicitDma).
    Async,
    /// Zero copy: the rings live in memory both sides address coherently (mapped pinned
    /// memory on a device; ordinary memory on the CPU backend). The default for
    /// [`SystemScope`](crate::visibility::MemoryVisibility::SystemScope).
    Unified,
    /// The device's rings live in device memory; the host copies the control lines and
    /// new slots every `poll_interval`. The default for
    /// [`DeviceScope`](crate::visibility::MemoryVisibility::DeviceScope) (WSL2).
    DmaPolling {
        /// How often the host polls; in [`MIN_POLL_INTERVAL`]..=[`MAX_POLL_INTERVAL`].
        poll_interval: Duration,
    },
}

impl TransferStrategy {
    /// [`TransferStrategy::DmaPolling`] with `poll_interval`, validated.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming `poll_interval` when it is outside
    /// [`MIN_POLL_INTERVAL`]..=[`MAX_POLL_INTERVAL`].
    pub fn dma_polling(poll_interval: Duration) -> Result<Self> {
        validate_poll_interval("poll_interval", poll_interval)?;
        Ok(TransferStrategy::DmaPolling { poll_interval })
    }

    /// Checks the values a strategy carries (the poll interval).
    ///
    /// # Errors
    ///
    /// As [`TransferStrategy::dma_polling`].
    pub fn validate(&self) -> Result<()> {
        match self {
            TransferStrategy::DmaPolling { poll_interval } => {
                validate_poll_interval("poll_interval", *poll_interval)
            }
            _ => Ok(()),
        }
    }

    /// The name used in the environment, on the command line and in logs.
    pub fn name(&self) -> &'static str {
        match self {
            TransferStrategy::Sync => "sync",
            TransferStrategy::Async => "async",
            TransferStrategy::Unified => "unified",
            TransferStrategy::DmaPolling { .. } => "dma-polling",
        }
    }

    /// Whether the strategy copies ring contents (everything but `Unified`).
    pub fn copies(&self) -> bool {
        !matches!(self, TransferStrategy::Unified)
    }
}

/// Checks a poll interval; `name` is the setting reported in the error.
pub(crate) fn validate_poll_interval(name: &'static str, d: Duration) -> Result<()> {
    if (MIN_POLL_INTERVAL..=MAX_POLL_INTERVAL).contains(&d) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            name,
            value: format!("{d:?}"),
            reason: POLL_INTERVAL_RANGE,
        })
    }
}

impl core::fmt::Display for TransferStrategy {
    /// The name (`dma-polling` without its interval; `{:#}` adds it).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())?;
        if let (true, TransferStrategy::DmaPolling { poll_interval }) = (f.alternate(), self) {
            write!(f, " (every {poll_interval:?})")?;
        }
        Ok(())
    }
}

impl core::str::FromStr for TransferStrategy {
    type Err = Error;
    /// Parses `sync`, `async`, `unified` or `dma-polling` (case-insensitive, `_` for `-`
    /// accepted). `dma-polling` gets [`DEFAULT_POLL_INTERVAL`].
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "sync" => Ok(TransferStrategy::Sync),
            "async" => Ok(TransferStrategy::Async),
            "unified" => Ok(TransferStrategy::Unified),
            "dma-polling" => Ok(TransferStrategy::DmaPolling {
                poll_interval: DEFAULT_POLL_INTERVAL,
            }),
            _ => Err(Error::InvalidArgument {
                name: "transfer_strategy",
                value: s.to_owned(),
                reason: VALID_STRATEGIES,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            TransferStrategy::Sync,
            TransferStrategy::Async,
            TransferStrategy::Unified,
            TransferStrategy::DmaPolling {
                poll_interval: DEFAULT_POLL_INTERVAL,
            },
        ] {
            assert_eq!(s.to_string().parse::<TransferStrategy>(), Ok(s));
        }
        assert_eq!(
            "DMA_Polling".parse::<TransferStrategy>(),
            Ok(TransferStrategy::DmaPolling {
                poll_interval: DEFAULT_POLL_INTERVAL
            })
        );
        assert_eq!(
            format!(
                "{:#}",
                TransferStrategy::dma_polling(Duration::from_micros(50)).unwrap()
            ),
            "dma-polling (every 50µs)"
        );
        assert_eq!(format!("{:#}", TransferStrategy::Async), "async");
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let e = "zero-copy".parse::<TransferStrategy>().unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument {
                name: "transfer_strategy",
                value: "zero-copy".into(),
                reason: VALID_STRATEGIES,
            }
        );
        let s = e.to_string();
        for v in ["sync", "async", "unified", "dma-polling", "zero-copy"] {
            assert!(s.contains(v), "{s}");
        }
    }

    #[test]
    fn poll_interval_bounds() {
        assert!(TransferStrategy::dma_polling(MIN_POLL_INTERVAL).is_ok());
        assert!(TransferStrategy::dma_polling(MAX_POLL_INTERVAL).is_ok());
        for bad in [
            Duration::ZERO,
            Duration::from_nanos(999),
            MAX_POLL_INTERVAL + Duration::from_nanos(1),
        ] {
            assert!(matches!(
                TransferStrategy::dma_polling(bad),
                Err(Error::InvalidArgument {
                    name: "poll_interval",
                    reason: POLL_INTERVAL_RANGE,
                    ..
                })
            ));
            assert!(TransferStrategy::DmaPolling { poll_interval: bad }
                .validate()
                .is_err());
        }
        assert!(TransferStrategy::Sync.validate().is_ok());
        assert!(!TransferStrategy::Unified.copies());
        assert!(TransferStrategy::Sync.copies());
    }
}
