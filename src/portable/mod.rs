//! Handlers written once in Rust and run on every backend: the runtime side of
//! `#[gyre::handler]`, `#[gyre::handler_fn]` and `#[derive(gyre::DeviceType)]`
//! (`docs/handlers.md`).
//!
//! A handler's C is generated at compile time with placeholders for its types and
//! helpers; [`Portable::c_source`] fills them in (types from [`DeviceType`], helpers from
//! their [`Source`]) and adds the phase function the block loop calls. The CPU backend runs
//! the Rust function; OpenCL builds the C at launch; CUDA compiles it with NVRTC.
//!
//! # Examples
//!
//! ```
//! use gyre::{Backend, KernelSpec, Runtime};
//!
//! #[derive(Clone, Copy, gyre::Pod, gyre::Zeroable, gyre::DeviceType)]
//! #[bytemuck(crate = "gyre::bytemuck")]
//! #[repr(C)]
//! struct Point { x: f32, y: f32 }
//!
//! #[gyre::handler]
//! fn norm2(p: Point) -> f32 {
//!     p.x * p.x + p.y * p.y
//! }
//!
//! assert_eq!(norm2(Point { x: 3.0, y: 4.0 }), 25.0); // still a Rust function
//! let rt = Runtime::builder().backend(Backend::Auto).build()?;
//! let k = rt.launch(KernelSpec::portable(norm2))?;
//! assert_eq!(k.call_blocking(Point { x: 3.0, y: 4.0 })?, 25.0);
//! # Ok::<(), gyre::Error>(())
//! ```

use std::collections::HashSet;
use std::ops::Deref;

mod lanes;
mod loan;
#[doc(hidden)] // macro support: used by the code #[gyre::handler] generates
pub mod ops;

pub use lanes::{Lane, PortableLanes, Reduce, Reducible};
pub use loan::{Bytes, PortableLoan, PortableLoanHandler, PortableLoanLanes};

/// A type a portable handler can use: scalars, arrays of them, and `#[repr(C)]` structs
/// with `#[derive(gyre::DeviceType)]`. Implemented by the derive; not meant to be
/// implemented by hand.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a device type: a #[gyre::handler] cannot use it",
    note = "device types are u8..u64, i8..i64, usize, f32, f64, bool, arrays of them, and \
            #[repr(C)] structs with #[derive(gyre::DeviceType)]"
)]
pub trait DeviceType {
    /// The C name of the type (`uint32_t`, `gyre_arr4_float`, `gyre_t_Point`).
    fn c_name() -> String;
    /// Adds the C declarations this type needs (its own and its fields'), once each.
    fn declare(d: &mut Decls);
}

macro_rules! scalars {
    ($($t:ty => $c:expr),*) => {$(
        impl DeviceType for $t {
            fn c_name() -> String { String::from($c) }
            fn declare(_: &mut Decls) {}
        }
    )*};
}
scalars!(u8 => "uint8_t", u16 => "uint16_t", u32 => "uint32_t", u64 => "uint64_t",
         i8 => "int8_t", i16 => "int16_t", i32 => "int32_t", i64 => "int64_t",
         f32 => "float", f64 => "double", bool => "bool");

// gyre's device code takes `usize` (the index type) as a 64-bit integer.
const _: () = assert!(core::mem::size_of::<usize>() == 8);
impl DeviceType for usize {
    fn c_name() -> String {
        String::from("uint64_t")
    }
    fn declare(_: &mut Decls) {}
}

/// `[T; N]` is a C struct `{ T v[N]; }`: a value that C can copy, pass and return.
impl<T: DeviceType, const N: usize> DeviceType for [T; N] {
    fn c_name() -> String {
        format!("gyre_arr{N}_{}", T::c_name())
    }
    fn declare(d: &mut Decls) {
        let name = Self::c_name();
        if !d.begin(&name) {
            return;
        }
        T::declare(d);
        // C has no zero-length arrays: keep one element (size then differs, and the
        // layout assertion of a struct holding it says so).
        let n = N.max(1);
        d.push(format!(
            "typedef struct {name} {{ {} v[{n}]; }} {name};\n",
            T::c_name()
        ));
    }
}

