//! `gyre demo`'s checked configuration, shared by the demo, its load and the soak.

use std::str::FromStr;
use std::time::Duration;

use gyre::{Backend, IdleStrategy, KernelSpec, TransferStrategy};

use crate::args::{DemoArgs, IdleArg};
use crate::error::{CliError, Result};

/// The demo's request and reply type.
pub type Msg = [u8; 64];

/// Most producer threads accepted.
pub const MAX_PRODUCERS: usize = 64;
/// The service name `gyre demo --serve` exports its kernel under.
pub const SERVE_SERVICE: &str = "demo";

/// Validated `demo` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoConfig {
    /// Backend as named on the command line.
    pub backend_name: String,
    /// Backend requested.
    pub backend: Backend,
    /// Messages in total, >= 1.
    pub messages: u64,
    /// Producer threads, `1..=MAX_PRODUCERS`.
    pub producers: usize,
    /// Ring capacity, if not the spec default (validated at launch).
    pub capacity: Option<usize>,
    /// Whether kernel and host busy-spin.
    pub busy_spin: bool,
    /// `--serve`: keep serving and exporting telemetry until interrupted.
    pub serve: bool,
    /// `--strategy` (with `--poll-interval-us`), if given.
    pub strategy: Option<TransferStrategy>,
}

impl DemoConfig {
    /// Checks the arguments; errors name the bad value.
    pub fn from_args(args: &DemoArgs) -> Result<Self> {
        let backend = Backend::from_str(&args.backend)?;
        if args.messages == 0 {
            return Err(CliError::Messages(args.messages));
        }
        if !(1..=MAX_PRODUCERS).contains(&args.producers) {
            return Err(CliError::Producers {
                value: args.producers,
                max: MAX_PRODUCERS,
            });
        }
        let strategy = match (&args.strategy, args.poll_interval_us) {
            (None, _) => None,
            (Some(s), None) => Some(TransferStrategy::from_str(s)?),
            (Some(s), Some(us)) => match TransferStrategy::from_str(s)? {
                TransferStrategy::DmaPolling { .. } => {
                    Some(TransferStrategy::dma_polling(Duration::from_micros(us))?)
                }
                other => return Err(CliError::PollIntervalWithout(other.name())),
            },
        };
        Ok(Self {
            strategy,
            backend_name: args.backend.clone(),
            backend,
            messages: args.messages,
            producers: args.producers,
            capacity: args.capacity,
            busy_spin: args.idle == IdleArg::Spin,
            serve: args.serve,
        })
    }

    /// The echo kernel's spec for this configuration.
    pub fn spec(&self) -> KernelSpec<Msg, Msg> {
        let mut spec = KernelSpec::<Msg, Msg>::echo();
        if let Some(c) = self.capacity {
            spec = spec.capacity(c);
        }
        if self.busy_spin {
            spec = spec
                .idle(IdleStrategy::BusySpin)
                .host_idle(IdleStrategy::BusySpin);
        }
        if self.serve {
            spec = spec.export_telemetry(SERVE_SERVICE);
        }
        spec
    }

    /// How many of the messages producer `p` sends (the remainder goes to the first ones).
    pub fn share(&self, p: usize) -> u64 {
        let producers = self.producers.max(1) as u64;
        let base = self.messages / producers;
        let extra = u64::from((p as u64) < self.messages % producers);
        base + extra
    }
}
