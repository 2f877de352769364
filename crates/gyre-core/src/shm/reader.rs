//! [`TelemetryReader`]: a read-only view of a telemetry export file.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use gyre_abi::TelemetrySnapshot;

use super::error::ExportError;
use super::layout::{
    read_control, read_lifecycle, read_loans, ControlSnapshot, ExportHeader, LifecycleSnapshot,
    EXPORT_MAGIC, EXPORT_SIZE, EXPORT_VERSION, NAME_BYTES,
};
use super::mapping::Mapping;
use super::paths::pid_alive;
use crate::telemetry::read_consistent;

/// Retry bound of [`TelemetryReader::snapshot`].
pub const READ_ATTEMPTS: u32 = 1024;

/// The fixed part of an export: who writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// Service name (cut to 16 bytes; the path has the full name).
    pub service: String,
    /// Kernel name (cut to 16 bytes).
    pub kernel: String,
    /// Writer process id.
    pub pid: u32,
    /// Creation time, Unix ms.
    pub created_unix_ms: u64,
    /// `gyre_abi::ABI_VERSION` of the writer.
    pub abi_version: u32,
}

/// One consistent read of an export: each part is consistent on its own (four
/// seqlocks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportSnapshot {
    /// State and ring indices.
    pub control: ControlSnapshot,
    /// The telemetry line.
    pub telemetry: TelemetrySnapshot,
    /// Relaunches: generation, reloads, epochs, restarts.
    pub lifecycle: LifecycleSnapshot,
    /// The loan pool (`pool_bytes == 0`: the kernel has none).
    pub loans: crate::loan::LoanStats,
}

/// A read-only mapping of an export file. Never writes to it.
///
/// # Examples
///
/// ```
/// use gyre_core::shm::{ExportError, ExportWriter};
/// use gyre_core::shm::TelemetryReader;
/// let dir = std::env::temp_dir().join(format!("gyre-doc-{}", std::process::id()));
/// let path = dir.join("svc").join("echo");
/// let w = ExportWriter::create_at(&path, "svc", "echo").unwrap();
/// let r = TelemetryReader::open(&path).unwrap();
/// assert_eq!(r.info().kernel, "echo");
/// assert_eq!(r.snapshot().unwrap().telemetry.messages_in, 0);
/// drop(w); // removes the file
/// assert!(matches!(TelemetryReader::open(&path), Err(ExportError::Missing { .. })));
/// # let _ = std::fs::remove_dir_all(&dir);
/// ```
#[derive(Debug)]
pub struct TelemetryReader {
    map: Mapping,
    path: PathBuf,
    info: ExportInfo,
}

