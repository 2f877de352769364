//! gyre inside a real service.
//!
//! `gyre-service` is an axum HTTP service that embeds a gyre [`Runtime`](gyre::Runtime):
//! a pre-trade risk check ([`risk::risk_check`], written once with `#[gyre::handler]`)
//! runs in a ring kernel, on the CPU backend or a GPU. `gyre-load` drives it open loop
//! and compares it, in the same run, with the same check called inline in the HTTP
//! handler. `docs/service.md` explains the embedding and records the figures.
//!
//! The shape of the embedding, in order:
//!
//! 1. The process builds one `Runtime` and launches one kernel ([`Engine::launch`]),
//!    before it binds its port; the kernel exports its telemetry so `gyre top` can
//!    watch the service.
//! 2. Every request handler shares the [`Engine`] through an `Arc`; a
//!    [`Kernel`](gyre::Kernel) is a cheap handle, and its futures never block a worker.
//! 3. Load is shed, not queued: a full ring is `503` with `Retry-After`, a request past
//!    its timeout is `504` (its slot comes back when the kernel answers it).
//! 4. On SIGTERM the listener stops, accepted requests are answered, then the kernel is
//!    shut down (its export file removed), all within 2 s.
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> Result<(), gyre_service::ServiceError> {
//! let service = gyre_service::Service::bind(gyre_service::Config::local()).await?;
//! println!("listening http://{}", service.local_addr());
//! let summary = service.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! assert_eq!(summary.accepted, summary.answered);
//! # Ok(()) }
//! ```

pub mod config;
pub mod engine;
pub mod http;
pub mod load;
pub mod risk;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre::{Backend, KernelSpec, RestartPolicy};

pub use config::Config;
pub use engine::{Engine, Reject};
use risk::{Decision, Order, RefData};

/// Everything a stop takes, at most (the issue's bound for SIGTERM to exit).
pub const STOP_BOUND: Duration = Duration::from_secs(2);

/// Why the service did not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A flag's value is not valid.
    #[error("invalid --{flag} {value}: {reason}")]
    Config {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: String,
        /// Why.
        reason: String,
    },
    /// gyre refused to build the runtime or launch the kernel.
    #[error("launching the kernel: {0}")]
    Launch(#[source] gyre::Error),
    /// The listener could not be bound, or serving failed.
    #[error("{op} {addr}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// On which address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// What a stopped service reports.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Requests whose handling started.
    pub accepted: u64,
    /// Requests answered (any status).
    pub answered: u64,
    /// Requests whose client went away before the answer.
    pub cancelled: u64,
    /// Whether every accepted request was answered within the drain bound.
    pub drained: bool,
    /// How the kernel's shutdown went (`Ok` for the inline engine).
    pub kernel_shutdown: Result<(), String>,
    /// From the shutdown signal to the end of the kernel's shutdown.
    pub stop_took: Duration,
}

impl Summary {
    /// Whether the stop was clean: drained (every accepted request answered or given up
    /// by its client), and the kernel shut down.
    pub fn clean(&self) -> bool {
        self.drained
            && self.accepted == self.answered + self.cancelled
            && self.kernel_shutdown.is_ok()
    }
}

/// A bound, not yet serving, service.
pub struct Service {
    state: Arc<http::AppState>,
    listener: tokio::net::TcpListener,
    config: Config,
}

impl Service {
    /// Launches the risk kernel ([`risk::risk_check`]) as `config` says, then binds.
    ///
    /// # Errors
    ///
    /// [`ServiceError`]: a bad flag, a refused launch, a port in use.
    pub async fn bind(config: Config) -> Result<Self, ServiceError> {
        Self::bind_with(config, KernelSpec::portable(risk::risk_check).named("risk")).await
    }

    /// [`Service::bind`] with another kernel for the same messages (a slower or a faulty
    /// one, in tests). The configuration's capacity, restart policy and export are
    /// applied to it.
    ///
    /// # Errors
    ///
    /// As [`Service::bind`].
    pub async fn bind_with(
        config: Config,
        spec: KernelSpec<Order, Decision>,
    ) -> Result<Self, ServiceError> {
        let engine = engine(&config, spec)?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServiceError::Io {
                op: "binding",
                addr: config.listen,
                source,
            })?;
        let state = Arc::new(http::AppState::new(
            engine,
            RefData::default(),
            config.retry_after_s,
        ));
        Ok(Self {
            state,
            listener,
            config,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// The engine (its kernel, for tests and monitoring).
    pub fn engine(&self) -> &Engine {
        &self.state.engine
    }

    /// Serves until `shutdown` resolves; then stops accepting connections, answers the
    /// requests already accepted (for at most the configured drain time), and shuts the
    /// kernel down. The whole stop stays within [`STOP_BOUND`].
    ///
    /// # Errors
    ///
    /// [`ServiceError::Io`] when serving fails. An unclean stop is not an error: the
    /// [`Summary`] says what happened.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Summary, ServiceError> {
        let addr = self.local_addr();
        let (fired_tx, fired_rx) = tokio::sync::oneshot::channel::<Instant>();
        let signal = async move {
            shutdown.await;
            tracing::info!("shutdown: no new connections, draining accepted requests");
            let _ = fired_tx.send(Instant::now());
        };
        let app = http::router(self.state.clone());
        let upkeep = tokio::spawn(http::upkeep(self.state.clone()));
        let serve = axum::serve(self.listener, app).with_graceful_shutdown(signal);
        let drain = Duration::from_millis(self.config.drain_ms).min(STOP_BOUND);
        let mut fired_rx = fired_rx;
        let mut fired_at = None;
        let serve = serve.into_future();
        tokio::pin!(serve);
        let drained = tokio::select! {
            r = &mut serve => {
                r.map_err(|source| ServiceError::Io { op: "serving", addr, source })?;
                true
            }
            at = &mut fired_rx => {
                // The signal fired: the drain gets its bound, measured from it.
                let at = at.unwrap_or_else(|_| Instant::now());
                fired_at = Some(at);
                match tokio::time::timeout_at((at + drain).into(), &mut serve).await {
                    Ok(r) => {
                        r.map_err(|source| ServiceError::Io { op: "serving", addr, source })?;
                        true
                    }
                    Err(_) => false,
                }
            }
        };
        let fired = fired_at
            .or_else(|| fired_rx.try_recv().ok())
            .unwrap_or_else(Instant::now);
        let left = STOP_BOUND
            .saturating_sub(fired.elapsed())
            .saturating_sub(Duration::from_millis(50));
        let kernel_shutdown = self
            .state
            .engine
            .shutdown(left)
            .await
            .map_err(|e| e.to_string());
        upkeep.abort();
        let (accepted, answered, cancelled) = http::counts(&self.state);
        let summary = Summary {
            accepted,
            answered,
            cancelled,
            drained,
            kernel_shutdown,
            stop_took: fired.elapsed(),
        };
        tracing::info!(?summary, "stopped");
        Ok(summary)
    }
}

/// The engine `config` asks for, running `spec` when it is a gyre backend.
fn engine(config: &Config, spec: KernelSpec<Order, Decision>) -> Result<Engine, ServiceError> {
    if config.backend.eq_ignore_ascii_case("inline") {
        return Ok(Engine::Inline);
    }
    let backend: Backend =
        config
            .backend
            .parse()
            .map_err(|e: gyre::Error| ServiceError::Config {
                flag: "backend",
                value: config.backend.clone(),
                reason: e.to_string(),
            })?;
    let strategy = match &config.strategy {
        None => None,
        Some(s) => Some(s.parse().map_err(|e: gyre::Error| ServiceError::Config {
            flag: "strategy",
            value: s.clone(),
            reason: e.to_string(),
        })?),
    };
    let policy = RestartPolicy::new(config.max_restarts)
        .backoff(
            Duration::from_millis(config.restart_backoff_ms),
            Duration::from_secs(2).max(Duration::from_millis(config.restart_backoff_ms)),
        )
        .reset_after(Duration::from_secs(config.restart_window_s));
    let mut spec = spec
        .capacity(config.capacity)
        .restart(policy)
        .async_spin(Duration::from_micros(config.async_spin_us));
    if !config.export.is_empty() {
        spec = spec.export_telemetry(config.export.clone());
    }
    Engine::launch(backend, strategy, spec, config.timeout()).map_err(ServiceError::Launch)
}
