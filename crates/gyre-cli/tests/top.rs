//! `gyre top` against a `gyre demo --serve` in another process, and against missing,
//! foreign and stale export files. Each test uses its own GYRE_SHM_DIR.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GYRE: &str = env!("CARGO_BIN_EXE_gyre");

fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("gyre-top-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Kills the child on drop (a failed assertion must not leave a server running).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn top(dir: &Path, args: &[&str]) -> Output {
    Command::new(GYRE)
        .arg("top")
        .args(args)
        .env("GYRE_SHM_DIR", dir)
        .env("GYRE_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run gyre top")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(
            Instant::now() < end,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn top_once_reads_a_serving_demo_and_the_file_goes_away_on_sigint() {
    let dir = temp_dir("serve");
    let log = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let child = Command::new(GYRE)
        .args(["demo", "--backend", "cpu", "-n", "500", "--serve"])
        .env("GYRE_SHM_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn gyre demo --serve");
    let mut child = Guard(child);
    let export = dir.join("demo").join("echo");
    wait_until("the export file", Duration::from_secs(60), || {
        export.exists()
    });

    // The kernel keeps serving: wait until top sees messages flowing.
    let mut last = String::new();
    let mut seen = 0u64;
    wait_until(
        "non-zero messages in gyre top",
        Duration::from_secs(30),
        || {
            let out = top(&dir, &["--once", "--interval-ms", "200"]);
            last = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "gyre top --once failed:\n{last}");
            let row = last.lines().find(|l| l.starts_with("demo ")).unwrap_or("");
            let cols: Vec<&str> = row.split_whitespace().collect();
            // SERVICE KERNEL PID STATE IN/s OUT/s IN OUT ...
            if cols.len() < 8 {
                return false;
            }
            assert_eq!(cols[1], "echo", "{last}");
            assert_eq!(cols[2], child.0.id().to_string(), "{last}");
            seen = cols[6].replace(',', "").parse().unwrap_or(0);
            cols[3] == "active" && seen > 0
        },
    );
    assert!(
        last.contains("IN/s") && last.contains("HEARTBEAT"),
        "{last}"
    );
    assert!(!last.contains("STALE"), "{last}");
    assert!(seen > 0);

    // SAFETY: signalling our own child.
    let rc = unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let mut status = None;
    wait_until("gyre demo --serve to exit", Duration::from_secs(30), || {
        status = child.0.try_wait().expect("try_wait");
        status.is_some()
    });
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(log.contains("serving: stopped"), "{log}");
    assert!(!export.exists(), "export file left behind after SIGINT");

    let out = top(&dir, &["--once", "--interval-ms", "1"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no telemetry exports"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_foreign_and_stale_exports_get_clear_messages() {
    let dir = temp_dir("bad");

    let out = top(&dir, &["--once", "--path", "/nonexistent/gyre/x"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no telemetry export at"),
        "{}",
        text(&out.stderr)
    );

    std::fs::create_dir_all(dir.join("svc")).unwrap();
    let foreign = dir.join("svc").join("foreign");
    std::fs::write(&foreign, vec![b'z'; 256]).unwrap();
    let out = top(&dir, &["--once", "--path", foreign.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("not a gyre telemetry export"), "{err}");

    // A stale export left by a dead process, next to the foreign file.
    let w = gyre_core::shm::ExportWriter::create_at(&dir.join("tmp").join("k"), "svc", "k")
        .expect("create");
    let mut bytes = std::fs::read(w.path()).unwrap();
    drop(w);
    bytes[20..24].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    std::fs::write(dir.join("svc").join("k"), &bytes).unwrap();
    let out = top(&dir, &["--once", "--interval-ms", "1"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("STALE"), "{stdout}");
    assert!(stdout.contains("writer gone"), "{stdout}");
    assert!(stdout.contains("not a gyre telemetry export"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
