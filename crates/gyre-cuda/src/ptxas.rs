//! `ptxas -v` resource reports: assemble PTX for an architecture and read each function's
//! registers, stack frame and spills. The tests of this crate and of `gyre` check with it
//! that every ring kernel, built-in and generated handlers alike, runs without spills or
//! stack on every architecture NVRTC supports.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::path::Path;
use std::process::Command;

/// `ptxas -v` resources of one function.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Resources {
    /// The function's name.
    pub function: String,
    /// Registers per thread (entry functions).
    pub registers: u32,
    /// Bytes of stack frame.
    pub stack: u32,
    /// Bytes of spill stores.
    pub spill_stores: u32,
    /// Bytes of spill loads.
    pub spill_loads: u32,
    /// Bytes of static shared memory (entry functions).
    pub smem: u32,
}

/// Parses `ptxas -v` output: for each "Function properties for F" its next line
/// ("N bytes stack frame, N bytes spill stores, N bytes spill loads") and, for entry
/// functions, the "Used N registers, ..., N bytes smem" line.
pub fn parse(out: &str) -> Vec<Resources> {
    let mut res: Vec<Resources> = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        if let Some(f) = l.split("Function properties for ").nth(1) {
            let mut r = Resources {
                function: f.trim().to_owned(),
                ..Default::default()
            };
            if let Some(props) = lines.next() {
                r.stack = number_before(props, "bytes stack frame").unwrap_or(u32::MAX);
                r.spill_stores = number_before(props, "bytes spill stores").unwrap_or(u32::MAX);
                r.spill_loads = number_before(props, "bytes spill loads").unwrap_or(u32::MAX);
            }
            res.push(r);
        } else if l.contains("Used ") && l.contains(" registers") {
            if let Some(r) = res.last_mut() {
                r.registers = number_before(l, "registers").unwrap_or(0);
                r.smem = number_before(l, "bytes smem").unwrap_or(0);
            }
        }
    }
    res
}

/// The integer right before `what` in `line` ("..., 12 bytes smem" -> 12).
fn number_before(line: &str, what: &str) -> Option<u32> {
    let head = &line[..line.find(what)?];
    head.split(|c: char| !c.is_ascii_digit())
        .rfind(|s| !s.is_empty())?
        .parse()
        .ok()
}

/// Assembles `ptx` for `sm_<arch>` with `ptxas -v` (in a directory of its own under the
/// system temp dir, removed afterwards; `stem` names the files); returns its report, for
/// [`parse`].
///
/// # Errors
///
/// The reason as text: a file could not be written, `ptxas` could not run, or it failed
/// (with its output).
pub fn run(ptxas: &Path, ptx: &str, arch: u32, stem: &str) -> Result<String, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // The system temp dir, not a build-time path: the GPU kit runs this binary elsewhere.
    // One directory per call (process id and a counter), so concurrent calls never
    // remove each other's files.
    let dir = TempDir(std::env::temp_dir().join(format!(
        "gyre-cuda-ptxas-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Relaxed)
    )));
    std::fs::create_dir_all(&dir.0).map_err(|e| e.to_string())?;
    let (src, bin) = (
        dir.0.join(format!("{stem}.ptx")),
        dir.0.join(format!("{stem}.cubin")),
    );
    std::fs::write(&src, ptx).map_err(|e| e.to_string())?;
    let out = Command::new(ptxas)
        .arg(format!("-arch=sm_{arch}"))
        .args(["-v", "--warn-on-spills", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(|e| format!("running {}: {e}", ptxas.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("ptxas failed ({}):\n{text}", out.status))
    }
}

/// A directory removed (with what is in it) when dropped; a failure to remove it is
/// ignored (it is in the temp dir).
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
