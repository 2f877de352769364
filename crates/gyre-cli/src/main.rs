//! `gyre`: the command-line front end of the gyre ring-kernel runtime.
//!
//! * `gyre demo` — round trips through the built-in echo kernel: latency percentiles,
//!   throughput and the kernel's telemetry.
//! * `gyre doctor` — backends, versions, host, and a quick self-test.
//! * `gyre top` — a live table of the kernels exporting their telemetry (read-only).
//! * `gyre bench` — RTT and throughput against this machine's floor (and, on CUDA,
//!   launch+sync and graph+sync) in one process.
//!
//! Logging goes to stderr, filtered by `GYRE_LOG` (default `warn`). Errors are printed as
//! `error: <message>` with a non-zero exit code.

mod args;
mod bench;
mod config;
mod demo;
mod doctor;
mod error;
mod load;
mod progress;
mod signal;
mod soak;
mod table;
mod top;
mod watch;

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::error::CliError;

fn main() -> ExitCode {
    // While the process has one thread: the CUDA driver's environment (eager module
    // loading, 32 hardware queues) must be set before anything starts a thread.
    gyre::prepare_cuda_environment();
    let cli = Cli::parse();
    init_tracing();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let result = match &cli.command {
        Command::Demo(args) => demo::run(args, &mut out),
        Command::Doctor => doctor::run(&mut out),
        Command::Top(args) => return top::main(args, &mut out),
        Command::Bench(args) => bench::run(args, &mut out),
    }
    .and_then(|()| out.flush().map_err(CliError::from));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`gyre demo | head`): nothing left to tell anyone.
        Err(CliError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::FAILURE,
        Err(e) => {
            let _ = out.flush();
            let _ = writeln!(io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by `GYRE_LOG` (tracing `EnvFilter` syntax, default `warn`).
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("GYRE_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            let _ = writeln!(
                io::stderr(),
                "warning: ignoring GYRE_LOG={spec:?}: {e}; using warn"
            );
            EnvFilter::new("warn")
        }),
        _ => EnvFilter::new("warn"),
    };
    // Fails only if a subscriber is already installed, which nothing else does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::DemoArgs;
    use crate::config::DemoConfig;
    use crate::error::Result;
    use clap::CommandFactory;

    fn parse_demo(args: &[&str]) -> std::result::Result<DemoArgs, clap::Error> {
        let cli = Cli::try_parse_from(["gyre", "demo"].iter().chain(args))?;
        match cli.command {
            Command::Demo(a) => Ok(a),
            _ => panic!("parsed another command from demo arguments"),
        }
    }

    /// Parses and validates `gyre demo <args>` as the binary does.
    fn demo_config(args: &[&str]) -> Result<DemoConfig> {
        DemoConfig::from_args(&parse_demo(args).expect("arguments parse"))
    }

    #[test]
    fn clap_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let c = demo_config(&[]).expect("defaults are valid");
        assert_eq!(c.backend, gyre::Backend::Auto);
        assert_eq!(c.messages, 100_000);
        assert_eq!(c.producers, 1);
        assert_eq!(c.capacity, None);
        assert!(!c.busy_spin);
    }

    #[test]
    fn all_options() {
        let c = demo_config(&[
            "--backend",
            "cpu",
            "--messages",
            "7",
            "--producers",
            "64",
            "--capacity",
            "256",
            "--idle",
            "spin",
        ])
        .expect("valid");
        assert_eq!(c.backend, gyre::Backend::Cpu);
        assert_eq!((c.messages, c.producers, c.capacity), (7, 64, Some(256)));
        assert!(c.busy_spin);
    }

    #[test]
    fn zero_messages_is_rejected_by_value() {
        let e = demo_config(&["--messages", "0"]).expect_err("0 messages");
        assert!(matches!(e, CliError::Messages(0)));
        assert!(e.to_string().contains("--messages 0"), "{e}");
    }

    #[test]
    fn producers_out_of_range_are_rejected_by_value() {
        for bad in ["0", "65", "1000"] {
            let e = demo_config(&["--producers", bad]).expect_err(bad);
            assert!(matches!(e, CliError::Producers { .. }), "{e:?}");
            assert!(e.to_string().contains(&format!("--producers {bad}")), "{e}");
        }
        assert!(demo_config(&["--producers", "1"]).is_ok());
    }

    #[test]
    fn unknown_backend_lists_valid_ones() {
        let e = demo_config(&["--backend", "nope"]).expect_err("nope");
        let msg = e.to_string();
        assert!(matches!(e, CliError::Gyre(_)), "{e:?}");
        assert!(
            msg.contains("nope") && msg.contains("auto") && msg.contains("cpu"),
            "{msg}"
        );
    }

    #[test]
    fn unparsable_values_are_clap_errors() {
        assert!(parse_demo(&["--messages", "-1"]).is_err());
        assert!(parse_demo(&["--idle", "sometimes"]).is_err());
        assert!(parse_demo(&["--capacity", "big"]).is_err());
        assert!(parse_demo(&["--producers", "-3"]).is_err());
    }

    #[test]
    fn strategy_and_poll_interval() {
        use gyre::TransferStrategy;
        let c = demo_config(&["--strategy", "sync"]).expect("valid");
        assert_eq!(c.strategy, Some(TransferStrategy::Sync));
        let c =
            demo_config(&["--strategy", "dma-polling", "--poll-interval-us", "50"]).expect("valid");
        assert_eq!(
            c.strategy,
            Some(TransferStrategy::DmaPolling {
                poll_interval: std::time::Duration::from_micros(50)
            })
        );
        let e = demo_config(&["--strategy", "warp"]).expect_err("warp");
        assert!(e.to_string().contains("dma-polling"), "{e}");
        let e =
            demo_config(&["--strategy", "async", "--poll-interval-us", "5"]).expect_err("async");
        assert!(matches!(e, CliError::PollIntervalWithout("async")), "{e:?}");
        let e = demo_config(&["--strategy", "dma-polling", "--poll-interval-us", "0"])
            .expect_err("0 us");
        assert!(e.to_string().contains("poll"), "{e}");
        assert!(
            parse_demo(&["--poll-interval-us", "5"]).is_err(),
            "needs --strategy"
        );
    }

    #[test]
    fn messages_are_shared_between_producers() {
        let c = demo_config(&["--messages", "10", "--producers", "4"]).expect("valid");
        let shares: Vec<u64> = (0..4).map(|p| c.share(p)).collect();
        assert_eq!(shares, [3, 3, 2, 2]);
        let c = demo_config(&["--messages", "2", "--producers", "3"]).expect("valid");
        assert_eq!((0..3).map(|p| c.share(p)).sum::<u64>(), 2);
    }
}
