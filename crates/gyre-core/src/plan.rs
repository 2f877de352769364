//! The [`MemoryPlan`]: which memory visibility and transfer strategy a runtime uses, who
//! decided (detection, the `GYRE_*` environment, the builder) and why.
//!
//! [`plan`] applies the overrides (builder > environment > detection, separately for the
//! visibility and the strategy) to [`crate::visibility::detect`]'s verdict and refuses a
//! strategy the platform cannot honour instead of changing it. `docs/memory-visibility.md`
//! describes each platform and the overrides.

use std::ffi::OsString;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::strategy::{
    validate_poll_interval, TransferStrategy, POLL_INTERVAL_RANGE, VALID_STRATEGIES,
};
use crate::visibility::{
    check_strategy, default_strategy, detect, MemoryVisibility, PlatformProbe, VALID_VISIBILITIES,
};

/// Environment variable overriding the detected [`MemoryVisibility`].
pub const ENV_MEMORY_VISIBILITY: &str = "GYRE_MEMORY_VISIBILITY";
/// Environment variable overriding the [`TransferStrategy`].
pub const ENV_TRANSFER_STRATEGY: &str = "GYRE_TRANSFER_STRATEGY";
/// Environment variable setting the `dma-polling` interval, in microseconds.
pub const ENV_POLL_INTERVAL_US: &str = "GYRE_POLL_INTERVAL_US";

/// Overrides from one source (the builder or the environment); `None` means not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overrides {
    /// Replaces the detected visibility (and so the default strategy).
    pub visibility: Option<MemoryVisibility>,
    /// Replaces the default strategy.
    pub strategy: Option<TransferStrategy>,
    /// The `dma-polling` interval, where the strategy is `dma-polling` and was not given
    /// with its own interval by a higher-precedence source.
    pub poll_interval: Option<Duration>,
}

impl Overrides {
    /// Reads `GYRE_MEMORY_VISIBILITY`, `GYRE_TRANSFER_STRATEGY` and
    /// `GYRE_POLL_INTERVAL_US` from the process environment (see [`Self::from_env_with`]).
    ///
    /// # Errors
    ///
    /// As [`Self::from_env_with`].
    pub fn from_env() -> Result<Self> {
        Self::from_env_with(|name| std::env::var_os(name))
    }

    /// [`Self::from_env`] for the settings `builder` leaves open: a variable whose setting
    /// the builder overrides is not read at all, so an invalid value there cannot fail a
    /// runtime whose builder decided (the builder wins, as for every other override).
    /// `GYRE_POLL_INTERVAL_US` is skipped too when the builder sets the strategy (an
    /// interval from the environment never applies to a builder's strategy).
    ///
    /// # Errors
    ///
    /// As [`Self::from_env_with`], for the variables read.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::plan::Overrides;
    /// use gyre_core::strategy::TransferStrategy;
    /// let builder = Overrides { strategy: Some(TransferStrategy::Sync), ..Overrides::default() };
    /// // Whatever GYRE_TRANSFER_STRATEGY holds, it is not read:
    /// assert_eq!(Overrides::from_env_beneath(&builder)?.strategy, None);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn from_env_beneath(builder: &Overrides) -> Result<Self> {
        Self::from_env_with(beneath(builder, |name| std::env::var_os(name)))
    }

    /// Reads the three variables through `get`. An unset or empty variable is not set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] named after the variable, with its value and the valid
    /// values (or range: an integer of microseconds in 1..=1000000).
    pub fn from_env_with(get: impl Fn(&str) -> Option<OsString>) -> Result<Self> {
        let read = |name: &'static str, valid: &'static str| -> Result<Option<String>> {
            match get(name) {
                None => Ok(None),
                Some(v) => match v.into_string() {
                    Ok(s) if s.trim().is_empty() => Ok(None),
                    Ok(s) => Ok(Some(s)),
                    Err(raw) => Err(Error::InvalidArgument {
                        name,
                        value: raw.to_string_lossy().into_owned(),
                        reason: valid,
                    }),
                },
            }
        };
        let rename = |name: &'static str| {
            move |e: Error| match e {
                Error::InvalidArgument { value, reason, .. } => Error::InvalidArgument {
                    name,
                    value,
                    reason,
                },
                other => other,
            }
        };
        let visibility = read(ENV_MEMORY_VISIBILITY, VALID_VISIBILITIES)?
            .map(|s| s.parse::<MemoryVisibility>())
            .transpose()
            .map_err(rename(ENV_MEMORY_VISIBILITY))?;
        let strategy = read(ENV_TRANSFER_STRATEGY, VALID_STRATEGIES)?
            .map(|s| s.parse::<TransferStrategy>())
            .transpose()
            .map_err(rename(ENV_TRANSFER_STRATEGY))?;
        let poll_interval = match read(ENV_POLL_INTERVAL_US, POLL_INTERVAL_RANGE)? {
            None => None,
            Some(s) => {
                let bad = || Error::InvalidArgument {
                    name: ENV_POLL_INTERVAL_US,
                    value: s.clone(),
                    reason: "must be an integer number of microseconds in 1..=1000000",
                };
                let us: u64 = s.trim().parse().map_err(|_| bad())?;
                let d = Duration::from_micros(us);
                validate_poll_interval(ENV_POLL_INTERVAL_US, d).map_err(|_| bad())?;
                Some(d)
            }
        };
        Ok(Overrides {
            visibility,
            strategy,
            poll_interval,
        })
    }
}

