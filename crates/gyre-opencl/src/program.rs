//! The OpenCL C sources of the ring kernel and their build.
//!
//! A ring-kernel program is one source string: the OpenCL port and the handler interface
//! (`gyre/port_opencl.h`, `gyre/handler.h`), a built-in handler (`cuda/handlers/*.h`,
//! the device code every backend runs), then `cuda/ring_kernel.cl`, with every
//! `#include "gyre/..."` replaced by the embedded header (`abi.h`, `ring.h`, `poller.h`, `link.h`, `tick.h`, `block.h`, `loan.h`,
//! `port_opencl.h`, `handler.h`) under `#line` directives, so build logs name the
//! real files and no include path (which PoCL passes to clang unquoted) reaches the
//! compiler. [`BuildOptions`] turns what the host learnt about the device (its atomic
//! scopes, its clock rate, the work-group size) into `-D` options.

use opencl3::context::Context;
use opencl3::error_codes::CL_BUILD_PROGRAM_FAILURE;
use opencl3::program::Program;

use crate::error::{cl_error, Error, Result};
use crate::probe::{DeviceInfo, Scope};
use crate::scale::ClockScale;

/// `cuda/ring_kernel.cl`.
pub const RING_KERNEL_CL: &str = include_str!("../../../cuda/ring_kernel.cl");
const ABI_H: &str = include_str!("../../../cuda/include/gyre/abi.h");
const RING_H: &str = include_str!("../../../cuda/include/gyre/ring.h");
const LINK_H: &str = include_str!("../../../cuda/include/gyre/link.h");
const POLLER_H: &str = include_str!("../../../cuda/include/gyre/poller.h");
const TICK_H: &str = include_str!("../../../cuda/include/gyre/tick.h");
const PORT_OPENCL_H: &str = include_str!("../../../cuda/include/gyre/port_opencl.h");
const HANDLER_H: &str = include_str!("../../../cuda/include/gyre/handler.h");
const BLOCK_H: &str = include_str!("../../../cuda/include/gyre/block.h");
const WAVE_H: &str = include_str!("../../../cuda/include/gyre/wave.h");
const LOAN_H: &str = include_str!("../../../cuda/include/gyre/loan.h");
const PORTABLE_H: &str = include_str!("../../../cuda/include/gyre/portable.h");

/// The entry point of the ring kernel.
pub const RING_KERNEL_ENTRY: &str = "gyre_ring_kernel";
/// The entry point of the clock probe ([`clock_probe_source`]).
pub const CLOCK_PROBE_ENTRY: &str = "gyre_clock_probe";
/// The OpenCL C version every gyre program is built for.
pub const CL_STD: &str = "-cl-std=CL3.0";

/// The language standard and the port's form for a device: [`CL_STD`], or OpenCL C 1.2
/// with the port's legacy atomics; plus NVIDIA's clock where that is the device's.
pub fn language_options(legacy_atomics: bool, nvidia_ptx: bool) -> String {
    let mut o = if legacy_atomics {
        "-cl-std=CL1.2 -DGYRE_CL_LEGACY_ATOMICS=1".to_owned()
    } else {
        CL_STD.to_owned()
    };
    if nvidia_ptx {
        o.push_str(" -DGYRE_CL_NVIDIA=1");
    }
    o
}

/// A handler linked into the ring kernel (defined once, in `gyre_core`).
pub use gyre_core::kernels::DeviceHandler as Handler;

/// The embedded header named by an `#include "..."` of gyre's device code.
fn header(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "gyre/abi.h" | "abi.h" => Some(("gyre/abi.h", ABI_H)),
        "gyre/ring.h" | "ring.h" => Some(("gyre/ring.h", RING_H)),
        "gyre/link.h" | "link.h" => Some(("gyre/link.h", LINK_H)),
        "gyre/poller.h" | "poller.h" => Some(("gyre/poller.h", POLLER_H)),
        "gyre/tick.h" | "tick.h" => Some(("gyre/tick.h", TICK_H)),
        "gyre/port_opencl.h" | "port_opencl.h" => Some(("gyre/port_opencl.h", PORT_OPENCL_H)),
        "gyre/handler.h" | "handler.h" => Some(("gyre/handler.h", HANDLER_H)),
        "gyre/block.h" | "block.h" => Some(("gyre/block.h", BLOCK_H)),
        "gyre/wave.h" | "wave.h" => Some(("gyre/wave.h", WAVE_H)),
        "gyre/loan.h" | "loan.h" => Some(("gyre/loan.h", LOAN_H)),
        "gyre/portable.h" | "portable.h" => Some(("gyre/portable.h", PORTABLE_H)),
        _ => None,
    }
}