#[doc(hidden)] // macro support: used by the code #[gyre::handler] generates
/// The C declarations a program needs, in dependency order, each once.
#[derive(Debug, Default)]
pub struct Decls {
    seen: HashSet<String>,
    text: String,
}

impl Decls {
    /// Marks `name` as declared; `false` if it already was (then declare nothing).
    pub fn begin(&mut self, name: &str) -> bool {
        self.seen.insert(name.to_owned())
    }
    /// Appends a declaration.
    pub fn push(&mut self, text: String) {
        self.text.push_str(&text);
    }
}

#[doc(hidden)] // macro support: used by the code #[gyre::handler] generates
/// The C that checks a struct's layout against Rust's: size, alignment, every offset.
pub fn layout_asserts(c: &str, size: usize, align: usize, fields: &[(&str, usize)]) -> String {
    let mut s = format!(
        "GYRE_STATIC_ASSERT(sizeof({c}) == {size}u, \"{c}: size differs from Rust's\");\n\
         GYRE_STATIC_ASSERT(GYRE_ALIGNOF({c}) == {align}u, \"{c}: alignment differs from Rust's\");\n"
    );
    for (f, off) in fields {
        s.push_str(&format!(
            "GYRE_STATIC_ASSERT(GYRE_OFFSETOF({c}, {f}) == {off}u, \"{c}.{f}: offset differs from Rust's\");\n"
        ));
    }
    s
}

#[doc(hidden)] // macro support: used by the code #[gyre::handler] generates
/// A type used by generated C: its name and declarations.
#[derive(Clone, Copy)]
pub struct TypeRef {
    /// [`DeviceType::c_name`].
    pub c_name: fn() -> String,
    /// [`DeviceType::declare`].
    pub declare: fn(&mut Decls),
}

#[doc(hidden)] // macro support: used by the code #[gyre::handler] generates
/// The generated C of one handler or helper, with placeholders for its types
/// (`\x01T<n>\x02`), its helpers (`\x01F<n>\x02`) and, for a helper, its own name
/// (`\x01S\x02`).
#[derive(Clone, Copy)]
pub struct Source {
    /// The Rust function's name.
    pub name: &'static str,
    /// Its `module_path!()`, `line!()` and `column!()` (make helper names unique in C,
    /// also for helpers of one name in one module, defined in different function bodies).
    pub module: &'static str,
    /// See `module`.
    pub line: u32,
    /// See `module`.
    pub column: u32,
    /// The C text.
    pub c: &'static str,
    /// The types of `T<n>`.
    pub types: &'static [TypeRef],
    /// The helpers of `F<n>`.
    pub fns: &'static [&'static Source],
}

impl core::fmt::Debug for Source {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("module", &self.module)
            .finish_non_exhaustive()
    }
}

impl Source {
    /// The C name of this function as a helper.
    fn helper_name(&self) -> String {
        let module: String = self
            .module
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!(
            "gyre_fn_{module}__{}_{}_{}",
            self.name.trim_start_matches("r#"),
            self.line,
            self.column
        )
    }

