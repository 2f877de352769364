//! The OpenCL backend, or why not, in this build (the `opencl` feature).

use std::sync::Arc;

use gyre_core::visibility::DeviceAttributes;

/// What OpenCL offers here, as `gyre doctor` rows: every platform, every device with its
/// kind, SVM capabilities, atomics, and whether and how gyre can use it (zero copy and the
/// copy strategies, or the copy strategies only). `Err` says why there is none: no
/// library, no platform, no device that runs the ring kernel, or a bad environment.
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
            let unusable = d.unusable().or_else(|| {
                // A bad GYRE_OPENCL_SVM fails every open.
                gyre_opencl::probe::check_env().err()
            });
            let verdict = match (unusable, d.zero_copy_refusal()) {
                (None, None) => "usable (zero copy and the copy strategies)".to_owned(),
                (None, Some(why)) => format!("usable with the copy strategies ({why})"),
                (Some(e), _) => {
                    why_not.push(format!("{}:{} {}: {e}", p.index, d.index, d.name));
                    format!("not usable: {e}")
                }
            };
            rows.push((
                "device",
                format!(
                    "{}:{} {} ({}, {} compute units); SVM: {}; {}; {}",
                    p.index,
                    d.index,
                    d.name,
                    d.kind,
                    d.compute_units,
                    d.svm.describe(),
                    if d.legacy_atomics() {
                        "OpenCL C 1.2 atomics".to_owned()
                    } else {
                        format!(
                            "atomic scope {}, fence scope {}",
                            d.atomic_scope.cl_name(),
                            d.fence_scope.cl_name()
                        )
                    },
                    verdict
                ),
            ));
        }
    }
    if platforms
        .iter()
        .flat_map(|p| &p.devices)
        .all(|d| d.unusable().is_some() || gyre_opencl::probe::check_env().is_err())
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
) -> Result<Arc<dyn gyre_core::Backend>, gyre_core::Cause> {
    match gyre_opencl::OpenClBackend::new(platform, device) {
        Ok(b) => Ok(Arc::new(b)),
        Err(e) => Err(gyre_core::Cause::new(e)),
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
/// atomics; fine-grained system SVM is pageable memory access. A device that cannot share
/// rings in place (`DeviceInfo::zero_copy_refusal`: no fine-grained SVM with atomics, or
/// `GYRE_OPENCL_SVM=off`) maps nothing, so the plan picks a copy strategy and refuses
/// `unified`.
#[cfg(feature = "opencl")]
pub(crate) fn device_attributes(platform: usize, device: usize) -> Option<DeviceAttributes> {
    let (_, d) = gyre_opencl::probe::select(platform, device).ok()?;
    let zero_copy = d.zero_copy_refusal().is_none();
    Some(DeviceAttributes {
        can_map_host_memory: zero_copy && d.svm.fine_grain_buffer,
        unified_addressing: zero_copy && d.svm.fine_grain_buffer,
        concurrent_managed_access: zero_copy && d.svm.fine_grain_buffer,
        pageable_memory_access: zero_copy && d.svm.fine_grain_system,
        host_native_atomics: zero_copy && d.svm.atomics,
    })
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn facts() -> Result<Vec<(&'static str, String)>, String> {
    Err(crate::features::not_built("opencl"))
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn backend(
    _platform: usize,
    _device: usize,
) -> Result<Arc<dyn gyre_core::Backend>, gyre_core::Cause> {
    Err(gyre_core::Cause::msg(crate::features::not_built("opencl")))
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn auto_gpu() -> Result<(usize, usize, Arc<dyn gyre_core::Backend>), String> {
    Err(crate::features::not_built("opencl"))
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn device_attributes(_platform: usize, _device: usize) -> Option<DeviceAttributes> {
    None
}

/// Whether `cause` is OpenCL's refusal for want of room: a ring kernel on every compute
/// unit.
#[cfg(feature = "opencl")]
pub(crate) fn no_room(cause: &gyre_core::Cause) -> bool {
    matches!(
        cause.downcast_ref::<gyre_opencl::Error>(),
        Some(gyre_opencl::Error::DeviceFull { .. })
    )
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn no_room(_cause: &gyre_core::Cause) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use crate::{backends, Backend, Error, Runtime};

    #[test]
    fn opencl_parses_and_displays() {
        if cfg!(feature = "opencl") {
            for (s, platform, device) in
                [("opencl", 0, 0), ("OpenCL:2", 2, 0), ("opencl:1:3", 1, 3)]
            {
                let b: Backend = s.parse().unwrap();
                assert_eq!(b, Backend::OpenCl { platform, device }, "{s}");
                assert_eq!(b.to_string().parse::<Backend>().unwrap(), b);
                assert_eq!(b.name(), "opencl");
            }
            for bad in ["opencl:", "opencl:x", "opencl:1:2:3", "opencl1"] {
                assert!(
                    matches!(bad.parse::<Backend>(), Err(Error::InvalidArgument { .. })),
                    "{bad}"
                );
            }
        } else {
            assert!(matches!(
                "opencl".parse::<Backend>(),
                Err(Error::BackendUnavailable {
                    backend: "opencl",
                    ..
                })
            ));
        }
    }

    #[test]
    fn missing_platform_is_a_typed_error_naming_it() {
        let e = Runtime::builder()
            .backend(Backend::OpenCl {
                platform: 999,
                device: 0,
            })
            .build()
            .unwrap_err();
        match e {
            Error::BackendUnavailable { backend, source } => {
                let reason = source.to_string();
                assert_eq!(backend, "opencl");
                assert!(
                    ["platform", "library", "not in this build"]
                        .iter()
                        .any(|w| reason.contains(w)),
                    "{reason}"
                );
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn backends_lists_opencl_devices_with_svm() {
        let info = backends()
            .into_iter()
            .find(|b| b.name == "opencl")
            .expect("opencl is listed");
        assert_eq!(info.compiled, cfg!(feature = "opencl"));
        if info.available.is_ok() {
            assert!(info
                .details
                .iter()
                .any(|(label, v)| *label == "device" && v.contains("SVM")));
        }
    }

    /// `Backend::Auto` never resolves to an OpenCL CPU device.
    #[cfg(feature = "opencl")]
    #[test]
    fn auto_never_picks_an_opencl_cpu_device() {
        let rt = Runtime::builder().backend(Backend::Auto).build().unwrap();
        if let Backend::OpenCl { platform, device } = rt.backend() {
            let (_, d) = gyre_opencl::probe::select(platform, device).unwrap();
            assert_eq!(d.kind, gyre_opencl::DeviceKind::Gpu, "{}", d.name);
        }
        if let Ok(platforms) = gyre_opencl::probe() {
            let only_cpus = platforms
                .iter()
                .flat_map(|p| &p.devices)
                .all(|d| d.kind != gyre_opencl::DeviceKind::Gpu);
            if only_cpus && !matches!(rt.backend(), Backend::Cuda { .. }) {
                assert_eq!(rt.backend(), Backend::Cpu);
            }
        }
    }
}
