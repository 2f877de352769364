//! `gyre demo`: round trips through the built-in echo kernel, with latency percentiles,
//! throughput, and the kernel's own telemetry.

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use gyre::{telemetry::TelemetrySnapshot, Kernel, Runtime};

use crate::args::DemoArgs;
use crate::config::{DemoConfig, Msg, SERVE_SERVICE};
use crate::error::{CliError, Result};
use crate::load::{drive, Measured};
use crate::signal;
use crate::table::{self, state_name, Table};

/// Echo calls per burst while serving, and the pause between bursts.
const SERVE_BURST: usize = 256;
const SERVE_PAUSE: Duration = Duration::from_millis(5);
/// How long to wait for the kernel's telemetry to account for every reply.
const TELEMETRY_SETTLE: Duration = Duration::from_secs(1);

/// `gyre demo`.
pub fn run(args: &DemoArgs, out: &mut dyn Write) -> Result<()> {
    if let Some(duration) = &args.soak {
        return crate::soak::run(args, duration, out);
    }
    if let Some(file) = &args.watch {
        let backend: gyre::Backend = args.backend.parse()?;
        return crate::watch::run(backend, file, out);
    }
    let cfg = DemoConfig::from_args(args)?;
    if cfg.serve {
        // Before the run: a SIGINT / SIGTERM during it must still stop cleanly (and
        // remove the export file), not kill the process with the default action.
        signal::install_stop_handler()?;
    }
    let mut builder = Runtime::builder().backend(cfg.backend);
    if let Some(s) = cfg.strategy {
        builder = builder.transfer_strategy(s);
    }
    let rt = builder.build()?;
    let kernel = rt.launch(cfg.spec())?;
    tracing::debug!(?cfg, backend = rt.backend_name(), "demo kernel launched");
    let outcome = drive(&kernel, &cfg).and_then(|measured| {
        let telemetry = settled_telemetry(&kernel, cfg.messages)?;
        report(out, &cfg, rt.backend_name(), &kernel, &measured, &telemetry)?;
        if cfg.serve {
            serve(&kernel, out)?;
        }
        Ok(())
    });
    // Stop the kernel whatever happened; a run error is reported before a shutdown error.
    let down = kernel.shutdown_blocking();
    if let (Err(_), Err(down)) = (&outcome, &down) {
        tracing::warn!(error = %down, "shutdown after a failed run also failed");
    }
    outcome?;
    down?;
    writeln!(
        out,
        "shutdown: ok (kernel {})",
        describe_state(kernel.state())
    )?;
    Ok(())
}

/// The strategy and, for a copy strategy, what the bridge moved.
fn describe_transfer(kernel: &Kernel<Msg, Msg>) -> String {
    let s = kernel.transfer_strategy();
    match kernel.transfer_stats() {
        None => format!("{s:#} (zero copy: host and kernel share the rings)"),
        Some(t) => format!(
            "{s:#}: {} slots down in {} copies ({} B), {} slots up in {} copies ({} B)",
            table::count(t.slots_down),
            table::count(t.h2d_copies),
            table::count(t.h2d_bytes),
            table::count(t.slots_up),
            table::count(t.d2h_copies),
            table::count(t.d2h_bytes),
        ),
    }
}

/// `--serve`: a light echo load (bursts of calls with pauses) until SIGINT / SIGTERM
/// (the handler is installed by [`run`] before the measured run),
/// while the kernel's telemetry is exported; then returns for the normal shutdown, which
/// removes the export file.
fn serve(kernel: &Kernel<Msg, Msg>, out: &mut dyn Write) -> Result<()> {
    let path = kernel
        .telemetry_export_path()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(not exported)".into());
    writeln!(
        out,
        "serving: telemetry exported at {path}; watch with `gyre top --service {SERVE_SERVICE}`; \
         Ctrl-C to stop"
    )?;
    out.flush()?;
    let mut msg: Msg = [0; 64];
    let mut n: u64 = 0;
    while !signal::stop_requested() {
        for _ in 0..SERVE_BURST {
            n += 1;
            msg[..8].copy_from_slice(&n.to_le_bytes());
            let reply = kernel.call_blocking(msg)?;
            if reply != msg {
                let byte = reply
                    .iter()
                    .zip(&msg)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(CliError::Mismatch {
                    producer: 0,
                    seq: n,
                    byte,
                    sent: msg[byte],
                    got: reply[byte],
                });
            }
        }
        thread::sleep(SERVE_PAUSE);
    }
    writeln!(out, "serving: stopped after {n} more messages")?;
    Ok(())
}

