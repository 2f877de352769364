//! Finding the CUDA compile toolchain on the machine gyre runs on: libnvrtc (with its
//! builtins library) and, for resource reports only, ptxas.
//!
//! Nothing here comes from the build machine: gyre's device headers are compiled into the
//! crate and handed to NVRTC in memory ([`crate::nvrtc`]), and no other header is needed
//! (the CUDA port writes its system-scope atomics as inline PTX), so a binary copied to
//! another machine finds everything from that machine's environment.
//!
//! Layouts known, CUDA 12 and 13:
//!
//! | where | libnvrtc | ptxas |
//! | --- | --- | --- |
//! | PyPI wheel 12 (`nvidia-cuda-nvrtc-cu12`, `-nvcc-cu12`) in a venv | `site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12` | `nvidia/cuda_nvcc/bin` |
//! | PyPI wheel 13 (`nvidia-cuda-nvrtc`, `-nvcc` 13.x) in a venv | `site-packages/nvidia/cu13/lib/libnvrtc.so.13` | `nvidia/cu13/bin` |
//! | toolkit (`/usr/local/cuda`, `$CUDA_HOME`) | `lib64/`, `targets/<arch>-linux/lib/` or `lib/` | `bin/` |
//!
//! [`Toolchain::discover`] takes `$GYRE_NVRTC_LIB` (a libnvrtc file) if set, else
//! `$GYRE_CUDA_VENV` (a venv) if set, and nothing else in either case; otherwise
//! `$CUDA_HOME`, `$CUDA_PATH`, the active venv (`$VIRTUAL_ENV`), `/usr/local/cuda`, and
//! finally the dynamic loader's own search path (`LD_LIBRARY_PATH`, the ld.so cache) by
//! library name, newest major first. A venv's packages may be in `site-packages` or, for a
//! system Python, `dist-packages`. NVRTC's builtins library
//! (`libnvrtc-builtins.so.<major>.<minor>`) is loaded from the directory libnvrtc was
//! found in: NVRTC 13 opens it by name and carries no run path to find it.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Environment variable naming a Python venv with the NVRTC wheel (and nothing else is
/// searched when it is set).
pub const VENV_ENV: &str = "GYRE_CUDA_VENV";

/// Environment variable naming one libnvrtc file to use (and nothing else is searched
/// when it is set).
pub const LIB_ENV: &str = "GYRE_NVRTC_LIB";

/// The NVRTC library file names looked for, newest major first.
pub const NVRTC_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

/// Where NVRTC and ptxas are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// libnvrtc to load by absolute path; `None` leaves it to the dynamic loader's search
    /// path.
    pub nvrtc_lib: Option<PathBuf>,
    /// NVRTC's builtins library next to it, preloaded before libnvrtc, when found.
    pub builtins_lib: Option<PathBuf>,
    /// ptxas (PTX to CUBIN), when present: only resource reports need it.
    pub ptxas: Option<PathBuf>,
    /// Where this toolchain was found (a venv, a toolkit, or the loader path), for
    /// messages.
    pub origin: String,
}

impl Toolchain {
    /// The toolchain in the Python venv `venv` (CUDA 12 or 13 wheels; see the module
    /// docs).
    ///
    /// # Errors
    ///
    /// [`Error::ToolchainNotFound`] naming the directories searched.
    pub fn from_venv(venv: &Path) -> Result<Self> {
        let nvidia = site_packages(venv)?.join("nvidia");
        let lib_dirs = [nvidia.join("cu13/lib"), nvidia.join("cuda_nvrtc/lib")];
        let bin_dirs = [nvidia.join("cu13/bin"), nvidia.join("cuda_nvcc/bin")];
        Self::from_dirs(&lib_dirs, &bin_dirs, venv.display().to_string()).ok_or_else(|| {
            Error::ToolchainNotFound {
                what: "libnvrtc (pip: nvidia-cuda-nvrtc 13.x or nvidia-cuda-nvrtc-cu12)",
                searched: join(&lib_dirs),
            }
        })
    }

    /// The toolchain of the CUDA toolkit installed at `home` (`/usr/local/cuda`).
    ///
    /// # Errors
    ///
    /// [`Error::ToolchainNotFound`] naming the directories searched.
    pub fn from_cuda_home(home: &Path) -> Result<Self> {
        let lib_dirs = [
            home.join("lib64"),
            home.join(format!("targets/{}-linux/lib", std::env::consts::ARCH)),
            home.join("lib"),
        ];
        let bin_dirs = [home.join("bin")];
        Self::from_dirs(&lib_dirs, &bin_dirs, home.display().to_string()).ok_or_else(|| {
            Error::ToolchainNotFound {
                what: "libnvrtc (a CUDA toolkit)",
                searched: join(&lib_dirs),
            }
        })
    }

