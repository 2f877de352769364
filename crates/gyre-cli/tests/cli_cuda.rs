//! `gyre demo --backend cuda` and `gyre doctor` on a machine without a usable GPU.

use std::process::Command;

fn cuda_available() -> bool {
    gyre_cuda_available_from_doctor()
}

/// Reads `gyre doctor`'s backends table: whether the cuda row says available.
fn gyre_cuda_available_from_doctor() -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_gyre"))
        .arg("doctor")
        .env_remove("GYRE_LOG")
        .output()
        .expect("the gyre binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .any(|l| l.trim_start().starts_with("cuda ") && l.contains("available: yes"))
}

#[test]
fn doctor_reports_cuda_facts_or_why_not() {
    let out = Command::new(env!("CARGO_BIN_EXE_gyre"))
        .arg("doctor")
        .env_remove("GYRE_LOG")
        .output()
        .expect("the gyre binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("cuda "))
        .unwrap_or_else(|| panic!("no cuda row:\n{stdout}"));
    assert!(row.contains("compiled in: yes"), "{row}");
    if row.contains("available: yes") {
        assert!(stdout.contains("compute capability"), "{stdout}");
    } else {
        assert!(row.contains("available: no ("), "{row}");
    }
}

#[test]
fn demo_on_cuda_without_a_gpu_fails_with_the_reason() {
    if cuda_available() {
        eprintln!("SKIP: a CUDA device is present");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_gyre"))
        .args(["demo", "--backend", "cuda", "--messages", "10"])
        .env_remove("GYRE_LOG")
        .output()
        .expect("the gyre binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit {:?}", out.status);
    assert!(stderr.contains("cuda backend unavailable"), "{stderr}");
    // It names what is missing: the library, a device, or the driver version.
    assert!(
        ["library", "device", "driver", "NVRTC", "cuInit"]
            .iter()
            .any(|w| stderr.contains(w)),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
