//! `gyre doctor`: what this build and this machine support, and a quick self-test.

use std::io::Write;
use std::time::{Duration, Instant};

use gyre::{Backend, KernelSpec, Runtime};

use crate::error::{CliError, Result};
use crate::load::{as_nanos, check_echo, message, Msg};
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