    /// The C text with every placeholder filled in.
    fn resolve(&self) -> String {
        let mut out = String::with_capacity(self.c.len());
        let mut rest = self.c;
        while let Some(start) = rest.find('\u{1}') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let Some(end) = after.find('\u{2}') else {
                out.push_str(&rest[start..]);
                rest = "";
                break;
            };
            let tag = &after[..end];
            let idx = |s: &str| s.parse::<usize>().ok();
            let text = match tag.split_at(1) {
                ("T", n) => idx(n).and_then(|i| self.types.get(i)).map(|t| (t.c_name)()),
                ("F", n) => idx(n)
                    .and_then(|i| self.fns.get(i))
                    .map(|f| f.helper_name()),
                ("S", "") => Some(self.helper_name()),
                _ => None,
            };
            // The macro wrote every placeholder with an index it also wrote out.
            out.push_str(&text.unwrap_or_else(|| format!("/* bad placeholder {tag} */")));
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// Declares this function's types and, depth first, its helpers (each once).
    fn collect(&self, decls: &mut Decls, helpers: &mut String, seen: &mut HashSet<String>) {
        for t in self.types {
            (t.declare)(decls);
        }
        for f in self.fns {
            if seen.insert(f.helper_name()) {
                f.collect(decls, helpers, seen);
                helpers.push_str(&f.resolve());
            }
        }
    }
}

/// A handler written once in Rust (`#[gyre::handler]`): callable as the Rust function
/// (`name(req)`, through `Deref`), and launched with
/// [`KernelSpec::portable`](crate::KernelSpec::portable).
pub struct Portable<Req, Resp> {
    f: fn(Req) -> Resp,
    source: Source,
}

impl<Req, Resp> Clone for Portable<Req, Resp> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Req, Resp> Copy for Portable<Req, Resp> {}

impl<Req, Resp> core::fmt::Debug for Portable<Req, Resp> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Portable")
            .field("name", &self.source.name)
            .finish_non_exhaustive()
    }
}

impl<Req, Resp> Deref for Portable<Req, Resp> {
    type Target = fn(Req) -> Resp;
    fn deref(&self) -> &Self::Target {
        &self.f
    }
}

impl<Req: DeviceType, Resp: DeviceType> Portable<Req, Resp> {
    #[doc(hidden)]
    pub const fn __new(f: fn(Req) -> Resp, source: Source) -> Self {
        Self { f, source }
    }

    /// The handler's name (the Rust function's).
    pub fn name(&self) -> &'static str {
        self.source.name
    }

    /// The Rust function.
    pub fn function(&self) -> fn(Req) -> Resp {
        self.f
    }

    /// The whole device source of the handler: `gyre/portable.h`, the C declarations of
    /// its types, its helpers, the translated function and the phase function the block
    /// loop calls (lane 0 answers; a request of another type or size is answered
    /// `UNKNOWN_TYPE` / `HANDLER_REJECTED`, as the CPU backend's typed adapter does).
    ///
    /// # Examples
    ///
    /// ```
    /// #[gyre::handler]
    /// fn inc(x: u32) -> u32 { x + 1 }
    /// let c = inc.c_source();
    /// assert!(c.contains("gyre_add"));
    /// assert!(c.contains("#define GYRE_HANDLER_PHASE gyre_portable_phase"));
    /// ```
    pub fn c_source(&self) -> String {
        let (req, resp) = (Req::c_name(), Resp::c_name());
        let prelude = prelude::<Req, Resp>(&self.source);
        let body = format!(
            "\
             \x20   (void)phase;\n\
             \x20   (void)l;\n\
             \x20   if (c->lane == 0u) {{\n\
             \x20       b->reply_len = 0u;\n\
             \x20       if (c->msg_type != 0u) {{\n\
             \x20           b->status = GYRE_ERR_UNKNOWN_TYPE;\n\
             \x20       }} else if (c->req_len != (uint32_t)sizeof({req})) {{\n\
             \x20           b->status = GYRE_ERR_HANDLER_REJECTED;\n\
             \x20       }} else {{\n\
             \x20           {req} q;\n\
             \x20           {resp} r;\n\
             \x20           uint32_t p = 0u;\n\
             \x20           gyre_copy_in((unsigned char *)&q, c->req, (uint32_t)sizeof(q));\n\
             \x20           r = gyre_h(q, &p);\n\
             \x20           if (p != 0u) {{\n\
             \x20               b->panicked = 1u;\n\
             \x20           }} else {{\n\
             \x20               gyre_copy_out(c->reply, (const unsigned char *)&r, (uint32_t)sizeof(r));\n\
             \x20               b->status = GYRE_ERR_NONE;\n\
             \x20               b->reply_len = (uint32_t)sizeof(r);\n\
             \x20           }}\n\
             \x20       }}\n\
             \x20   }}\n\
             \x20   return GYRE_PHASE_DONE;\n"
        );
        program(&prelude, &body)
    }
}

