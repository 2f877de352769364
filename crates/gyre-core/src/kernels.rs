//! The built-in kernels, defined once: message layout, semantics and a reference result.
//!
//! Every backend runs the same device code for these (`cuda/handlers/*.h`: CUDA, OpenCL,
//! and the CPU backend over emulated lanes); the Rust functions below are the reference
//! it is checked against (the conformance suite, `crates/gyre-cpu/tests/builtins.rs`).
//!
//! | kernel | id | request payload | reply payload |
//! | --- | --- | --- | --- |
//! | echo | 1 | any bytes | the same bytes |
//! | vector scale | 2 | `f32 factor, u32 count, f32 values[count]` | `u32 count, u32 0, f32 values[i] * factor` |
//! | reduce-sum | 3 | `u32 count, u32 0, f32 values[count]` | `f32 sum, u32 count` |
//!
//! All fields little-endian, the natural layout of the `#[repr(C)]` types below. A
//! `count` that does not fit the payload is rejected with
//! `gyre_abi::error::HANDLER_REJECTED`.

use bytemuck::{Pod, Zeroable};
use gyre_abi::error::HANDLER_REJECTED;

/// Kernel ids (used as the slot `msg_type` of built-in kernels).
pub mod ids {
    /// Echo.
    pub const ECHO: u32 = 1;
    /// Vector scale.
    pub const VEC_SCALE: u32 = 2;
    /// Reduce-sum.
    pub const REDUCE_SUM: u32 = 3;
}

/// The device code a ring kernel is built with: a built-in's handler (`cuda/handlers/`, one
/// source for every device backend) or a user's source. Written once here; the device
/// backends build their ring kernels from it (`gyre_cuda::Handler` and
/// `gyre_opencl::Handler` are this type).
///
/// # Examples
///
/// ```
/// use gyre_core::kernels::{ids, DeviceHandler};
/// let h = DeviceHandler::builtin(ids::ECHO).unwrap();
/// assert_eq!(h, DeviceHandler::Echo);
/// assert_eq!(h.name(), "handlers/echo.h");
/// assert!(h.source().contains("GYRE_HANDLER_PHASE"));
/// assert_eq!(DeviceHandler::builtin(99), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceHandler<'a> {
    /// `cuda/handlers/echo.h` ([`echo`]).
    Echo,
    /// `cuda/handlers/vec_scale.h` ([`vec_scale`]).
    VecScale,
    /// `cuda/handlers/reduce_sum.h` ([`reduce_sum`]).
    ReduceSum,
    /// A user's source in the device language: a phase function (`gyre/handler.h`) named
    /// by `#define GYRE_HANDLER_PHASE`, or `gyre_handler` with the handler signature
    /// (`docs/cuda.md`, `docs/opencl.md`).
    Custom {
        /// A name for `#line` directives and messages (the compiler's log names it).
        name: &'a str,
        /// The source text.
        source: &'a str,
    },
}

/// The built-in handlers' device code (`cuda/handlers/`).
const ECHO_H: &str = include_str!("../../../cuda/handlers/echo.h");
const VEC_SCALE_H: &str = include_str!("../../../cuda/handlers/vec_scale.h");
const REDUCE_SUM_H: &str = include_str!("../../../cuda/handlers/reduce_sum.h");

impl DeviceHandler<'static> {
    /// Every built-in handler.
    pub const BUILTIN: [DeviceHandler<'static>; 3] = [
        DeviceHandler::Echo,
        DeviceHandler::VecScale,
        DeviceHandler::ReduceSum,
    ];

    /// The built-in handler of kernel id `id` ([`ids`]).
    pub fn builtin(id: u32) -> Option<Self> {
        match id {
            ids::ECHO => Some(DeviceHandler::Echo),
            ids::VEC_SCALE => Some(DeviceHandler::VecScale),
            ids::REDUCE_SUM => Some(DeviceHandler::ReduceSum),
            _ => None,
        }
    }
}

impl<'a> DeviceHandler<'a> {
    /// Its name: the file name under `cuda/` for a built-in (`handlers/echo.h`), else the
    /// given one.
    pub fn name(&self) -> &'a str {
        match self {
            DeviceHandler::Echo => "handlers/echo.h",
            DeviceHandler::VecScale => "handlers/vec_scale.h",
            DeviceHandler::ReduceSum => "handlers/reduce_sum.h",
            DeviceHandler::Custom { name, .. } => name,
        }
    }

    /// Its source text.
    pub fn source(&self) -> &'a str {
        match self {
            DeviceHandler::Echo => ECHO_H,
            DeviceHandler::VecScale => VEC_SCALE_H,
            DeviceHandler::ReduceSum => REDUCE_SUM_H,
            DeviceHandler::Custom { source, .. } => source,
        }
    }
}

