//! The device clock's calibration, kept between processes.
//!
//! The ring kernel is built with the clock's rate as a define (`port_opencl.h`), and a
//! calibration varies by up to about 1% from one process to the next (the probe's
//! command latency; `clock.rs`). Built with a fresh rate, every process would miss the
//! driver's program cache (PoCL's `kcache`, NVIDIA's compute cache: both key on the
//! source and the options) and rebuild every ring kernel, about a second each on PoCL.
//! So the first calibration of a device is kept in a file, and a later one that agrees
//! with it within [`AGREE`] uses the kept rate: the same options, the driver's cached
//! program. One that disagrees (another clock, a changed machine) replaces it.
//!
//! The file: `$XDG_CACHE_HOME/gyre/` (else `$HOME/.cache/gyre/`), one per device, named
//! after its vendor, name and version, holding the rate's bits as text. Nothing here can
//! fail a launch: an unreadable, corrupt or unwritable file means the fresh rate is used.

use std::path::{Path, PathBuf};

use crate::probe::DeviceInfo;
use crate::scale::ClockScale;

/// The largest relative difference between a fresh calibration and the kept one for the
/// kept one to be used: past the probe's scatter (0.6% seen on PoCL), far below a clock
/// of another rate.
pub(crate) const AGREE: f64 = 0.02;

/// Where the kept calibration of `info` lives, if a cache directory is known.
pub(crate) fn path_for(info: &DeviceInfo) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(
        base.join("gyre")
            .join(file_name(&info.vendor, &info.name, &info.version)),
    )
}

/// `opencl-clock-<vendor>-<name>-<version>`, each reduced to `[A-Za-z0-9._]` and the
/// whole to 200 bytes.
fn file_name(vendor: &str, name: &str, version: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut f = format!(
        "opencl-clock-{}-{}-{}",
        clean(vendor),
        clean(name),
        clean(version)
    );
    f.truncate(200);
    f
}

/// The rate to build with: the kept one at `path` if it agrees with `measured` within
/// [`AGREE`], else `measured` (kept at `path` for the next process, best effort).
pub(crate) fn settle(path: Option<&Path>, measured: f64) -> f64 {
    let Some(path) = path else {
        return measured;
    };
    let kept = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
        .map(f64::from_bits)
        .filter(|k| ClockScale::from_ns_per_tick(*k).is_some());
    if let Some(k) = kept {
        if ((measured - k) / k).abs() <= AGREE {
            return k;
        }
    }
    if let Err(e) = keep(path, measured) {
        tracing::debug!(path = %path.display(), error = %e, "the OpenCL clock calibration is not kept");
    }
    measured
}

/// Writes `ns_per_tick` to `path` whole: a temporary file, then a rename over it.
fn keep(path: &Path, ns_per_tick: f64) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, format!("{:016x}\n", ns_per_tick.to_bits()))?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gyre-clock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_first_calibration_is_kept_and_later_close_ones_use_it() {
        let d = dir("keep");
        let f = d
            .join("sub")
            .join(file_name("Vendor Inc.", "pthread-cpu", "OpenCL 3.0"));
        assert_eq!(settle(Some(&f), 0.3850), 0.3850, "nothing kept yet");
        assert_eq!(settle(Some(&f), 0.3871), 0.3850, "within 2%: the kept rate");
        assert_eq!(settle(Some(&f), 0.3832), 0.3850);
        assert_eq!(settle(Some(&f), 0.5), 0.5, "another clock: the fresh rate");
        assert_eq!(settle(Some(&f), 0.501), 0.5, "which is kept from then on");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_corrupt_or_unwritable_file_leaves_the_fresh_rate() {
        let d = dir("corrupt");
        std::fs::create_dir_all(&d).expect("dir");
        let f = d.join("opencl-clock-x");
        std::fs::write(&f, "not a rate").expect("write");
        assert_eq!(settle(Some(&f), 1.25), 1.25);
        assert_eq!(settle(Some(&f), 1.26), 1.25, "rewritten");
        std::fs::write(&f, format!("{:x}", f64::NAN.to_bits())).expect("write");
        assert_eq!(
            settle(Some(&f), 1.26),
            1.26,
            "an implausible kept rate is ignored"
        );
        // A file where the directory should be: nothing can be written under it.
        let blocked = f.join("below");
        assert_eq!(settle(Some(&blocked), 2.0), 2.0);
        assert_eq!(settle(None, 3.0), 3.0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn file_names_are_plain() {
        let n = file_name(
            "The pocl project",
            "pthread-skylake-avx512/Intel(R)",
            "OpenCL 3.0 PoCL",
        );
        assert_eq!(
            n,
            "opencl-clock-The_pocl_project-pthread_skylake_avx512_Intel_R_-OpenCL_3.0_PoCL"
        );
        assert!(file_name(&"v".repeat(300), "n", "1").len() <= 200);
    }
}
