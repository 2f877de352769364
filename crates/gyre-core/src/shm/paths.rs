//! Where export files live, which names are legal, finding them, and whether their writer
//! is alive.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::error::ExportError;

/// Environment variable overriding the export directory.
pub const DIR_ENV: &str = "GYRE_SHM_DIR";
/// Default export directory.
pub const DEFAULT_DIR: &str = "/dev/shm/gyre";

/// The export directory: `$GYRE_SHM_DIR`, or `/dev/shm/gyre`.
pub fn default_dir() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_DIR),
    }
}

fn check_name(what: &'static str, name: &str) -> Result<(), ExportError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(ExportError::InvalidName {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// `<default_dir()>/<service>/<kernel>`, with both names checked.
pub fn export_path(service: &str, kernel: &str) -> Result<PathBuf, ExportError> {
    check_name("service", service)?;
    check_name("kernel", kernel)?;
    Ok(default_dir().join(service).join(kernel))
}

/// Export files under `dir` (`dir/<service>/<kernel>`), sorted; only `service` if given.
/// Hidden names (temporary files) are skipped. A missing `dir` is an empty list.
pub fn discover(dir: &Path, service: Option<&str>) -> io::Result<Vec<PathBuf>> {
    let services: Vec<PathBuf> = match service {
        Some(s) => vec![dir.join(s)],
        None => match fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        },
    };
    let mut out = Vec::new();
    for sdir in services {
        let rd = match fs::read_dir(&sdir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for e in rd.filter_map(|e| e.ok()) {
            let hidden = e.file_name().to_string_lossy().starts_with('.');
            if !hidden && e.file_type().map(|t| t.is_file()).unwrap_or(false) {
                out.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Whether process `pid` exists (signal 0; a process of another user counts as alive).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
