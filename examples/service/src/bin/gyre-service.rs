//! `gyre-service`: the risk-check HTTP service (see the crate docs and `docs/service.md`).
//!
//! Prints `listening http://ADDR` and `backend NAME` first, then serves until SIGTERM or
//! Ctrl-C; then prints the stop's `key value` summary and exits 0 when every accepted
//! request was answered and the kernel shut down, 1 otherwise, 2 when it did not start.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use gyre_service::{Config, Service};

/// SIGTERM or SIGINT, registered now: **before** the runtime is built. Loading an
/// OpenCL platform (the `auto` backend probes for one) can load LLVM, whose own handlers
/// end the process on SIGTERM when they run after a handler registered before them; a
/// handler registered first is the one LLVM restores and re-raises to.
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Config::parse();
    let stop = match stop_signal() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gyre-service: cannot handle SIGTERM: {e}");
            return ExitCode::from(2);
        }
    };
    let service = match Service::bind(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gyre-service: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening http://{}", service.local_addr());
    let _ = writeln!(out, "backend {}", service.engine().backend_name());
    if let Some(path) = service
        .engine()
        .kernel()
        .and_then(|k| k.telemetry_export_path())
    {
        let _ = writeln!(out, "telemetry_export {}", path.display());
    }
    let _ = out.flush();
    let summary = match service.run(stop).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gyre-service: {e}");
            return ExitCode::from(1);
        }
    };
    let _ = writeln!(out, "requests_accepted {}", summary.accepted);
    let _ = writeln!(out, "requests_answered {}", summary.answered);
    let _ = writeln!(out, "requests_cancelled {}", summary.cancelled);
    let _ = writeln!(out, "drained {}", summary.drained);
    let _ = writeln!(
        out,
        "kernel_shutdown {}",
        match &summary.kernel_shutdown {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.replace('\n', " "),
        }
    );
    let _ = writeln!(out, "stop_ms {:.1}", summary.stop_took.as_secs_f64() * 1e3);
    let _ = out.flush();
    if summary.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
