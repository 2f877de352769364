//! Out-of-process telemetry: the [`TelemetryExport`] file a kernel publishes and
//! [`TelemetryReader`](crate::telemetry::TelemetryReader)s (such as `gyre top`) map
//! read-only.
//!
//! The rings stay private. The file holds a 64-byte [`ExportHeader`] (magic `GYRETLM1`,
//! layout version, writer pid, names), a 64-byte [`ExportControl`] line (the kernel's
//! state and ring indices, under its own sequence lock) and a copy of the kernel's
//! [`TelemetryBuffer`] (same seqlock as in the shared region). 192 bytes in all; see
//! `docs/telemetry.md` for the byte layout and the reader protocol.
//!
//! On the CPU backend (and OpenCL) the telemetry line of the file is a periodic copy made
//! by a host thread (the [`ExportPublisher`], every 50 ms by default), not the kernel's own
//! line: the counters lag the kernel by up to one period. On CUDA the backend registers
//! the mapping with the driver (`cuMemHostRegister`) and the ring kernel's K8 writes the
//! file's telemetry line itself, as its single writer, with no copy loop; the publisher
//! then writes only the control line (see `LaunchSpec::export` and
//! `KernelInstance::writes_export_telemetry`). That CUDA path has not run on a GPU yet.
//!
//! Files live at `$GYRE_SHM_DIR/<service>/<kernel>` (default `/dev/shm/gyre`), created
//! mode 0600 in directories created 0700, published atomically (written under a temporary
//! name, then hard-linked into place, which fails if the name exists) and removed when the
//! writer is dropped. A leftover file whose writer pid is dead is replaced; one whose
//! writer is alive is an error.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gyre_abi::TelemetryBuffer;

use crate::region::SharedRegion;
use crate::telemetry::{read_consistent, TelemetryWriter};

/// The first eight bytes of every export file.
pub const EXPORT_MAGIC: [u8; 8] = *b"GYRETLM1";
/// Version of the export layout; bumped on any change to [`TelemetryExport`].
pub const EXPORT_VERSION: u32 = 1;
/// Size of an export file in bytes.
pub const EXPORT_SIZE: usize = 192;
/// Bytes of a service or kernel name kept in the header (longer names are cut; the
/// path holds the full name).
pub const NAME_BYTES: usize = 16;
/// Environment variable overriding the export directory.
pub const DIR_ENV: &str = "GYRE_SHM_DIR";
/// Default export directory.
pub const DEFAULT_DIR: &str = "/dev/shm/gyre";
/// Default period of the [`ExportPublisher`].
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);

/// Bytes 0..64: written once, before the file gets its name; never changed after.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportHeader {
    /// [`EXPORT_MAGIC`].
    pub magic: [u8; 8],
    /// [`EXPORT_VERSION`].
    pub version: u32,
    /// `gyre_abi::ABI_VERSION` of the writer (layout of the telemetry line).
    pub abi_version: u32,
    /// Total file size, [`EXPORT_SIZE`].
    pub size: u32,
    /// Process id of the writer.
    pub pid: u32,
    /// When the file was created, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// Service name, UTF-8, NUL-padded (cut to 16 bytes).
    pub service: [u8; NAME_BYTES],
    /// Kernel name, UTF-8, NUL-padded (cut to 16 bytes).
    pub kernel: [u8; NAME_BYTES],
}

/// Bytes 64..128: the kernel's state and ring indices, copied by the publisher under a
/// sequence lock (`seq` odd while writing; same protocol as the telemetry line).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ExportControl {
    /// Sequence lock word.
    pub seq: AtomicU32,
    /// `gyre_abi::state` value.
    pub state: AtomicU32,
    /// `gyre_abi::error` code.
    pub error_code: AtomicU32,
    /// Ring capacity (slots).
    pub capacity: AtomicU32,
    /// Requests published by the host.
    pub h2k_head: AtomicU64,
    /// Requests consumed by the kernel.
    pub h2k_tail: AtomicU64,
    /// Replies published by the kernel.
    pub k2h_head: AtomicU64,
    /// Replies consumed by the host.
    pub k2h_tail: AtomicU64,
    /// Wall time (Unix ms) at which the publisher last saw the kernel heartbeat change.
    pub heartbeat_unix_ms: AtomicU64,
    /// Wall time (Unix ms) of this copy.
    pub published_unix_ms: AtomicU64,
}

/// A plain copy of an [`ExportControl`] taken by a consistent read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlSnapshot {
    /// Sequence value the copy was taken at (even).
    pub seq: u32,
    /// `gyre_abi::state` value.
    pub state: u32,
    /// `gyre_abi::error` code.
    pub error_code: u32,
    /// Ring capacity.
    pub capacity: u32,
    /// Requests published by the host.
    pub h2k_head: u64,
    /// Requests consumed by the kernel.
    pub h2k_tail: u64,
    /// Replies published by the kernel.
    pub k2h_head: u64,
    /// Replies consumed by the host.
    pub k2h_tail: u64,
    /// Wall time (Unix ms) the kernel heartbeat last changed, as seen by the publisher.
    pub heartbeat_unix_ms: u64,
    /// Wall time (Unix ms) of the copy.
    pub published_unix_ms: u64,
}