/// Reads up to `buf.len()` bytes from the start of `file`; how many were read.
fn read_prefix(mut file: &std::fs::File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match std::io::Read::read(&mut file, &mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    n
}

/// The writer pid of an export file of any layout version (bytes 20..24), if it has one.
pub(crate) fn raw_pid(path: &Path) -> Option<u32> {
    let file = OpenOptions::new().read(true).open(path).ok()?;
    let mut head = [0u8; 24];
    (read_prefix(&file, &mut head) == 24 && head[..8] == EXPORT_MAGIC)
        .then(|| u32::from_le_bytes([head[20], head[21], head[22], head[23]]))
}

fn name(b: &[u8; NAME_BYTES]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl TelemetryReader {
    /// Opens and validates the export at `path`: [`ExportError::Missing`],
    /// [`ExportError::Truncated`], [`ExportError::Foreign`] (wrong magic) or
    /// [`ExportError::AbiMismatch`] (another layout version) when it is not readable.
    pub fn open(path: &Path) -> Result<Self, ExportError> {
        let file = OpenOptions::new()
            .read(true)
            .open(path)
            .map_err(|e| ExportError::io("open", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| ExportError::io("stat", path, e))?
            .len();
        // The first 24 bytes (magic, version, abi, size, pid) keep their place in every
        // layout version: check them before the size, so an export of another version
        // is reported as such, not as truncated.
        let mut head = [0u8; 24];
        let n = read_prefix(&file, &mut head);
        let mut found_magic = [0u8; 8];
        found_magic.copy_from_slice(&head[..8]);
        if n == 0 || head[..n.min(8)] != EXPORT_MAGIC[..n.min(8)] {
            return Err(ExportError::Foreign {
                path: path.to_owned(),
                found_magic,
            });
        }
        if n >= 12 {
            let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
            if version != EXPORT_VERSION {
                return Err(ExportError::AbiMismatch {
                    path: path.to_owned(),
                    field: "export version",
                    found: version,
                    expected: EXPORT_VERSION,
                });
            }
        }
        if len < EXPORT_SIZE as u64 {
            return Err(ExportError::Truncated {
                path: path.to_owned(),
                len,
                expected: EXPORT_SIZE as u64,
            });
        }
        let map = Mapping::new(&file, false, path)?;
        let h: ExportHeader = map.header();
        if h.magic != EXPORT_MAGIC {
            return Err(ExportError::Foreign {
                path: path.to_owned(),
                found_magic: h.magic,
            });
        }
        if h.version != EXPORT_VERSION {
            return Err(ExportError::AbiMismatch {
                path: path.to_owned(),
                field: "export version",
                found: h.version,
                expected: EXPORT_VERSION,
            });
        }
        if h.abi_version != gyre_abi::ABI_VERSION {
            return Err(ExportError::AbiMismatch {
                path: path.to_owned(),
                field: "abi version",
                found: h.abi_version,
                expected: gyre_abi::ABI_VERSION,
            });
        }
        if (h.size as usize) < EXPORT_SIZE {
            return Err(ExportError::Truncated {
                path: path.to_owned(),
                len: u64::from(h.size),
                expected: EXPORT_SIZE as u64,
            });
        }
        let info = ExportInfo {
            service: name(&h.service),
            kernel: name(&h.kernel),
            pid: h.pid,
            created_unix_ms: h.created_unix_ms,
            abi_version: h.abi_version,
        };
        Ok(Self {
            map,
            path: path.to_owned(),
            info,
        })
    }

    /// The path opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who writes the file.
    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// Whether the writer process still exists.
    pub fn writer_alive(&self) -> bool {
        pid_alive(self.info.pid)
    }

    /// A consistent snapshot, retrying torn reads up to [`READ_ATTEMPTS`] times per part;
    /// [`ExportError::Torn`] if the writer never lets go (stopped mid-write).
    pub fn snapshot(&self) -> Result<ExportSnapshot, ExportError> {
        let ex = self.map.get();
        let torn = || ExportError::Torn {
            path: self.path.clone(),
            attempts: READ_ATTEMPTS,
        };
        let control = read_control(&ex.control, READ_ATTEMPTS).ok_or_else(torn)?;
        let telemetry = read_consistent(&ex.telemetry, READ_ATTEMPTS).map_err(|_| torn())?;
        let lifecycle = read_lifecycle(&ex.lifecycle, READ_ATTEMPTS).ok_or_else(torn)?;
        let loans = read_loans(&ex.loans, READ_ATTEMPTS).ok_or_else(torn)?;
        Ok(ExportSnapshot {
            control,
            telemetry,
            lifecycle,
            loans,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::{write_control, ExportWriter};
    use crate::telemetry::TelemetryWriter;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "gyre-shm-{tag}-{}-{}",
            std::process::id(),
            crate::shm::unix_ms()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn permissions_are_owner_only_and_file_is_removed_on_drop() {
        let d = tmpdir("perm");
        let path = d.join("svc").join("k");
        let w = ExportWriter::create_at(&path, "svc", "k").expect("create");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&d.join("svc")), 0o700);
        assert_eq!(mode(&d), 0o700);
        // No temporary file left behind.
        let names: Vec<_> = std::fs::read_dir(d.join("svc")).unwrap().collect();
        assert_eq!(names.len(), 1);
        drop(w);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn live_writer_blocks_a_second_and_dead_writer_is_replaced() {
        let d = tmpdir("stale");
        let path = d.join("svc").join("k");
        let w = ExportWriter::create_at(&path, "svc", "k").expect("create");
        let e = ExportWriter::create_at(&path, "svc", "k").expect_err("in use");
        assert!(
            matches!(e, ExportError::InUse { pid, .. } if pid == std::process::id()),
            "{e:?}"
        );
        drop(w);
        // Forge a leftover from a dead process: copy a valid file, patch its pid.
        let w = ExportWriter::create_at(&d.join("tmp").join("k"), "svc", "k").unwrap();
        let mut bytes = std::fs::read(w.path()).unwrap();
        drop(w);
        let dead: u32 = 0x7fff_fff0; // above any pid_max
        bytes[20..24].copy_from_slice(&dead.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(TelemetryReader::open(&path).unwrap().info().pid, dead);
        let w = ExportWriter::create_at(&path, "svc", "k").expect("stale file replaced");
        let r = TelemetryReader::open(&path).unwrap();
        assert_eq!(r.info().pid, std::process::id());
        assert!(r.writer_alive());
        drop(w);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn missing_foreign_truncated_and_other_versions_are_typed_errors() {
        let d = tmpdir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let e = TelemetryReader::open(&d.join("nope")).unwrap_err();
        assert!(matches!(e, ExportError::Missing { .. }), "{e:?}");

        let foreign = d.join("foreign");
        std::fs::write(&foreign, vec![b'x'; 4096]).unwrap();
        let e = TelemetryReader::open(&foreign).unwrap_err();
        assert!(
            matches!(e, ExportError::Foreign { found_magic, .. } if found_magic == *b"xxxxxxxx"),
            "{e:?}"
        );
        std::fs::write(&foreign, b"hi").unwrap();
        assert!(matches!(
            TelemetryReader::open(&foreign).unwrap_err(),
            ExportError::Foreign { .. }
        ));
        std::fs::write(&foreign, b"").unwrap();
        assert!(matches!(
            TelemetryReader::open(&foreign).unwrap_err(),
            ExportError::Foreign { .. }
        ));
        // A foreign file at an export path is reported, not deleted.
        let e = ExportWriter::create_at(&foreign, "s", "k").unwrap_err();
        assert!(matches!(e, ExportError::Foreign { .. }), "{e:?}");
        assert!(foreign.exists());

        let w = ExportWriter::create_at(&d.join("s").join("k"), "s", "k").unwrap();
        let good = std::fs::read(w.path()).unwrap();
        drop(w);
        let short = d.join("short");
        std::fs::write(&short, &good[..100]).unwrap();
        let e = TelemetryReader::open(&short).unwrap_err();
        assert!(
            matches!(e, ExportError::Truncated { len: 100, expected, .. } if expected == EXPORT_SIZE as u64),
            "{e:?}"
        );
        // A version-1 export (192 bytes) is another version, not a truncated file.
        let mut v1 = good[..192].to_vec();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let other = d.join("v1");
        std::fs::write(&other, &v1).unwrap();
        let e = TelemetryReader::open(&other).unwrap_err();
        assert!(
            matches!(
                e,
                ExportError::AbiMismatch {
                    found: 1,
                    expected: EXPORT_VERSION,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("export version 1"), "{e}");
        assert_eq!(raw_pid(&other), Some(std::process::id()));
        // ... and one whose writer (this process) lives is not replaced.
        let e = ExportWriter::create_at(&other, "s", "k").unwrap_err();
        assert!(matches!(e, ExportError::InUse { .. }), "{e:?}");
        assert!(other.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn invalid_names_are_rejected() {
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(matches!(
                crate::shm::export_path(bad, "k"),
                Err(ExportError::InvalidName {
                    what: "service",
                    ..
                })
            ));
        }
    }

    /// A reader of the mapped file racing the writer (through a second, read-only
    /// mapping) never returns a torn snapshot of either seqlocked line.
    #[test]
    fn racing_file_reader_never_sees_torn_snapshot() {
        let d = tmpdir("race");
        let path = d.join("s").join("k");
        let w = Arc::new(ExportWriter::create_at(&path, "s", "k").unwrap());
        let r = TelemetryReader::open(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (w2, s2) = (w.clone(), stop.clone());
        let writer = std::thread::spawn(move || {
            let mut tw = TelemetryWriter::default();
            let mut k: u64 = 0;
            while !s2.load(Relaxed) {
                k += 1;
                tw.acc.messages_in = k;
                tw.acc.messages_out = k * 2;
                tw.acc.errors = k * 3;
                tw.acc.busy_polls = !k;
                tw.acc.handler_ns_total = k.rotate_left(11);
                tw.acc.heartbeat_ms = k as u32;
                tw.publish(&w2.export().telemetry);
                let c = ControlSnapshot {
                    seq: 0,
                    state: k as u32,
                    error_code: (k as u32).wrapping_mul(3),
                    capacity: !(k as u32),
                    h2k_head: k,
                    h2k_tail: k * 5,
                    k2h_head: k * 7,
                    k2h_tail: !k,
                    heartbeat_unix_ms: k.rotate_left(7),
                    published_unix_ms: k ^ 0x5555,
                };
                write_control(&w2.export().control, &c);
            }
        });
        let deadline = Instant::now() + Duration::from_millis(300);
        let mut ok = 0u32;
        while Instant::now() < deadline {
            let Ok(s) = r.snapshot() else { continue };
            let t = s.telemetry;
            let k = t.messages_in;
            assert_eq!((t.messages_out, t.errors), (k * 2, k * 3));
            assert_eq!(t.busy_polls, if k == 0 { 0 } else { !k });
            assert_eq!(t.handler_ns_total, k.rotate_left(11));
            assert_eq!(t.heartbeat_ms, k as u32);
            let c = s.control;
            let k = c.h2k_head;
            if k != 0 {
                assert_eq!(c.state, k as u32);
                assert_eq!(c.error_code, (k as u32).wrapping_mul(3));
                assert_eq!(c.capacity, !(k as u32));
                assert_eq!((c.h2k_tail, c.k2h_head, c.k2h_tail), (k * 5, k * 7, !k));
                assert_eq!(c.heartbeat_unix_ms, k.rotate_left(7));
                assert_eq!(c.published_unix_ms, k ^ 0x5555);
            }
            ok += 1;
        }
        stop.store(true, Relaxed);
        writer.join().unwrap();
        assert!(ok > 100, "too few consistent reads: {ok}");
        drop(r);
        drop(w);
        let _ = std::fs::remove_dir_all(&d);
    }
}
