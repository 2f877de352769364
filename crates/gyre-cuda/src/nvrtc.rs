//! Compiling device code with NVRTC at run time, through gyre's own handle on the library.
//!
//! gyre loads libnvrtc itself ([`Nvrtc::load`]): cudarc's loader knows the library names
//! of the one CUDA version it was built for (`libnvrtc.so.12` for `cuda-12080`) and would
//! panic on a machine with only `libnvrtc.so.13`, and its typed results cannot hold a code
//! a newer NVRTC adds. Here the library is opened by the path [`Toolchain`] found (its
//! builtins library first, see [`crate::toolchain`]), every result is read as an integer,
//! and a missing library is [`Error::NvrtcNotFound`], never a panic.
//!
//! A program is compiled with gyre's device headers in memory ([`HEADERS`]) and no
//! include path, for one [`Target`]: a CUBIN for a real architecture (`sm_90`), which a
//! driver of the same major version loads even when it is older than NVRTC (minor-version
//! compatibility), or PTX for a virtual one (`compute_90`), which the driver's JIT
//! compiles and which needs a driver at least as new as NVRTC. The backend prefers the
//! CUBIN ([`crate::backend`]). [`Nvrtc::supported_archs`] says which architectures this
//! NVRTC compiles for (NVRTC 13 dropped sm_70).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::source::{ring_kernel_source, Handler, HEADERS, MIN_ARCH};
use crate::toolchain::{Toolchain, NVRTC_NAMES};

type NvrtcResult = c_int;
type Program = *mut c_void;

/// The NVRTC functions gyre calls, resolved from one library.
#[allow(non_snake_case)]
struct Api {
    nvrtcVersion: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult,
    nvrtcGetErrorString: unsafe extern "C" fn(NvrtcResult) -> *const c_char,
    nvrtcGetNumSupportedArchs: unsafe extern "C" fn(*mut c_int) -> NvrtcResult,
    nvrtcGetSupportedArchs: unsafe extern "C" fn(*mut c_int) -> NvrtcResult,
    nvrtcCreateProgram: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    nvrtcDestroyProgram: unsafe extern "C" fn(*mut Program) -> NvrtcResult,
    nvrtcCompileProgram: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult,
    nvrtcGetProgramLogSize: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    nvrtcGetProgramLog: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    nvrtcGetPTXSize: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    nvrtcGetPTX: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    nvrtcGetCUBINSize: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    nvrtcGetCUBIN: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    version: (i32, i32),
    path: String,
}

impl Api {
    /// Resolves the table from `lib` (kept loaded for the rest of the process).
    ///
    /// # Safety
    ///
    /// `lib` is libnvrtc: each symbol has the declared signature.
    unsafe fn resolve(lib: &'static libloading::Library, path: String) -> Result<Self> {
        macro_rules! sym {
            ($name:ident) => {{
                // SAFETY: the caller's contract.
                let s = unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) };
                *s.map_err(|e| Error::NvrtcNotFound {
                    detail: format!("{path} lacks {}: {e}", stringify!($name)),
                })?
            }};
        }
        let mut api = Self {
            nvrtcVersion: sym!(nvrtcVersion),
            nvrtcGetErrorString: sym!(nvrtcGetErrorString),
            nvrtcGetNumSupportedArchs: sym!(nvrtcGetNumSupportedArchs),
            nvrtcGetSupportedArchs: sym!(nvrtcGetSupportedArchs),
            nvrtcCreateProgram: sym!(nvrtcCreateProgram),
            nvrtcDestroyProgram: sym!(nvrtcDestroyProgram),
            nvrtcCompileProgram: sym!(nvrtcCompileProgram),
            nvrtcGetProgramLogSize: sym!(nvrtcGetProgramLogSize),
            nvrtcGetProgramLog: sym!(nvrtcGetProgramLog),
            nvrtcGetPTXSize: sym!(nvrtcGetPTXSize),
            nvrtcGetPTX: sym!(nvrtcGetPTX),
            nvrtcGetCUBINSize: sym!(nvrtcGetCUBINSize),
            nvrtcGetCUBIN: sym!(nvrtcGetCUBIN),
            version: (0, 0),
            path,
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two ints written through valid pointers.
        let r = unsafe { (api.nvrtcVersion)(&mut major, &mut minor) };
        api.check("nvrtcVersion", r)?;
        api.version = (major, minor);
        Ok(api)
    }

    fn name(&self, r: NvrtcResult) -> String {
        // SAFETY: returns a static NUL-terminated string for any code (NVRTC's
        // "NVRTC_ERROR unknown" for codes it does not know).
        let p = unsafe { (self.nvrtcGetErrorString)(r) };
        if p.is_null() {
            return format!("NVRTC_ERROR_{r}");
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(&self, op: &'static str, r: NvrtcResult) -> Result<()> {
        if r == 0 {
            Ok(())
        } else {
            Err(Error::Nvrtc {
                op,
                name: self.name(r),
                code: r,
            })
        }
    }
}

/// Libraries loaded by this process, by path, never unloaded.
static LOADED: Mutex<Vec<&'static Api>> = Mutex::new(Vec::new());

/// Loads `path` and keeps it loaded for the rest of the process.
fn load_library(path: &Path) -> Result<&'static libloading::Library> {
    // SAFETY: loading libnvrtc (or its builtins) runs its initialisers, which have no
    // preconditions; the handle is leaked so the library is never unloaded while used.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| Error::NvrtcNotFound {
        detail: format!("cannot load {}: {e}", path.display()),
    })?;
    Ok(Box::leak(Box::new(lib)))
}

