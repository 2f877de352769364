//! What OpenCL offers here: platforms, devices and the capabilities the ring kernel needs
//! (fine-grained SVM with atomics, OpenCL C 3.0, atomic scopes). Makes no context.

use std::sync::OnceLock;

use opencl3::device::{
    Device, CL_DEVICE_ATOMIC_ORDER_ACQ_REL, CL_DEVICE_ATOMIC_SCOPE_ALL_DEVICES,
    CL_DEVICE_ATOMIC_SCOPE_DEVICE, CL_DEVICE_SVM_ATOMICS, CL_DEVICE_SVM_COARSE_GRAIN_BUFFER,
    CL_DEVICE_SVM_FINE_GRAIN_BUFFER, CL_DEVICE_SVM_FINE_GRAIN_SYSTEM, CL_DEVICE_TYPE_ACCELERATOR,
    CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU,
};
use opencl3::platform::Platform;

use crate::error::{check, cl_error, Error, Result};

/// `CL_PLATFORM_NOT_FOUND_KHR`: what the ICD loader returns when no driver is installed.
const PLATFORM_NOT_FOUND_KHR: i32 = -1001;

/// Runs `f` while holding the process-wide OpenCL discovery lock. The first queries
/// initialise the ICD loader and the drivers, and PoCL 3.1 does not survive two threads
/// doing that at once (one thread's `clGetDeviceInfo` crashed in `strlen` while another
/// was still in PoCL's hwloc topology probe). Every probe, and opening a device, goes
/// through here.
pub(crate) fn serialized<T>(f: impl FnOnce() -> T) -> T {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    f()
}

/// The kind of an OpenCL device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// `CL_DEVICE_TYPE_CPU` (PoCL, Intel's CPU runtime).
    Cpu,
    /// `CL_DEVICE_TYPE_GPU`.
    Gpu,
    /// `CL_DEVICE_TYPE_ACCELERATOR`.
    Accelerator,
    /// Anything else (custom devices).
    Other,
}

impl core::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            DeviceKind::Cpu => "CPU",
            DeviceKind::Gpu => "GPU",
            DeviceKind::Accelerator => "accelerator",
            DeviceKind::Other => "other",
        })
    }
}

/// A device's shared virtual memory capabilities (`CL_DEVICE_SVM_CAPABILITIES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SvmCaps {
    /// `CL_DEVICE_SVM_COARSE_GRAIN_BUFFER` (map/unmap to synchronise).
    pub coarse_grain_buffer: bool,
    /// `CL_DEVICE_SVM_FINE_GRAIN_BUFFER` (host and device share the bytes while it runs).
    pub fine_grain_buffer: bool,
    /// `CL_DEVICE_SVM_FINE_GRAIN_SYSTEM` (any host allocation).
    pub fine_grain_system: bool,
    /// `CL_DEVICE_SVM_ATOMICS` (atomics ordered between host and device).
    pub atomics: bool,
}

impl SvmCaps {
    fn from_bits(b: u64) -> Self {
        Self {
            coarse_grain_buffer: b & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER != 0,
            fine_grain_buffer: b & CL_DEVICE_SVM_FINE_GRAIN_BUFFER != 0,
            fine_grain_system: b & CL_DEVICE_SVM_FINE_GRAIN_SYSTEM != 0,
            atomics: b & CL_DEVICE_SVM_ATOMICS != 0,
        }
    }

    /// Whether the zero-copy placement works: fine-grained buffers with atomics.
    pub fn zero_copy(&self) -> bool {
        self.fine_grain_buffer && self.atomics
    }

