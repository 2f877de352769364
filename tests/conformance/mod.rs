//! The conformance suite, written once against a backend parameter.
//!
//! A backend's test file expands [`conformance_suite!`] with its [`gyre::Backend`]; every
//! case below then runs as its own `#[test]` on that backend. Later backends reuse it
//! unchanged.

#![allow(dead_code)]

pub mod cases;

/// Expands every conformance case as a `#[test]` running on `$backend`: a
/// [`gyre::Backend`], or a [`cases::Target`] (a backend under a pinned transfer strategy).
///
/// With `guard = expr`, each test first evaluates `expr` and holds the value until the
/// case returns (the OpenCL suite serialises its cases and arms a watchdog that way).
#[macro_export]
macro_rules! conformance_suite {
    ($backend:expr) => {
        $crate::conformance_suite!($backend, guard = $crate::conformance::NoGuard);
    };
    ($backend:expr, guard = $guard:expr) => {
        $crate::conformance_suite!(@cases ($backend) ($guard);
            echo_round_trip, builtin_kernels_match_reference, fifo_and_no_loss_4x100k_send,
            no_loss_4_producers_call, many_wraparounds, full_ring_back_pressure,
            oversize_type_rejected_at_launch, bad_geometry_rejected, pause_resume,
            terminate_with_messages_in_flight, handler_panic_faults_kernel,
            handler_error_keeps_serving, async_call_send_recv_stream,
            dropped_call_futures_release_slots, async_shutdown_drains, telemetry_counts,
            batch_send_and_recv_order, call_timeout_abandons,
            replies_stream_yields_last_error, call_timeout_while_ring_full,
            mixed_batch_and_single_senders_always_shut_down
        );
    };
    (@cases ($backend:expr) ($guard:expr); $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let _guard = $guard;
                $crate::conformance::cases::$name($backend.into());
            }
        )*
    };
}

/// The guard of a suite that needs none.
pub struct NoGuard;
