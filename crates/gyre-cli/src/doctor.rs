//! `gyre doctor`: what this build and this machine support, and a quick self-test.

use std::io::Write;
use std::time::{Duration, Instant};

use gyre::{Backend, KernelSpec, Runtime};

use crate::config::Msg;
use crate::error::{CliError, Result};
use crate::load::{as_nanos, check_echo, message};
use crate::table::{self, Table};

/// Round trips in the self-test.
const SELF_TEST_CALLS: u64 = 1000;
/// A self-test call slower than this counts as a failure rather than a hang.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// `gyre doctor`.
pub fn run(out: &mut dyn Write) -> Result<()> {
    let mut versions = Table::new("versions");
    versions
        .row("gyre", env!("CARGO_PKG_VERSION"))
        .row("ABI", gyre_abi::ABI_VERSION);
    versions.write_to(out)?;

    let mut host = Table::new("host");
    host.row("os", std::env::consts::OS)
        .row("arch", std::env::consts::ARCH)
        .row(
            "logical CPUs",
            match std::thread::available_parallelism() {
                Ok(n) => n.to_string(),
                Err(e) => format!("unknown ({e})"),
            },
        );
    host.write_to(out)?;

    let infos = gyre::backends();
    let mut backends = Table::new("backends");
    for b in &infos {
        let compiled = if b.compiled { "yes" } else { "no" };
        let available = match &b.available {
            Ok(()) => "yes".to_owned(),
            Err(why) => format!("no ({why})"),
        };
        backends.row(
            b.name,
            format!("compiled in: {compiled}, available: {available}"),
        );
    }
    backends.write_to(out)?;
    for b in infos.iter().filter(|b| !b.details.is_empty()) {
        let mut facts = Table::new(b.name);
        for (label, value) in &b.details {
            facts.row(*label, value);
        }
        facts.write_to(out)?;
    }

    memory_plan(out)?;

    let mut test = Table::new("self-test");
    test.row(
        "what",
        format!("{SELF_TEST_CALLS} verified echo round trips on backend auto"),
    );
    // Flush what we know before the self-test, which could take a while on a bad day.
    out.flush()?;
    match self_test() {
        Ok((backend, median)) => {
            test.row("backend", backend)
                .row("median RTT", table::nanos(median))
                .row("result", "OK");
            test.write_to(out)?;
            Ok(())
        }
        Err(e) => {
            test.row("result", format!("FAILED: {e}"));
            test.write_to(out)?;
            Err(CliError::SelfTest(Box::new(e)))
        }
    }
}

/// The memory plan of a `Backend::Auto` runtime: every probe input, the detected
/// visibility, the chosen strategy and why. A plan that cannot be made (a bad `GYRE_*`
/// variable, a strategy the platform cannot honour) is shown, not fatal here: the
/// self-test that follows reports it as a failure.
fn memory_plan(out: &mut dyn Write) -> Result<()> {
    let mut t = Table::new("memory");
    for var in [
        "GYRE_MEMORY_VISIBILITY",
        "GYRE_TRANSFER_STRATEGY",
        "GYRE_POLL_INTERVAL_US",
    ] {
        let value = match std::env::var_os(var) {
            Some(v) => format!("{:?}", v),
            None => "unset".to_owned(),
        };
        t.row(var, value);
    }
    match Runtime::builder().backend(Backend::Auto).build() {
        Ok(rt) => {
            let p = rt.memory_plan();
            let yes = |b: bool| if b { "yes" } else { "no" };
            // Auto decides per kernel: built-ins and device code on the device backend,
            // Rust handlers on the CPU backend.
            t.row("backend", rt.backend_name())
                .row(
                    "auto: where kernels run",
                    if rt.backend() == Backend::Cpu {
                        "every kernel on cpu (no GPU backend found)".to_owned()
                    } else {
                        format!(
                            "built-ins, #[gyre::handler] and device sources on {}; Rust \
                             closures on cpu",
                            rt.backend_name()
                        )
                    },
                )
                .row(
                    "epochs (display watchdog)",
                    match rt.default_epoch() {
                        Some(e) => format!(
                            "kernels hand over every {e:?} (the device has a kernel execution \
                             timeout); KernelSpec::epoch overrides"
                        ),
                        None => "off: no kernel execution timeout (KernelSpec::epoch sets one)"
                            .to_owned(),
                    },
                )
                .row("probe: os", p.probe.os)
                .row(
                    "probe: /proc/version",
                    p.probe.proc_version.as_deref().unwrap_or("(not read)"),
                )
                .row(
                    "probe: WSL_DISTRO_NAME/WSL_INTEROP",
                    if p.probe.wsl_env { "set" } else { "unset" },
                );
            match &p.probe.device {
                None => {
                    t.row("probe: device", "none (CPU backend)");
                }
                Some(d) => {
                    for (label, value) in d.fields() {
                        t.row(format!("probe: {label}"), yes(value));
                    }
                }
            }
            t.row("detected visibility", p.detected)
                .row(
                    "visibility",
                    format!("{} ({})", p.visibility, p.visibility_source),
                )
                .row("strategy", format!("{:#} ({})", p.strategy, p.source));
            for (i, why) in p.reasons.iter().enumerate() {
                t.row(if i == 0 { "why" } else { "" }, why);
            }
            t.row(
                "placement",
                if p.strategy.copies() {
                    "device-resident rings behind the bridge (CPU backend: a separate \
                     allocation and an emulated copy engine)"
                } else {
                    "rings shared zero copy by host and kernel"
                },
            );
        }
        Err(e) => {
            t.row("plan", format!("FAILED: {e}"));
        }
    }
    t.write_to(out)?;
    Ok(())
}

/// Launches echo on `Backend::Auto`, does the calls, shuts down. Returns the backend used
/// and the median round trip in ns.
fn self_test() -> Result<(&'static str, u64)> {
    let rt = Runtime::builder().backend(Backend::Auto).build()?;
    let kernel = rt.launch(KernelSpec::<Msg, Msg>::echo())?;
    let measured = (|| -> Result<u64> {
        let mut rtts = Vec::with_capacity(SELF_TEST_CALLS as usize);
        for seq in 0..SELF_TEST_CALLS {
            let req = message(0, seq);
            let t0 = Instant::now();
            let reply = kernel.call_timeout(req, CALL_TIMEOUT);
            let rtt = t0.elapsed();
            check_echo(0, seq, &req, &reply?)?;
            rtts.push(as_nanos(rtt));
        }
        Ok(median(&mut rtts))
    })();
    let down = kernel.shutdown_blocking();
    let median = measured?;
    down?;
    Ok((rt.backend_name(), median))
}

/// The median (upper median for an even count); 0 for no values.
fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0);
        assert_eq!(median(&mut [5]), 5);
        assert_eq!(median(&mut [9, 1, 5]), 5);
        assert_eq!(median(&mut [4, 1, 3, 2]), 3);
    }
}
