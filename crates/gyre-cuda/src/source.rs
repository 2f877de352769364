//! What NVRTC compiles: the ring kernel's source ([`ring_kernel_source`]: the CUDA port and
//! handler interface, a handler, then `cuda/ring_kernel.cu`), the handlers it can be built
//! with ([`Handler`]), and gyre's
//! device headers, embedded in the crate and handed to NVRTC in memory ([`HEADERS`]), so
//! that no file of the build machine is needed at run time.

use gyre_core::kernels::ids;

/// The entry point of every ring kernel (`extern "C"`, so unmangled).
pub const RING_KERNEL_ENTRY: &str = "gyre_ring_kernel";

/// `cuda/ring_kernel.cu`, the persistent loop.
pub const RING_KERNEL_CU: &str = include_str!("../../../cuda/ring_kernel.cu");
const ECHO_H: &str = include_str!("../../../cuda/handlers/echo.h");
const VEC_SCALE_H: &str = include_str!("../../../cuda/handlers/vec_scale.h");
const REDUCE_SUM_H: &str = include_str!("../../../cuda/handlers/reduce_sum.h");

const ABI_H: &str = include_str!("../../../cuda/include/gyre/abi.h");
const RING_H: &str = include_str!("../../../cuda/include/gyre/ring.h");
const LINK_H: &str = include_str!("../../../cuda/include/gyre/link.h");
const POLLER_H: &str = include_str!("../../../cuda/include/gyre/poller.h");
const TICK_H: &str = include_str!("../../../cuda/include/gyre/tick.h");
const PORT_CUDA_H: &str = include_str!("../../../cuda/include/gyre/port_cuda.h");
const HANDLER_H: &str = include_str!("../../../cuda/include/gyre/handler.h");
const BLOCK_H: &str = include_str!("../../../cuda/include/gyre/block.h");
const WAVE_H: &str = include_str!("../../../cuda/include/gyre/wave.h");
const LOAN_H: &str = include_str!("../../../cuda/include/gyre/loan.h");
const PORTABLE_H: &str = include_str!("../../../cuda/include/gyre/portable.h");

/// gyre's device headers as NVRTC sees them: `(include name, text)`. Each is registered
/// under its path from `cuda/include` (`gyre/abi.h`, as handlers and `ring_kernel.cu`
/// include them) and its bare name (`abi.h`, as the headers include each other); the
/// include guards make the two names one header.
pub const HEADERS: [(&str, &str); 22] = [
    ("gyre/abi.h", ABI_H),
    ("abi.h", ABI_H),
    ("gyre/ring.h", RING_H),
    ("ring.h", RING_H),
    ("gyre/link.h", LINK_H),
    ("link.h", LINK_H),
    ("gyre/poller.h", POLLER_H),
    ("poller.h", POLLER_H),
    ("gyre/tick.h", TICK_H),
    ("tick.h", TICK_H),
    ("gyre/port_cuda.h", PORT_CUDA_H),
    ("port_cuda.h", PORT_CUDA_H),
    ("gyre/handler.h", HANDLER_H),
    ("handler.h", HANDLER_H),
    ("gyre/block.h", BLOCK_H),
    ("block.h", BLOCK_H),
    ("gyre/wave.h", WAVE_H),
    ("wave.h", WAVE_H),
    ("gyre/loan.h", LOAN_H),
    ("loan.h", LOAN_H),
    ("gyre/portable.h", PORTABLE_H),
    ("portable.h", PORTABLE_H),
];

/// The oldest architecture the ring kernel supports (`sm_70`: system-scope
/// acquire/release, `__nanosleep`).
pub const MIN_ARCH: u32 = 70;

/// The handler a ring kernel is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler<'a> {
    /// `cuda/handlers/echo.h` (`gyre_core::kernels::echo`).
    Echo,
    /// `cuda/handlers/vec_scale.h` (`gyre_core::kernels::vec_scale`).
    VecScale,
    /// `cuda/handlers/reduce_sum.h` (`gyre_core::kernels::reduce_sum`).
    ReduceSum,
    /// A user's CUDA C++ source: either `gyre_handler` with the handler signature, or a
    /// phase function (`gyre/handler.h`) named by `#define GYRE_HANDLER_PHASE`.
    Custom {
        /// A name for messages and `#line` directives (NVRTC's log names it).
        name: &'a str,
        /// The source text.
        source: &'a str,
    },
}