    /// A short description (`fine-grained buffer + atomics`), `none` when empty.
    ///
    /// # Examples
    ///
    /// ```
    /// let caps = gyre_opencl::SvmCaps { fine_grain_buffer: true, atomics: true, ..Default::default() };
    /// assert_eq!(caps.describe(), "fine-grained buffer, atomics");
    /// ```
    pub fn describe(&self) -> String {
        let parts: Vec<&str> = [
            (self.coarse_grain_buffer, "coarse-grained buffer"),
            (self.fine_grain_buffer, "fine-grained buffer"),
            (self.fine_grain_system, "fine-grained system"),
            (self.atomics, "atomics"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, s)| *s)
        .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// The atomic scope the ring kernel's accesses can use on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `memory_scope_all_svm_devices`: orders accesses by the host too.
    AllSvmDevices,
    /// `memory_scope_device`.
    Device,
    /// Neither (work-group scope only): unusable.
    None,
}

impl Scope {
    /// The widest scope in capability bits `caps`; all-SVM-devices only where the OpenCL
    /// C compiler also offers it (`all_devices_in_c`: the feature macro
    /// `__opencl_c_atomic_scope_all_devices`). PoCL 3.1 reports the all-devices scope for
    /// atomics but its compiler does not define the enumerator.
    fn from_caps(caps: u64, all_devices_in_c: bool) -> Self {
        if caps & CL_DEVICE_ATOMIC_SCOPE_ALL_DEVICES != 0 && all_devices_in_c {
            Scope::AllSvmDevices
        } else if caps & CL_DEVICE_ATOMIC_SCOPE_DEVICE != 0 {
            Scope::Device
        } else {
            Scope::None
        }
    }

    /// The OpenCL C enumerator (`memory_scope_all_svm_devices`).
    pub fn cl_name(&self) -> &'static str {
        match self {
            Scope::AllSvmDevices => "memory_scope_all_svm_devices",
            Scope::Device | Scope::None => "memory_scope_device",
        }
    }
}

/// One OpenCL device and what the ring kernel needs from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Index within its platform (`Backend::OpenCl { device }`).
    pub index: usize,
    /// `CL_DEVICE_NAME`.
    pub name: String,
    /// `CL_DEVICE_TYPE`.
    pub kind: DeviceKind,
    /// `CL_DEVICE_VERSION` (`OpenCL 3.0 PoCL ...`).
    pub version: String,
    /// Whether OpenCL C 3.0 is among `CL_DEVICE_OPENCL_C_ALL_VERSIONS`.
    pub opencl_c_3: bool,
    /// `CL_DEVICE_MAX_COMPUTE_UNITS`.
    pub compute_units: u32,
    /// `CL_DEVICE_SVM_CAPABILITIES`.
    pub svm: SvmCaps,
    /// Widest scope of acquire/release atomics (`CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES`).
    pub atomic_scope: Scope,
    /// Widest scope of fences (`CL_DEVICE_ATOMIC_FENCE_CAPABILITIES`).
    pub fence_scope: Scope,
    /// Whether acquire/release atomics are supported at all.
    pub acq_rel: bool,
    /// `CL_DEVICE_COMPILER_AVAILABLE`.
    pub compiler: bool,
    /// `CL_DEVICE_VENDOR` (`NVIDIA Corporation`).
    pub vendor: String,
    /// Whether `CL_DEVICE_EXTENSIONS` include `cl_khr_int64_base_atomics` (the 64-bit
    /// compare-and-swap of the OpenCL C 1.2 form of the port).
    pub int64_atomics: bool,
}

/// Environment variable: `off` keeps every kernel's rings in device buffers moved by the
/// bridge's copy strategies, even on a device whose SVM would allow zero copy (the path a
/// device without fine-grained SVM takes, on any device); `auto` (the default, also when
/// unset or empty) uses zero copy where the device allows it. Read once per process.
pub const ENV_SVM: &str = "GYRE_OPENCL_SVM";

/// Whether [`ENV_SVM`] allows zero copy: `Ok(true)` for `auto` (or unset, or empty),
/// `Ok(false)` for `off`. Read once per process (the first call), so every device opened
/// and every memory plan see the same answer.
///
/// # Errors
///
/// [`Error::Env`] for any other value.
pub(crate) fn svm_allowed() -> Result<bool> {
    static ONCE: EnvCell = OnceLock::new();
    env_choice(
        &ONCE,
        ENV_SVM,
        &[("auto", true), ("off", false)],
        true,
        "auto or off",
    )
}

/// One environment variable's value, read once per process.
type EnvCell = OnceLock<std::result::Result<bool, String>>;