/// Appends `text` (file `name`) to `out`, replacing each `#include "gyre/..."` with the
/// header's text between `#line` directives. Headers have include guards, so including
/// one twice is harmless; `depth` bounds a cycle that guards would not stop.
fn expand(name: &str, text: &str, out: &mut String, depth: u32) {
    out.push_str(&format!("#line 1 \"{name}\"\n"));
    for (n, line) in text.lines().enumerate() {
        let inc = line
            .trim_start()
            .strip_prefix("#include")
            .map(str::trim)
            .and_then(|r| r.strip_prefix('"'))
            .and_then(|r| r.split('"').next())
            .and_then(header);
        match inc {
            Some((hname, htext)) if depth < 8 => {
                expand(hname, htext, out, depth + 1);
                out.push_str(&format!("#line {} \"{name}\"\n", n + 2));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}

/// The full source of the ring kernel with `handler`: one translation unit.
///
/// # Examples
///
/// ```
/// let src = gyre_opencl::program::ring_kernel_source(gyre_opencl::Handler::Echo);
/// assert!(src.contains("gyre_ring_kernel"));
/// assert!(src.contains("GYRE_PORT_OPENCL_H"));
/// assert!(!src.contains("#include \"gyre/"));
/// ```
pub fn ring_kernel_source(handler: Handler<'_>) -> String {
    // A user's name goes into a comment and `#line` directives: keep it printable and
    // free of quotes and backslashes.
    let name: String = handler
        .name()
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut out = format!(
        "// gyre ring kernel, handler `{name}`: generated by gyre_opencl::program::ring_kernel_source\n"
    );
    expand(
        "ring_kernel_prelude.cl",
        "#include \"gyre/port_opencl.h\"\n#include \"gyre/handler.h\"\n",
        &mut out,
        0,
    );
    expand(&name, handler.source(), &mut out, 0);
    expand("ring_kernel.cl", RING_KERNEL_CL, &mut out, 0);
    out
}

/// `text` (a program named `name` that includes gyre's headers) with each
/// `#include "gyre/..."` replaced by the embedded header, as the ring kernel is built.
pub fn expand_source(name: &str, text: &str) -> String {
    let mut out = String::new();
    expand(name, text, &mut out, 0);
    out
}

/// The clock probe: one work-item writes the device tick counter (`GYRE_CL_TICKS()` of
/// `port_opencl.h`) to `out[0]`.
pub fn clock_probe_source() -> String {
    let mut out = String::new();
    expand(
        "clock_probe.cl",
        "#include \"gyre/port_opencl.h\"\n\
         __kernel void gyre_clock_probe(__global ulong *out) {\n\
         \x20   out[0] = (ulong)GYRE_CL_TICKS();\n\
         }\n",
        &mut out,
        0,
    );
    out
}

/// The build options of a ring kernel on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildOptions {
    /// The work-group size (`GYRE_CL_LANES`).
    pub lanes: u32,
    /// Scope of the protocol's atomics (`GYRE_CL_ATOMIC_SCOPE`).
    pub atomic_scope: Scope,
    /// Scope of its fences (`GYRE_CL_FENCE_SCOPE`).
    pub fence_scope: Scope,
    /// The device clock's rate (`GYRE_CL_NS_PER_TICK_INT` / `_FRAC`).
    pub clock: ClockScale,
    /// OpenCL C 1.2 atomics (`-cl-std=CL1.2 -DGYRE_CL_LEGACY_ATOMICS`, see
    /// `port_opencl.h`) instead of OpenCL C 3.0 ones: a device without acquire/release
    /// atomics at device scope; its kernels run over buffers and the copy strategies only.
    pub legacy_atomics: bool,
    /// NVIDIA's PTX through inline assembly (`-DGYRE_CL_NVIDIA`): the `%globaltimer`
    /// clock, `membar.gl` as the legacy form's fence.
    pub nvidia_ptx: bool,
}

impl BuildOptions {
    /// The options for `device` with `lanes` work-items and the calibrated `clock`.
    pub fn new(device: &DeviceInfo, lanes: u32, clock: ClockScale) -> Self {
        Self {
            lanes,
            atomic_scope: device.atomic_scope,
            fence_scope: device.fence_scope,
            clock,
            legacy_atomics: device.legacy_atomics(),
            nvidia_ptx: device.nvidia_ptx(),
        }
    }

    /// The option string passed to `clBuildProgram`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_opencl::program::BuildOptions;
    /// use gyre_opencl::{ClockScale, Scope};
    /// let o = BuildOptions {
    ///     lanes: 8,
    ///     atomic_scope: Scope::AllSvmDevices,
    ///     fence_scope: Scope::Device,
    ///     clock: ClockScale::ONE_NS,
    ///     legacy_atomics: false,
    ///     nvidia_ptx: false,
    /// };
    /// assert!(o.to_cl_options().starts_with("-cl-std=CL3.0 -DGYRE_CL_LANES=8 "));
    /// ```
    pub fn to_cl_options(&self) -> String {
        format!(
            "{} -DGYRE_CL_LANES={} -DGYRE_CL_ATOMIC_SCOPE={} -DGYRE_CL_FENCE_SCOPE={} \
             -DGYRE_CL_NS_PER_TICK_INT={}ul -DGYRE_CL_NS_PER_TICK_FRAC={}ul",
            language_options(self.legacy_atomics, self.nvidia_ptx),
            self.lanes,
            self.atomic_scope.cl_name(),
            self.fence_scope.cl_name(),
            self.clock.int,
            self.clock.frac,
        )
    }
}

/// Builds `source` (named `what` in errors) for the context's device with `options`.
/// A compile error is [`Error::Build`] with the compiler's log.
pub fn build(
    context: &Context,
    device: &DeviceInfo,
    what: &str,
    source: &str,
    options: &str,
) -> Result<Program> {
    let mut program = Program::create_from_source(context, source).map_err(|e| {
        cl_error(
            "clCreateProgramWithSource",
            e.0,
            format!(", {} bytes of {what}", source.len()),
        )
    })?;
    let _span =
        tracing::info_span!("gyre_opencl_build", program = what, device = %device.name).entered();
    match program.build(context.devices(), options) {
        Ok(()) => Ok(program),
        Err(e) => {
            let log = context
                .devices()
                .first()
                .and_then(|d| program.get_build_log(*d).ok())
                .unwrap_or_else(|| "(no build log)".to_owned());
            if e.0 == CL_BUILD_PROGRAM_FAILURE || !log.trim().is_empty() {
                Err(Error::Build {
                    handler: what.to_owned(),
                    device: device.name.clone(),
                    name: crate::error::cl_error_name(e.0),
                    code: e.0,
                    options: options.to_owned(),
                    log,
                })
            } else {
                Err(cl_error("clBuildProgram", e.0, format!(", {what}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_are_inlined_once_each_with_line_directives() {
        for h in Handler::BUILTIN {
            let src = ring_kernel_source(h);
            assert!(!src.contains("#include \"gyre/"), "{}", h.name());
            assert!(src.contains("#line 1 \"gyre/abi.h\""));
            assert!(src.contains("#line 1 \"gyre/ring.h\""));
            assert!(src.contains("#line 1 \"gyre/port_opencl.h\""));
            assert!(src.contains("#line 1 \"gyre/handler.h\""));
            let port = src.find("#line 1 \"gyre/port_opencl.h\"").unwrap();
            let handler = src.find(&format!("#line 1 \"{}\"", h.name())).unwrap();
            assert!(port < handler, "the port precedes the handler");
            assert!(src.contains(&format!("#line 1 \"{}\"", h.name())));
            assert!(src.contains("__kernel"));
        }
    }
}
