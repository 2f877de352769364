//! Where a decision is computed: inline in the HTTP handler (no gyre, the baseline the
//! load generator compares against) or by a gyre ring kernel.
//!
//! The kernel path sheds load instead of queueing it: [`gyre::Kernel::try_call`] either
//! publishes the order now or hands it back (`Full`: the ring holds `capacity` requests
//! already), and a request that outlives its timeout is dropped, which gyre makes safe
//! (the kernel still answers it; the completion driver discards the reply and releases
//! the slot).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use gyre::{Backend, Kernel, KernelSpec, KernelState, Runtime, TrySendError};

use crate::risk::{risk_check, Decision, Order};

/// Why the engine gave no decision, each mapped to one HTTP status by the router.
#[derive(Debug, thiserror::Error)]
pub enum Reject {
    /// Every slot of the ring is taken: `503` with `Retry-After`.
    #[error("the kernel's ring is full ({capacity} requests in flight)")]
    Full {
        /// The ring's capacity.
        capacity: usize,
    },
    /// The kernel is relaunching after a fault, or has stopped for good: `503` with
    /// `Retry-After`.
    #[error("the kernel is unavailable: {state:?}")]
    Unavailable {
        /// Its state.
        state: KernelState,
    },
    /// No decision within the request timeout: `504`. The request stays accepted by
    /// the kernel, which still answers it; its reply is discarded.
    #[error("no decision within {0:?}")]
    Timeout(Duration),
    /// The handler faulted on this request (`HANDLER_PANIC`): `500`. Under the restart
    /// policy the kernel is relaunched and answers the requests after it.
    #[error("the handler faulted on this request: {0}")]
    Faulted(gyre::Error),
    /// Anything else gyre reported: `500`.
    #[error(transparent)]
    Other(gyre::Error),
}

/// The decision maker.
pub enum Engine {
    /// [`risk_check`] called in the HTTP handler itself.
    Inline,
    /// A gyre kernel running [`risk_check`] (or the spec the service was given).
    Gyre {
        /// The runtime the kernel was launched by (kept for as long as the kernel).
        runtime: Runtime,
        /// The kernel. Clones of it are the request handlers' handles.
        kernel: Kernel<Order, Decision>,
        /// The request timeout.
        timeout: Duration,
        /// A fault was seen (a request's `HANDLER_PANIC`, a `Faulted` state) and the kernel
        /// has not been `Active` since: its `Relaunching` is a restart after a fault, not a
        /// reload's or an epoch's handover (brief, and nothing is lost).
        fault_seen: AtomicBool,
    },
}

impl Engine {
    /// Launches `spec` on a runtime of `backend`, with the transfer strategy when given.
    ///
    /// # Errors
    ///
    /// What [`Runtime::builder`]'s `build` and [`Runtime::launch`] report.
    pub fn launch(
        backend: Backend,
        strategy: Option<gyre::TransferStrategy>,
        spec: KernelSpec<Order, Decision>,
        timeout: Duration,
    ) -> gyre::Result<Self> {
        let mut b = Runtime::builder().backend(backend);
        if let Some(s) = strategy {
            b = b.transfer_strategy(s);
        }
        let runtime = b.build()?;
        let kernel = runtime.launch(spec)?;
        tracing::info!(
            kernel = kernel.name(),
            backend = ?kernel.backend(),
            strategy = ?kernel.transfer_strategy(),
            capacity = kernel.capacity(),
            "kernel launched"
        );
        Ok(Engine::Gyre {
            runtime,
            kernel,
            timeout,
            fault_seen: AtomicBool::new(false),
        })
    }

    /// The backend's name: `inline`, or the kernel's backend.
    pub fn backend_name(&self) -> String {
        match self {
            Engine::Inline => "inline".into(),
            Engine::Gyre { kernel, .. } => match kernel.backend() {
                Backend::Cpu => "cpu".into(),
                Backend::Cuda { device } => format!("cuda:{device}"),
                Backend::OpenCl { platform, device } => format!("opencl:{platform}:{device}"),
                b => format!("{b:?}").to_lowercase(),
            },
        }
    }

