//! The reader samples of `docs/telemetry.md` ("Reading it from any language"), run exactly
//! as the page shows them against the export file of a running kernel: the Python sample
//! with `python3`, the C sample compiled with the host C compiler (`$CC`, default `cc`).
//! Both are prerequisites of the README's quick start.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gyre::telemetry::TelemetryReader;
use gyre::{Backend, KernelSpec, Runtime};

const DOC: &str = include_str!("../docs/telemetry.md");
const CALLS: u64 = 50;

/// The body of the first fenced block of `lang` after `marker` in the page.
fn sample(marker: &str, lang: &str) -> String {
    let from = DOC
        .find(marker)
        .unwrap_or_else(|| panic!("docs/telemetry.md has no {marker:?}"));
    let fence = format!("```{lang}\n");
    let rest = &DOC[from..];
    let start = rest.find(&fence).expect("the sample's opening fence") + fence.len();
    let len = rest[start..]
        .find("```")
        .expect("the sample's closing fence");
    rest[start..start + len].to_owned()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "gyre-samples-{tag}-{}-{}",
        std::process::id(),
        gyre_core::shm::unix_ms()
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Runs `f` with the path of a live export file whose telemetry line shows `CALLS`
/// replies and whose lifecycle line shows one reload, then shuts the kernel down.
fn with_export(tag: &str, f: impl FnOnce(&Path, &Path)) {
    let dir = temp_dir(tag);
    let path = dir.join("svc").join("double");
    let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
    let k = rt
        .launch(
            KernelSpec::from_fn("double", |x: u64| x * 2)
                .export_telemetry_to(&path)
                .export_interval(Duration::from_millis(1)),
        )
        .unwrap();
    for i in 0..CALLS / 2 {
        assert_eq!(k.call_blocking(i).unwrap(), 2 * i);
    }
    // A reload halfway: the counters continue, the lifecycle line counts it.
    k.reload_blocking(KernelSpec::from_fn("double", |x: u64| x + x))
        .unwrap();
    for i in CALLS / 2..CALLS {
        assert_eq!(k.call_blocking(i).unwrap(), 2 * i);
    }
    // The CPU backend's export is a periodic copy: wait (bounded) for it to catch up.
    let r = TelemetryReader::open(&path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let caught_up = |s: gyre::telemetry::ExportSnapshot| {
        s.telemetry.messages_out >= CALLS && s.lifecycle.reloads >= 1
    };
    while !caught_up(r.snapshot().unwrap()) {
        assert!(Instant::now() < deadline, "the export never caught up");
        std::thread::sleep(Duration::from_millis(2));
    }
    f(&path, &dir);
    k.shutdown_blocking().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A copy of the export at `path` with `abi_version` (bytes 12..16) set to `abi`.
fn with_abi(path: &Path, dir: &Path, abi: u32) -> PathBuf {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[12..16].copy_from_slice(&abi.to_le_bytes());
    let p = dir.join(format!("abi-{abi}"));
    std::fs::write(&p, bytes).unwrap();
    p
}

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn expected_line() -> String {
    format!(
        "state={} in={CALLS} out={CALLS} errors=0 generation=2 reloads=1 restarts=0",
        gyre_abi::state::ACTIVE
    )
}

#[test]
fn python_sample_reads_a_live_export() {
    let script = sample("Python (", "python");
    with_export("py", |path, dir| {
        let py = dir.join("reader.py");
        std::fs::write(&py, &script).unwrap();
        let (ok, out, err) = run(Command::new("python3").arg(&py).arg(path));
        assert!(ok, "the Python sample failed: {err}");
        assert_eq!(out.trim(), expected_line());
        // A reader written from the page refuses another ABI version.
        let other = with_abi(path, dir, gyre::ABI_VERSION + 1);
        let (ok, _, err) = run(Command::new("python3").arg(&py).arg(&other));
        assert!(!ok && err.contains("ABI mismatch"), "{err}");
    });
}

#[test]
fn c_sample_reads_a_live_export() {
    let source = sample("C (C11 atomics)", "c");
    with_export("c", |path, dir| {
        let src = dir.join("reader.c");
        let exe = dir.join("reader");
        std::fs::write(&src, &source).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let (ok, _, err) = run(Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Werror", "-O2", "-o"])
            .arg(&exe)
            .arg(&src));
        assert!(ok, "the C sample does not compile with {cc}: {err}");
        let (ok, out, err) = run(Command::new(&exe).arg(path));
        assert!(ok, "the C sample failed: {err}");
        assert_eq!(out.trim(), expected_line());
        let other = with_abi(path, dir, gyre::ABI_VERSION + 1);
        let (ok, _, err) = run(Command::new(&exe).arg(&other));
        assert!(!ok && err.contains("ABI mismatch"), "{err}");
    });
}
