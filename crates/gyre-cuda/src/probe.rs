//! Is there a usable CUDA driver and device here? [`CudaProbe::detect`] answers without
//! panicking: the driver library is looked for first (cudarc panics on a driver call when
//! `libcuda` is absent), and every other failure (cuInit, no device, an old driver) is its
//! own [`Error`] variant.
//!
//! Detection is also where gyre prepares the driver's environment, once, before the
//! process's first `cuInit` (the driver reads it only then; see [`DriverEnv`]):
//!
//! * `CUDA_MODULE_LOADING=EAGER`: with lazy loading (the default since 12.2) a kernel's
//!   code is loaded at its first launch, and that load waits for the whole device to be
//!   idle, which never happens while a persistent ring kernel runs: a second kernel, or
//!   the visibility probe, would hang behind the first.
//! * `CUDA_DEVICE_MAX_CONNECTIONS=32`: the device has this many hardware work queues
//!   (default 8); streams beyond it share queues, and work queued behind a persistent
//!   kernel on a shared queue never runs. gyre holds at most this many streams per
//!   context (see `crate::stream`).
//!
//! A variable the user already set is left alone. The environment is changed only while
//! the process has a single thread ([`prepare_environment`]; call it first thing in
//! `main`); otherwise gyre leaves it and says so ([`DriverEnv::not_set`], `gyre doctor`).
//! Either way every module gyre uses is loaded explicitly (`cuFuncLoad`) before its first
//! launch. A [`CudaInfo`] is the proof that `cuInit` succeeded in this process: the
//! driver calls of the other modules start from one.

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::result;
use crate::sys::CUdevice_attribute as Attr;

/// The oldest driver gyre's driver calls work with (12.2: `cuMemAdvise_v2`,
/// `cuMemPrefetchAsync_v2`).
pub const MIN_DRIVER_VERSION: i32 = 12020;

/// The hardware queue count gyre asks for (`CUDA_DEVICE_MAX_CONNECTIONS`, at most 32).
pub const WANTED_CONNECTIONS: u32 = 32;
/// The driver's default when the variable is unset or invalid.
pub const DEFAULT_CONNECTIONS: u32 = 8;

/// The driver environment in effect for this process (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverEnv {
    /// `CUDA_MODULE_LOADING` as the driver saw it (`EAGER`, `LAZY`, or `unset`).
    pub module_loading: String,
    /// Hardware work queues per device (`CUDA_DEVICE_MAX_CONNECTIONS`, 1..=32).
    pub max_connections: u32,
    /// The variables gyre set itself (it never overrides one the user set).
    pub set_by_gyre: Vec<&'static str>,
    /// Why gyre left a variable unset that it would have set (the process already had
    /// several threads, or CUDA was initialised first), if it did.
    pub not_set: Option<String>,
    /// Whether something in this process called `cuInit` before gyre did, so the
    /// variables above may not be what the driver read.
    pub initialized_before_gyre: bool,
}

/// What the driver says about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The ordinal (`cuDeviceGet`).
    pub ordinal: i32,
    /// The device name.
    pub name: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (i32, i32),
    /// Global memory in bytes.
    pub total_mem: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// `KERNEL_EXEC_TIMEOUT`: a display watchdog kills long-running kernels (WDDM,
    /// WSL2, a GPU that drives a display).
    pub kernel_exec_timeout: bool,
    /// `CAN_MAP_HOST_MEMORY`: mapped pinned memory (zero copy) works.
    pub can_map_host_memory: bool,
    /// `UNIFIED_ADDRESSING`: host and device share one address space.
    pub unified_addressing: bool,
    /// `CONCURRENT_MANAGED_ACCESS`: the host may touch managed memory while kernels run.
    pub concurrent_managed_access: bool,
    /// `PAGEABLE_MEMORY_ACCESS`: the device reads pageable host memory (HMM, ATS).
    pub pageable_memory_access: bool,
    /// `HOST_NATIVE_ATOMIC_SUPPORTED`: device atomics on host memory are native
    /// (NVLink-C2C), not emulated.
    pub host_native_atomic_supported: bool,
}

impl DeviceInfo {
    /// The architecture number (`90` for sm_90).
    pub fn arch(&self) -> u32 {
        let (major, minor) = self.compute_capability;
        (major.max(0) as u32) * 10 + minor.max(0) as u32
    }
}

