//! Exports a kernel's telemetry to Prometheus through the `metrics` facade.
//!
//! `cargo run --example prometheus --features metrics` launches echo, sends 1000 calls,
//! records the telemetry once and prints the Prometheus text exposition, then exits.
//! With `-- --listen` it serves `http://127.0.0.1:9000/metrics` instead, sending 1000
//! calls and recording every second, until Ctrl-C.

use std::time::Duration;

use gyre::{Backend, KernelSpec, Runtime};
use metrics_exporter_prometheus::PrometheusBuilder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args().skip(1).any(|a| a == "--listen");
    let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    let k = rt.launch(KernelSpec::<u64, u64>::echo())?;
    let load = || -> gyre::Result<()> {
        for i in 0..1000u64 {
            let r = k.call_blocking(i)?;
            assert_eq!(r, i);
        }
        Ok(())
    };
    if listen {
        PrometheusBuilder::new()
            .with_http_listener(([127, 0, 0, 1], 9000))
            .install()?;
        println!("serving http://127.0.0.1:9000/metrics (Ctrl-C to stop)");
        loop {
            load()?;
            k.record_metrics()?;
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let handle = PrometheusBuilder::new().install_recorder()?;
    load()?;
    k.record_metrics()?;
    print!("{}", handle.render());
    k.shutdown_blocking()?;
    Ok(())
}