impl ControlSnapshot {
    /// Requests published but not yet taken by the kernel.
    pub fn requests_queued(&self) -> u64 {
        self.h2k_head.saturating_sub(self.h2k_tail)
    }
    /// Replies published but not yet taken by the host.
    pub fn replies_queued(&self) -> u64 {
        self.k2h_head.saturating_sub(self.k2h_tail)
    }
}

/// The whole export file.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct TelemetryExport {
    /// Bytes 0..64.
    pub header: ExportHeader,
    /// Bytes 64..128.
    pub control: ExportControl,
    /// Bytes 128..192: same layout and seqlock as the shared region's telemetry line.
    pub telemetry: TelemetryBuffer,
}

const _: () = assert!(core::mem::size_of::<ExportHeader>() == 64);
const _: () = assert!(core::mem::size_of::<ExportControl>() == 64);
const _: () = assert!(core::mem::offset_of!(ExportControl, published_unix_ms) == 56);
const _: () = assert!(core::mem::size_of::<TelemetryExport>() == EXPORT_SIZE);
const _: () = assert!(core::mem::offset_of!(TelemetryExport, control) == 64);
const _: () = assert!(core::mem::offset_of!(TelemetryExport, telemetry) == 128);
const _: () = assert!(core::mem::offset_of!(ExportHeader, service) == 32);

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
        /// [`EXPORT_SIZE`].
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

/// A shared file mapping of [`EXPORT_SIZE`] bytes, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<TelemetryExport>,
}

// SAFETY: the mapping is plain shared memory; all concurrently changed fields are atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first [`EXPORT_SIZE`] bytes of `file` (which must be at least that long),
    /// read-write or read-only.
    pub(crate) fn new(file: &File, writable: bool, path: &Path) -> Result<Self, ExportError> {
        use std::os::fd::AsRawFd;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an open file descriptor; the result is checked.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                EXPORT_SIZE,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ExportError::io("mmap", path, io::Error::last_os_error()));
        }
        let ptr = NonNull::new(p.cast::<TelemetryExport>())
            .ok_or_else(|| ExportError::io("mmap", path, io::Error::other("null mapping")))?;
        Ok(Self { ptr })
    }

    /// The mapped file. Never write through it unless mapped writable and single writer.
    pub(crate) fn get(&self) -> &TelemetryExport {
        // SAFETY: page-aligned (so 64-aligned), EXPORT_SIZE bytes, live until drop; the
        // header is never changed after creation and everything else is atomics.
        unsafe { self.ptr.as_ref() }
    }

    /// A copy of the header.
    pub(crate) fn header(&self) -> ExportHeader {
        // SAFETY: in bounds and aligned; the header is immutable once the file is named.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.ptr.as_ptr()).header)) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no references outlive `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), EXPORT_SIZE) };
    }
}

/// Takes a consistent copy of an [`ExportControl`] (same protocol as
/// [`read_consistent`]); `None` after `attempts` torn reads.
pub fn read_control(c: &ExportControl, attempts: u32) -> Option<ControlSnapshot> {
    crate::telemetry::seqlock_read(&c.seq, attempts, |seq| ControlSnapshot {
        seq,
        state: c.state.load(Relaxed),
        error_code: c.error_code.load(Relaxed),
        capacity: c.capacity.load(Relaxed),
        h2k_head: c.h2k_head.load(Relaxed),
        h2k_tail: c.h2k_tail.load(Relaxed),
        k2h_head: c.k2h_head.load(Relaxed),
        k2h_tail: c.k2h_tail.load(Relaxed),
        heartbeat_unix_ms: c.heartbeat_unix_ms.load(Relaxed),
        published_unix_ms: c.published_unix_ms.load(Relaxed),
    })
}