/// The value of environment variable `name` among `choices` (case and surrounding space
/// ignored; unset or empty: `default`), read once into `cell`; [`Error::Env`] naming
/// `expected` when it is none of them.
fn env_choice(
    cell: &EnvCell,
    name: &'static str,
    choices: &[(&str, bool)],
    default: bool,
    expected: &'static str,
) -> Result<bool> {
    let read = || {
        let Ok(v) = std::env::var(name) else {
            return Ok(default);
        };
        let key = v.trim().to_ascii_lowercase();
        if key.is_empty() {
            return Ok(default);
        }
        choices
            .iter()
            .find(|(c, _)| *c == key)
            .map(|&(_, b)| b)
            .ok_or(v)
    };
    cell.get_or_init(read).clone().map_err(|value| Error::Env {
        name,
        value,
        expected,
    })
}

/// Environment variable: `legacy` builds the ring kernel with OpenCL C 1.2 atomics
/// (`port_opencl.h`, `GYRE_CL_LEGACY_ATOMICS`) on every device, as on a device without
/// OpenCL C 3.0 acquire/release atomics at device scope (NVIDIA's), which implies the copy
/// strategies; `auto` (the default, also when unset or empty) uses them only there. Read
/// once per process.
pub const ENV_ATOMICS: &str = "GYRE_OPENCL_ATOMICS";

/// Whether [`ENV_ATOMICS`] forces the OpenCL C 1.2 atomics: `Ok(false)` for `auto` (or
/// unset, or empty), `Ok(true)` for `legacy`. Read once per process (the first call).
///
/// # Errors
///
/// [`Error::Env`] for any other value.
pub(crate) fn legacy_atomics_forced() -> Result<bool> {
    static ONCE: EnvCell = OnceLock::new();
    env_choice(
        &ONCE,
        ENV_ATOMICS,
        &[("auto", false), ("legacy", true)],
        false,
        "auto or legacy",
    )
}

/// Both environment variables of this backend ([`ENV_SVM`], [`ENV_ATOMICS`]) are valid.
///
/// # Errors
///
/// [`Error::Env`] naming the first that is not.
pub fn check_env() -> Result<()> {
    svm_allowed()?;
    legacy_atomics_forced().map(|_| ())
}

impl DeviceInfo {
    /// Whether the ring kernel is built with OpenCL C 1.2 atomics here: the device has no
    /// OpenCL C 3.0 with acquire/release atomics at device scope or wider (NVIDIA's
    /// OpenCL 3.0 reports relaxed, work-group-scope atomics only), or [`ENV_ATOMICS`] is
    /// `legacy`. Such a kernel runs over buffers and the copy strategies only.
    pub fn legacy_atomics(&self) -> bool {
        legacy_atomics_forced().unwrap_or(false)
            || !self.opencl_c_3
            || !self.acq_rel
            || self.atomic_scope == Scope::None
            || self.fence_scope == Scope::None
    }

    /// Whether the port uses NVIDIA's PTX through inline assembly (`GYRE_CL_NVIDIA`): the
    /// `%globaltimer` clock, and `membar.gl` as the OpenCL C 1.2 form's fence.
    pub fn nvidia_ptx(&self) -> bool {
        self.kind == DeviceKind::Gpu && self.vendor.to_ascii_lowercase().contains("nvidia")
    }

    /// Why the ring kernel cannot run on this device at all, if it cannot: no compiler, or
    /// neither OpenCL C 3.0 acquire/release atomics at device scope nor the 64-bit atomics
    /// of the OpenCL C 1.2 form. A device that runs it without zero copy runs it over
    /// buffers and the copy strategies ([`DeviceInfo::zero_copy_refusal`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// for p in gyre_opencl::probe()? {
    ///     for d in &p.devices {
    ///         println!("{}: {:?}", d.name, d.unusable());
    ///     }
    /// }
    /// # Ok::<(), gyre_opencl::Error>(())
    /// ```
    pub fn unusable(&self) -> Option<Error> {
        let reason = if !self.compiler {
            Some("no compiler (CL_DEVICE_COMPILER_AVAILABLE is false)".to_owned())
        } else if self.legacy_atomics() && !self.int64_atomics {
            Some(
                "neither OpenCL C 3.0 acquire/release atomics at device scope \
                 (CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES) nor cl_khr_int64_base_atomics \
                 for the OpenCL C 1.2 form"
                    .to_owned(),
            )
        } else {
            None
        };
        reason.map(|reason| Error::Unsupported {
            device: self.name.clone(),
            reason,
        })
    }

