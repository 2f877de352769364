//! A user crate in miniature: it depends on `gyre` only, **not** on `bytemuck`, and
//! derives its message types through gyre's re-exports, as `gyre::Pod` documents:
//!
//! ```
//! #[derive(Clone, Copy, gyre::Pod, gyre::Zeroable)]
//! #[bytemuck(crate = "gyre::bytemuck")]
//! #[repr(C)]
//! struct Quote {
//!     id: u64,
//!     bid: f64,
//! }
//! # let _ = Quote { id: 0, bid: 0.0 };
//! ```
//!
//! If the documented form stopped compiling without a direct `bytemuck` dependency, this
//! crate (part of the workspace, so of every `cargo test --workspace`) would fail to
//! build. (A doc test of `gyre` itself cannot show it: doc tests see every dependency of
//! the crate they document, `bytemuck` included.)

#![forbid(unsafe_code)]

/// A request type derived through gyre only.
#[derive(Debug, Clone, Copy, PartialEq, gyre::Pod, gyre::Zeroable)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Order {
    /// Order id.
    pub id: u64,
    /// Quantity.
    pub qty: u32,
    /// Side: 0 buy, 1 sell.
    pub side: u32,
}

/// A reply type derived through gyre only, with the short path form of the derives.
#[derive(Debug, Clone, Copy, PartialEq, gyre::Zeroable, gyre::Pod)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Fill {
    /// The order's id.
    pub id: u64,
    /// Quantity filled.
    pub filled: u32,
    /// Padding (Pod types have none implicit).
    pub _pad: u32,
}

#[cfg(test)]
mod tests {
    use super::{Fill, Order};
    use gyre::{Backend, KernelSpec, Runtime};

    /// The derived types are real message types: a kernel takes and answers them.
    #[test]
    fn derived_types_cross_a_kernel() {
        let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
        let k = rt
            .launch(KernelSpec::from_fn("fill", |o: Order| Fill {
                id: o.id,
                filled: o.qty / 2,
                _pad: 0,
            }))
            .unwrap();
        let f = k
            .call_blocking(Order {
                id: 9,
                qty: 10,
                side: 1,
            })
            .unwrap();
        assert_eq!(
            f,
            Fill {
                id: 9,
                filled: 5,
                _pad: 0
            }
        );
        assert_eq!(gyre::bytemuck::bytes_of(&f).len(), 16);
        k.shutdown_blocking().unwrap();
    }
}
