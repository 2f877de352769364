//! Runs the built `gyre` binary.

use std::process::{Command, Output};

fn gyre(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gyre"))
        .args(args)
        .env_remove("GYRE_LOG")
        .output()
        .expect("the gyre binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The value column of the first table row labelled `label`.
fn row<'a>(stdout: &'a str, label: &str) -> Option<&'a str> {
    stdout.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix(label)?;
        // The label must be followed by the column gap, not more label text.
        rest.starts_with("  ").then(|| rest.trim())
    })
}

#[test]
fn demo_reports_latency_throughput_and_telemetry() {
    let out = gyre(&["demo", "--messages", "2000", "--producers", "2"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    for label in ["p50", "p99", "p99.9", "max"] {
        let v = row(&stdout, label).unwrap_or_else(|| panic!("no {label} row:\n{stdout}"));
        assert!(
            v.ends_with(" ns") || v.ends_with(" µs") || v.ends_with(" ms") || v.ends_with(" s"),
            "{label} = {v:?}"
        );
    }
    assert!(
        row(&stdout, "rate").is_some_and(|v| v.ends_with("msg/s")),
        "{stdout}"
    );
    assert!(row(&stdout, "elapsed").is_some(), "{stdout}");
    for label in [
        "messages in",
        "messages out",
        "errors",
        "busy polls",
        "idle polls",
        "handler time total",
        "handler time max",
        "state",
    ] {
        assert!(row(&stdout, label).is_some(), "no {label} row:\n{stdout}");
    }
    assert_eq!(row(&stdout, "messages in"), Some("2000"), "{stdout}");
    assert_eq!(row(&stdout, "messages out"), Some("2000"), "{stdout}");
    assert_eq!(row(&stdout, "errors"), Some("0"), "{stdout}");
    assert!(stdout.contains("cpu"), "{stdout}");
    assert!(stdout.contains("shutdown: ok"), "{stdout}");
}

#[test]
fn demo_busy_spin_with_small_ring() {
    let out = gyre(&[
        "demo",
        "--messages",
        "300",
        "--producers",
        "3",
        "--capacity",
        "2",
        "--idle",
        "spin",
        "--backend",
        "cpu",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(row(&stdout, "messages in"), Some("300"), "{stdout}");
}

#[test]
fn demo_runs_under_every_transfer_strategy() {
    for (strategy, copies) in [
        ("unified", false),
        ("sync", true),
        ("async", true),
        ("dma-polling", true),
    ] {
        let out = gyre(&[
            "demo",
            "--backend",
            "cpu",
            "--strategy",
            strategy,
            "--messages",
            "3000",
            "--producers",
            "2",
        ]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{strategy}: {}", text(&out.stderr));
        let t = row(&stdout, "transfer").unwrap_or_else(|| panic!("{strategy}: {stdout}"));
        assert!(t.starts_with(strategy), "{strategy}: {t}");
        if copies {
            // Every echo crossed both ways (plus the demo's own warm-up, if any).
            assert!(t.contains("slots down") && t.contains("slots up"), "{t}");
        } else {
            assert!(t.contains("zero copy"), "{t}");
        }
        assert!(stdout.contains("shutdown: ok"), "{strategy}: {stdout}");
    }
}

#[test]
fn demo_unknown_backend_fails_listing_valid_ones() {
    let out = gyre(&["demo", "--backend", "nope"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("nope") && stderr.contains("auto") && stderr.contains("cpu"),
        "{stderr}"
    );
}

#[test]
fn demo_zero_messages_fails() {
    let out = gyre(&["demo", "--messages", "0"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("error: invalid --messages 0"), "{stderr}");
}

#[test]
fn demo_bad_capacity_fails_naming_it() {
    let out = gyre(&["demo", "--capacity", "1000", "--messages", "1"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("error: ") && stderr.contains("1000"),
        "{stderr}"
    );
}

#[test]
fn doctor_reports_cpu_and_passes_self_test() {
    let out = gyre(&["doctor"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("cpu"), "{stdout}");
    let abi = gyre::ABI_VERSION.to_string();
    assert_eq!(row(&stdout, "ABI"), Some(abi.as_str()), "{stdout}");
    assert!(row(&stdout, "median RTT").is_some(), "{stdout}");
    assert_eq!(row(&stdout, "result"), Some("OK"), "{stdout}");
}
