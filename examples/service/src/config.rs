//! The service's configuration: flags, each also read from the environment.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// `gyre-service`: a pre-trade risk check over HTTP, computed by a gyre ring kernel.
#[derive(Parser, Debug, Clone)]
#[command(name = "gyre-service", version)]
pub struct Config {
    /// Address to listen on (port 0: any free port; the first line printed says which).
    #[arg(long, env = "GYRE_SERVICE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Where the risk check runs: `inline` (in the HTTP handler, no gyre: the baseline),
    /// or a gyre backend: `auto`, `cpu`, `cuda[:D]`, `opencl[:P[:D]]`.
    #[arg(long, env = "GYRE_SERVICE_BACKEND", default_value = "auto")]
    pub backend: String,

    /// Transfer strategy (`unified`, `sync`, `async`, `dma-polling`); the platform's
    /// default when not given.
    #[arg(long, env = "GYRE_SERVICE_STRATEGY")]
    pub strategy: Option<String>,

    /// The kernel's ring capacity: at most this many requests in the kernel at once; one
    /// more is answered 503.
    #[arg(long, env = "GYRE_SERVICE_CAPACITY", default_value_t = 1024)]
    pub capacity: usize,

    /// A request with no decision after this many milliseconds is answered 504.
    #[arg(long, env = "GYRE_SERVICE_TIMEOUT_MS", default_value_t = 1000)]
    pub timeout_ms: u64,

    /// Relaunches of a faulted kernel (gyre's `RestartPolicy`), within `--restart-window-s`.
    #[arg(long, env = "GYRE_SERVICE_MAX_RESTARTS", default_value_t = 5)]
    pub max_restarts: u32,

    /// The first relaunch's backoff, in milliseconds (doubling up to 2 s).
    #[arg(long, env = "GYRE_SERVICE_RESTART_BACKOFF_MS", default_value_t = 50)]
    pub restart_backoff_ms: u64,

    /// The restart count is forgotten after this many seconds without a fault.
    #[arg(long, env = "GYRE_SERVICE_RESTART_WINDOW_S", default_value_t = 60)]
    pub restart_window_s: u64,

    /// The `Retry-After` of a 503, in seconds.
    #[arg(long, env = "GYRE_SERVICE_RETRY_AFTER_S", default_value_t = 1)]
    pub retry_after_s: u64,

    /// The service name the kernel's telemetry is exported under (`gyre top` finds it);
    /// empty: no export.
    #[arg(long, env = "GYRE_SERVICE_EXPORT", default_value = "gyre-service")]
    pub export: String,

    /// How long an async call spins for its reply on its first poll before it parks its
    /// task, in microseconds (gyre's `KernelSpec::async_spin`, whose own default is
    /// 20). Spinning holds a tokio worker that the HTTP work needs: measured on 2 vCPUs,
    /// 20 buys 10-30 us at the median at moderate load and costs up to 15x in p99
    /// (`docs/service.md`).
    #[arg(long, env = "GYRE_SERVICE_ASYNC_SPIN_US", default_value_t = 0)]
    pub async_spin_us: u64,

    /// After SIGTERM, how long accepted requests may take to be answered before the
    /// kernel is shut down, in milliseconds. The whole stop stays within 2 s.
    #[arg(long, env = "GYRE_SERVICE_DRAIN_MS", default_value_t = 1500)]
    pub drain_ms: u64,
}

impl Config {
    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The configuration with every default and `listen` on a free local port: for tests
    /// and the load generator.
    pub fn local() -> Self {
        Self::parse_from(["gyre-service", "--listen", "127.0.0.1:0"])
    }
}