/// What to compile for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A CUBIN for the real architecture `sm_XX` (`90`).
    Cubin(u32),
    /// PTX for the virtual architecture `compute_XX`, JIT-compiled by the driver.
    Ptx(u32),
}

impl Target {
    /// The architecture number.
    pub fn arch(self) -> u32 {
        match self {
            Target::Cubin(a) | Target::Ptx(a) => a,
        }
    }

    /// `sm_90` or `compute_90`.
    pub fn name(self) -> String {
        match self {
            Target::Cubin(a) => format!("sm_{a}"),
            Target::Ptx(a) => format!("compute_{a}"),
        }
    }
}

/// NVRTC options. [`args`](Self::args) turns them into the command line:
/// `--std=c++17 --gpu-architecture=<target> -default-device
/// --relocatable-device-code=false [-lineinfo] -D...`. No include path: gyre's headers
/// are in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// What to compile for.
    pub target: Target,
    /// Preprocessor definitions, `NAME` or `NAME=VALUE` (e.g. `GYRE_MAX_LANES=128`).
    pub defines: Vec<String>,
    /// Emit line information (`-lineinfo`): profilers and sanitizers map SASS to source.
    pub line_info: bool,
}

impl CompileOptions {
    /// Options for `target`, with line information.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            defines: Vec::new(),
            line_info: true,
        }
    }

    /// The NVRTC command line.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedArch`] for an architecture older than [`MIN_ARCH`];
    /// [`Error::InvalidInput`] for a define containing a NUL byte.
    pub fn args(&self) -> Result<Vec<String>> {
        let arch = self.target.arch();
        if arch < MIN_ARCH {
            return Err(Error::UnsupportedArch {
                arch,
                why: format!(
                    "gyre's ring kernel needs sm_{MIN_ARCH} or newer (system-scope \
                     acquire/release, __nanosleep)"
                ),
            });
        }
        let mut args = vec![
            "--std=c++17".to_owned(),
            format!("--gpu-architecture={}", self.target.name()),
            "-default-device".to_owned(),
            "--relocatable-device-code=false".to_owned(),
        ];
        if self.line_info {
            args.push("-lineinfo".to_owned());
        }
        for d in &self.defines {
            args.push(format!("-D{d}"));
        }
        if let Some(a) = args.iter().find(|a| a.contains('\0')) {
            return Err(Error::InvalidInput {
                what: format!("option {a:?}"),
                reason: "contains a NUL byte",
            });
        }
        Ok(args)
    }
}