impl Handler<'static> {
    /// Every built-in handler.
    pub const BUILTIN: [Handler<'static>; 3] =
        [Handler::Echo, Handler::VecScale, Handler::ReduceSum];

    /// The built-in handler of kernel id `id` (`gyre_core::kernels::ids`).
    pub fn builtin(id: u32) -> Option<Self> {
        match id {
            ids::ECHO => Some(Handler::Echo),
            ids::VEC_SCALE => Some(Handler::VecScale),
            ids::REDUCE_SUM => Some(Handler::ReduceSum),
            _ => None,
        }
    }
}

impl<'a> Handler<'a> {
    /// Its name: the file name for a built-in (`handlers/echo.h`), else the given one.
    pub fn name(&self) -> &'a str {
        match self {
            Handler::Echo => "handlers/echo.h",
            Handler::VecScale => "handlers/vec_scale.h",
            Handler::ReduceSum => "handlers/reduce_sum.h",
            Handler::Custom { name, .. } => name,
        }
    }

    /// Its source text.
    pub fn source(&self) -> &'a str {
        match self {
            Handler::Echo => ECHO_H,
            Handler::VecScale => VEC_SCALE_H,
            Handler::ReduceSum => REDUCE_SUM_H,
            Handler::Custom { source, .. } => source,
        }
    }
}

/// The full source of a ring kernel with `handler`: the CUDA port and the handler
/// interface (`gyre/port_cuda.h`, `gyre/handler.h`, so a handler may use the port's macros
/// and name a phase function), the handler, then `cuda/ring_kernel.cu`, each after a
/// `#line` directive so that NVRTC's log names the original file and line.
pub fn ring_kernel_source(handler: &Handler<'_>) -> String {
    let name: String = handler
        .name()
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    format!(
        "// gyre ring kernel, handler `{name}`: generated by gyre_cuda::nvrtc::ring_kernel_source\n\
         #include \"gyre/port_cuda.h\"\n#include \"gyre/handler.h\"\n\
         #line 1 \"{name}\"\n{}\n#line 1 \"ring_kernel.cu\"\n{RING_KERNEL_CU}",
        handler.source()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_ids_match_gyre_core() {
        assert_eq!(Handler::builtin(ids::ECHO), Some(Handler::Echo));
        assert_eq!(Handler::builtin(ids::VEC_SCALE), Some(Handler::VecScale));
        assert_eq!(Handler::builtin(ids::REDUCE_SUM), Some(Handler::ReduceSum));
        assert_eq!(Handler::builtin(0), None);
    }

    #[test]
    fn source_is_handler_then_loop() {
        for h in Handler::BUILTIN {
            let s = ring_kernel_source(&h);
            let port_at = s.find("#include \"gyre/port_cuda.h\"").unwrap();
            let handler_at = s.find("#define GYRE_HANDLER_PHASE gyre_").unwrap();
            assert!(port_at < handler_at, "{}", h.name());
            let entry_at = s.find("void __launch_bounds__").unwrap();
            assert!(handler_at < entry_at, "{}", h.name());
            assert!(s.contains(&format!("#line 1 \"{}\"", h.name())));
            assert!(s.contains("#line 1 \"ring_kernel.cu\""));
        }
        let odd = Handler::Custom {
            name: "my\"handler\n.cu",
            source: "",
        };
        assert!(ring_kernel_source(&odd).contains("#line 1 \"my_handler_.cu\""));
    }

    #[test]
    fn every_include_of_the_device_code_is_an_embedded_header() {
        let names: Vec<&str> = HEADERS.iter().map(|(n, _)| *n).collect();
        let mut texts: Vec<&str> = HEADERS.iter().map(|(_, t)| *t).collect();
        texts.extend([RING_KERNEL_CU, ECHO_H, VEC_SCALE_H, REDUCE_SUM_H]);
        for t in texts {
            for line in t.lines().filter(|l| l.trim_start().starts_with("#include")) {
                // abi.h's <stdint.h> is on its host-compiler branch only.
                assert!(!line.contains("<cuda/"), "a CCCL include: {line}");
                if let Some(inc) = line.split('"').nth(1) {
                    assert!(names.contains(&inc), "{inc} is not embedded");
                }
            }
        }
    }
}
