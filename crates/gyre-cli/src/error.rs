//! The error type of the `gyre` command.

/// Everything that can make a `gyre` subcommand fail. Printed as `error: <message>`.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--messages` out of range.
    #[error("invalid --messages {0}: must be at least 1")]
    Messages(u64),
    /// `--producers` out of range.
    #[error("invalid --producers {value}: must be in 1..={max}")]
    Producers {
        /// The value given.
        value: usize,
        /// The largest accepted value.
        max: usize,
    },
    /// `--poll-interval-us` given with a strategy that does not poll.
    #[error("--poll-interval-us applies to --strategy dma-polling only, not {0}")]
    PollIntervalWithout(&'static str),
    /// An error from the gyre runtime (launch, call, shutdown, ...), or a bad backend name.
    #[error(transparent)]
    Gyre(#[from] gyre::Error),
    /// The echo kernel answered something other than the request.
    #[error(
        "echo mismatch: producer {producer}, message {seq}: reply differs from the request \
         at byte {byte} (sent {sent:#04x}, got {got:#04x})"
    )]
    Mismatch {
        /// Producer id.
        producer: u64,
        /// Sequence number within that producer.
        seq: u64,
        /// First differing byte offset.
        byte: usize,
        /// The byte sent.
        sent: u8,
        /// The byte received.
        got: u8,
    },
    /// `gyre bench` could not run a row (bad arguments, a baseline, a wrong reply).
    #[error("bench: {0}")]
    Bench(String),
    /// A latency histogram could not be created or merged.
    #[error("latency histogram: {0}")]
    Histogram(String),
    /// A producer thread could not be started.
    #[error("could not start producer thread {producer}: {source}")]
    Spawn {
        /// Producer id.
        producer: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// A producer thread panicked.
    #[error("producer thread {0} panicked")]
    ProducerPanicked(usize),
    /// A producer stopped early because another one failed (never reported on its own).
    #[error("stopped because another producer failed")]
    Aborted,
    /// `gyre demo --soak`: a bad duration, or the run lost, duplicated or corrupted
    /// messages, or its memory grew.
    #[error("soak: {0}")]
    Soak(String),
    /// The doctor's self-test failed.
    #[error("self-test failed: {0}")]
    SelfTest(Box<CliError>),
    /// Writing the report failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

/// Result alias for [`CliError`].
pub type Result<T, E = CliError> = std::result::Result<T, E>;