    /// Why the rings cannot be shared with the kernel in place (zero copy, the `Unified`
    /// strategy) on this device, if they cannot; the kernel then runs over device buffers
    /// and the bridge's copy strategies. Zero copy needs fine-grained buffer SVM with
    /// atomics and, on a device other than a CPU (whose "device" is the host's own
    /// coherent cores), the all-SVM-devices atomic scope; and [`ENV_SVM`] not `off`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// for p in gyre_opencl::probe()? {
    ///     for d in &p.devices {
    ///         match d.zero_copy_refusal() {
    ///             None => println!("{}: zero copy", d.name),
    ///             Some(why) => println!("{}: copy strategies ({why})", d.name),
    ///         }
    ///     }
    /// }
    /// # Ok::<(), gyre_opencl::Error>(())
    /// ```
    pub fn zero_copy_refusal(&self) -> Option<Error> {
        if let Err(e) = check_env() {
            return Some(e);
        }
        let missing = match svm_allowed() {
            Err(e) => return Some(e),
            Ok(false) => "SVM use (GYRE_OPENCL_SVM=off)",
            Ok(true) if self.legacy_atomics() => {
                "OpenCL C 3.0 acquire/release atomics at device scope (built with OpenCL C 1.2 \
                 atomics, which order nothing with the host)"
            }
            Ok(true) if !self.svm.fine_grain_buffer => "fine-grained buffer SVM",
            Ok(true) if !self.svm.atomics => "SVM atomics",
            Ok(true)
                if self.kind != DeviceKind::Cpu && self.atomic_scope != Scope::AllSvmDevices =>
            {
                "all-SVM-devices atomic scope (the host would not be ordered with the kernel's atomics)"
            }
            Ok(true) => return None,
        };
        Some(Error::NeedsCopyStrategy {
            device: self.name.clone(),
            missing,
        })
    }
}

/// One OpenCL platform (driver) and its devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformInfo {
    /// Index in the ICD loader's list (`Backend::OpenCl { platform }`).
    pub index: usize,
    /// `CL_PLATFORM_NAME` (`Portable Computing Language`).
    pub name: String,
    /// `CL_PLATFORM_VENDOR`.
    pub vendor: String,
    /// `CL_PLATFORM_VERSION`.
    pub version: String,
    /// Its devices, in the driver's order.
    pub devices: Vec<DeviceInfo>,
}

/// The platform handles, or why there are none: the loader is missing
/// ([`Error::LibraryMissing`]) or no driver is installed ([`Error::NoPlatform`]).
pub(crate) fn platforms() -> Result<Vec<Platform>> {
    // Without libOpenCL.so.1 opencl3 answers DLOPEN_RUNTIME_LOAD_FAILED, which
    // `cl_error` turns into Error::LibraryMissing.
    match opencl3::platform::get_platforms() {
        Ok(p) if p.is_empty() => Err(Error::NoPlatform),
        Ok(p) => Ok(p),
        Err(e) if e.0 == PLATFORM_NOT_FOUND_KHR => Err(Error::NoPlatform),
        Err(e) => Err(cl_error("clGetPlatformIDs", e.0, String::new())),
    }
}

/// The device handles of `platform`.
pub(crate) fn device_ids(platform: &Platform) -> Result<Vec<Device>> {
    match platform.get_devices(CL_DEVICE_TYPE_ALL) {
        Ok(ids) => Ok(ids.into_iter().map(Device::new).collect()),
        // CL_DEVICE_NOT_FOUND: a platform with no device.
        Err(e) if e.0 == opencl3::error_codes::CL_DEVICE_NOT_FOUND => Ok(Vec::new()),
        Err(e) => Err(cl_error("clGetDeviceIDs", e.0, String::new())),
    }
}