/// Echo: the reply is the request, byte for byte.
#[inline]
pub fn echo(_msg_type: u32, req: &[u8], reply: &mut [u8]) -> Result<usize, u32> {
    let out = reply.get_mut(..req.len()).ok_or(HANDLER_REJECTED)?;
    out.copy_from_slice(req);
    Ok(req.len())
}

fn read_u32(b: &[u8], at: usize) -> Result<u32, u32> {
    let s = b.get(at..at + 4).ok_or(HANDLER_REJECTED)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn f32s(b: &[u8], at: usize, count: usize) -> Result<impl Iterator<Item = f32> + '_, u32> {
    let bytes = count.checked_mul(4).ok_or(HANDLER_REJECTED)?;
    let s = b.get(at..at + bytes).ok_or(HANDLER_REJECTED)?;
    Ok(s.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
}

/// Vector scale: `values[i] * factor` for each of `count` values.
pub fn vec_scale(_msg_type: u32, req: &[u8], reply: &mut [u8]) -> Result<usize, u32> {
    let factor = f32::from_bits(read_u32(req, 0)?);
    let count = read_u32(req, 4)? as usize;
    let out_len = 8 + count * 4;
    if out_len > reply.len() {
        return Err(HANDLER_REJECTED);
    }
    reply[0..4].copy_from_slice(&(count as u32).to_le_bytes());
    reply[4..8].copy_from_slice(&0u32.to_le_bytes());
    for (i, v) in f32s(req, 8, count)?.enumerate() {
        reply[8 + 4 * i..12 + 4 * i].copy_from_slice(&(v * factor).to_le_bytes());
    }
    Ok(out_len)
}

/// Reduce-sum: the sum of `count` values, accumulated in `f32` in index order.
pub fn reduce_sum(_msg_type: u32, req: &[u8], reply: &mut [u8]) -> Result<usize, u32> {
    let count = read_u32(req, 0)? as usize;
    let sum: f32 = f32s(req, 8, count)?.sum();
    let out = reply.get_mut(..8).ok_or(HANDLER_REJECTED)?;
    out[0..4].copy_from_slice(&sum.to_le_bytes());
    out[4..8].copy_from_slice(&(count as u32).to_le_bytes());
    Ok(8)
}

/// The signature of a built-in CPU handler.
pub type BuiltinFn = fn(u32, &[u8], &mut [u8]) -> Result<usize, u32>;

/// The handler of built-in kernel `id`, if there is one.
pub fn builtin(id: u32) -> Option<BuiltinFn> {
    match id {
        ids::ECHO => Some(echo),
        ids::VEC_SCALE => Some(vec_scale),
        ids::REDUCE_SUM => Some(reduce_sum),
        _ => None,
    }
}

/// Typed vector-scale request with room for `N` values.
///
/// `VecScale<14>` fills the 64-byte payload of a 128-byte slot.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VecScale<const N: usize> {
    /// Multiplier.
    pub factor: f32,
    /// Values used, `<= N`.
    pub count: u32,
    /// The values.
    pub values: [f32; N],
}

/// Typed vector of up to `N` `f32` values (the vector-scale reply).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VecF32<const N: usize> {
    /// Values used, `<= N`.
    pub count: u32,
    /// Zero.
    pub reserved: u32,
    /// The values.
    pub values: [f32; N],
}

/// Typed reduce-sum request: `VecF32<N>` is its layout.
pub type ReduceSum<const N: usize> = VecF32<N>;

/// Typed reduce-sum reply.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
pub struct Sum {
    /// The sum.
    pub sum: f32,
    /// How many values were summed.
    pub count: u32,
}

// SAFETY: repr(C) of f32, u32 and [f32; N]: every field is Pod, all 4-aligned, so there
// is no padding for any N, and all-zero / any bit pattern is a valid value.
unsafe impl<const N: usize> Zeroable for VecScale<N> {}
// SAFETY: see above.
unsafe impl<const N: usize> Pod for VecScale<N> {}
// SAFETY: repr(C) of u32, u32 and [f32; N]: no padding, any bit pattern valid.
unsafe impl<const N: usize> Zeroable for VecF32<N> {}
// SAFETY: see above.
unsafe impl<const N: usize> Pod for VecF32<N> {}

impl<const N: usize> VecScale<N> {
    /// A request scaling `values` (at most `N`) by `factor`; `None` if too many.
    pub fn new(factor: f32, values: &[f32]) -> Option<Self> {
        let mut v = [0.0; N];
        v.get_mut(..values.len())?.copy_from_slice(values);
        Some(Self {
            factor,
            count: values.len() as u32,
            values: v,
        })
    }
}

