//! [`MemoryVisibility`]: what a running kernel and the host can see of each other's
//! writes, detected from a [`PlatformProbe`], and the [`MemoryPlan`](crate::plan::MemoryPlan) that follows from it.
//!
//! Detection ([`detect`]) is a pure function of the probe, so every platform's path is
//! unit-tested on any machine. [`crate::plan::plan`] applies the overrides (builder >
//! environment > detection) and refuses a strategy the platform cannot honour instead of
//! changing it.
//! `docs/memory-visibility.md` describes each platform and the overrides.
//!
//! # Rules of [`detect`], in order
//!
//! 1. **No device** (the CPU backend): [`MemoryVisibility::SystemScope`]. The rings are
//!    ordinary host memory, coherent for every host thread, whatever the OS.
//! 2. **WSL** (Linux with `microsoft` or `wsl` in `/proc/version`, or `WSL_DISTRO_NAME` /
//!    `WSL_INTEROP` set): [`MemoryVisibility::DeviceScope`]. WSL2 reaches the GPU through
//!    the paravirtualised WDDM driver (dxgkrnl); mapped pinned memory exists but system-
//!    scope atomics on it are not coherent between a running kernel and the host (and
//!    managed memory has no concurrent access), so the device's rings stay in device
//!    memory and the host polls them by DMA.
//! 3. **Native Linux**: [`MemoryVisibility::SystemScope`] when the device can map host
//!    memory and has unified addressing (mapped pinned memory at one address on both
//!    sides); otherwise [`MemoryVisibility::ExplicitDma`], naming what is missing.
//! 4. **Native Windows** (WDDM): [`MemoryVisibility::ExplicitDma`] unless the device
//!    maps host memory *and* reports pageable memory access and host-native atomics
//!    (hardware coherence), then [`MemoryVisibility::SystemScope`]. Under WDDM the OS
//!    owns GPU memory management and batches submissions; gyre does not rely on a
//!    persistent kernel seeing host writes to mapped memory there without hardware
//!    coherence. `GYRE_MEMORY_VISIBILITY=system-scope` overrides this.
//! 5. **macOS**, or any other OS, with a device: [`MemoryVisibility::ExplicitDma`]
//!    (macOS has no CUDA; nothing else is known to be coherent).

use crate::error::{Error, Result};
use crate::strategy::TransferStrategy;

/// The names [`MemoryVisibility`] parses, for error messages.
pub const VALID_VISIBILITIES: &str = "valid values: system-scope, device-scope, explicit-dma";

/// The operating system a probe describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetOs {
    /// Linux, native or under WSL.
    Linux,
    /// Native Windows.
    Windows,
    /// macOS.
    MacOs,
    /// Anything else, by `std::env::consts::OS` name.
    Other(&'static str),
}

impl TargetOs {
    /// The OS this process runs on.
    pub fn host() -> Self {
        match std::env::consts::OS {
            "linux" => TargetOs::Linux,
            "windows" => TargetOs::Windows,
            "macos" => TargetOs::MacOs,
            other => TargetOs::Other(other),
        }
    }
}

impl core::fmt::Display for TargetOs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            TargetOs::Linux => "linux",
            TargetOs::Windows => "windows",
            TargetOs::MacOs => "macos",
            TargetOs::Other(name) => name,
        })
    }
}

/// The device attributes detection looks at (CUDA's names in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DeviceAttributes {
    /// Mapped pinned host memory works (`CAN_MAP_HOST_MEMORY`).
    pub can_map_host_memory: bool,
    /// Host and device share one address space (`UNIFIED_ADDRESSING`).
    pub unified_addressing: bool,
    /// The host may touch managed memory while kernels run (`CONCURRENT_MANAGED_ACCESS`).
    pub concurrent_managed_access: bool,
    /// The device reads pageable host memory: HMM or ATS (`PAGEABLE_MEMORY_ACCESS`).
    pub pageable_memory_access: bool,
    /// Device atomics on host memory are native (`HOST_NATIVE_ATOMIC_SUPPORTED`).
    pub host_native_atomics: bool,
}

impl DeviceAttributes {
    /// Every attribute as a CUDA-named `(label, value)` pair, for reports.
    pub fn fields(&self) -> [(&'static str, bool); 5] {
        [
            ("can map host memory", self.can_map_host_memory),
            ("unified addressing", self.unified_addressing),
            ("concurrent managed access", self.concurrent_managed_access),
            ("pageable memory access", self.pageable_memory_access),
            ("host native atomics", self.host_native_atomics),
        ]
    }
}

/// Everything [`detect`] looks at. Build one by hand in tests, or with
/// [`PlatformProbe::from_host`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformProbe {
    /// The operating system.
    pub os: TargetOs,
    /// The text of `/proc/version`, where it could be read.
    pub proc_version: Option<String>,
    /// `WSL_DISTRO_NAME` or `WSL_INTEROP` is set.
    pub wsl_env: bool,
    /// The device's attributes; `None` for the CPU backend.
    pub device: Option<DeviceAttributes>,
}