/// What `device` (index `index` on its platform) offers.
pub(crate) fn device_info(index: usize, device: &Device) -> Result<DeviceInfo> {
    let q = |op: &'static str| move || format!(", {op}");
    let name = check("clGetDeviceInfo", device.name(), q("CL_DEVICE_NAME"))?;
    let ty = check("clGetDeviceInfo", device.dev_type(), q("CL_DEVICE_TYPE"))?;
    let kind = if ty & CL_DEVICE_TYPE_GPU != 0 {
        DeviceKind::Gpu
    } else if ty & CL_DEVICE_TYPE_CPU != 0 {
        DeviceKind::Cpu
    } else if ty & CL_DEVICE_TYPE_ACCELERATOR != 0 {
        DeviceKind::Accelerator
    } else {
        DeviceKind::Other
    };
    let version = check("clGetDeviceInfo", device.version(), q("CL_DEVICE_VERSION"))?;
    // OpenCL 1.x/2.x devices do not know the 3.0 queries: treat a failure as "no".
    let opencl_c_3 = device
        .opencl_c_all_versions()
        .map(|v| v.iter().any(|nv| nv.version >> 22 >= 3))
        .unwrap_or(false);
    let svm = SvmCaps::from_bits(device.svm_capabilities().unwrap_or(0));
    let mem_caps = device.atomic_memory_capabilities().unwrap_or(0);
    let all_devices_in_c = device
        .opencl_c_features()
        .map(|f| {
            f.iter().any(|nv| {
                let end = nv
                    .name
                    .iter()
                    .position(|&c| c == 0)
                    .unwrap_or(nv.name.len());
                &nv.name[..end] == b"__opencl_c_atomic_scope_all_devices"
            })
        })
        .unwrap_or(false);
    let fence_caps = device.atomic_fence_capabilities().unwrap_or(0);
    Ok(DeviceInfo {
        index,
        name: name.trim().to_owned(),
        kind,
        version: version.trim().to_owned(),
        opencl_c_3,
        compute_units: check(
            "clGetDeviceInfo",
            device.max_compute_units(),
            q("CL_DEVICE_MAX_COMPUTE_UNITS"),
        )?,
        svm,
        atomic_scope: Scope::from_caps(mem_caps, all_devices_in_c),
        fence_scope: Scope::from_caps(fence_caps, all_devices_in_c),
        acq_rel: mem_caps & CL_DEVICE_ATOMIC_ORDER_ACQ_REL != 0,
        compiler: device.compiler_available().unwrap_or(false),
        vendor: device.vendor().unwrap_or_default().trim().to_owned(),
        int64_atomics: device.extensions().is_ok_and(|e| {
            e.split_whitespace()
                .any(|x| x == "cl_khr_int64_base_atomics")
        }),
    })
}

/// Every OpenCL platform and device on this machine.
///
/// # Errors
///
/// [`Error::LibraryMissing`] without an ICD loader, [`Error::NoPlatform`] without a
/// driver, [`Error::Cl`] when a query fails.
///
/// # Examples
///
/// ```
/// match gyre_opencl::probe() {
///     Ok(platforms) => {
///         for p in &platforms {
///             for d in &p.devices {
///                 println!("{}: {} ({}), SVM {}", p.name, d.name, d.kind, d.svm.describe());
///             }
///         }
///     }
///     Err(why) => println!("no OpenCL: {why}"),
/// }
/// ```
pub fn probe() -> Result<Vec<PlatformInfo>> {
    serialized(probe_unlocked)
}

fn probe_unlocked() -> Result<Vec<PlatformInfo>> {
    let mut out = Vec::new();
    for (index, p) in platforms()?.iter().enumerate() {
        let q = |what: &'static str| move || format!(", {what} of platform {index}");
        let mut devices = Vec::new();
        for (i, d) in device_ids(p)?.iter().enumerate() {
            devices.push(device_info(i, d)?);
        }
        out.push(PlatformInfo {
            index,
            name: check("clGetPlatformInfo", p.name(), q("CL_PLATFORM_NAME"))?
                .trim()
                .to_owned(),
            vendor: check("clGetPlatformInfo", p.vendor(), q("CL_PLATFORM_VENDOR"))?
                .trim()
                .to_owned(),
            version: check("clGetPlatformInfo", p.version(), q("CL_PLATFORM_VERSION"))?
                .trim()
                .to_owned(),
            devices,
        });
    }
    Ok(out)
}

