//! Finding the CUDA compile toolchain: libnvrtc, the CCCL headers and (for resource
//! reports) ptxas.
//!
//! Two layouts are known:
//! * a Python venv with the PyPI wheels `nvidia-cuda-nvrtc-cu12`, `nvidia-cuda-cccl-cu12`
//!   and `nvidia-cuda-nvcc-cu12`, as made by `scripts/setup-cuda-venv.sh` (no GPU, driver or
//!   system CUDA needed): `<venv>/lib/python3.*/site-packages/nvidia/{cuda_nvrtc/lib,
//!   cuda_cccl/include, cuda_nvcc/bin}`;
//! * a CUDA toolkit: `<home>/{lib64, include, bin}`.
//!
//! [`Toolchain::discover`] takes the venv named by `GYRE_CUDA_VENV` if set (and nothing
//! else), otherwise the repository's `.venv-cuda`, otherwise `CUDA_HOME`, `CUDA_PATH` or
//! `/usr/local/cuda`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Environment variable naming the venv (default: `<repo>/.venv-cuda`).
pub const VENV_ENV: &str = "GYRE_CUDA_VENV";

/// The NVRTC library file names looked for in a library directory, best first.
const NVRTC_NAMES: &[&str] = &["libnvrtc.so.12", "libnvrtc.so"];

/// Where NVRTC, the CCCL headers and ptxas are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// libnvrtc to load by absolute path; `None` leaves it to the dynamic loader's search
    /// path (`LD_LIBRARY_PATH`, the ld.so cache).
    pub nvrtc_lib: Option<PathBuf>,
    /// The directory holding the CCCL headers (`cuda/atomic`), for NVRTC's include path.
    pub cccl_include: PathBuf,
    /// ptxas (PTX to CUBIN), when present: only resource reports need it.
    pub ptxas: Option<PathBuf>,
    /// Where this toolchain was found (a venv or a toolkit directory), for messages.
    pub origin: PathBuf,
}

impl Toolchain {
    /// The repository's default venv, `<repo>/.venv-cuda` (a build-time path).
    pub fn default_venv() -> PathBuf {
        repo_root().join(".venv-cuda")
    }

    /// The toolchain in the Python venv `venv` (see the module docs).
    pub fn from_venv(venv: &Path) -> Result<Self> {
        let nvidia = site_packages(venv)?.join("nvidia");
        let lib_dir = nvidia.join("cuda_nvrtc/lib");
        let nvrtc = first_file(&lib_dir, NVRTC_NAMES).ok_or_else(|| Error::ToolchainNotFound {
            what: "libnvrtc (pip: nvidia-cuda-nvrtc-cu12)",
            searched: lib_dir.display().to_string(),
        })?;
        let cccl_include = cccl_in(&nvidia.join("cuda_cccl/include"))
            .ok_or_else(|| cccl_missing(&nvidia.join("cuda_cccl/include")))?;
        let ptxas = Some(nvidia.join("cuda_nvcc/bin/ptxas")).filter(|p| p.is_file());
        Ok(Self {
            nvrtc_lib: Some(nvrtc),
            cccl_include,
            ptxas,
            origin: venv.to_path_buf(),
        })
    }

    /// The toolchain of the CUDA toolkit installed at `home` (`/usr/local/cuda`). libnvrtc
    /// is taken from `lib64/` when there, else left to the dynamic loader.
    pub fn from_cuda_home(home: &Path) -> Result<Self> {
        let include = home.join("include");
        let cccl_include = cccl_in(&include).ok_or_else(|| cccl_missing(&include))?;
        let ptxas = Some(home.join("bin/ptxas")).filter(|p| p.is_file());
        Ok(Self {
            nvrtc_lib: first_file(&home.join("lib64"), NVRTC_NAMES),
            cccl_include,
            ptxas,
            origin: home.to_path_buf(),
        })
    }

    /// The toolchain of this machine: `$GYRE_CUDA_VENV` if set (only it), else
    /// [`default_venv`](Self::default_venv), else `$CUDA_HOME`, `$CUDA_PATH`,
    /// `/usr/local/cuda`. The error lists every place tried.
    pub fn discover() -> Result<Self> {
        if let Some(v) = std::env::var_os(VENV_ENV).filter(|v| !v.is_empty()) {
            return Self::from_venv(Path::new(&v));
        }
        let mut tried = Vec::new();
        match Self::from_venv(&Self::default_venv()) {
            Ok(t) => return Ok(t),
            Err(e) => tried.push(e.to_string()),
        }
        let homes = ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(|k| std::env::var_os(k).filter(|v| !v.is_empty()))
            .map(PathBuf::from)
            .chain(std::iter::once(PathBuf::from("/usr/local/cuda")));
        for home in homes {
            match Self::from_cuda_home(&home) {
                Ok(t) => return Ok(t),
                Err(e) => tried.push(e.to_string()),
            }
        }
        Err(Error::ToolchainNotFound {
            what: "a CUDA compile toolchain (NVRTC + CCCL headers)",
            searched: tried.join("; "),
        })
    }

    /// The include directory of gyre's device headers (`cuda/include`: `gyre/abi.h`,
    /// `gyre/ring.h`, `gyre/port_cuda.h`), a build-time path into the repository.
    pub fn gyre_include() -> PathBuf {
        repo_root().join("cuda/include")
    }
}

/// The repository root: this crate lives in `<repo>/crates/gyre-cuda`.
fn repo_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().nth(2).unwrap_or(manifest)
}

/// `<venv>/lib/python3.*/site-packages` holding an `nvidia` package.
fn site_packages(venv: &Path) -> Result<PathBuf> {
    let lib = venv.join("lib");
    let missing = || Error::ToolchainNotFound {
        what: "a venv site-packages with the nvidia-cuda-*-cu12 wheels",
        searched: format!("{}/python3.*/site-packages/nvidia", lib.display()),
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
        .map_err(|_| missing())?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages"))
        .filter(|sp| sp.join("nvidia").is_dir())
        .collect();
    found.sort();
    found.pop().ok_or_else(missing)
}

fn first_file(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

fn cccl_in(include: &Path) -> Option<PathBuf> {
    Some(include.to_path_buf()).filter(|i| i.join("cuda/atomic").is_file())
}

fn cccl_missing(include: &Path) -> Error {
    Error::ToolchainNotFound {
        what: "the CCCL headers (cuda/atomic; pip: nvidia-cuda-cccl-cu12)",
        searched: include.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn gyre_headers_are_where_the_include_path_says() {
        let inc = Toolchain::gyre_include();
        for h in ["gyre/abi.h", "gyre/ring.h", "gyre/port_cuda.h"] {
            assert!(inc.join(h).is_file(), "{}", inc.join(h).display());
        }
    }
}
