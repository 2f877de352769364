//! The host process dies (SIGKILL) while its kernel runs: the kernel must notice the
//! stale host heartbeat and stop by itself.
//!
//! On the CPU backend the kernel is a thread of the host process, so killing the host
//! kills it too and proves nothing. The honest test splits them across two processes
//! over one shared-memory region (a `MAP_SHARED` file mapping): this test process runs
//! the kernel loop (`gyre_cpu::kernel_loop`, exactly what the CPU backend's thread runs),
//! a child process is the host (a `Channel` writing the heartbeat, publishing calls and
//! taking their replies). The child is killed with SIGKILL mid-traffic; the kernel must
//! then terminate with `HOST_HEARTBEAT_STALE` instead of spinning forever. A device
//! backend's kernel lives on the device, where the same heartbeat rule (K9) applies; its
//! process-level test needs the device and skips here.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre::Backend;
use gyre_abi::{error, state};
use gyre_core::region::RegionMemory;
use gyre_core::ring::Geometry;
use gyre_core::{Channel, IdleStrategy, Kind, PublishError, SharedRegion};

use super::{rt, Target};

/// Where the child finds the region file.
const ENV_REGION: &str = "GYRE_FAULTS_CHILD_REGION";
/// Lines of the child's stdout meant for the parent start with this.
const TAG: &str = "GYRE_CHILD";
/// Kernel-side host timeout: the kernel stops this long after the last heartbeat.
const HOST_TIMEOUT_MS: u32 = 1000;

fn geometry() -> Geometry {
    Geometry::new(64, 128, 16).expect("geometry")
}

/// A `MAP_SHARED` mapping of a file: the region both processes address.
struct Mapped {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only accessed through the protocol's
// atomics and ownership rules.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps `path`, creating it zeroed with `len` bytes when `create`.
    fn map(path: &Path, len: usize, create: bool) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(path)?;
        if create {
            f.set_len(len as u64)?;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared read/write mapping of `len` bytes of an open file; the
        // result is checked before use.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Self { ptr, len })
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

// SAFETY: page-aligned (mmap), `len` bytes, valid until drop. Zeroed at creation (a new
// file); the child maps it after the parent initialised the control block and before
// any message exists, so every slot is still zero.
unsafe impl RegionMemory for Mapped {
    fn base(&self) -> NonNull<u8> {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// A region file of its own for each call (two suites of one test binary may run this
/// case at the same time: the pid alone does not tell them apart).
fn region_file() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "gyre-faults-host-killed-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ))
}

/// The host process is SIGKILLed mid-traffic; the kernel (in this surviving process)
/// terminates itself with `HOST_HEARTBEAT_STALE`.
pub fn host_process_killed(b: Target) {
    if rt(b).backend() != Backend::Cpu {
        eprintln!("SKIP: the kernel of a device backend lives on the device; this case needs the CPU kernel loop in a surviving process");
        return;
    }
    let g = geometry();
    let path = region_file();
    let len = SharedRegion::bytes_for(&g);
    let mem = Mapped::map(&path, len, true).expect("map the region file");
    let region = Arc::new(SharedRegion::new(Box::new(mem), g, HOST_TIMEOUT_MS).expect("region"));

    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "host_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_REGION, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the host process");
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
    let mut wait_for = |what: &str| -> u64 {
        for line in lines.by_ref() {
            let line = line.expect("child output");
            // libtest may print "test host_child_process ... " before it on the line.
            if let Some(rest) = line.find(TAG).map(|at| &line[at + TAG.len()..]) {
                let mut it = rest.split_whitespace();
                if it.next() == Some(what) {
                    return it.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                }
            }
        }
        panic!("the host process ended before `{what}`");
    };
    wait_for("attached");

    // The kernel, in this process: what the CPU backend's thread runs.
    let r = region.clone();
    let kernel = std::thread::spawn(move || {
        gyre_cpu::kernel_loop(&r, &gyre_core::kernels::echo, IdleStrategy::default(), true)
    });
    // The host keeps the kernel alive across several host timeouts while it heartbeats.
    let started = Instant::now();
    let mut replied = 0;
    while started.elapsed() < Duration::from_millis(u64::from(HOST_TIMEOUT_MS) * 2) {
        replied = wait_for("replied");
    }
    let cb = region.control();
    assert_eq!(
        cb.state.load(Acquire),
        state::ACTIVE,
        "the kernel stopped while its host was alive"
    );
    assert!(replied > 0);

    child.kill().expect("SIGKILL the host process");
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !kernel.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the kernel outlived its dead host (hang guard)"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    kernel.join().expect("the kernel loop never panics");
    assert_eq!(cb.state.load(Acquire), state::TERMINATED);
    assert_eq!(cb.error_code.load(Acquire), error::HOST_HEARTBEAT_STALE);
    // Every request the kernel consumed was answered, once (it polls slot sequences, so
    // it may have consumed a request the dead host stamped but never published).
    let (head, tail, k2h_head) = (
        cb.h2k_head.load(Acquire),
        cb.h2k_tail.load(Acquire),
        cb.k2h_head.load(Acquire),
    );
    assert_eq!(k2h_head, tail, "published head {head}");
    assert!(tail >= replied);
    drop(region);
    let _ = std::fs::remove_file(&path);
}

/// The host process of [`host_process_killed`]: maps the region, writes the heartbeat
/// from a thread, and calls the echo kernel until it is killed (it gives up after 60 s,
/// a guard against a leaked child). Does nothing when not started by that case.
pub fn child_main() {
    let Some(path) = std::env::var_os(ENV_REGION) else {
        return;
    };
    let g = geometry();
    let mem = Mapped::map(Path::new(&path), SharedRegion::bytes_for(&g), false)
        .expect("map the region file");
    // Rewrites the same host line the parent wrote (geometry, timeout, Run).
    let region = Arc::new(SharedRegion::new(Box::new(mem), g, HOST_TIMEOUT_MS).expect("region"));
    let ch = Arc::new(Channel::new(region, "host-killed"));
    ch.heartbeat();
    let hb = ch.clone();
    std::thread::spawn(move || loop {
        hb.heartbeat();
        std::thread::sleep(Duration::from_millis(10));
    });
    println!("{TAG} attached");
    let start = Instant::now();
    let idle = IdleStrategy::default();
    let mut n: u64 = 0;
    while start.elapsed() < Duration::from_secs(60) {
        let idx = match ch.try_publish(Kind::Call, gyre_core::kernels::ids::ECHO, &n.to_le_bytes())
        {
            Ok(i) => i,
            Err(PublishError::Full) => continue,
            Err(e) => panic!("publish: {e:?}"),
        };
        let v = ch
            .wait_blocking(idx, &idle, Some(Duration::from_secs(30)), |r| {
                Ok(u64::from_le_bytes(r.payload.try_into().unwrap_or_default()))
            })
            .expect("echo reply");
        assert_eq!(v, n);
        n += 1;
        if n % 100 == 0 {
            println!("{TAG} replied {n}");
        }
    }
}
