//! What a ring's capacity costs at launch on the CPU backend: launch time and resident
//! memory for 2^16, 2^20 and 2^24 slots of 128 bytes (`docs/benchmarks.md`, "Ring
//! capacity"). The largest needs about 5 GiB of free memory.
//!
//! `cargo run --release --example capacity_cost` (`-- 65536 1048576` for chosen sizes).

use std::time::Instant;

use gyre::{Backend, KernelSpec, Runtime};

/// Resident set of this process, KiB (0 where `/proc` is missing).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    if sizes.is_empty() {
        sizes = vec![1 << 16, 1 << 20, 1 << 24];
    }
    let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    for capacity in sizes {
        let before = rss_kib();
        let t = Instant::now();
        let k = rt.launch(KernelSpec::<u64, u64>::echo().capacity(capacity))?;
        let launch = t.elapsed();
        let grown = rss_kib().saturating_sub(before);
        assert_eq!(k.call_blocking(1)?, 1);
        let t = Instant::now();
        k.shutdown_blocking()?;
        drop(k);
        println!(
            "capacity {capacity}: launch {launch:.2?}, resident +{} MiB, shutdown and drop {:.2?}",
            grown / 1024,
            t.elapsed()
        );
    }
    Ok(())
}
