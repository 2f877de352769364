//! Is there a usable CUDA driver and device here? [`CudaProbe::detect`] answers without
//! panicking: cudarc panics on the first driver call when `libcuda` is absent, so the
//! library is looked for first ([`cudarc::driver::sys::is_culib_present`]), and every
//! other failure (cuInit, no device, an old driver) is its own [`Error`] variant.
//!
//! A [`CudaInfo`] is also the proof that `cuInit` succeeded in this process: the driver
//! calls of [`crate::context`], [`crate::memory`] and [`crate::backend`] start from one.

use std::ffi::c_int;
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUdevice_attribute as Attr, CUresult};

use crate::error::{check, Error, Result};

/// The oldest driver gyre's driver calls work with (12.2: `cuMemAdvise_v2`,
/// `cuMemPrefetchAsync_v2`; cudarc resolves symbols lazily and panics on a missing one).
pub const MIN_DRIVER_VERSION: i32 = 12020;
/// Drivers from this version on have `cuFuncLoad`, used to load a kernel eagerly.
pub const FUNC_LOAD_DRIVER_VERSION: i32 = 12040;

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
    /// The architecture number NVRTC takes (`90` for sm_90).
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
    /// The driver's CUDA version (`12080` for 12.8).
    pub driver_version: i32,
    /// Number of devices.
    pub device_count: i32,
    /// Device 0, the one gyre uses.
    pub device: DeviceInfo,
}

impl CudaInfo {
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
        unsafe { sys::is_culib_present() }
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

    /// Loads the driver, initialises it and describes device 0. A success is kept:
    /// the facts do not change within a process; a failure is detected again next time.
    pub fn detect() -> Result<CudaInfo> {
        static DETECTED: OnceLock<CudaInfo> = OnceLock::new();
        if let Some(info) = DETECTED.get() {
            return Ok(info.clone());
        }
        let info = detect_uncached()?;
        Ok(DETECTED.get_or_init(|| info).clone())
    }
}

fn detect_uncached() -> Result<CudaInfo> {
    if !CudaProbe::library_present() {
        return Err(Error::LibraryMissing {
            searched: CudaProbe::library_names(),
        });
    }
    // SAFETY: the library is present (checked above), so cudarc's loader does not panic;
    // cuInit(0) has no preconditions and may be called more than once.
    match unsafe { sys::cuInit(0) } {
        CUresult::CUDA_SUCCESS => {}
        CUresult::CUDA_ERROR_NO_DEVICE => return Err(Error::NoDevice { driver: 0 }),
        e => {
            return Err(Error::InitFailed {
                code: e as i32,
                name: format!("{e:?}"),
            })
        }
    }
    let mut version: c_int = 0;
    // SAFETY: the driver is initialised; one int written through a valid pointer.
    check(
        "cuDriverGetVersion",
        unsafe { sys::cuDriverGetVersion(&mut version) },
        String::new,
    )?;
    if version < MIN_DRIVER_VERSION {
        return Err(Error::DriverTooOld {
            found: version,
            need: MIN_DRIVER_VERSION,
            why: "cuMemAdvise_v2 and cuMemPrefetchAsync_v2",
        });
    }
    let mut count: c_int = 0;
    // SAFETY: as above.
    check(
        "cuDeviceGetCount",
        unsafe { sys::cuDeviceGetCount(&mut count) },
        String::new,
    )?;
    if count < 1 {
        return Err(Error::NoDevice { driver: version });
    }
    let device = describe(0)?;
    Ok(CudaInfo {
        driver_version: version,
        device_count: count,
        device,
    })
}

/// Describes device `ordinal`. The driver must be initialised.
fn describe(ordinal: i32) -> Result<DeviceInfo> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: driver initialised (caller); one int written through a valid pointer.
    check(
        "cuDeviceGet",
        unsafe { sys::cuDeviceGet(&mut dev, ordinal) },
        || format!(", ordinal {ordinal}"),
    )?;
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is 256 bytes and the length passed is 255, leaving a NUL.
    check(
        "cuDeviceGetName",
        unsafe { sys::cuDeviceGetName(buf.as_mut_ptr().cast(), 255, dev) },
        String::new,
    )?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut total_mem = 0usize;
    // SAFETY: valid device handle; one usize written through a valid pointer.
    check(
        "cuDeviceTotalMem",
        unsafe { sys::cuDeviceTotalMem_v2(&mut total_mem, dev) },
        String::new,
    )?;
    let attr = |a: Attr| -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: valid device handle; one int written through a valid pointer.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) };
        check("cuDeviceGetAttribute", r, || format!(", attribute {a:?}"))?;
        Ok(v)
    };
    Ok(DeviceInfo {
        ordinal,
        compute_capability: (
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        total_mem,
        can_map_host_memory: attr(Attr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? != 0,
        unified_addressing: attr(Attr::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0,
        concurrent_managed_access: attr(Attr::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? != 0,
        pageable_memory_access: attr(Attr::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)? != 0,
        host_native_atomic_supported: attr(Attr::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED)?
            != 0,
        name,
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
        let e = Error::driver(
            "cuMemHostAlloc",
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            ", 4096 bytes".into(),
        );
        let s = e.to_string();
        assert!(
            s.contains("cuMemHostAlloc") && s.contains("CUDA_ERROR_OUT_OF_MEMORY"),
            "{s}"
        );
        assert!(s.contains("code 2") && s.contains("4096 bytes"), "{s}");
        assert_eq!(version_string(12080), "12.8");
    }
}
