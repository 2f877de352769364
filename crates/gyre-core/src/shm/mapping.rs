//! The shared mapping of an export file.

use std::fs::File;
use std::io;
use std::path::Path;
use std::ptr::NonNull;

use super::error::ExportError;
use super::layout::{ExportHeader, TelemetryExport, EXPORT_SIZE};

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

    /// Writes the header.
    ///
    /// # Safety
    ///
    /// The mapping is writable and nobody else reads or writes the file yet (it has no
    /// public name).
    pub(super) unsafe fn write_header(&self, header: ExportHeader) {
        // SAFETY: in bounds and aligned (the header is the first 64 bytes of a
        // page-aligned mapping); exclusive access per the caller's contract.
        unsafe { core::ptr::write_volatile(self.ptr.as_ptr().cast::<ExportHeader>(), header) };
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
