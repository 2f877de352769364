//! The command line, as clap parses it (checked further by each subcommand).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// gyre: a ring-kernel messaging runtime.
#[derive(Debug, Parser)]
#[command(name = "gyre", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the built-in echo kernel and measure round trips.
    Demo(DemoArgs),
    /// Show backends, versions and host, and run a quick self-test.
    Doctor,
    /// Show the kernels that export their telemetry (`/dev/shm/gyre` or $GYRE_SHM_DIR),
    /// refreshed in place until Ctrl-C.
    Top(TopArgs),
    /// Measure one backend and strategy against this machine's floor: RTT, throughput
    /// against the batch size, and on CUDA the floor, launch+sync and graph+sync in the
    /// same process; `key value` lines (or --json).
    Bench(BenchArgs),
}

/// Arguments of `gyre bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Backend: auto, cpu, cuda, cuda:D, opencl, opencl:P or opencl:P:D.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Transfer strategy: sync, async, unified or dma-polling [default: the memory plan's].
    #[arg(long)]
    pub strategy: Option<String>,
    /// The dma-polling interval in microseconds.
    #[arg(long, requires = "strategy")]
    pub poll_interval_us: Option<u64>,
    /// Timed round trips per latency row (after a tenth as many, at least 1000, of warm-up).
    #[arg(long, default_value_t = 20_000)]
    pub calls: u64,
    /// Most messages per throughput row.
    #[arg(long, default_value_t = 2_000_000)]
    pub messages: u64,
    /// Longest time per throughput row, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    pub max_ms_per_row: u64,
    /// Batch sizes of the throughput rows (host and kernel batch), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64,128,256")]
    pub batches: Vec<usize>,
    /// The CPU backend under the cost model of a PCIe GPU: this many nanoseconds per read
    /// wave and per fence (0: count only); adds the kernel's read waves and fences per
    /// batch and the same emulation's floor.
    #[arg(long)]
    pub emulate_remote_ns: Option<u64>,
    /// One JSON object instead of `key value` lines.
    #[arg(long)]
    pub json: bool,
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

/// Arguments of `gyre demo`, as parsed; checked by `config::DemoConfig::from_args`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Backend to run the kernel on: auto, cpu, cuda, cuda:D, opencl, opencl:P or
    /// opencl:P:D (CUDA device D; OpenCL platform P, device D; as `gyre doctor` lists
    /// them; default 0, 0:0).
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
    pub capacity: Option<usize>,
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
    /// Run a kernel whose handler is the device source in FILE (a phase function over
    /// gyre/handler.h; a starter is written if FILE does not exist) on a device backend
    /// (--backend opencl or cuda), reload it live whenever FILE changes, and call it
    /// twice a second until SIGINT.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["serve", "soak"])]
    pub watch: Option<std::path::PathBuf>,
}

/// `--idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IdleArg {
    /// Busy-spin (lowest latency; a core per kernel and per waiting caller).
    Spin,
    /// Spin, yield, then park (the kernel spec's default).
    Backoff,
}