impl PlatformProbe {
    /// This machine: the OS, `/proc/version` (on Linux) and the WSL variables. `device`
    /// is `None`; the backend that owns a device fills it with [`Self::with_device`].
    pub fn from_host() -> Self {
        let os = TargetOs::host();
        let proc_version = match os {
            TargetOs::Linux => std::fs::read_to_string("/proc/version")
                .ok()
                .map(|s| s.trim().to_owned()),
            _ => None,
        };
        let wsl_env = ["WSL_DISTRO_NAME", "WSL_INTEROP"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        PlatformProbe {
            os,
            proc_version,
            wsl_env,
            device: None,
        }
    }

    /// The same probe with `device`'s attributes.
    pub fn with_device(mut self, device: DeviceAttributes) -> Self {
        self.device = Some(device);
        self
    }

    /// Why this looks like WSL, or `None`. Only Linux can be WSL.
    pub fn wsl_evidence(&self) -> Option<String> {
        if self.os != TargetOs::Linux {
            return None;
        }
        let pv = self.proc_version.as_deref().filter(|pv| {
            let l = pv.to_ascii_lowercase();
            l.contains("microsoft") || l.contains("wsl")
        });
        match (pv, self.wsl_env) {
            (Some(_), true) => Some(
                "/proc/version names Microsoft/WSL and WSL_DISTRO_NAME or WSL_INTEROP is set"
                    .into(),
            ),
            (Some(_), false) => Some("/proc/version names Microsoft/WSL".into()),
            (None, true) => Some("WSL_DISTRO_NAME or WSL_INTEROP is set".into()),
            (None, false) => None,
        }
    }
}

/// What a running kernel and the host can see of each other's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryVisibility {
    /// Host and device see each other's writes to shared (mapped) memory, with system-
    /// scope atomics: the rings can be shared zero copy.
    SystemScope,
    /// Device-scope coherence only (WSL2): shared memory exists but is not coherent
    /// while the kernel runs, so the host copies by DMA and polls.
    DeviceScope,
    /// No coherent shared memory is relied on: every exchange is an explicit copy.
    ExplicitDma,
}

impl MemoryVisibility {
    /// The name used in the environment and in logs.
    pub fn name(&self) -> &'static str {
        match self {
            MemoryVisibility::SystemScope => "system-scope",
            MemoryVisibility::DeviceScope => "device-scope",
            MemoryVisibility::ExplicitDma => "explicit-dma",
        }
    }
}

impl core::fmt::Display for MemoryVisibility {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for MemoryVisibility {
    type Err = Error;
    /// Parses `system-scope`, `device-scope` or `explicit-dma` (case-insensitive, `_`
    /// for `-` accepted); anything else is [`Error::InvalidArgument`] listing them.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "system-scope" => Ok(MemoryVisibility::SystemScope),
            "device-scope" => Ok(MemoryVisibility::DeviceScope),
            "explicit-dma" => Ok(MemoryVisibility::ExplicitDma),
            _ => Err(Error::InvalidArgument {
                name: "memory_visibility",
                value: s.to_owned(),
                reason: VALID_VISIBILITIES,
            }),
        }
    }
}

/// What [`detect`] decided, and why (one line per deciding fact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// The detected visibility.
    pub visibility: MemoryVisibility,
    /// Why, in order.
    pub reasons: Vec<String>,
}