/// What [`CudaProbe::detect`] found: a loaded driver, initialised, with at least one
/// device. Only `detect` makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaInfo {
    /// The driver's CUDA version (`13000` for 13.0).
    pub driver_version: i32,
    /// Number of devices.
    pub device_count: i32,
    /// The device gyre uses: device 0 as detected, another through
    /// [`CudaInfo::on_device`].
    pub device: DeviceInfo,
    /// Every device the driver reports, by ordinal (`gyre doctor` lists them).
    pub devices: Vec<DeviceInfo>,
    /// The driver environment in effect.
    pub env: DriverEnv,
}

impl CudaInfo {
    /// The same facts about device `ordinal`.
    ///
    /// # Errors
    ///
    /// [`Error::DeviceOutOfRange`] when the driver reports no such device.
    pub fn on_device(&self, ordinal: usize) -> Result<CudaInfo> {
        let d = self.devices.get(ordinal).ok_or(Error::DeviceOutOfRange {
            ordinal,
            count: self.devices.len(),
        })?;
        Ok(CudaInfo {
            device: d.clone(),
            ..self.clone()
        })
    }

    /// The driver version as `major.minor`.
    pub fn driver_version_string(&self) -> String {
        version_string(self.driver_version)
    }
}

/// `12080` -> `"12.8"`.
pub fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// Detects the CUDA driver and device 0.
#[derive(Debug, Clone, Copy)]
pub struct CudaProbe;