/// The device at (`platform`, `device`), with its facts.
///
/// # Errors
///
/// As [`probe`], plus [`Error::PlatformIndex`] / [`Error::DeviceIndex`] for an index that
/// does not exist.
pub fn select(platform: usize, device: usize) -> Result<(Device, DeviceInfo)> {
    serialized(|| select_unlocked(platform, device))
}

/// [`select`] for a caller already inside [`serialized`].
pub(crate) fn select_unlocked(platform: usize, device: usize) -> Result<(Device, DeviceInfo)> {
    let platforms = platforms()?;
    let count = platforms.len();
    let p = platforms.get(platform).ok_or(Error::PlatformIndex {
        index: platform,
        count,
    })?;
    let ids = device_ids(p)?;
    let Some(d) = ids.get(device) else {
        return Err(Error::DeviceIndex {
            platform,
            name: p.name().unwrap_or_default().trim().to_owned(),
            index: device,
            count: ids.len(),
        });
    };
    let info = device_info(device, d)?;
    Ok((Device::new(d.id()), info))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What NVIDIA's OpenCL 3.0 reports for a GPU (clinfo of an RTX 3090, driver 550):
    /// OpenCL C 1.2 plus 3.0 without optional features, coarse-grained SVM only, relaxed
    /// work-group-scope atomics, the 64-bit atomics extension.
    fn nvidia() -> DeviceInfo {
        DeviceInfo {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            kind: DeviceKind::Gpu,
            version: "OpenCL 3.0 CUDA".into(),
            opencl_c_3: true,
            compute_units: 132,
            svm: SvmCaps {
                coarse_grain_buffer: true,
                ..SvmCaps::default()
            },
            atomic_scope: Scope::None,
            fence_scope: Scope::None,
            acq_rel: false,
            compiler: true,
            vendor: "NVIDIA Corporation".into(),
            int64_atomics: true,
        }
    }

    fn pocl() -> DeviceInfo {
        DeviceInfo {
            index: 0,
            name: "pthread-x86".into(),
            kind: DeviceKind::Cpu,
            version: "OpenCL 3.0 PoCL".into(),
            opencl_c_3: true,
            compute_units: 2,
            svm: SvmCaps {
                coarse_grain_buffer: true,
                fine_grain_buffer: true,
                fine_grain_system: false,
                atomics: true,
            },
            atomic_scope: Scope::Device,
            fence_scope: Scope::Device,
            acq_rel: true,
            compiler: true,
            vendor: "GenuineIntel".into(),
            int64_atomics: true,
        }
    }

    #[test]
    fn an_nvidia_gpu_runs_legacy_atomics_over_buffers() {
        if check_env().is_err()
            || legacy_atomics_forced().unwrap_or(true)
            || !svm_allowed().unwrap_or(false)
        {
            return; // this process was started with a forcing environment
        }
        let d = nvidia();
        assert!(d.unusable().is_none(), "{:?}", d.unusable());
        assert!(d.legacy_atomics());
        assert!(d.nvidia_ptx());
        assert!(matches!(
            d.zero_copy_refusal(),
            Some(Error::NeedsCopyStrategy { .. })
        ));
        // Without the 64-bit atomics the OpenCL C 1.2 form cannot build either.
        let old = DeviceInfo {
            int64_atomics: false,
            ..nvidia()
        };
        assert!(matches!(old.unusable(), Some(Error::Unsupported { .. })));
    }

    #[test]
    fn pocl_shares_rings_in_place_with_c11_atomics() {
        if check_env().is_err()
            || legacy_atomics_forced().unwrap_or(true)
            || !svm_allowed().unwrap_or(false)
        {
            return;
        }
        let d = pocl();
        assert!(d.unusable().is_none());
        assert!(!d.legacy_atomics());
        assert!(!d.nvidia_ptx());
        assert!(d.zero_copy_refusal().is_none());
        // A GPU with fine-grained SVM but device-scope atomics only: buffers.
        let gpu = DeviceInfo {
            kind: DeviceKind::Gpu,
            ..pocl()
        };
        assert!(matches!(
            gpu.zero_copy_refusal(),
            Some(Error::NeedsCopyStrategy { .. })
        ));
        assert!(!gpu.legacy_atomics());
    }
}