/// `get`, hiding the variables whose setting `builder` decides (see
/// [`Overrides::from_env_beneath`]).
fn beneath<'a>(
    builder: &'a Overrides,
    get: impl Fn(&str) -> Option<OsString> + 'a,
) -> impl Fn(&str) -> Option<OsString> + 'a {
    move |name| {
        let decided = match name {
            ENV_MEMORY_VISIBILITY => builder.visibility.is_some(),
            ENV_TRANSFER_STRATEGY => builder.strategy.is_some(),
            ENV_POLL_INTERVAL_US => builder.strategy.is_some() || builder.poll_interval.is_some(),
            _ => false,
        };
        if decided {
            None
        } else {
            get(name)
        }
    }
}

/// Which source decided a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// [`detect`] (for the strategy: [`default_strategy`] of the detected visibility).
    Detected,
    /// A `GYRE_*` environment variable.
    Env,
    /// The runtime builder.
    Builder,
}

impl core::fmt::Display for Source {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Source::Detected => "detected",
            Source::Env => "environment",
            Source::Builder => "builder",
        })
    }
}

/// The memory visibility and transfer strategy a runtime uses, and why.
///
/// The strategy decides placement at launch: `unified` shares the rings, the others put
/// them on the device behind a [`crate::bridge::RingBufferBridge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// What detection looked at.
    pub probe: PlatformProbe,
    /// What [`detect`] decided on its own.
    pub detected: MemoryVisibility,
    /// The visibility in effect.
    pub visibility: MemoryVisibility,
    /// Who set [`Self::visibility`].
    pub visibility_source: Source,
    /// The strategy in effect.
    pub strategy: TransferStrategy,
    /// Who set [`Self::strategy`] (a strategy that follows an overridden visibility has
    /// that override's source).
    pub source: Source,
    /// Why: detection's reasons, then each override applied or ignored.
    pub reasons: Vec<String>,
}

/// Resolves the plan for `probe`: builder over environment over detection, separately for
/// the visibility and the strategy; an unset strategy follows the visibility in effect.
///
/// # Errors
///
/// A strategy the platform cannot honour ([`check_strategy`]), with its source in the
/// value; an invalid poll interval.
pub fn plan(probe: PlatformProbe, env: &Overrides, builder: &Overrides) -> Result<MemoryPlan> {
    let detection = detect(&probe);
    let mut reasons = detection.reasons;
    let (visibility, visibility_source) = pick(builder.visibility, env.visibility)
        .unwrap_or((detection.visibility, Source::Detected));
    if visibility_source != Source::Detected {
        reasons.push(format!(
            "memory visibility {visibility} set by the {visibility_source} (detected {})",
            detection.visibility
        ));
    }
    let (mut strategy, source) = match pick(builder.strategy, env.strategy) {
        Some((s, src)) => {
            reasons.push(format!("transfer strategy {s} set by the {src}"));
            (s, src)
        }
        None => {
            let s = default_strategy(visibility);
            reasons.push(format!(
                "transfer strategy {s} is the default for {visibility}"
            ));
            (s, visibility_source)
        }
    };
    if let Some((d, src)) = pick(builder.poll_interval, env.poll_interval) {
        let applies = source != Source::Builder || src == Source::Builder;
        match &mut strategy {
            TransferStrategy::DmaPolling { poll_interval } if applies => {
                validate_poll_interval("poll_interval", d)?;
                *poll_interval = d;
                reasons.push(format!("poll interval {d:?} set by the {src}"));
            }
            _ => reasons.push(format!(
                "poll interval {d:?} from the {src} ignored: the strategy is {strategy:#}, \
                 set by the {source}"
            )),
        }
    }
    check_strategy(strategy, &probe).map_err(|e| match e {
        Error::InvalidArgument {
            name: "transfer_strategy",
            value,
            reason,
        } => Error::InvalidArgument {
            name: "transfer_strategy",
            value: format!("{value} (from the {source})"),
            reason,
        },
        other => other,
    })?;
    if strategy == TransferStrategy::Unified && visibility != MemoryVisibility::SystemScope {
        reasons.push(format!(
            "warning: unified (zero copy) with {visibility} visibility: the kernel and the host \
             may not see each other's writes in time"
        ));
    }
    Ok(MemoryPlan {
        probe,
        detected: detection.visibility,
        visibility,
        visibility_source,
        strategy,
        source,
        reasons,
    })
}

