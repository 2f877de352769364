//! [`ExportError`]: what can go wrong creating or reading an export file.

use std::io;
use std::path::{Path, PathBuf};

/// What went wrong creating or reading an export file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// No file at the path.
    #[error("no telemetry export at {path}")]
    Missing {
        /// The path tried.
        path: PathBuf,
    },
    /// The file does not start with `GYRETLM1`.
    #[error(
        "{path} is not a gyre telemetry export (magic {found_magic:02x?}, expected \"GYRETLM1\")"
    )]
    Foreign {
        /// The path.
        path: PathBuf,
        /// The first eight bytes found (zero-padded when shorter).
        found_magic: [u8; 8],
    },
    /// A gyre export of another layout version.
    #[error("{path}: {field} {found}, this gyre reads {expected}")]
    AbiMismatch {
        /// The path.
        path: PathBuf,
        /// `export version` or `abi version`.
        field: &'static str,
        /// The value in the file.
        found: u32,
        /// The value this build understands.
        expected: u32,
    },
    /// The file is shorter than the layout.
    #[error("{path} is truncated: {len} bytes, expected {expected}")]
    Truncated {
        /// The path.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// [`EXPORT_SIZE`](super::EXPORT_SIZE).
        expected: u64,
    },
    /// A live process already exports at this path.
    #[error("{path} is already exported by live process {pid}")]
    InUse {
        /// The path.
        path: PathBuf,
        /// The writer's pid.
        pid: u32,
    },
    /// A service or kernel name that cannot be a path component.
    #[error(
        "invalid {what} name {name:?}: must be non-empty, not '.' or '..', without '/' or NUL"
    )]
    InvalidName {
        /// `service` or `kernel`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// No consistent read within the retry bound (writer stopped mid-write?).
    #[error(
        "no stable read of {path} after {attempts} attempts (writer busy or stopped mid-write)"
    )]
    Torn {
        /// The path.
        path: PathBuf,
        /// Attempts made.
        attempts: u32,
    },
    /// Any other I/O error, with the operation that failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl ExportError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            return ExportError::Missing {
                path: path.to_owned(),
            };
        }
        ExportError::Io {
            op,
            path: path.to_owned(),
            source,
        }
    }
}