    fn from_dirs(lib_dirs: &[PathBuf], bin_dirs: &[PathBuf], origin: String) -> Option<Self> {
        let (dir, lib) = lib_dirs
            .iter()
            .find_map(|d| first_file(d, NVRTC_NAMES).map(|f| (d.clone(), f)))?;
        let ptxas = bin_dirs
            .iter()
            .map(|d| d.join("ptxas"))
            .find(|p| p.is_file());
        Some(Self {
            builtins_lib: builtins_in(&dir),
            nvrtc_lib: Some(lib),
            ptxas,
            origin,
        })
    }

    /// The libnvrtc file `lib` (its builtins library from the same directory); ptxas from
    /// `PATH`.
    ///
    /// # Errors
    ///
    /// [`Error::ToolchainNotFound`] when `lib` is not a file.
    pub fn from_lib(lib: &Path) -> Result<Self> {
        if !lib.is_file() {
            return Err(Error::ToolchainNotFound {
                what: "libnvrtc (GYRE_NVRTC_LIB)",
                searched: lib.display().to_string(),
            });
        }
        Ok(Self {
            nvrtc_lib: Some(lib.to_path_buf()),
            builtins_lib: lib.parent().and_then(builtins_in),
            ptxas: find_on_path("ptxas"),
            origin: lib.display().to_string(),
        })
    }

    /// NVRTC left to the dynamic loader's search path (by [`NVRTC_NAMES`]); ptxas from
    /// `PATH`.
    pub fn from_loader_path() -> Self {
        Self {
            nvrtc_lib: None,
            builtins_lib: None,
            ptxas: find_on_path("ptxas"),
            origin: "the dynamic loader's search path".into(),
        }
    }

    /// The toolchain of this machine (see the module docs for the order).
    ///
    /// # Errors
    ///
    /// With `$GYRE_CUDA_VENV` set, that venv's error. Otherwise never: the loader-path
    /// toolchain is the last resort, and loading NVRTC reports what was tried.
    pub fn discover() -> Result<Self> {
        if let Some(lib) = env_path(LIB_ENV) {
            return Self::from_lib(&lib);
        }
        if let Some(v) = env_path(VENV_ENV) {
            return Self::from_venv(&v);
        }
        let homes = ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(|k| env_path(k))
            .map(|h| (h, false))
            .chain(env_path("VIRTUAL_ENV").map(|v| (v, true)))
            .chain(std::iter::once((PathBuf::from("/usr/local/cuda"), false)));
        for (dir, venv) in homes {
            let found = if venv {
                Self::from_venv(&dir)
            } else {
                Self::from_cuda_home(&dir)
            };
            if let Ok(t) = found {
                return Ok(t);
            }
        }
        Ok(Self::from_loader_path())
    }

    /// Where [`discover`](Self::discover) looks, for messages.
    pub fn searched() -> String {
        if let Some(l) = env_path(LIB_ENV) {
            return format!("${LIB_ENV}={}", l.display());
        }
        if let Some(v) = env_path(VENV_ENV) {
            return format!("${VENV_ENV}={}", v.display());
        }
        let mut s: Vec<String> = ["CUDA_HOME", "CUDA_PATH", "VIRTUAL_ENV"]
            .iter()
            .filter_map(|k| env_path(k).map(|p| format!("${k}={}", p.display())))
            .collect();
        s.push("/usr/local/cuda".into());
        s.push(format!(
            "the loader's search path ({})",
            NVRTC_NAMES.join(", ")
        ));
        s.join(", ")
    }
}

