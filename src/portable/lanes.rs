//! The lane-parallel form of a portable handler, `#[gyre::handler(lanes)]`: every lane of
//! the block runs the function with its own [`Lane`] (taking its part of the request), and
//! the reply is the block reduction its last expression names (`lane.sum(x)`,
//! `lane.min(x)`, `lane.max(x)`) of the lanes' results, combined in lane order.
//!
//! On CUDA and OpenCL the lanes are the block's threads (work-items); the CPU backend
//! calls the Rust function once per emulated lane (`CpuBackend::with_lanes`,
//! `GYRE_CPU_LANES`, [`RuntimeBuilder::cpu_lanes`](crate::RuntimeBuilder::cpu_lanes)) and
//! combines the results in the same order, so a handler answers the same on every backend
//! with the same lane count. Integer reductions do not depend on the lane count; a float
//! sum does, as any parallel sum does (a different association).
//!
//! # Examples
//!
//! ```
//! use gyre::{Backend, KernelSpec, Runtime, portable::Lane};
//!
//! /// The sum of squares of the first `n` values, each lane taking every `count()`th.
//! #[gyre::handler(lanes)]
//! fn sum_sq(v: [u32; 16], lane: Lane) -> u32 {
//!     let mut acc: u32 = 0;
//!     let mut i: u32 = lane.id();
//!     while i < 16 {
//!         acc += v[i as usize] * v[i as usize];
//!         i += lane.count();
//!     }
//!     lane.sum(acc)
//! }
//!
//! let v: [u32; 16] = core::array::from_fn(|i| i as u32);
//! assert_eq!(sum_sq(v, Lane::single()), 1240); // the Rust function, one lane
//! let rt = Runtime::builder().backend(Backend::Cpu).cpu_lanes(32).build()?;
//! let k = rt.launch(KernelSpec::portable(sum_sq))?;
//! assert_eq!(k.call_blocking(v)?, 1240);
//! # Ok::<(), gyre::Error>(())
//! ```

use std::ops::Deref;
use std::sync::Arc;

use super::{DeviceType, Source};

/// One lane of a lane-parallel handler: its index and the block's lane count, and the
/// block reductions.
///
/// Called from Rust directly, a handler takes [`Lane::single`] and the reductions return
/// their argument: the one-lane result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    id: u32,
    count: u32,
}

impl Lane {
    /// The only lane of a one-lane block.
    pub const fn single() -> Self {
        Self { id: 0, count: 1 }
    }

    /// Lane `id` of `count` (`id < count`, `count` in 1..=256), as the CPU backend's
    /// emulation passes it; `None` otherwise.
    pub const fn new(id: u32, count: u32) -> Option<Self> {
        if count == 0 || count > 256 || id >= count {
            return None;
        }
        Some(Self { id, count })
    }

    /// This lane's index, `0..count()`.
    pub const fn id(&self) -> u32 {
        self.id
    }

    /// The lanes in the block.
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The block reduction by addition (wrapping on integers, IEEE in lane order on
    /// floats) of every lane's `x`: the reply. Only a handler's last expression.
    pub fn sum<T: Reducible>(&self, x: T) -> T {
        x
    }

    /// The block reduction by minimum (`f32::min` on floats).
    pub fn min<T: Reducible>(&self, x: T) -> T {
        x
    }

    /// The block reduction by maximum (`f32::max` on floats).
    pub fn max<T: Reducible>(&self, x: T) -> T {
        x
    }
}

/// The block reduction a lane-parallel handler's reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    /// `lane.sum(x)`.
    Sum,
    /// `lane.min(x)`.
    Min,
    /// `lane.max(x)`.
    Max,
}

impl Reduce {
    fn c_fn(self) -> &'static str {
        match self {
            Reduce::Sum => "gyre_add",
            Reduce::Min => "gyre_min",
            Reduce::Max => "gyre_max",
        }
    }
}

