//! The CUDA backend, or why not, in this build (the `cuda` feature): what `gyre doctor`
//! shows of it, the device attributes the memory plan reads, and opening it.

use std::sync::Arc;

/// Whether CUDA is usable here (no context is made), and what was found: the
/// compile toolchain (even without a driver) and the driver and device.
#[cfg(feature = "cuda")]
pub(crate) fn facts() -> (Result<(), String>, Vec<(&'static str, String)>) {
    let mut facts = Vec::new();
    match gyre_cuda::Nvrtc::discover() {
        Ok((n, tc)) => {
            facts.push(("NVRTC", format!("{} ({})", n.version_string(), n.path())));
            facts.push(("toolchain", tc.origin.clone()));
            match n.ring_kernel_archs() {
                Ok(a) => facts.push(("NVRTC archs (sm_70+)", format!("{a:?}"))),
                Err(e) => facts.push(("NVRTC archs (sm_70+)", e.to_string())),
            }
        }
        Err(e) => facts.push(("NVRTC", e.to_string())),
    }
    let i = match gyre_cuda::CudaBackend::check() {
        Ok(i) => i,
        Err(e) => return (Err(e.to_string()), facts),
    };
    let d = &i.device;
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    facts.extend([
        ("driver", i.driver_version_string()),
        ("devices", i.device_count.to_string()),
    ]);
    // Every device, as `Backend::Cuda { device }` names them, and whether gyre can use
    // it; then device 0's attributes (the device `Backend::Auto` uses).
    for dev in &i.devices {
        let ordinal = usize::try_from(dev.ordinal).unwrap_or(usize::MAX);
        let verdict = match gyre_cuda::CudaBackend::check_device(ordinal) {
            Ok(_) => "usable".to_owned(),
            Err(e) => format!("not usable: {e}"),
        };
        facts.push((
            "device",
            format!(
                "{} {} (sm_{}, {} SMs, {} MiB); {verdict}",
                dev.ordinal,
                dev.name,
                dev.arch(),
                dev.multiprocessors,
                dev.total_mem >> 20
            ),
        ));
    }
    // Peer-to-peer between every ordered pair (with two GPUs or more): what a chain
    // across devices could use; it runs through mapped pinned host memory today.
    match gyre_cuda::p2p::links() {
        Ok(links) => facts.extend(links.into_iter().map(|l| {
            (
                "peer",
                format!(
                    "{} -> {}: peer access {}, native atomics {}, rank {}",
                    l.from,
                    l.to,
                    yes(l.can_access_peer && l.access_supported),
                    yes(l.native_atomics),
                    l.performance_rank
                ),
            )
        })),
        Err(e) => facts.push(("peer", e.to_string())),
    }
    facts.extend([
        ("attributes of", format!("device 0 ({})", d.name)),
        (
            "compute capability",
            format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
        ),
        ("multiprocessors", d.multiprocessors.to_string()),
        ("memory", format!("{} MiB", d.total_mem >> 20)),
        ("kernel exec timeout", yes(d.kernel_exec_timeout)),
        ("can map host memory", yes(d.can_map_host_memory)),
        ("unified addressing", yes(d.unified_addressing)),
        (
            "concurrent managed access",
            yes(d.concurrent_managed_access),
        ),
        ("pageable memory access", yes(d.pageable_memory_access)),
        ("host native atomics", yes(d.host_native_atomic_supported)),
        ("CUDA_MODULE_LOADING", i.env.module_loading.clone()),
        (
            "CUDA_DEVICE_MAX_CONNECTIONS",
            i.env.max_connections.to_string(),
        ),
        (
            "set by gyre",
            match (&i.env.not_set, i.env.set_by_gyre.is_empty()) {
                (Some(why), _) => format!("nothing: {why}"),
                (None, true) => "nothing (already set)".to_owned(),
                (None, false) => i.env.set_by_gyre.join(", "),
            },
        ),
    ]);
    if i.env.initialized_before_gyre {
        facts.push((
            "note",
            "CUDA was initialised before gyre: the variables above may not be in effect".to_owned(),
        ));
    }
    (Ok(()), facts)
}

/// Device `ordinal`'s memory attributes, where the CUDA backend is usable on it.
#[cfg(feature = "cuda")]
pub(crate) fn device_attributes(ordinal: usize) -> Option<gyre_core::visibility::DeviceAttributes> {
    let d = gyre_cuda::CudaBackend::check_device(ordinal).ok()?.device;
    Some(gyre_core::visibility::DeviceAttributes {
        can_map_host_memory: d.can_map_host_memory,
        unified_addressing: d.unified_addressing,
        concurrent_managed_access: d.concurrent_managed_access,
        pageable_memory_access: d.pageable_memory_access,
        host_native_atomics: d.host_native_atomic_supported,
    })
}

#[cfg(not(feature = "cuda"))]
pub(crate) fn device_attributes(
    _ordinal: usize,
) -> Option<gyre_core::visibility::DeviceAttributes> {
    None
}

/// A CUDA backend on device `ordinal`, or why not.
#[cfg(feature = "cuda")]
pub(crate) fn backend(ordinal: usize) -> Result<Arc<dyn gyre_core::Backend>, gyre_core::Cause> {
    match gyre_cuda::CudaBackend::on_device(ordinal) {
        Ok(b) => Ok(Arc::new(b)),
        Err(e) => Err(gyre_core::Cause::new(e)),
    }
}

#[cfg(not(feature = "cuda"))]
pub(crate) fn facts() -> (Result<(), String>, Vec<(&'static str, String)>) {
    (Err(crate::features::not_built("cuda")), Vec::new())
}

#[cfg(not(feature = "cuda"))]
pub(crate) fn backend(_ordinal: usize) -> Result<Arc<dyn gyre_core::Backend>, gyre_core::Cause> {
    Err(gyre_core::Cause::msg(crate::features::not_built("cuda")))
}

/// Whether `cause` is CUDA's refusal for want of room: as many ring kernels as the device
/// keeps resident, every stream held, or a module load refused while ring kernels run
/// (one that is ending lets it through once it ended).
#[cfg(feature = "cuda")]
pub(crate) fn no_room(cause: &gyre_core::Cause) -> bool {
    matches!(
        cause.downcast_ref::<gyre_cuda::Error>(),
        Some(
            gyre_cuda::Error::TooManyKernels { .. }
                | gyre_cuda::Error::StreamsExhausted { .. }
                | gyre_cuda::Error::WouldWait { .. }
        )
    )
}

#[cfg(not(feature = "cuda"))]
pub(crate) fn no_room(_cause: &gyre_core::Cause) -> bool {
    false
}