/// A compiled program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// The program name.
    pub name: String,
    /// What it was compiled for.
    pub target: Target,
    /// The CUBIN, or the PTX text (without a NUL byte).
    pub image: Vec<u8>,
    /// NVRTC's log: empty, or warnings.
    pub log: String,
}

impl Compiled {
    /// The PTX text, for a [`Target::Ptx`] program.
    pub fn ptx(&self) -> Option<&str> {
        match self.target {
            Target::Ptx(_) => std::str::from_utf8(&self.image).ok(),
            Target::Cubin(_) => None,
        }
    }

    /// The image as the driver loads it: a CUBIN as is, PTX with a NUL byte appended.
    pub fn loadable(&self) -> Vec<u8> {
        let mut v = self.image.clone();
        if matches!(self.target, Target::Ptx(_)) {
            v.push(0);
        }
        v
    }
}

/// A loaded NVRTC library: the only way to compile. Cheap to copy.
#[derive(Clone, Copy)]
pub struct Nvrtc {
    api: &'static Api,
}

impl core::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("version", &self.api.version)
            .field("path", &self.api.path)
            .finish()
    }
}

impl PartialEq for Nvrtc {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.api, other.api)
    }
}

impl Nvrtc {
    /// Loads the NVRTC of `toolchain`: its builtins library first (NVRTC 13 opens it by
    /// name and has no run path), then libnvrtc by absolute path; with no path, the
    /// loader's search path by [`NVRTC_NAMES`]. Loading the same library again returns
    /// the same handle.
    ///
    /// # Errors
    ///
    /// [`Error::NvrtcNotFound`] saying what was tried.
    pub fn load(toolchain: &Toolchain) -> Result<Self> {
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        let key = toolchain
            .nvrtc_lib
            .as_ref()
            .map_or_else(|| "<loader path>".to_owned(), |p| p.display().to_string());
        if let Some(api) = loaded.iter().find(|a| a.path == key) {
            return Ok(Self { api });
        }
        if let Some(b) = &toolchain.builtins_lib {
            load_library(b)?;
        }
        let lib = match &toolchain.nvrtc_lib {
            Some(p) => load_library(p)?,
            None => NVRTC_NAMES
                .iter()
                .find_map(|n| load_library(&PathBuf::from(n)).ok())
                .ok_or_else(|| Error::NvrtcNotFound {
                    detail: format!(
                        "none of {} on the loader's search path; searched {}",
                        NVRTC_NAMES.join(", "),
                        Toolchain::searched()
                    ),
                })?,
        };
        // SAFETY: `lib` is libnvrtc (by its name or the toolchain's path).
        let api: &'static Api = Box::leak(Box::new(unsafe { Api::resolve(lib, key)? }));
        loaded.push(api);
        Ok(Self { api })
    }

    /// Finds the toolchain ([`Toolchain::discover`]) and loads its NVRTC.
    ///
    /// # Errors
    ///
    /// As [`Toolchain::discover`] and [`Nvrtc::load`].
    pub fn discover() -> Result<(Self, Toolchain)> {
        let tc = Toolchain::discover()?;
        let nvrtc = Self::load(&tc)?;
        Ok((nvrtc, tc))
    }

    /// NVRTC's version, `(13, 0)`.
    pub fn version(&self) -> (i32, i32) {
        self.api.version
    }