impl MemoryPlan {
    /// Whether the runtime should confirm this plan empirically before the first launch:
    /// `system-scope` that came from detection (device attributes), not from an override.
    pub fn needs_confirmation(&self) -> bool {
        self.visibility == MemoryVisibility::SystemScope
            && self.visibility_source == Source::Detected
    }

    /// The plan after the empirical mapped-memory round trip failed (`why`): visibility
    /// becomes `device-scope`; a strategy that followed detection follows it there
    /// (`dma-polling`), one set by the environment or the builder is kept (you asserted
    /// it), with a warning. Both are recorded in the reasons.
    pub fn downgrade(mut self, why: &str) -> Self {
        self.reasons.push(format!(
            "empirical check failed: {why}; visibility downgraded from {} to {}",
            self.visibility,
            MemoryVisibility::DeviceScope
        ));
        self.visibility = MemoryVisibility::DeviceScope;
        if self.source == Source::Detected {
            self.strategy = default_strategy(MemoryVisibility::DeviceScope);
            self.reasons.push(format!(
                "transfer strategy {:#} is the default for {}",
                self.strategy, self.visibility
            ));
        } else if self.strategy == TransferStrategy::Unified {
            self.reasons.push(format!(
                "warning: unified (zero copy) set by the {} kept although the check failed",
                self.source
            ));
        }
        self
    }
}

