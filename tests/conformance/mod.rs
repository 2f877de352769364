//! The conformance suite, written once against a backend parameter.
//!
//! A backend's test file expands [`conformance_suite!`] with its [`gyre::Backend`]; every
//! case below then runs as its own `#[test]` on that backend. Later backends reuse it
//! unchanged.
//!
//! A case is a top-level `pub fn` of a case file ([`CASE_FILES`]: `cases.rs`, the ring
//! and the protocol; `futures.rs`, the async API's futures and streams; `lifecycle.rs`, the API's promises about refusals, shutdown and the
//! end of a kernel; `relaunch.rs`, reloads, epochs and restarts; `transfer.rs`, the copy
//! strategies' budget). The macro's list names each one; `suite_lists_every_case`, expanded
//! with the suite, fails when a case file has a `pub fn` the list does not name (or the
//! list names one that does not exist), so a new case cannot be silently left out.

#![allow(dead_code)]

pub mod cases;
pub mod common;
pub mod futures;
pub mod lifecycle;
pub mod relaunch;
pub mod transfer;

#[allow(unused_imports)] // not every suite uses both
pub use common::{NoGuard, Target};

/// The case files, by module name, and their text.
pub const CASE_FILES: [(&str, &str); 5] = [
    ("cases", include_str!("cases.rs")),
    ("futures", include_str!("futures.rs")),
    ("lifecycle", include_str!("lifecycle.rs")),
    ("relaunch", include_str!("relaunch.rs")),
    ("transfer", include_str!("transfer.rs")),
];

/// `module::name` of every top-level `pub fn` in `files` (a line starting `pub fn `),
/// minus `not_cases`.
pub fn declared_cases(files: &[(&str, &str)], not_cases: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = files
        .iter()
        .flat_map(|(module, text)| {
            text.lines().filter_map(move |line| {
                let rest = line.strip_prefix("pub fn ")?;
                let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
                Some(format!("{module}::{}", &rest[..end]))
            })
        })
        .filter(|c| !not_cases.iter().any(|n| c.ends_with(&format!("::{n}"))))
        .collect();
    out.sort();
    out
}

/// Panics, naming them, when the cases declared in `files` and the suite's `listed` cases
/// differ.
pub fn check_listed(files: &[(&str, &str)], not_cases: &[&str], listed: &[&str]) {
    let declared = declared_cases(files, not_cases);
    let mut listed: Vec<String> = listed.iter().map(|s| s.replace(' ', "")).collect();
    listed.sort();
    let missing: Vec<&String> = declared.iter().filter(|c| !listed.contains(c)).collect();
    let unknown: Vec<&String> = listed.iter().filter(|c| !declared.contains(c)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "the suite's case list is out of date: not listed {missing:?}, listed but not \
         declared {unknown:?} (add each case to the macro's list)"
    );
}

/// Expands every conformance case as a `#[test]` running on `$backend`: a
/// [`gyre::Backend`], or a [`Target`] (a backend under a pinned transfer strategy), plus
/// `suite_lists_every_case`.
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
            cases::echo_round_trip, cases::builtin_kernels_match_reference,
            cases::fifo_and_no_loss_4x100k_send, cases::no_loss_4_producers_call,
            cases::many_wraparounds, cases::full_ring_back_pressure,
            cases::try_call_sheds_load_when_full,
            cases::oversize_type_rejected_at_launch, cases::bad_geometry_rejected,
            cases::pause_resume, cases::terminate_with_messages_in_flight,
            cases::handler_panic_faults_kernel, cases::handler_error_keeps_serving,
            futures::async_call_send_recv_stream, futures::dropped_call_futures_release_slots,
            futures::async_shutdown_drains, cases::telemetry_counts,
            cases::batch_send_and_recv_order, cases::call_timeout_abandons,
            cases::a_sleeping_caller_is_woken_and_keeps_its_deadline,
            futures::replies_stream_yields_last_error, cases::call_timeout_while_ring_full,
            cases::mixed_batch_and_single_senders_always_shut_down,
            lifecycle::refused_requests_are_closed_on_every_path,
            lifecycle::every_shutdown_removes_the_export,
            lifecycle::last_handle_ends_streams_and_receivers,
            lifecycle::dropping_the_last_handle_never_waits_for_the_kernel,
            lifecycle::handler_statuses_never_pass_for_protocol_codes,
            lifecycle::raw_reply_too_long_is_a_reply_error,
            relaunch::hundred_reloads_under_load, relaunch::one_ms_epochs_under_load,
            relaunch::restarts_after_injected_panics, relaunch::reload_racing_shutdown,
            relaunch::reload_with_failing_build, relaunch::reload_keeps_pause_and_checks_rings,
            relaunch::a_reload_into_a_parking_kernel_still_wakes,
            transfer::copies_wait_once_per_push_and_pull
        );
    };
    (@cases ($backend:expr) ($guard:expr); $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let _guard = $guard;
                $crate::conformance::$module::$name($backend.into());
            }
        )*

        /// Every case of the case files is in the list above, and nothing else.
        #[test]
        fn suite_lists_every_case() {
            $crate::conformance::check_listed(
                &$crate::conformance::CASE_FILES,
                &[],
                &[$(stringify!($module::$name)),*],
            );
        }
    };
}