/// A reply type a block reduction combines: one 32-bit word per lane.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be block-reduced: a lane-parallel handler replies u32, i32 or f32"
)]
pub trait Reducible: DeviceType + Copy + bytemuck::Pod {
    /// `a op b`, as the device computes it.
    fn combine(a: Self, b: Self, op: Reduce) -> Self;
    /// The C expression turning the `uint32_t` word `w` into this type.
    #[doc(hidden)]
    fn c_from_word(w: &str) -> String;
    /// The C expression turning a value `v` of this type into a `uint32_t` word.
    #[doc(hidden)]
    fn c_to_word(v: &str) -> String;
}

macro_rules! int_reducible {
    ($($t:ty => $c:literal),*) => {$(
        impl Reducible for $t {
            fn combine(a: Self, b: Self, op: Reduce) -> Self {
                match op {
                    Reduce::Sum => a.wrapping_add(b),
                    Reduce::Min => a.min(b),
                    Reduce::Max => a.max(b),
                }
            }
            fn c_from_word(w: &str) -> String {
                format!(concat!("((", $c, ")({}))"), w)
            }
            fn c_to_word(v: &str) -> String {
                format!("((uint32_t)({v}))")
            }
        }
    )*};
}
int_reducible!(u32 => "uint32_t", i32 => "int32_t");

impl Reducible for f32 {
    fn combine(a: Self, b: Self, op: Reduce) -> Self {
        match op {
            Reduce::Sum => a + b,
            Reduce::Min => a.min(b),
            Reduce::Max => a.max(b),
        }
    }
    fn c_from_word(w: &str) -> String {
        format!("GYRE_AS_FLOAT({w})")
    }
    fn c_to_word(v: &str) -> String {
        format!("GYRE_AS_UINT({v})")
    }
}

/// A lane-parallel handler written once in Rust (`#[gyre::handler(lanes)]`): callable as
/// the Rust function (`name(req, Lane::single())`), launched with
/// [`KernelSpec::portable`](crate::KernelSpec::portable).
pub struct PortableLanes<Req, Resp> {
    f: fn(Req, Lane) -> Resp,
    source: Source,
    reduce: Reduce,
}

impl<Req, Resp> Clone for PortableLanes<Req, Resp> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Req, Resp> Copy for PortableLanes<Req, Resp> {}

impl<Req, Resp> core::fmt::Debug for PortableLanes<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortableLanes")
            .field("name", &self.source.name)
            .field("reduce", &self.reduce)
            .finish_non_exhaustive()
    }
}

impl<Req, Resp> Deref for PortableLanes<Req, Resp> {
    type Target = fn(Req, Lane) -> Resp;
    fn deref(&self) -> &Self::Target {
        &self.f
    }
}

impl<Req: DeviceType + bytemuck::Pod, Resp: Reducible> PortableLanes<Req, Resp> {
    #[doc(hidden)]
    pub const fn __new(f: fn(Req, Lane) -> Resp, source: Source, reduce: Reduce) -> Self {
        Self { f, source, reduce }
    }