    /// The kernel, when there is one.
    pub fn kernel(&self) -> Option<&Kernel<Order, Decision>> {
        match self {
            Engine::Inline => None,
            Engine::Gyre { kernel, .. } => Some(kernel),
        }
    }

    /// The runtime, when there is one.
    pub fn runtime(&self) -> Option<&Runtime> {
        match self {
            Engine::Inline => None,
            Engine::Gyre { runtime, .. } => Some(runtime),
        }
    }

    /// The decision for `order`.
    ///
    /// # Errors
    ///
    /// A [`Reject`] saying which status to answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (a client that went away) loses nothing: an accepted
    /// request's reply is discarded and its slot released, as after a timeout.
    pub async fn decide(&self, order: Order) -> Result<Decision, Reject> {
        let (kernel, timeout, fault_seen) = match self {
            Engine::Inline => return Ok(risk_check(order)),
            Engine::Gyre {
                kernel,
                timeout,
                fault_seen,
                ..
            } => (kernel, *timeout, fault_seen),
        };
        // Do not queue behind a kernel that is down: a relaunch after a fault waits out
        // the restart policy's backoff, and a request published meanwhile would wait in
        // the ring for all of it.
        if let Err(state) = self.health() {
            return Err(Reject::Unavailable { state });
        }
        let reply = match kernel.try_call(order) {
            Ok(f) => f,
            Err(TrySendError::Full(_)) => {
                return Err(Reject::Full {
                    capacity: kernel.capacity(),
                })
            }
            Err(TrySendError::Closed(_)) => {
                return Err(Reject::Unavailable {
                    state: kernel.state(),
                })
            }
        };
        match tokio::time::timeout(timeout, reply).await {
            Err(_) => Err(Reject::Timeout(timeout)),
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => {
                let r = classify(e, kernel);
                if matches!(r, Reject::Faulted(_) | Reject::Unavailable { .. }) {
                    fault_seen.store(true, Relaxed);
                }
                Err(r)
            }
        }
    }

    /// Whether the engine can take requests: `Err` with the kernel's state when not (it
    /// stopped, or it is being relaunched after a fault; a reload's or an epoch's
    /// handover is brief and loses nothing, so it counts as up).
    pub fn health(&self) -> Result<KernelState, KernelState> {
        let Engine::Gyre {
            kernel, fault_seen, ..
        } = self
        else {
            return Ok(KernelState::Active);
        };
        match kernel.state() {
            s @ (KernelState::Active | KernelState::Paused | KernelState::Launching) => {
                if s == KernelState::Active {
                    fault_seen.store(false, Relaxed);
                }
                Ok(s)
            }
            s @ KernelState::Relaunching if !fault_seen.load(Relaxed) => Ok(s),
            s => {
                if matches!(s, KernelState::Faulted { .. }) {
                    fault_seen.store(true, Relaxed);
                }
                Err(s)
            }
        }
    }

    /// Shuts the kernel down (drains what it accepted, then joins it; its telemetry
    /// export file is removed), bounded by `bound`.
    ///
    /// # Errors
    ///
    /// What [`Kernel::shutdown`] reports, or [`gyre::Error::Timeout`] after `bound`.
    pub async fn shutdown(&self, bound: Duration) -> gyre::Result<()> {
        let Some(k) = self.kernel() else {
            return Ok(());
        };
        match tokio::time::timeout(bound, k.shutdown()).await {
            Ok(r) => r,
            Err(_) => Err(gyre::Error::Timeout {
                op: "shutdown",
                after: bound,
            }),
        }
    }
}

/// A gyre error of an accepted request, as a [`Reject`].
fn classify(e: gyre::Error, kernel: &Kernel<Order, Decision>) -> Reject {
    match e {
        gyre::Error::Handler { status, .. } if status == gyre::codes::HANDLER_PANIC => {
            Reject::Faulted(e)
        }
        gyre::Error::KernelFaulted { .. }
        | gyre::Error::KernelLost { .. }
        | gyre::Error::KernelTerminated { .. }
        | gyre::Error::Unresponsive { .. }
        | gyre::Error::Closed { .. } => Reject::Unavailable {
            state: kernel.state(),
        },
        e => Reject::Other(e),
    }
}