/// The kernel publishes its telemetry just after its replies: wait (briefly) until the
/// snapshot accounts for every reply received, so the table matches the run.
fn settled_telemetry(kernel: &Kernel<Msg, Msg>, expected: u64) -> Result<TelemetrySnapshot> {
    let deadline = Instant::now() + TELEMETRY_SETTLE;
    loop {
        let t = kernel.telemetry()?;
        if t.messages_out >= expected || Instant::now() >= deadline {
            return Ok(t);
        }
        thread::sleep(Duration::from_micros(50));
    }
}

fn report(
    out: &mut dyn Write,
    cfg: &DemoConfig,
    backend: &str,
    kernel: &Kernel<Msg, Msg>,
    m: &Measured,
    t: &TelemetrySnapshot,
) -> std::io::Result<()> {
    let payload = kernel.payload();
    let slot = payload + gyre_abi::SLOT_HEADER_SIZE;
    let mut run = Table::new("gyre demo");
    run.row(
        "backend",
        format!("{backend} (requested: {})", cfg.backend_name),
    )
    .row(
        "kernel",
        format!("{} ([u8; 64] -> [u8; 64])", kernel.name()),
    )
    .row(
        "geometry",
        format!(
            "{} slots x {slot} B per ring ({payload} B payload)",
            kernel.capacity()
        ),
    )
    .row("transfer", describe_transfer(kernel))
    .row(
        "idle",
        if cfg.busy_spin {
            "busy-spin (kernel and host)"
        } else {
            "backoff (spec default)"
        },
    )
    .row(
        "messages",
        format!(
            "{} from {} producer{}, every echo verified",
            cfg.messages,
            cfg.producers,
            if cfg.producers == 1 { "" } else { "s" }
        ),
    );
    run.write_to(out)?;

    let mut rtt = Table::new("round-trip time");
    for (label, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
        rtt.row(label, table::nanos(m.rtt.value_at_quantile(q)));
    }
    rtt.row("max", table::nanos(m.rtt.max()));
    rtt.write_to(out)?;

    let secs = m.elapsed.as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let rate = if secs > 0.0 {
        (cfg.messages as f64 / secs) as u64
    } else {
        0
    };
    let mut tput = Table::new("throughput");
    tput.row("rate", format!("{} msg/s", table::count(rate)))
        .row("elapsed", table::duration(m.elapsed));
    tput.write_to(out)?;

    telemetry_table(t).write_to(out)
}

/// The kernel's telemetry as a table.
pub fn telemetry_table(t: &TelemetrySnapshot) -> Table {
    let mut tab = Table::new("kernel telemetry");
    tab.row("messages in", t.messages_in)
        .row("messages out", t.messages_out)
        .row("errors", t.errors)
        .row("busy polls", t.busy_polls)
        .row("idle polls", t.idle_polls)
        .row("handler time total", table::nanos(t.handler_ns_total))
        .row(
            "handler time max",
            table::nanos(u64::from(t.handler_ns_max)),
        )
        .row("state", state_name(t.state));
    tab
}

/// A kernel state in words, with the error code where there is one.
pub fn describe_state(state: gyre::KernelState) -> String {
    use gyre::KernelState as S;
    match state {
        S::Launching => "launching".into(),
        S::Active => "active".into(),
        S::Paused => "paused".into(),
        S::Draining => "draining".into(),
        S::Terminated { code: 0 } => "terminated".into(),
        S::Terminated { code } => format!("terminated: {}", gyre_abi::error::name(code)),
        S::Faulted { code } => format!("faulted: {}", gyre_abi::error::name(code)),
        S::Unresponsive => "unresponsive (watchdog)".into(),
        S::Relaunching => "relaunching".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_in_words() {
        assert_eq!(state_name(gyre_abi::state::ACTIVE), "active");
        assert_eq!(state_name(99), "unknown");
        assert_eq!(
            describe_state(gyre::KernelState::Terminated { code: 0 }),
            "terminated"
        );
    }
}