impl CudaProbe {
    /// Whether `libcuda` loads, without calling into it.
    pub fn library_present() -> bool {
        // SAFETY: only dlopens the candidate names and closes them again; loading libcuda
        // runs no initialiser with preconditions.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    /// The driver library's names that cudarc tries on this OS, for messages.
    pub fn library_names() -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for n in ["cuda", "nvcuda"]
            .iter()
            .flat_map(|l| cudarc::get_lib_name_candidates(l))
        {
            let plain = !cfg!(unix) || n.starts_with("libcuda.so");
            if plain && !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }

    /// Loads the driver, prepares its environment (once), initialises it and describes
    /// every device (`device`: device 0). A success is kept: the facts do not change within a process; a failure
    /// is detected again next time.
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`], [`Error::DriverSymbol`], [`Error::InitFailed`],
    /// [`Error::NoDevice`], [`Error::DriverTooOld`], or a failed query naming its call.
    pub fn detect() -> Result<CudaInfo> {
        static DETECTED: OnceLock<CudaInfo> = OnceLock::new();
        if let Some(info) = DETECTED.get() {
            return Ok(info.clone());
        }
        let info = detect_uncached()?;
        Ok(DETECTED.get_or_init(|| info).clone())
    }
}

/// Threads in this process, from `/proc/self/status` (Linux); `None` when unknown.
fn process_threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Prepares the driver's environment (see the module docs), once per process: sets
/// `CUDA_MODULE_LOADING=EAGER` and `CUDA_DEVICE_MAX_CONNECTIONS=32` where unset, before
/// the first `cuInit`. Changing the environment is only sound while the process has a
/// single thread (another thread's `getenv` in C code races with it), so it is done only
/// then; otherwise nothing is set and [`DriverEnv::not_set`] says why. Call this at the
/// top of `main` (the `gyre` CLI does) to be sure it happens; the first CUDA probe calls
/// it too.
///
/// Returns the environment in effect, or `None` without a CUDA driver library.
pub fn prepare_environment() -> Option<DriverEnv> {
    prepare_env().ok()
}

fn prepare_env() -> Result<DriverEnv> {
    static ENV: OnceLock<DriverEnv> = OnceLock::new();
    if let Some(e) = ENV.get() {
        return Ok(e.clone());
    }
    result::api()?;
    // Before cuInit, cuDeviceGetCount fails with CUDA_ERROR_NOT_INITIALIZED; success
    // means another library initialised the driver first.
    let initialized_before_gyre = result::device_count().is_ok();
    let wanted = [
        ("CUDA_MODULE_LOADING", "EAGER".to_owned()),
        (
            "CUDA_DEVICE_MAX_CONNECTIONS",
            WANTED_CONNECTIONS.to_string(),
        ),
    ];
    let unset: Vec<&(&'static str, String)> = wanted
        .iter()
        .filter(|(var, _)| std::env::var_os(var).is_none())
        .collect();
    let mut set_by_gyre = Vec::new();
    let mut not_set = None;
    if initialized_before_gyre {
        if !unset.is_empty() {
            not_set = Some("CUDA was initialised before gyre's first probe".to_owned());
        }
    } else if !unset.is_empty() {
        match process_threads() {
            Some(1) => {
                for (var, value) in unset {
                    // Sound: the process has one thread (checked just above, and this
                    // thread creates none in between), and cuInit has not run.
                    std::env::set_var(var, value);
                    set_by_gyre.push(*var);
                }
            }
            threads => {
                let names: Vec<&str> = unset.iter().map(|(v, _)| *v).collect();
                not_set = Some(format!(
                    "{} unset, and the process already runs {} threads (changing the \
                     environment then races with them): set them before starting \
                     threads, e.g. gyre::prepare_cuda_environment() first thing in main",
                    names.join(" and "),
                    threads.map_or_else(|| "several".to_owned(), |n| n.to_string())
                ));
            }
        }
    }
    let max_connections = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| (1..=32).contains(n))
        .unwrap_or(DEFAULT_CONNECTIONS);
    let env = DriverEnv {
        module_loading: std::env::var("CUDA_MODULE_LOADING").unwrap_or_else(|_| "unset".into()),
        max_connections,
        set_by_gyre,
        not_set,
        initialized_before_gyre,
    };
    if let Some(why) = &env.not_set {
        tracing::warn!(
            CUDA_MODULE_LOADING = %env.module_loading,
            CUDA_DEVICE_MAX_CONNECTIONS = env.max_connections,
            "gyre did not set the CUDA driver environment: {why}"
        );
    }
    Ok(ENV.get_or_init(|| env).clone())
}

fn detect_uncached() -> Result<CudaInfo> {
    let env = prepare_env()?;
    result::init()?;
    let version = result::driver_version()?;
    if version < MIN_DRIVER_VERSION {
        return Err(Error::DriverTooOld {
            found: version,
            need: MIN_DRIVER_VERSION,
            why: "cuMemAdvise_v2 and cuMemPrefetchAsync_v2",
        });
    }
    let count = result::device_count()?;
    if count < 1 {
        return Err(Error::NoDevice { driver: version });
    }
    let devices = (0..count).map(describe).collect::<Result<Vec<_>>>()?;
    Ok(CudaInfo {
        driver_version: version,
        device_count: count,
        device: devices[0].clone(),
        devices,
        env,
    })
}

/// Describes device `ordinal`. The driver must be initialised.
fn describe(ordinal: i32) -> Result<DeviceInfo> {
    let dev = result::device_get(ordinal)?;
    let attr = |a: Attr| result::device_attribute(dev, a);
    Ok(DeviceInfo {
        ordinal,
        name: result::device_name(dev)?,
        compute_capability: (
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        total_mem: result::device_total_mem(dev)?,
        multiprocessors: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        kernel_exec_timeout: attr(Attr::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT)? != 0,
        can_map_host_memory: attr(Attr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0,
        unified_addressing: attr(Attr::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0,
        concurrent_managed_access: attr(Attr::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? != 0,
        pageable_memory_access: attr(Attr::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)? != 0,
        host_native_atomic_supported: attr(Attr::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED)?
            != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_never_panics_and_agrees_with_the_library_check() {
        match CudaProbe::detect() {
            Ok(info) => {
                assert!(CudaProbe::library_present());
                assert!(info.device_count >= 1);
                assert!(info.driver_version >= MIN_DRIVER_VERSION);
                assert!((1..=32).contains(&info.env.max_connections));
            }
            Err(Error::LibraryMissing { searched }) => {
                assert!(!CudaProbe::library_present());
                assert!(searched.iter().any(|n| n.contains("cuda")), "{searched:?}");
            }
            Err(e) => assert!(CudaProbe::library_present(), "{e}"),
        }
    }

    #[test]
    fn messages_say_what_is_missing() {
        let e = Error::LibraryMissing {
            searched: vec!["libcuda.so".into()],
        };
        assert!(
            e.to_string().contains("CUDA driver library not found"),
            "{e}"
        );
        let e = Error::DriverTooOld {
            found: 11080,
            need: 12020,
            why: "x",
        };
        assert!(e.to_string().contains("11.8 is too old"), "{e}");
        assert!(e.to_string().contains("12.2 or newer"), "{e}");
        let e = Error::driver("cuMemHostAlloc", 2, ", 4096 bytes".into());
        let s = e.to_string();
        assert!(
            s.contains("cuMemHostAlloc") && s.contains("CUDA_ERROR_OUT_OF_MEMORY"),
            "{s}"
        );
        assert!(s.contains("code 2") && s.contains("4096 bytes"), "{s}");
        assert_eq!(version_string(12080), "12.8");
        assert_eq!(version_string(13000), "13.0");
    }
}