fn env_path(k: &str) -> Option<PathBuf> {
    std::env::var_os(k)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn join(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `<venv>/lib/python3.*/{site,dist}-packages` holding an `nvidia` package (the newest
/// Python if several).
fn site_packages(venv: &Path) -> Result<PathBuf> {
    let lib = venv.join("lib");
    let missing = || Error::ToolchainNotFound {
        what: "a venv site-packages with the nvidia-cuda-* wheels",
        searched: format!("{}/python3*/{{site,dist}}-packages/nvidia", lib.display()),
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
        .map_err(|_| missing())?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .flat_map(|e| {
            [
                e.path().join("site-packages"),
                e.path().join("dist-packages"),
            ]
        })
        .filter(|sp| sp.join("nvidia").is_dir())
        .collect();
    found.sort();
    found.pop().ok_or_else(missing)
}

fn first_file(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// `libnvrtc-builtins.so.<major>.<minor>` in `dir` (not the `.alt.` variant), the newest
/// if several.
fn builtins_in(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.strip_prefix("libnvrtc-builtins.so.")?;
            let v: Option<Vec<u32>> = version.split('.').map(|p| p.parse().ok()).collect();
            Some((v?, e.path()))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

fn find_on_path(exe: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(exe))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(root: &Path, files: &[&str]) {
        let _ = std::fs::remove_dir_all(root);
        for f in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"").unwrap();
        }
    }

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("gyre-toolchain-{name}-{}", std::process::id()))
    }

    #[test]
    fn missing_venv_is_a_typed_error() {
        let e = Toolchain::from_venv(Path::new("/nonexistent/gyre-venv")).unwrap_err();
        assert!(matches!(e, Error::ToolchainNotFound { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/gyre-venv"), "{e}");
    }

    #[test]
    fn missing_toolkit_is_a_typed_error() {
        let e = Toolchain::from_cuda_home(Path::new("/nonexistent/cuda")).unwrap_err();
        assert!(matches!(e, Error::ToolchainNotFound { .. }), "{e}");
    }

    #[test]
    fn cuda13_wheel_layout() {
        let v = tmp("w13");
        let sp = "lib/python3.11/site-packages/nvidia/cu13";
        fake(
            &v,
            &[
                &format!("{sp}/lib/libnvrtc.so.13"),
                &format!("{sp}/lib/libnvrtc.alt.so.13"),
                &format!("{sp}/lib/libnvrtc-builtins.so.13.0"),
                &format!("{sp}/lib/libnvrtc-builtins.alt.so.13.0"),
                &format!("{sp}/bin/ptxas"),
            ],
        );
        let t = Toolchain::from_venv(&v).unwrap();
        assert!(t.nvrtc_lib.unwrap().ends_with("cu13/lib/libnvrtc.so.13"));
        assert!(t
            .builtins_lib
            .unwrap()
            .ends_with("cu13/lib/libnvrtc-builtins.so.13.0"));
        assert!(t.ptxas.unwrap().ends_with("cu13/bin/ptxas"));
        let _ = std::fs::remove_dir_all(&v);
    }

    #[test]
    fn cuda12_wheel_layout() {
        let v = tmp("w12");
        let sp = "lib/python3.11/site-packages/nvidia";
        fake(
            &v,
            &[
                &format!("{sp}/cuda_nvrtc/lib/libnvrtc.so.12"),
                &format!("{sp}/cuda_nvrtc/lib/libnvrtc-builtins.so.12.8"),
                &format!("{sp}/cuda_nvcc/bin/ptxas"),
            ],
        );
        let t = Toolchain::from_venv(&v).unwrap();
        assert!(t
            .nvrtc_lib
            .unwrap()
            .ends_with("cuda_nvrtc/lib/libnvrtc.so.12"));
        assert!(t
            .builtins_lib
            .unwrap()
            .ends_with("libnvrtc-builtins.so.12.8"));
        assert!(t.ptxas.unwrap().ends_with("cuda_nvcc/bin/ptxas"));
        let _ = std::fs::remove_dir_all(&v);
    }

    #[test]
    fn a_library_path_and_dist_packages() {
        let v = tmp("lib");
        let dp = "lib/python3/dist-packages/nvidia/cu13/lib";
        fake(
            &v,
            &[
                &format!("{dp}/libnvrtc.so.13"),
                &format!("{dp}/libnvrtc-builtins.so.13.0"),
            ],
        );
        let t = Toolchain::from_venv(&v).unwrap();
        assert!(t
            .nvrtc_lib
            .unwrap()
            .ends_with("dist-packages/nvidia/cu13/lib/libnvrtc.so.13"));
        let lib = v.join(dp).join("libnvrtc.so.13");
        let t = Toolchain::from_lib(&lib).unwrap();
        assert_eq!(t.nvrtc_lib.as_deref(), Some(lib.as_path()));
        assert!(t
            .builtins_lib
            .unwrap()
            .ends_with("libnvrtc-builtins.so.13.0"));
        assert!(Toolchain::from_lib(&v.join("nope.so")).is_err());
        let _ = std::fs::remove_dir_all(&v);
    }

    #[test]
    fn toolkit_layouts_12_and_13() {
        let h = tmp("tk");
        fake(
            &h,
            &[
                "targets/x86_64-linux/lib/libnvrtc.so.13",
                "targets/x86_64-linux/lib/libnvrtc-builtins.so.13.0",
                "bin/ptxas",
            ],
        );
        if std::env::consts::ARCH == "x86_64" {
            let t = Toolchain::from_cuda_home(&h).unwrap();
            assert!(t.nvrtc_lib.unwrap().ends_with("libnvrtc.so.13"));
            assert!(t.builtins_lib.is_some());
        }
        fake(
            &h,
            &["lib64/libnvrtc.so.12", "lib64/libnvrtc-builtins.so.12.8"],
        );
        let t = Toolchain::from_cuda_home(&h).unwrap();
        assert!(t.nvrtc_lib.unwrap().ends_with("lib64/libnvrtc.so.12"));
        assert_eq!(t.ptxas, None);
        let _ = std::fs::remove_dir_all(&h);
    }
}