/// The builder's value over the environment's, with its source.
fn pick<T>(builder: Option<T>, env: Option<T>) -> Option<(T, Source)> {
    builder
        .map(|v| (v, Source::Builder))
        .or(env.map(|v| (v, Source::Env)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::visibility::fixtures::*;
    use crate::visibility::TargetOs;
    use MemoryVisibility::*;

    #[test]
    fn a_failed_empirical_check_downgrades_a_detected_plan() {
        let linux = probe(TargetOs::Linux, Some(LINUX_PV), false, Some(DISCRETE));
        let p = plan(linux.clone(), &Overrides::default(), &Overrides::default()).unwrap();
        assert!(p.needs_confirmation());
        assert_eq!(p.strategy, TransferStrategy::Unified);
        let d = p.downgrade("no answer within 1s");
        assert_eq!((d.visibility, d.strategy), (DeviceScope, dma()));
        assert!(!d.needs_confirmation());
        assert!(
            d.reasons.iter().any(|r| r.contains("no answer within 1s")),
            "{:?}",
            d.reasons
        );

        // A strategy the user set is kept (with a warning for unified).
        let user = Overrides {
            strategy: Some(TransferStrategy::Unified),
            ..Overrides::default()
        };
        let d = plan(linux.clone(), &Overrides::default(), &user)
            .unwrap()
            .downgrade("x");
        assert_eq!(
            (d.visibility, d.strategy),
            (DeviceScope, TransferStrategy::Unified)
        );
        assert!(
            d.reasons.iter().any(|r| r.starts_with("warning")),
            "{:?}",
            d.reasons
        );

        // Overridden or non-system-scope visibility is not re-checked.
        let forced = Overrides {
            visibility: Some(SystemScope),
            ..Overrides::default()
        };
        assert!(!plan(linux, &forced, &Overrides::default())
            .unwrap()
            .needs_confirmation());
        let wsl = probe(TargetOs::Linux, Some(WSL2_PV), false, Some(FULL));
        let p = plan(wsl, &Overrides::default(), &Overrides::default()).unwrap();
        assert!(!p.needs_confirmation());
    }

    fn env(vars: &[(&str, &str)]) -> Result<Overrides> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        Overrides::from_env_with(|name| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    /// The plan of every detection case, with no override, is detection's verdict and the
    /// visibility's default strategy.
    #[test]
    fn plan_follows_detection() {
        for (what, p, vis) in cases() {
            let plan = plan(p.clone(), &Overrides::default(), &Overrides::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                (plan.visibility, plan.strategy),
                (vis, default_strategy(vis)),
                "{what}"
            );
            assert_eq!(
                (plan.visibility_source, plan.source),
                (Source::Detected, Source::Detected)
            );
            assert_eq!((plan.detected, &plan.probe), (vis, &p), "{what}");
        }
    }

    /// An invalid variable fails only where the builder leaves its setting open.
    #[test]
    fn builder_settings_hide_their_variables() {
        let bad = [
            (ENV_MEMORY_VISIBILITY, "everywhere"),
            (ENV_TRANSFER_STRATEGY, "teleport"),
            (ENV_POLL_INTERVAL_US, "soon"),
        ];
        let get = |name: &str| {
            bad.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        };
        let all = Overrides {
            visibility: Some(SystemScope),
            strategy: Some(TransferStrategy::Sync),
            poll_interval: None,
        };
        assert_eq!(
            Overrides::from_env_with(beneath(&all, get)),
            Ok(Overrides::default())
        );
        let strategy_only = Overrides {
            strategy: Some(TransferStrategy::Sync),
            ..Overrides::default()
        };
        assert!(matches!(
            Overrides::from_env_with(beneath(&strategy_only, get)),
            Err(Error::InvalidArgument {
                name: ENV_MEMORY_VISIBILITY,
                ..
            })
        ));
        assert!(matches!(
            Overrides::from_env_with(beneath(&Overrides::default(), get)),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn env_parsing_valid() {
        assert_eq!(env(&[]), Ok(Overrides::default()));
        assert_eq!(
            env(&[(ENV_MEMORY_VISIBILITY, ""), (ENV_TRANSFER_STRATEGY, "  ")]),
            Ok(Overrides::default()),
            "empty means unset"
        );
        assert_eq!(
            env(&[
                (ENV_MEMORY_VISIBILITY, "device-scope"),
                (ENV_TRANSFER_STRATEGY, "Sync"),
                (ENV_POLL_INTERVAL_US, "250"),
            ]),
            Ok(Overrides {
                visibility: Some(DeviceScope),
                strategy: Some(TransferStrategy::Sync),
                poll_interval: Some(Duration::from_micros(250)),
            })
        );
        for us in ["1", "1000000"] {
            assert!(env(&[(ENV_POLL_INTERVAL_US, us)]).is_ok(), "{us}");
        }
    }

    #[test]
    fn env_parsing_invalid_names_the_variable_and_the_valid_values() {
        let e = env(&[(ENV_MEMORY_VISIBILITY, "coherent")]).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument {
                name: ENV_MEMORY_VISIBILITY,
                value: "coherent".into(),
                reason: VALID_VISIBILITIES,
            }
        );
        assert!(
            e.to_string()
                .contains("system-scope, device-scope, explicit-dma"),
            "{e}"
        );
        let e = env(&[(ENV_TRANSFER_STRATEGY, "zero-copy")]).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument {
                name: ENV_TRANSFER_STRATEGY,
                value: "zero-copy".into(),
                reason: VALID_STRATEGIES,
            }
        );
        for bad in ["0", "1000001", "-5", "10ms", "1.5"] {
            match env(&[(ENV_POLL_INTERVAL_US, bad)]) {
                Err(Error::InvalidArgument {
                    name,
                    value,
                    reason,
                }) => {
                    assert_eq!((name, value.as_str()), (ENV_POLL_INTERVAL_US, bad));
                    assert!(reason.contains("1..=1000000"), "{reason}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn env_parsing_rejects_non_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let e = Overrides::from_env_with(|name| {
            (name == ENV_TRANSFER_STRATEGY).then(|| OsString::from_vec(vec![b'a', 0xff]))
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    name: ENV_TRANSFER_STRATEGY,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn builder_beats_env_beats_detection() {
        let native = probe(TargetOs::Linux, Some(LINUX_PV), false, Some(DISCRETE));
        let e = Overrides {
            visibility: Some(ExplicitDma),
            strategy: None,
            poll_interval: None,
        };
        // Env visibility, strategy follows it.
        let p = plan(native.clone(), &e, &Overrides::default()).unwrap();
        assert_eq!(
            (p.detected, p.visibility, p.strategy),
            (SystemScope, ExplicitDma, TransferStrategy::Async)
        );
        assert_eq!((p.visibility_source, p.source), (Source::Env, Source::Env));
        // Builder visibility beats env.
        let b = Overrides {
            visibility: Some(DeviceScope),
            ..Overrides::default()
        };
        let p = plan(native.clone(), &e, &b).unwrap();
        assert_eq!((p.visibility, p.strategy), (DeviceScope, dma()));
        assert_eq!(
            (p.visibility_source, p.source),
            (Source::Builder, Source::Builder)
        );
        // Strategy from env, visibility detected.
        let e = Overrides {
            strategy: Some(TransferStrategy::Sync),
            ..Overrides::default()
        };
        let p = plan(native.clone(), &e, &Overrides::default()).unwrap();
        assert_eq!(
            (p.visibility, p.strategy),
            (SystemScope, TransferStrategy::Sync)
        );
        assert_eq!(
            (p.visibility_source, p.source),
            (Source::Detected, Source::Env)
        );
        // Builder strategy beats env strategy.
        let b = Overrides {
            strategy: Some(TransferStrategy::Async),
            ..Overrides::default()
        };
        let p = plan(native, &e, &b).unwrap();
        assert_eq!(
            (p.strategy, p.source),
            (TransferStrategy::Async, Source::Builder)
        );
        assert!(
            p.reasons
                .iter()
                .any(|r| r.contains("async set by the builder")),
            "{:?}",
            p.reasons
        );
    }

    #[test]
    fn poll_interval_applies_to_dma_polling_only() {
        let wsl = probe(TargetOs::Linux, Some(WSL2_PV), true, Some(DISCRETE));
        let us = |n| Some(Duration::from_micros(n));
        let e = Overrides {
            poll_interval: us(500),
            ..Overrides::default()
        };
        let p = plan(wsl.clone(), &e, &Overrides::default()).unwrap();
        assert_eq!(
            p.strategy,
            TransferStrategy::DmaPolling {
                poll_interval: Duration::from_micros(500)
            }
        );
        // A builder-given dma-polling keeps its own interval over the environment's.
        let b = Overrides {
            strategy: Some(TransferStrategy::dma_polling(Duration::from_micros(70)).unwrap()),
            ..Overrides::default()
        };
        let p = plan(wsl.clone(), &e, &b).unwrap();
        assert_eq!(
            p.strategy,
            TransferStrategy::DmaPolling {
                poll_interval: Duration::from_micros(70)
            }
        );
        assert!(
            p.reasons.iter().any(|r| r.contains("ignored")),
            "{:?}",
            p.reasons
        );
        // Not dma-polling: noted as ignored, not silently dropped.
        let b = Overrides {
            strategy: Some(TransferStrategy::Async),
            ..Overrides::default()
        };
        let p = plan(wsl, &e, &b).unwrap();
        assert_eq!(p.strategy, TransferStrategy::Async);
        assert!(
            p.reasons
                .iter()
                .any(|r| r.contains("500µs") && r.contains("ignored")),
            "{:?}",
            p.reasons
        );
    }

    #[test]
    fn plan_refuses_what_the_platform_cannot_honour() {
        let no_map = probe(
            TargetOs::Linux,
            Some(LINUX_PV),
            false,
            Some(without(|d| d.can_map_host_memory = false)),
        );
        let e = Overrides {
            strategy: Some(TransferStrategy::Unified),
            ..Overrides::default()
        };
        match plan(no_map.clone(), &e, &Overrides::default()) {
            Err(Error::InvalidArgument {
                name,
                value,
                reason,
            }) => {
                assert_eq!(name, "transfer_strategy");
                assert_eq!(value, "unified (from the environment)");
                assert!(reason.contains("CAN_MAP_HOST_MEMORY"));
            }
            other => panic!("{other:?}"),
        }
        // Forcing system-scope there makes unified the default, which is refused too.
        let b = Overrides {
            visibility: Some(SystemScope),
            ..Overrides::default()
        };
        assert!(matches!(
            plan(no_map, &Overrides::default(), &b),
            Err(Error::InvalidArgument { value, .. }) if value == "unified (from the builder)"
        ));
        // A forced unified under device-scope visibility is allowed, with a warning.
        let wsl = probe(TargetOs::Linux, Some(WSL2_PV), false, Some(DISCRETE));
        let p = plan(wsl, &e, &Overrides::default()).unwrap();
        assert_eq!(
            (p.visibility, p.strategy),
            (DeviceScope, TransferStrategy::Unified)
        );
        assert!(
            p.reasons.iter().any(|r| r.starts_with("warning")),
            "{:?}",
            p.reasons
        );
    }
}