    /// The handler's name (the Rust function's).
    pub fn name(&self) -> &'static str {
        self.source.name
    }

    /// The block reduction of its reply.
    pub fn reduce(&self) -> Reduce {
        self.reduce
    }

    /// What the block computes with `lanes` lanes: the function on every lane, combined
    /// in lane order. What the CPU backend runs.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `lanes` is not in
    /// 1..=256. (A panic of the function on a lane propagates, as the function's own
    /// would; in a kernel it faults the kernel with HANDLER_PANIC.)
    pub fn run(&self, req: Req, lanes: u32) -> crate::Result<Resp> {
        if Lane::new(0, lanes).is_none() {
            return Err(crate::Error::InvalidArgument {
                name: "lanes",
                value: lanes.to_string(),
                reason: "a block has 1..=256 lanes",
            });
        }
        Ok(self.combine_lanes(req, lanes))
    }

    /// `run` for a lane count already checked (1..=256).
    fn combine_lanes(&self, req: Req, lanes: u32) -> Resp {
        debug_assert!((1..=256).contains(&lanes));
        let lane = |id| Lane { id, count: lanes };
        let mut acc = (self.f)(req, lane(0));
        for id in 1..lanes {
            acc = Resp::combine(acc, (self.f)(req, lane(id)), self.reduce);
        }
        acc
    }

    /// The whole device source: as [`Portable::c_source`](super::Portable::c_source),
    /// with a phase function that runs the handler on every lane (phase 0), agrees on a
    /// panic (phase 1) and combines the lanes' words in lane order on lane 0 (phase 2).
    pub fn c_source(&self) -> String {
        let (req, resp) = (Req::c_name(), Resp::c_name());
        let prelude = super::prelude::<Req, Resp>(&self.source);
        let from = |w: &str| Resp::c_from_word(w);
        let to_word = Resp::c_to_word("r");
        let first = from("b->words[0]");
        let next = from("b->words[k]");
        let op = self.reduce.c_fn();
        let body = format!(
            "\
             \x20   uint32_t k;\n\
             \x20   if (c->msg_type != 0u || c->req_len != (uint32_t)sizeof({req})) {{\n\
             \x20       if (c->lane == 0u) {{\n\
             \x20           b->reply_len = 0u;\n\
             \x20           b->status = c->msg_type != 0u ? GYRE_ERR_UNKNOWN_TYPE : GYRE_ERR_HANDLER_REJECTED;\n\
             \x20       }}\n\
             \x20       return GYRE_PHASE_DONE;\n\
             \x20   }}\n\
             \x20   if (phase == 0u) {{ /* every lane: its part */\n\
             \x20       {req} q;\n\
             \x20       {resp} r;\n\
             \x20       uint32_t p = 0u;\n\
             \x20       gyre_copy_in((unsigned char *)&q, c->req, (uint32_t)sizeof(q));\n\
             \x20       r = gyre_h(q, c->lane, c->lanes, &p);\n\
             \x20       l->u32 = p != 0u ? 0u : {to_word};\n\
             \x20       b->words[c->lane] = p;\n\
             \x20       return 1u;\n\
             \x20   }}\n\
             \x20   if (phase == 1u) {{ /* every lane: did any panic? (the same answer on each) */\n\
             \x20       uint32_t any = 0u;\n\
             \x20       for (k = 0u; k < c->lanes; ++k) {{\n\
             \x20           any |= b->words[k];\n\
             \x20       }}\n\
             \x20       return any != 0u ? 2u : 3u;\n\
             \x20   }}\n\
             \x20   if (phase == 2u) {{ /* a lane panicked: the request is answered HANDLER_PANIC */\n\
             \x20       if (c->lane == 0u) {{\n\
             \x20           b->panicked = 1u;\n\
             \x20           b->reply_len = 0u;\n\
             \x20       }}\n\
             \x20       return GYRE_PHASE_DONE;\n\
             \x20   }}\n\
             \x20   if (phase == 3u) {{ /* every lane: publish its word */\n\
             \x20       b->words[c->lane] = l->u32;\n\
             \x20       return 4u;\n\
             \x20   }}\n\
             \x20   if (c->lane == 0u) {{ /* lane 0: combine in lane order, reply */\n\
             \x20       {resp} acc = {first};\n\
             \x20       for (k = 1u; k < c->lanes; ++k) {{\n\
             \x20           acc = {op}(acc, {next});\n\
             \x20       }}\n\
             \x20       gyre_copy_out(c->reply, (const unsigned char *)&acc, (uint32_t)sizeof(acc));\n\
             \x20       b->status = GYRE_ERR_NONE;\n\
             \x20       b->reply_len = (uint32_t)sizeof(acc);\n\
             \x20   }}\n\
             \x20   return GYRE_PHASE_DONE;\n"
        );
        super::program(&prelude, &body)
    }

    /// The CPU backend's handler factory: `run` over the emulated lanes.
    pub(crate) fn lane_handler(&self) -> Arc<dyn gyre_core::LaneHandler> {
        Arc::new(*self)
    }
}

impl<Req, Resp> gyre_core::LaneHandler for PortableLanes<Req, Resp>
where
    Req: DeviceType + bytemuck::Pod,
    Resp: Reducible,
{
    fn for_lanes(&self, lanes: u32) -> Arc<dyn gyre_core::Handler> {
        let h = *self;
        // The CPU backend passes the lane count it validated (1..=256).
        Arc::new(move |ty: u32, req: &[u8], reply: &mut [u8]| {
            crate::spec::typed_call(ty, req, reply, |r| Ok(h.combine_lanes(r, lanes)))
        })
    }
}