impl<const N: usize> VecF32<N> {
    /// A vector of `values` (at most `N`); `None` if too many.
    pub fn new(values: &[f32]) -> Option<Self> {
        let mut v = [0.0; N];
        v.get_mut(..values.len())?.copy_from_slice(values);
        Some(Self {
            count: values.len() as u32,
            reserved: 0,
            values: v,
        })
    }
    /// The used values.
    pub fn as_slice(&self) -> &[f32] {
        &self.values[..(self.count as usize).min(N)]
    }
}

/// Reference results every backend must match.
pub mod reference {
    /// Vector scale: exactly `v * factor` in `f32` (one IEEE multiply, same on every device).
    pub fn vec_scale(factor: f32, values: &[f32]) -> Vec<f32> {
        values.iter().map(|v| v * factor).collect()
    }

    /// Reduce-sum: the exact sum (in `f64`) and the error bound any `f32` summation order
    /// satisfies: `|got - exact| <= gamma(n) * sum(|v|)`, `gamma(n) = n u / (1 - n u)`,
    /// `u = 2^-24` (Higham, *Accuracy and Stability of Numerical Algorithms*, 4.2).
    pub fn reduce_sum(values: &[f32]) -> (f64, f64) {
        let exact: f64 = values.iter().map(|&v| f64::from(v)).sum();
        let abs: f64 = values.iter().map(|&v| f64::from(v).abs()).sum();
        let n = values.len() as f64;
        let u = f64::powi(2.0, -24);
        let gamma = n * u / (1.0 - n * u);
        (exact, gamma * abs + f64::from(f32::MIN_POSITIVE))
    }

    /// Whether a device's reduce-sum result is within the reference bound.
    pub fn reduce_sum_ok(got: f32, values: &[f32]) -> bool {
        let (exact, bound) = reduce_sum(values);
        (f64::from(got) - exact).abs() <= bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_id_names_its_device_handler() {
        for (id, h) in [
            (ids::ECHO, DeviceHandler::Echo),
            (ids::VEC_SCALE, DeviceHandler::VecScale),
            (ids::REDUCE_SUM, DeviceHandler::ReduceSum),
        ] {
            assert_eq!(DeviceHandler::builtin(id), Some(h));
            assert!(DeviceHandler::BUILTIN.contains(&h));
            assert!(h.source().contains("GYRE_HANDLER_PHASE"), "{}", h.name());
        }
        assert_eq!(DeviceHandler::builtin(0), None);
    }

    #[test]
    fn vec_scale_matches_reference() {
        let req = VecScale::<14>::new(2.5, &[1.0, -2.0, 3.25]).unwrap();
        let mut out = [0u8; 64];
        let n = vec_scale(ids::VEC_SCALE, bytemuck::bytes_of(&req), &mut out).unwrap();
        assert_eq!(n, 8 + 12);
        let mut full = [0u8; 64];
        full[..n].copy_from_slice(&out[..n]);
        let r: VecF32<14> = bytemuck::pod_read_unaligned(&full);
        assert_eq!(
            r.as_slice(),
            reference::vec_scale(2.5, &[1.0, -2.0, 3.25]).as_slice()
        );
    }

    #[test]
    fn vec_scale_rejects_count_beyond_payload() {
        let mut req = VecScale::<14>::new(1.0, &[1.0]).unwrap();
        req.count = 1000;
        let mut out = [0u8; 64];
        assert_eq!(
            vec_scale(2, bytemuck::bytes_of(&req), &mut out),
            Err(HANDLER_REJECTED)
        );
        assert_eq!(vec_scale(2, &[1, 2], &mut out), Err(HANDLER_REJECTED));
    }

    #[test]
    fn reduce_sum_within_bound() {
        let vals: Vec<f32> = (0..14).map(|i| (i as f32) * 0.1 - 0.3).collect();
        let req = ReduceSum::<14>::new(&vals).unwrap();
        let mut out = [0u8; 64];
        assert_eq!(reduce_sum(3, bytemuck::bytes_of(&req), &mut out), Ok(8));
        let s: Sum = bytemuck::pod_read_unaligned(&out[..8]);
        assert_eq!(s.count, 14);
        assert!(reference::reduce_sum_ok(s.sum, &vals));
        assert!(!reference::reduce_sum_ok(s.sum + 1.0, &vals));
    }

    #[test]
    fn echo_rejects_reply_too_small() {
        let mut out = [0u8; 2];
        assert_eq!(echo(1, b"abc", &mut out), Err(HANDLER_REJECTED));
    }
}
