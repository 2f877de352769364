//! `gyre`: the command-line front end of the gyre ring-kernel runtime.
//!
//! * `gyre demo` — round trips through the built-in echo kernel: latency percentiles,
//!   throughput and the kernel's telemetry.
//! * `gyre doctor` — backends, versions, host, and a quick self-test.
//! * `gyre top` — a live table of the kernels exporting their telemetry (read-only).
//!
//! Logging goes to stderr, filtered by `GYRE_LOG` (default `warn`). Errors are printed as
//! `error: <message>` with a non-zero exit code.

mod demo;
mod doctor;
mod error;
mod load;
mod progress;
mod soak;
mod table;
mod top;

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::error::CliError;

/// gyre: a ring-kernel messaging runtime.
#[derive(Debug, Parser)]
#[command(name = "gyre", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the built-in echo kernel and measure round trips.
    Demo(DemoArgs),
    /// Show backends, versions and host, and run a quick self-test.
    Doctor,
    /// Show the kernels that export their telemetry (`/dev/shm/gyre` or $GYRE_SHM_DIR),
    /// refreshed in place until Ctrl-C.
    Top(TopArgs),
}

/// Arguments of `gyre top`.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// Only this service's kernels.
    #[arg(long, conflicts_with = "path")]
    pub service: Option<String>,
    /// One export file instead of the export directory.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Print one table and exit (rates measured over one interval).
    #[arg(long)]
    pub once: bool,
    /// Refresh period in milliseconds (also the rate window of --once).
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
}

/// Arguments of `gyre demo`, as parsed; checked by `demo::DemoConfig::from_args`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Backend to run the kernel on: auto, cpu, cuda, or opencl[:P[:D]] (OpenCL platform P,
    /// device D, as `gyre doctor` lists them; default 0:0).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Messages to send in total (at least 1).
    #[arg(long, short = 'n', default_value_t = 100_000)]
    pub messages: u64,
    /// Producer threads, each calling in a loop (1..=64).
    #[arg(long, short = 'p', default_value_t = 1)]
    pub producers: usize,
    /// Slots per ring: a power of two in 2..=16777216 [default: 1024].
    #[arg(long)]
    pub capacity: Option<u32>,
    /// What the kernel and waiting callers do when idle.
    #[arg(long, value_enum, default_value_t = IdleArg::Backoff)]
    pub idle: IdleArg,
    /// After the run, keep the kernel serving a light echo load and exporting its
    /// telemetry (for `gyre top`) until SIGINT or SIGTERM.
    #[arg(long)]
    pub serve: bool,
    /// How message bytes cross between host and kernel: sync, async, unified or
    /// dma-polling [default: the memory plan's, see `gyre doctor`].
    #[arg(long)]
    pub strategy: Option<String>,
    /// The dma-polling interval in microseconds (1..=1000000) [default: 10].
    #[arg(long, requires = "strategy")]
    pub poll_interval_us: Option<u64>,
    /// Soak test for DURATION (e.g. 20s, 2m): several producers (--producers, default 4)
    /// with random message sizes and periodic pause/resume; reports sent, replied,
    /// errored, `lost: N` and memory use, and fails if anything was lost or memory grew.
    #[arg(long, value_name = "DURATION", conflicts_with = "serve")]
    pub soak: Option<String>,
}

/// `--idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IdleArg {
    /// Busy-spin (lowest latency; a core per kernel and per waiting caller).
    Spin,
    /// Spin, yield, then park (the kernel spec's default).
    Backoff,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let result = match &cli.command {
        Command::Demo(args) => demo::run(args, &mut out),
        Command::Doctor => doctor::run(&mut out),
        Command::Top(args) => return top::main(args, &mut out),
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

/// Set by SIGINT / SIGTERM once [`install_stop_handler`] ran.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    STOP.store(true, Ordering::SeqCst);
}

/// Turns the first SIGINT / SIGTERM into [`stop_requested`]; a second one gets the
/// default action (terminates), in case the clean stop hangs.
pub(crate) fn install_stop_handler() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic.
        let rc = unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART | libc::SA_RESETHAND;
            libc::sigaction(sig, &sa, core::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGINT / SIGTERM arrived since [`install_stop_handler`].
pub(crate) fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
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
    use crate::demo::DemoConfig;
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
