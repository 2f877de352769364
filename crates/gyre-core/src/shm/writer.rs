//! [`ExportWriter`]: creates an export file under its final name atomically, and removes
//! it on drop.

use core::sync::atomic::Ordering::Relaxed;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::ExportError;
use super::layout::{
    ExportHeader, TelemetryExport, EXPORT_MAGIC, EXPORT_SIZE, EXPORT_VERSION, NAME_BYTES,
};
use super::mapping::Mapping;
use super::paths::{export_path, pid_alive, unix_ms};
use super::reader::{raw_pid, TelemetryReader};

fn name_bytes(s: &str) -> [u8; NAME_BYTES] {
    let mut out = [0u8; NAME_BYTES];
    // Cut at a char boundary so the header stays valid UTF-8.
    let mut n = s.len().min(NAME_BYTES);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// Creates the missing directories of `dir` with mode 0700.
fn create_dirs(dir: &Path) -> Result<(), ExportError> {
    let mut missing = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.as_os_str().is_empty() || p.exists() {
            break;
        }
        missing.push(p.to_owned());
        d = p.parent();
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| ExportError::io("create directory", dir, e))?;
    for p in missing {
        // The umask may have narrowed 0700; make it exact.
        fs::set_permissions(&p, fs::Permissions::from_mode(0o700))
            .map_err(|e| ExportError::io("chmod", &p, e))?;
    }
    Ok(())
}

/// The writer of one export file; removes the file on drop (if it is still ours).
#[derive(Debug)]
pub struct ExportWriter {
    map: Mapping,
    path: PathBuf,
    ident: (u64, u64),
}

impl ExportWriter {
    /// Creates `<default_dir()>/<service>/<kernel>`.
    pub fn create(service: &str, kernel: &str) -> Result<Self, ExportError> {
        let path = export_path(service, kernel)?;
        Self::create_at(&path, service, kernel)
    }

    /// Creates the export file at `path` (its directory with mode 0700 where missing, the
    /// file with mode 0600). A file left by a dead process is replaced; one whose writer is
    /// alive is [`ExportError::InUse`]; a non-gyre file is left alone and reported.
    pub fn create_at(path: &Path, service: &str, kernel: &str) -> Result<Self, ExportError> {
        let name = path
            .file_name()
            .ok_or_else(|| ExportError::InvalidName {
                what: "export file",
                name: path.display().to_string(),
            })?
            .to_string_lossy()
            .into_owned();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        create_dirs(&dir)?;
        let pid = std::process::id();
        let tmp = dir.join(format!(".{name}.{pid}.tmp"));
        let _ = fs::remove_file(&tmp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| ExportError::io("create", &tmp, e))?;
        let result = Self::fill_and_link(&file, &tmp, path, service, kernel, pid);
        let _ = fs::remove_file(&tmp);
        let map = result?;
        let meta = file
            .metadata()
            .map_err(|e| ExportError::io("stat", path, e))?;
        Ok(Self {
            map,
            path: path.to_owned(),
            ident: (meta.dev(), meta.ino()),
        })
    }

    fn fill_and_link(
        file: &File,
        tmp: &Path,
        path: &Path,
        service: &str,
        kernel: &str,
        pid: u32,
    ) -> Result<Mapping, ExportError> {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| ExportError::io("chmod", tmp, e))?;
        file.set_len(EXPORT_SIZE as u64)
            .map_err(|e| ExportError::io("resize", tmp, e))?;
        let map = Mapping::new(file, true, tmp)?;
        let now = unix_ms();
        let header = ExportHeader {
            magic: EXPORT_MAGIC,
            version: EXPORT_VERSION,
            abi_version: gyre_abi::ABI_VERSION,
            size: EXPORT_SIZE as u32,
            pid,
            created_unix_ms: now,
            service: name_bytes(service),
            kernel: name_bytes(kernel),
        };
        // SAFETY: writable mapping, not yet visible under its name: no other reader or
        // writer.
        unsafe { map.write_header(header) };
        let c = &map.get().control;
        c.heartbeat_unix_ms.store(now, Relaxed);
        c.published_unix_ms.store(now, Relaxed);
        // Publish under the final name; fails if the name exists (O_EXCL semantics).
        for _ in 0..2 {
            match fs::hard_link(tmp, path) {
                Ok(()) => return Ok(map),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    Self::clear_stale(path)?;
                }
                Err(e) => return Err(ExportError::io("link", path, e)),
            }
        }
        Err(ExportError::io(
            "link",
            path,
            io::Error::from(io::ErrorKind::AlreadyExists),
        ))
    }

    /// Removes the gyre export at `path` if its writer is dead; errors otherwise.
    fn clear_stale(path: &Path) -> Result<(), ExportError> {
        match TelemetryReader::open(path) {
            Ok(r) if pid_alive(r.info().pid) => Err(ExportError::InUse {
                path: path.to_owned(),
                pid: r.info().pid,
            }),
            // Another layout version: its pid is still at bytes 20..24.
            Err(ExportError::AbiMismatch { .. }) if raw_pid(path).is_some_and(pid_alive) => {
                Err(ExportError::InUse {
                    path: path.to_owned(),
                    pid: raw_pid(path).unwrap_or(0),
                })
            }
            // A gyre export of any version from a dead writer: ours to replace.
            Ok(_) | Err(ExportError::AbiMismatch { .. }) => {
                tracing::info!(path = %path.display(), "replacing stale telemetry export");
                fs::remove_file(path).map_err(|e| ExportError::io("remove stale", path, e))
            }
            Err(ExportError::Missing { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mapped file (the writer owns `control` and `telemetry`).
    pub fn export(&self) -> &TelemetryExport {
        self.map.get()
    }
}

impl Drop for ExportWriter {
    fn drop(&mut self) {
        // Remove the name only if it still refers to our file (not a successor's).
        if let Ok(m) = fs::metadata(&self.path) {
            if (m.dev(), m.ino()) == self.ident {
                let _ = fs::remove_file(&self.path);
            }
        }
    }
}