/// A whole device program: `prelude`, then the phase function the block loop calls
/// (`GYRE_HANDLER_PHASE`, named `gyre_portable_phase`) with `body` as its statements.
pub(crate) fn program(prelude: &str, body: &str) -> String {
    format!(
        "{prelude}\n\
         static inline GYRE_DEVICE_FN uint32_t gyre_portable_phase(uint32_t phase, const gyre_hcall *c,\n\
         \x20                                                      gyre_hlane *l, GYRE_SHARED gyre_hblock *b) {{\n\
         {body}\
         }}\n\
         #define GYRE_HANDLER_PHASE gyre_portable_phase\n"
    )
}

/// The generated program up to the phase function: `gyre/portable.h`, the declarations of
/// the request, reply and every type used, the helpers (depth first) and the handler.
pub(crate) fn prelude<Req: DeviceType, Resp: DeviceType>(source: &Source) -> String {
    let mut decls = Decls::default();
    let mut helpers = String::new();
    let mut seen = HashSet::new();
    Req::declare(&mut decls);
    Resp::declare(&mut decls);
    source.collect(&mut decls, &mut helpers, &mut seen);
    format!(
        "/* generated by #[gyre::handler] from {}::{} */\n#include \"gyre/portable.h\"\n{}{}{}",
        source.module,
        source.name,
        decls.text,
        helpers,
        source.resolve()
    )
}

/// A handler written once in Rust: [`Portable`] (`#[gyre::handler]`) or [`PortableLanes`]
/// (`#[gyre::handler(lanes)]`), for [`KernelSpec::portable`](crate::KernelSpec::portable).
pub trait PortableHandler<Req, Resp>: Copy + sealed::Sealed {
    /// The handler's name.
    fn handler_name(&self) -> &'static str;
    /// The whole device source.
    fn device_source(&self) -> String;
    /// The Rust function, for a handler that is not lane-parallel.
    #[doc(hidden)]
    fn single(&self) -> Option<fn(Req) -> Resp>;
    /// The lane-parallel form, if it is one.
    #[doc(hidden)]
    fn lanes(&self) -> Option<std::sync::Arc<dyn gyre_core::LaneHandler>>;
}

mod sealed {
    pub trait Sealed {}
    impl<Req, Resp> Sealed for super::Portable<Req, Resp> {}
    impl<Req, Resp> Sealed for super::PortableLanes<Req, Resp> {}
}

impl<Req: DeviceType, Resp: DeviceType> PortableHandler<Req, Resp> for Portable<Req, Resp> {
    fn handler_name(&self) -> &'static str {
        self.name()
    }
    fn device_source(&self) -> String {
        self.c_source()
    }
    fn single(&self) -> Option<fn(Req) -> Resp> {
        Some(self.f)
    }
    fn lanes(&self) -> Option<std::sync::Arc<dyn gyre_core::LaneHandler>> {
        None
    }
}

impl<Req, Resp> PortableHandler<Req, Resp> for PortableLanes<Req, Resp>
where
    Req: DeviceType + bytemuck::Pod,
    Resp: Reducible,
{
    fn handler_name(&self) -> &'static str {
        self.name()
    }
    fn device_source(&self) -> String {
        self.c_source()
    }
    fn single(&self) -> Option<fn(Req) -> Resp> {
        None
    }
    fn lanes(&self) -> Option<std::sync::Arc<dyn gyre_core::LaneHandler>> {
        Some(self.lane_handler())
    }
}
