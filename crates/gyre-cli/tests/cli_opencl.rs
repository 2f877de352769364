//! `gyre doctor` lists OpenCL platforms and devices with their SVM capabilities, and
//! `gyre demo --backend opencl` runs on the first device (PoCL in CI). Without a usable
//! OpenCL device the demo test prints `SKIP`, unless `GYRE_REQUIRE_OPENCL=1`. Each gyre
//! process is killed (and the test fails) if it outlives its limit.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs the gyre binary with `args`, failing the test if it runs longer than `limit`.
fn gyre(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gyre"))
        .args(args)
        .env_remove("GYRE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gyre binary runs");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gyre {args:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn doctor() -> String {
    let out = gyre(&["doctor"], Duration::from_secs(120));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn doctor_lists_opencl_devices_with_svm_or_why_not() {
    let stdout = doctor();
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("opencl "))
        .unwrap_or_else(|| panic!("no opencl row:\n{stdout}"));
    assert!(row.contains("compiled in: yes"), "{row}");
    if row.contains("available: yes") {
        let device = stdout
            .lines()
            .find(|l| l.trim_start().starts_with("device "))
            .unwrap_or_else(|| panic!("no device row:\n{stdout}"));
        assert!(device.contains("SVM: "), "{device}");
        assert!(device.contains("usable"), "{device}");
    } else {
        assert!(row.contains("available: no ("), "{row}");
        assert!(
            std::env::var("GYRE_REQUIRE_OPENCL").as_deref() != Ok("1"),
            "GYRE_REQUIRE_OPENCL=1 but: {row}"
        );
    }
}

#[test]
fn demo_runs_on_opencl() {
    let stdout = doctor();
    let usable = stdout
        .lines()
        .any(|l| l.trim_start().starts_with("opencl ") && l.contains("available: yes"));
    if !usable {
        assert!(
            std::env::var("GYRE_REQUIRE_OPENCL").as_deref() != Ok("1"),
            "GYRE_REQUIRE_OPENCL=1 but no usable OpenCL device:\n{stdout}"
        );
        eprintln!("SKIP demo_runs_on_opencl: no usable OpenCL device");
        return;
    }
    let out = gyre(
        &["demo", "--backend", "opencl", "--messages", "2000"],
        Duration::from_secs(180),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("backend   opencl"), "{stdout}");
    assert!(stdout.contains("shutdown: ok"), "{stdout}");
}

#[test]
fn demo_on_a_missing_opencl_device_names_it() {
    let out = gyre(
        &["demo", "--backend", "opencl:99:0", "--messages", "10"],
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("platform 99")
            || stderr.contains("library")
            || stderr.contains("no OpenCL platform"),
        "{stderr}"
    );
}