/// Detects the memory visibility of `probe`'s platform. Pure; the rules are in the
/// [module documentation](self).
pub fn detect(probe: &PlatformProbe) -> Detection {
    use MemoryVisibility::*;
    let mut reasons = Vec::new();
    let wsl = probe.wsl_evidence();
    let Some(d) = probe.device else {
        reasons.push(
            "no device: the CPU backend's rings are ordinary host memory, coherent for every thread"
                .to_owned(),
        );
        if let Some(why) = wsl {
            reasons.push(format!(
                "WSL detected ({why}), which does not matter without a device"
            ));
        }
        return Detection {
            visibility: SystemScope,
            reasons,
        };
    };
    let missing = |need: &[(&'static str, bool)]| -> Vec<&'static str> {
        need.iter().filter(|(_, v)| !v).map(|(n, _)| *n).collect()
    };
    let visibility = match (probe.os, wsl) {
        (_, Some(why)) => {
            reasons.push(format!("WSL detected: {why}"));
            reasons.push(
                "WSL2 reaches the GPU through paravirtualised WDDM: mapped memory has no \
                 coherent system-scope atomics with a running kernel, so the host polls \
                 device memory by DMA"
                    .to_owned(),
            );
            DeviceScope
        }
        (TargetOs::Linux, None) => {
            let need = [
                ("can map host memory", d.can_map_host_memory),
                ("unified addressing", d.unified_addressing),
            ];
            let miss = missing(&need);
            if miss.is_empty() {
                reasons.push(
                    "native Linux, device maps host memory with unified addressing: rings \
                     can live in mapped pinned memory"
                        .to_owned(),
                );
                SystemScope
            } else {
                reasons.push(format!(
                    "native Linux, but the device lacks {}: no coherent shared rings",
                    miss.join(" and ")
                ));
                ExplicitDma
            }
        }
        (TargetOs::Windows, None) => {
            let need = [
                ("can map host memory", d.can_map_host_memory),
                ("pageable memory access", d.pageable_memory_access),
                ("host native atomics", d.host_native_atomics),
            ];
            let miss = missing(&need);
            if miss.is_empty() {
                reasons.push(
                    "native Windows, device reports pageable memory access and host-native \
                     atomics (hardware coherence): rings can be shared"
                        .to_owned(),
                );
                SystemScope
            } else {
                reasons.push(format!(
                    "native Windows (WDDM) and the device lacks {}: gyre does not rely on \
                     mapped-memory coherence with a persistent kernel there",
                    miss.join(", ")
                ));
                ExplicitDma
            }
        }
        (TargetOs::MacOs, None) => {
            reasons.push("macOS has no CUDA: no host-coherent device mapping is known".to_owned());
            ExplicitDma
        }
        (TargetOs::Other(os), None) => {
            reasons.push(format!(
                "{os}: no device memory model known to gyre, copies are the safe choice"
            ));
            ExplicitDma
        }
    };
    Detection {
        visibility,
        reasons,
    }
}

/// The strategy a visibility gets when none is chosen: `SystemScope -> Unified`,
/// `DeviceScope -> DmaPolling` (every [`DEFAULT_POLL_INTERVAL`](crate::strategy::DEFAULT_POLL_INTERVAL)),
/// `ExplicitDma -> Async`.
pub fn default_strategy(visibility: MemoryVisibility) -> TransferStrategy {
    match visibility {
        MemoryVisibility::SystemScope => TransferStrategy::Unified,
        MemoryVisibility::DeviceScope => TransferStrategy::DmaPolling {
            poll_interval: crate::strategy::DEFAULT_POLL_INTERVAL,
        },
        MemoryVisibility::ExplicitDma => TransferStrategy::Async,
    }
}

/// Whether the platform can honour `strategy`: its values are valid, and `Unified` needs
/// a device that maps host memory (or no device: the CPU backend).
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the strategy and why; never a changed strategy.
pub fn check_strategy(strategy: TransferStrategy, probe: &PlatformProbe) -> Result<()> {
    strategy.validate()?;
    if let (TransferStrategy::Unified, Some(d)) = (strategy, probe.device) {
        if !d.can_map_host_memory {
            return Err(Error::InvalidArgument {
                name: "transfer_strategy",
                value: strategy.to_string(),
                reason: "the device cannot map host memory (CUDA: CAN_MAP_HOST_MEMORY is 0; \
                         OpenCL: no fine-grained SVM with atomics, or GYRE_OPENCL_SVM=off), \
                         so rings cannot be shared zero copy; choose sync, async or \
                         dma-polling",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Probes and devices shared by the visibility and strategy tests.
    use super::*;

    pub(crate) const WSL2_PV: &str = "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc (GCC) 11.2.0) #1 SMP";
    pub(crate) const LINUX_PV: &str =
        "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115) (gcc 13.2.0) #45-Ubuntu SMP";

    /// A device with every attribute.
    pub(crate) const FULL: DeviceAttributes = DeviceAttributes {
        can_map_host_memory: true,
        unified_addressing: true,
        concurrent_managed_access: true,
        pageable_memory_access: true,
        host_native_atomics: true,
    };
    /// A typical discrete GPU: maps host memory with UVA, no HMM/ATS, no native atomics.
    pub(crate) const DISCRETE: DeviceAttributes = DeviceAttributes {
        can_map_host_memory: true,
        unified_addressing: true,
        concurrent_managed_access: true,
        pageable_memory_access: false,
        host_native_atomics: false,
    };
    pub(crate) const NOTHING: DeviceAttributes = DeviceAttributes {
        can_map_host_memory: false,
        unified_addressing: false,
        concurrent_managed_access: false,
        pageable_memory_access: false,
        host_native_atomics: false,
    };

    pub(crate) fn probe(
        os: TargetOs,
        pv: Option<&str>,
        wsl_env: bool,
        device: Option<DeviceAttributes>,
    ) -> PlatformProbe {
        PlatformProbe {
            os,
            proc_version: pv.map(str::to_owned),
            wsl_env,
            device,
        }
    }

    pub(crate) fn without(f: impl Fn(&mut DeviceAttributes)) -> DeviceAttributes {
        let mut d = FULL;
        f(&mut d);
        d
    }

    pub(crate) fn dma() -> TransferStrategy {
        default_strategy(MemoryVisibility::DeviceScope)
    }

    /// `(what, probe, expected visibility)`; the expected strategy is the mapping.
    #[rustfmt::skip]
    pub(crate) fn cases() -> Vec<(&'static str, PlatformProbe, MemoryVisibility)> {
        use MemoryVisibility::{DeviceScope, ExplicitDma, SystemScope};
        use TargetOs::{Linux, MacOs, Other, Windows};
        let no = |f: fn(&mut DeviceAttributes)| Some(without(f));
        let (wsl, linux) = (Some(WSL2_PV), Some(LINUX_PV));
        vec![
            ("WSL2 by /proc/version",            probe(Linux, wsl, false, Some(DISCRETE)), DeviceScope),
            ("WSL2 by /proc/version and env",    probe(Linux, wsl, true, Some(FULL)), DeviceScope),
            ("WSL1-style /proc/version",         probe(Linux, Some("Linux version 4.4.0-19041-Microsoft"), false, Some(DISCRETE)), DeviceScope),
            ("WSL by env only",                  probe(Linux, None, true, Some(DISCRETE)), DeviceScope),
            ("WSL by env, plain /proc/version",  probe(Linux, linux, true, Some(DISCRETE)), DeviceScope),
            ("Linux, discrete GPU",              probe(Linux, linux, false, Some(DISCRETE)), SystemScope),
            ("Linux, every attribute",           probe(Linux, linux, false, Some(FULL)), SystemScope),
            ("Linux, no /proc/version",          probe(Linux, None, false, Some(DISCRETE)), SystemScope),
            ("Linux, no host mapping",           probe(Linux, linux, false, no(|d| d.can_map_host_memory = false)), ExplicitDma),
            ("Linux, no unified addressing",     probe(Linux, linux, false, no(|d| d.unified_addressing = false)), ExplicitDma),
            ("Linux, no concurrent managed",     probe(Linux, linux, false, no(|d| d.concurrent_managed_access = false)), SystemScope),
            ("Linux, no pageable access",        probe(Linux, linux, false, no(|d| d.pageable_memory_access = false)), SystemScope),
            ("Linux, no native atomics",         probe(Linux, linux, false, no(|d| d.host_native_atomics = false)), SystemScope),
            ("Linux, no attribute",              probe(Linux, linux, false, Some(NOTHING)), ExplicitDma),
            ("Windows, discrete GPU",            probe(Windows, None, false, Some(DISCRETE)), ExplicitDma),
            ("Windows, every attribute",         probe(Windows, None, false, Some(FULL)), SystemScope),
            ("Windows, no host mapping",         probe(Windows, None, false, no(|d| d.can_map_host_memory = false)), ExplicitDma),
            ("Windows, no unified addressing",   probe(Windows, None, false, no(|d| d.unified_addressing = false)), SystemScope),
            ("Windows, no concurrent managed",   probe(Windows, None, false, no(|d| d.concurrent_managed_access = false)), SystemScope),
            ("Windows, no pageable access",      probe(Windows, None, false, no(|d| d.pageable_memory_access = false)), ExplicitDma),
            ("Windows, no native atomics",       probe(Windows, None, false, no(|d| d.host_native_atomics = false)), ExplicitDma),
            ("Windows, WSL variables leak in",   probe(Windows, None, true, Some(DISCRETE)), ExplicitDma),
            ("macOS with a device",              probe(MacOs, None, false, Some(FULL)), ExplicitDma),
            ("other OS with a device",           probe(Other("freebsd"), None, false, Some(FULL)), ExplicitDma),
            ("no device, Linux",                 probe(Linux, linux, false, None), SystemScope),
            ("no device, WSL2",                  probe(Linux, wsl, true, None), SystemScope),
            ("no device, Windows",               probe(Windows, None, false, None), SystemScope),
            ("no device, macOS",                 probe(MacOs, None, false, None), SystemScope),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use std::time::Duration;
    use MemoryVisibility::*;

    #[test]
    fn detection_table() {
        for (what, p, vis) in cases() {
            let strategy = match vis {
                SystemScope => TransferStrategy::Unified,
                DeviceScope => dma(),
                ExplicitDma => TransferStrategy::Async,
            };
            let d = detect(&p);
            assert_eq!(d.visibility, vis, "{what}: {:?}", d.reasons);
            assert!(!d.reasons.is_empty(), "{what}");
            assert_eq!(default_strategy(d.visibility), strategy, "{what}");
        }
        assert_eq!(
            dma(),
            TransferStrategy::DmaPolling {
                poll_interval: crate::strategy::DEFAULT_POLL_INTERVAL
            }
        );
    }

    #[test]
    fn reasons_name_the_deciding_facts() {
        let d = detect(&probe(
            TargetOs::Linux,
            Some(WSL2_PV),
            false,
            Some(DISCRETE),
        ));
        assert!(d.reasons[0].contains("/proc/version"), "{:?}", d.reasons);
        let d = detect(&probe(TargetOs::Linux, None, true, Some(DISCRETE)));
        assert!(d.reasons[0].contains("WSL_DISTRO_NAME"), "{:?}", d.reasons);
        let d = detect(&probe(TargetOs::Linux, None, false, Some(NOTHING)));
        assert!(
            d.reasons[0].contains("can map host memory and unified addressing"),
            "{:?}",
            d.reasons
        );
        let d = detect(&probe(TargetOs::Windows, None, false, Some(DISCRETE)));
        assert!(
            d.reasons[0].contains("pageable memory access, host native atomics"),
            "{:?}",
            d.reasons
        );
        let d = detect(&probe(TargetOs::Linux, Some(WSL2_PV), false, None));
        assert!(
            d.reasons.iter().any(|r| r.contains("WSL detected")),
            "{:?}",
            d.reasons
        );
    }

    #[test]
    fn visibility_names_round_trip_and_reject_others() {
        for v in [SystemScope, DeviceScope, ExplicitDma] {
            assert_eq!(v.to_string().parse::<MemoryVisibility>(), Ok(v));
        }
        assert_eq!("SYSTEM_SCOPE".parse::<MemoryVisibility>(), Ok(SystemScope));
        let e = "coherent".parse::<MemoryVisibility>().unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument {
                name: "memory_visibility",
                value: "coherent".into(),
                reason: VALID_VISIBILITIES,
            }
        );
    }

    #[test]
    fn check_strategy_refuses_unified_without_host_mapping() {
        let no_map = without(|d| d.can_map_host_memory = false);
        for os in [TargetOs::Linux, TargetOs::Windows, TargetOs::MacOs] {
            let p = probe(os, None, false, Some(no_map));
            match check_strategy(TransferStrategy::Unified, &p) {
                Err(Error::InvalidArgument {
                    name,
                    value,
                    reason,
                }) => {
                    assert_eq!((name, value.as_str()), ("transfer_strategy", "unified"));
                    assert!(reason.contains("CAN_MAP_HOST_MEMORY"), "{reason}");
                }
                other => panic!("{os}: {other:?}"),
            }
            for ok in [TransferStrategy::Sync, TransferStrategy::Async, dma()] {
                assert_eq!(check_strategy(ok, &p), Ok(()), "{ok}");
            }
        }
        // No device (CPU backend) and a mapping device honour it.
        assert_eq!(
            check_strategy(
                TransferStrategy::Unified,
                &probe(TargetOs::Linux, None, false, None)
            ),
            Ok(())
        );
        assert_eq!(
            check_strategy(
                TransferStrategy::Unified,
                &probe(TargetOs::Linux, None, false, Some(DISCRETE))
            ),
            Ok(())
        );
        // A bad interval is refused too.
        let bad = TransferStrategy::DmaPolling {
            poll_interval: Duration::ZERO,
        };
        assert!(check_strategy(bad, &probe(TargetOs::Linux, None, false, None)).is_err());
    }

    #[test]
    fn from_host_reads_this_machine() {
        let p = PlatformProbe::from_host();
        assert_eq!(p.os, TargetOs::host());
        assert_eq!(p.device, None);
        assert_eq!(detect(&p).visibility, SystemScope);
        if p.os != TargetOs::Linux {
            assert_eq!(p.proc_version, None);
        }
        assert_eq!(p.clone().with_device(FULL).device, Some(FULL));
    }
}