/// Writes `v` to `c` under its sequence lock. Single writer only.
pub fn write_control(c: &ExportControl, v: &ControlSnapshot) {
    let odd = c.seq.load(Relaxed).wrapping_add(1) | 1;
    c.seq.store(odd, Relaxed);
    fence(Release);
    c.state.store(v.state, Relaxed);
    c.error_code.store(v.error_code, Relaxed);
    c.capacity.store(v.capacity, Relaxed);
    c.h2k_head.store(v.h2k_head, Relaxed);
    c.h2k_tail.store(v.h2k_tail, Relaxed);
    c.k2h_head.store(v.k2h_head, Relaxed);
    c.k2h_tail.store(v.k2h_tail, Relaxed);
    c.heartbeat_unix_ms.store(v.heartbeat_unix_ms, Relaxed);
    c.published_unix_ms.store(v.published_unix_ms, Relaxed);
    c.seq.store(odd.wrapping_add(1), Release);
}

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
        // writer; in bounds and aligned.
        unsafe { core::ptr::write_volatile(map.ptr.as_ptr().cast::<ExportHeader>(), header) };
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
        match crate::telemetry::TelemetryReader::open(path) {
            Ok(r) if pid_alive(r.info().pid) => Err(ExportError::InUse {
                path: path.to_owned(),
                pid: r.info().pid,
            }),
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

/// Copies a region's control block and telemetry into an [`ExportWriter`] periodically
/// on its own thread; a final copy, then the file's removal, on drop.
#[derive(Debug)]
pub struct ExportPublisher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

struct Copier {
    region: Arc<SharedRegion>,
    writer: Arc<ExportWriter>,
    /// Whether this thread writes the telemetry line (false when the kernel does).
    copy_telemetry: bool,
    tw: TelemetryWriter,
    last_hb: u64,
    hb_ms: u64,
}

impl Copier {
    fn copy(&mut self) {
        let cb = self.region.control();
        let now = unix_ms();
        let hb = cb.kernel_heartbeat.load(Acquire);
        if hb != self.last_hb {
            self.last_hb = hb;
            self.hb_ms = now;
        }
        let v = ControlSnapshot {
            seq: 0,
            state: cb.state.load(Acquire),
            error_code: cb.error_code.load(Acquire),
            capacity: cb.capacity.load(Relaxed),
            h2k_head: cb.h2k_head.load(Acquire),
            h2k_tail: cb.h2k_tail.load(Acquire),
            k2h_head: cb.k2h_head.load(Acquire),
            k2h_tail: cb.k2h_tail.load(Acquire),
            heartbeat_unix_ms: self.hb_ms,
            published_unix_ms: now,
        };
        let ex = self.writer.export();
        write_control(&ex.control, &v);
        if !self.copy_telemetry {
            return;
        }
        if let Ok(t) = read_consistent(self.region.telemetry(), 1024) {
            self.tw.acc = t;
            self.tw.publish(&ex.telemetry);
        }
    }
}

impl ExportPublisher {
    /// Starts copying `region` into `writer` every `interval` (at least 1 ms): the control
    /// line always, the telemetry line only when `copy_telemetry` (false when the kernel
    /// writes the file's telemetry line itself, which must then have no other writer).
    pub fn start(
        region: Arc<SharedRegion>,
        writer: Arc<ExportWriter>,
        interval: Duration,
        copy_telemetry: bool,
    ) -> Result<Self, ExportError> {
        let path = writer.path().to_owned();
        let interval = interval.max(Duration::from_millis(1));
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = Copier {
            last_hb: region.control().kernel_heartbeat.load(Acquire),
            hb_ms: unix_ms(),
            region,
            writer,
            copy_telemetry,
            tw: TelemetryWriter::default(),
        };
        c.copy();
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gyre-telemetry-export".into())
            .spawn(move || {
                while !s2.load(Acquire) {
                    std::thread::park_timeout(interval);
                    c.copy();
                }
                // `c` (and with it the writer) drops here: the file is removed.
            })
            .map_err(|e| ExportError::io("spawn publisher for", &path, e))?;
        Ok(Self {
            stop,
            thread: Some(thread),
            path,
        })
    }

    /// The export file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ExportPublisher {
    fn drop(&mut self) {
        self.stop.store(true, Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod publisher_tests {
    use super::*;
    use crate::ring::Geometry;
    use crate::telemetry::TelemetryReader;

    fn temp_path(tag: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("gyre-shm-{tag}-{}", std::process::id()))
            .join("svc")
            .join("k")
    }

    /// When the kernel writes the file's telemetry line itself (CUDA), the publisher
    /// keeps to the control line: the line keeps its single writer.
    #[test]
    fn publisher_leaves_a_kernel_written_telemetry_line_alone() {
        let path = temp_path("direct");
        let region =
            Arc::new(SharedRegion::new_host(Geometry::new(4, 128, 1).unwrap(), 0).unwrap());
        region.control().h2k_head.store(3, Release);
        let mut host_side = TelemetryWriter::default();
        host_side.acc.messages_in = 111; // what a copy would bring
        host_side.publish(region.telemetry());
        let file = Arc::new(ExportWriter::create_at(&path, "svc", "k").unwrap());
        // "The kernel" writes the file's line directly.
        let mut device_side = TelemetryWriter::default();
        device_side.acc.messages_in = 7;
        device_side.publish(&file.export().telemetry);
        let p =
            ExportPublisher::start(region, file.clone(), Duration::from_millis(1), false).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let snap = TelemetryReader::open(&path).unwrap().snapshot().unwrap();
        assert_eq!(snap.control.h2k_head, 3, "the control line is published");
        assert_eq!(
            snap.telemetry.messages_in, 7,
            "the kernel's line is not overwritten"
        );
        drop(p);
        drop(file);
        assert!(!path.exists(), "removed when the last owner drops");
        let _ = fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }
}