    /// NVRTC's version as `13.0`.
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.api.version.0, self.api.version.1)
    }

    /// The library's path (or `<loader path>`).
    pub fn path(&self) -> &str {
        &self.api.path
    }

    /// The architectures this NVRTC compiles for (`nvrtcGetSupportedArchs`), ascending.
    ///
    /// # Errors
    ///
    /// [`Error::Nvrtc`] naming the call.
    pub fn supported_archs(&self) -> Result<Vec<u32>> {
        let a = self.api;
        let mut n: c_int = 0;
        // SAFETY: one int written through a valid pointer.
        a.check("nvrtcGetNumSupportedArchs", unsafe {
            (a.nvrtcGetNumSupportedArchs)(&mut n)
        })?;
        let mut v = vec![0 as c_int; n.max(0) as usize];
        // SAFETY: `v` holds the `n` ints NVRTC writes.
        a.check("nvrtcGetSupportedArchs", unsafe {
            (a.nvrtcGetSupportedArchs)(v.as_mut_ptr())
        })?;
        let mut archs: Vec<u32> = v
            .into_iter()
            .filter_map(|x| u32::try_from(x).ok())
            .collect();
        archs.sort_unstable();
        Ok(archs)
    }

    /// The architectures the ring kernel can be compiled for here: those NVRTC supports,
    /// from [`MIN_ARCH`] on.
    ///
    /// # Errors
    ///
    /// As [`supported_archs`](Self::supported_archs).
    pub fn ring_kernel_archs(&self) -> Result<Vec<u32>> {
        Ok(self
            .supported_archs()?
            .into_iter()
            .filter(|&a| a >= MIN_ARCH)
            .collect())
    }

    /// Compiles `source` (named `name` in the log) for `opts.target`, with gyre's headers
    /// in memory.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] with NVRTC's log; [`Error::InvalidInput`] for a NUL byte;
    /// [`Error::Nvrtc`] for another failing call.
    pub fn compile(&self, name: &str, source: &str, opts: &CompileOptions) -> Result<Compiled> {
        let a = self.api;
        let args = opts.args()?;
        let nul = |what: String| Error::InvalidInput {
            what,
            reason: "contains a NUL byte",
        };
        let src = CString::new(source).map_err(|_| nul(format!("source of {name}")))?;
        let cname = CString::new(name).map_err(|_| nul(format!("program name {name:?}")))?;
        let cargs: Vec<CString> = args
            .iter()
            .map(|s| CString::new(s.as_str()).map_err(|_| nul(format!("option {s:?}"))))
            .collect::<Result<_>>()?;
        let arg_ptrs: Vec<*const c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        let headers: Vec<(CString, CString)> = HEADERS
            .iter()
            .map(|(n, t)| {
                Ok((
                    CString::new(*n).map_err(|_| nul(format!("header name {n}")))?,
                    CString::new(*t).map_err(|_| nul(format!("header {n}")))?,
                ))
            })
            .collect::<Result<_>>()?;
        let texts: Vec<*const c_char> = headers.iter().map(|(_, t)| t.as_ptr()).collect();
        let names: Vec<*const c_char> = headers.iter().map(|(n, _)| n.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: every string is NUL-terminated and outlives the program (destroyed
        // below, before they drop); the two header arrays have the same length.
        a.check("nvrtcCreateProgram", unsafe {
            (a.nvrtcCreateProgram)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                texts.len() as c_int,
                texts.as_ptr(),
                names.as_ptr(),
            )
        })?;
        let out = self.compile_program(prog, name, opts.target, &arg_ptrs);
        // SAFETY: created above, destroyed once.
        let _ = unsafe { (a.nvrtcDestroyProgram)(&mut prog) };
        out
    }

    fn compile_program(
        &self,
        prog: Program,
        name: &str,
        target: Target,
        args: &[*const c_char],
    ) -> Result<Compiled> {
        let a = self.api;
        // SAFETY: a live program; `args` are NUL-terminated strings the caller keeps alive.
        let compiled = unsafe { (a.nvrtcCompileProgram)(prog, args.len() as c_int, args.as_ptr()) };
        let log = self.fetch(prog, a.nvrtcGetProgramLogSize, a.nvrtcGetProgramLog, "log")?;
        let log = String::from_utf8_lossy(strip_nul(&log)).into_owned();
        if compiled != 0 {
            return Err(Error::Compile {
                name: name.to_owned(),
                target: target.name(),
                nvrtc: self.version_string(),
                result: a.name(compiled),
                log,
            });
        }
        let image = match target {
            Target::Cubin(_) => self.fetch(prog, a.nvrtcGetCUBINSize, a.nvrtcGetCUBIN, "CUBIN")?,
            Target::Ptx(_) => {
                let mut p = self.fetch(prog, a.nvrtcGetPTXSize, a.nvrtcGetPTX, "PTX")?;
                let len = strip_nul(&p).len();
                p.truncate(len);
                p
            }
        };
        Ok(Compiled {
            name: name.to_owned(),
            target,
            image,
            log,
        })
    }

    /// One of NVRTC's size-then-copy outputs.
    fn fetch(
        &self,
        prog: Program,
        size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
        get: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
        what: &'static str,
    ) -> Result<Vec<u8>> {
        let mut n = 0usize;
        // SAFETY: a live program; one usize written through a valid pointer.
        self.api
            .check(what_op(what, true), unsafe { size(prog, &mut n) })?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            // SAFETY: `buf` holds the `n` bytes NVRTC writes.
            self.api.check(what_op(what, false), unsafe {
                get(prog, buf.as_mut_ptr().cast())
            })?;
        }
        Ok(buf)
    }

    /// Builds the ring kernel with `handler` ([`ring_kernel_source`]) and compiles it; the
    /// entry point is [`crate::source::RING_KERNEL_ENTRY`].
    ///
    /// # Errors
    ///
    /// As [`compile`](Self::compile).
    pub fn compile_ring_kernel(
        &self,
        handler: &Handler<'_>,
        opts: &CompileOptions,
    ) -> Result<Compiled> {
        let name = format!("gyre_ring_kernel[{}]", handler.name());
        self.compile(&name, &ring_kernel_source(handler), opts)
    }
}

