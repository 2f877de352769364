//! The OpenCL backend, or why not, in this build (the `opencl` feature).

use std::sync::Arc;

use gyre_core::visibility::DeviceAttributes;

/// What OpenCL offers here, as `gyre doctor` rows: every platform, every device with its
/// kind, SVM capabilities, atomic scopes and whether gyre can use it. `Err` says why there
/// is none: no library, no platform, or no device with fine-grained SVM and atomics.
#[cfg(feature = "opencl")]
pub(crate) fn facts() -> Result<Vec<(&'static str, String)>, String> {
    let platforms = gyre_opencl::probe().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let mut why_not = Vec::new();
    for p in &platforms {
        rows.push((
            "platform",
            format!("{}: {} ({})", p.index, p.name, p.version),
        ));
        for d in &p.devices {
            let verdict = match d.unusable() {
                None => "usable".to_owned(),
                Some(e) => {
                    why_not.push(format!("{}:{} {}: {e}", p.index, d.index, d.name));
                    format!("not usable: {e}")
                }
            };
            rows.push((
                "device",
                format!(
                    "{}:{} {} ({}, {} compute units); SVM: {}; atomic scope {}, fence scope {}; {}",
                    p.index,
                    d.index,
                    d.name,
                    d.kind,
                    d.compute_units,
                    d.svm.describe(),
                    d.atomic_scope.cl_name(),
                    d.fence_scope.cl_name(),
                    verdict
                ),
            ));
        }
    }
    if platforms
        .iter()
        .flat_map(|p| &p.devices)
        .all(|d| d.unusable().is_some())
    {
        if why_not.is_empty() {
            return Err("no OpenCL device on any platform".to_owned());
        }
        return Err(format!("no usable OpenCL device: {}", why_not.join("; ")));
    }
    Ok(rows)
}

/// The OpenCL backend on (`platform`, `device`), or why not.
#[cfg(feature = "opencl")]
pub(crate) fn backend(
    platform: usize,
    device: usize,
) -> Result<Arc<dyn gyre_core::Backend>, String> {
    match gyre_opencl::OpenClBackend::new(platform, device) {
        Ok(b) => Ok(Arc::new(b)),
        Err(e) => Err(e.to_string()),
    }
}

/// For `Backend::Auto`: the first usable OpenCL **GPU** (never a CPU device), its
/// indices and backend, or why there is none.
#[cfg(feature = "opencl")]
pub(crate) fn auto_gpu() -> Result<(usize, usize, Arc<dyn gyre_core::Backend>), String> {
    let platforms = gyre_opencl::probe().map_err(|e| e.to_string())?;
    let mut why = Vec::new();
    for p in &platforms {
        for d in &p.devices {
            if d.kind != gyre_opencl::DeviceKind::Gpu {
                continue;
            }
            match backend(p.index, d.index) {
                Ok(b) => return Ok((p.index, d.index, b)),
                Err(e) => why.push(format!("{}:{} {}: {e}", p.index, d.index, d.name)),
            }
        }
    }
    if why.is_empty() {
        Err("no OpenCL GPU (OpenCL CPU devices are never chosen automatically)".to_owned())
    } else {
        Err(format!("no usable OpenCL GPU: {}", why.join("; ")))
    }
}

/// The memory attributes of an OpenCL device, in the terms the visibility detection uses:
/// a fine-grained SVM buffer is mapped, unified host memory; SVM atomics are native host
/// atomics; fine-grained system SVM is pageable memory access.
#[cfg(feature = "opencl")]
pub(crate) fn device_attributes(platform: usize, device: usize) -> Option<DeviceAttributes> {
    let (_, d) = gyre_opencl::probe::select(platform, device).ok()?;
    Some(DeviceAttributes {
        can_map_host_memory: d.svm.fine_grain_buffer,
        unified_addressing: d.svm.fine_grain_buffer,
        concurrent_managed_access: d.svm.fine_grain_buffer,
        pageable_memory_access: d.svm.fine_grain_system,
        host_native_atomics: d.svm.atomics,
    })
}

#[cfg(not(feature = "opencl"))]
const NOT_BUILT: &str = "not in this build: gyre was built without the `opencl` feature";

#[cfg(not(feature = "opencl"))]
pub(crate) fn facts() -> Result<Vec<(&'static str, String)>, String> {
    Err(NOT_BUILT.into())
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn backend(
    _platform: usize,
    _device: usize,
) -> Result<Arc<dyn gyre_core::Backend>, String> {
    Err(NOT_BUILT.into())
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn auto_gpu() -> Result<(usize, usize, Arc<dyn gyre_core::Backend>), String> {
    Err(NOT_BUILT.into())
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn device_attributes(_platform: usize, _device: usize) -> Option<DeviceAttributes> {
    None
}
