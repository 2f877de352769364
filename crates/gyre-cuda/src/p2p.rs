//! Peer-to-peer facts about pairs of GPUs (`cuDeviceCanAccessPeer`,
//! `cuDeviceGetP2PAttribute`), as `gyre doctor` reports them.
//!
//! A pipeline whose stages run on two devices (`gyre::Runtime::launch_across`) keeps each
//! stage's region (control block, telemetry) in portable mapped pinned host memory
//! (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`), which every device reaches over its own bus.
//! An inner ring between two GPUs lives in the reading GPU's device memory where the
//! writing GPU has peer access to it (`CudaBackend`'s `Backend::enable_peer_writes`:
//! `cuCtxEnablePeerAccess` where `cuDeviceCanAccessPeer` allows it), else in that host
//! memory too. Either way the links are plain stores and loads with system-scope
//! release/acquire (the same protocol as the host's rings); no compare-and-swap crosses
//! a device (`docs/pipelines.md`, "Across devices"). These facts say where peer access
//! applies, and with which atomics and rank.
//!
//! # Examples
//!
//! ```no_run
//! use gyre_cuda::p2p;
//!
//! for link in p2p::links()? {
//!     println!("{} -> {}: access {}", link.from, link.to, link.access_supported);
//! }
//! # Ok::<(), gyre_cuda::Error>(())
//! ```

use crate::error::Result;
use crate::probe::CudaProbe;
use crate::result;
use crate::sys::CUdevice_P2PAttribute as P2p;

/// What the driver says about the link from one device to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLink {
    /// The device that would map the other's memory (an ordinal, as
    /// `Backend::Cuda { device }` names it).
    pub from: usize,
    /// The device whose memory it would map.
    pub to: usize,
    /// `cuDeviceCanAccessPeer`: peer access can be enabled from `from` to `to`.
    pub can_access_peer: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED`.
    pub access_supported: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`: atomics over the link are atomic
    /// with the peer's own (what a compare-and-swap shared between two GPUs needs).
    pub native_atomics: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK`: the driver's relative rank of the link
    /// (lower is better; NVLink ranks above PCIe).
    pub performance_rank: i32,
}

/// The link from device `from` to device `to` (ordinals).
///
/// # Errors
///
/// The driver's ([`crate::Error::Driver`]), [`crate::Error::DeviceOutOfRange`] for an
/// ordinal the driver does not report, or the library's absence.
pub fn link(from: usize, to: usize) -> Result<PeerLink> {
    // The probe initialises the driver (after preparing its environment, see
    // `crate::probe`) and counts the devices.
    let count = CudaProbe::detect()?.device_count;
    let dev = |ordinal: usize| match i32::try_from(ordinal) {
        Ok(o) if o < count => result::device_get(o),
        _ => Err(crate::Error::DeviceOutOfRange {
            ordinal,
            count: usize::try_from(count).unwrap_or(0),
        }),
    };
    let (a, b) = (dev(from)?, dev(to)?);
    let attr = |p: P2p| result::device_p2p_attribute(p, a, b);
    Ok(PeerLink {
        from,
        to,
        can_access_peer: result::device_can_access_peer(a, b)?,
        access_supported: attr(P2p::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED)? != 0,
        native_atomics: attr(P2p::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED)? != 0,
        performance_rank: attr(P2p::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK)?,
    })
}

/// Every ordered pair of distinct devices' link (none with fewer than two devices).
///
/// # Errors
///
/// As [`link`].
pub fn links() -> Result<Vec<PeerLink>> {
    let n = usize::try_from(CudaProbe::detect()?.device_count).unwrap_or(0);
    let mut out = Vec::with_capacity(n * n.saturating_sub(1));
    for from in 0..n {
        for to in (0..n).filter(|&to| to != from) {
            out.push(link(from, to)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never panics: without a driver both say why; with one device there are no links;
    /// with several every ordered pair is reported once.
    #[test]
    fn links_are_every_ordered_pair_or_an_error() {
        match links() {
            Ok(l) => {
                let n = CudaProbe::detect().map_or(0, |i| i.device_count);
                let n = usize::try_from(n).unwrap_or(0);
                assert_eq!(l.len(), n * n.saturating_sub(1));
                assert!(l.iter().all(|x| x.from != x.to));
                assert!(
                    link(0, n).is_err(),
                    "an ordinal beyond the devices is refused"
                );
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