fn what_op(what: &'static str, size: bool) -> &'static str {
    match (what, size) {
        ("log", true) => "nvrtcGetProgramLogSize",
        ("log", false) => "nvrtcGetProgramLog",
        ("CUBIN", true) => "nvrtcGetCUBINSize",
        ("CUBIN", false) => "nvrtcGetCUBIN",
        (_, true) => "nvrtcGetPTXSize",
        (_, false) => "nvrtcGetPTX",
    }
}

/// `b` up to its first NUL byte.
fn strip_nul(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    &b[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_the_documented_command_line() {
        let o = CompileOptions {
            target: Target::Cubin(90),
            defines: vec!["GYRE_MAX_LANES=128".into()],
            line_info: true,
        };
        assert_eq!(
            o.args().unwrap(),
            [
                "--std=c++17",
                "--gpu-architecture=sm_90",
                "-default-device",
                "--relocatable-device-code=false",
                "-lineinfo",
                "-DGYRE_MAX_LANES=128",
            ]
        );
        let p = CompileOptions::new(Target::Ptx(80));
        assert!(p
            .args()
            .unwrap()
            .contains(&"--gpu-architecture=compute_80".to_owned()));
    }

    #[test]
    fn old_arch_and_nul_bytes_are_typed_errors() {
        let mut o = CompileOptions::new(Target::Ptx(61));
        assert!(matches!(
            o.args(),
            Err(Error::UnsupportedArch { arch: 61, .. })
        ));
        o.target = Target::Cubin(90);
        o.defines.push("A\0B".into());
        assert!(matches!(o.args(), Err(Error::InvalidInput { .. })));
    }

    #[test]
    fn missing_library_is_a_typed_error_not_a_panic() {
        let tc = Toolchain {
            nvrtc_lib: Some(PathBuf::from("/nonexistent/libnvrtc.so.13")),
            builtins_lib: None,
            ptxas: None,
            origin: "test".into(),
        };
        let e = Nvrtc::load(&tc).unwrap_err();
        assert!(matches!(e, Error::NvrtcNotFound { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/libnvrtc.so.13"), "{e}");
        // Whatever this machine has: a handle or NvrtcNotFound, never a panic.
        match Nvrtc::load(&Toolchain::from_loader_path()) {
            Ok(n) => assert!(n.version().0 >= 12),
            Err(e) => assert!(matches!(e, Error::NvrtcNotFound { .. }), "{e}"),
        }
    }

    #[test]
    fn nul_stripping() {
        assert_eq!(strip_nul(b"ab\0cd"), b"ab");
        assert_eq!(strip_nul(b"ab"), b"ab");
        let c = Compiled {
            name: "x".into(),
            target: Target::Ptx(80),
            image: b".version".to_vec(),
            log: String::new(),
        };
        assert_eq!(c.ptx(), Some(".version"));
        assert_eq!(c.loadable().last(), Some(&0));
    }
}
