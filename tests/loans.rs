//! Loan kernels (`docs/loans.md`) on the CPU backend, every case (`tests/loan_cases/`)
//! under each of its four transfer strategies.

mod loan_cases;

use loan_cases::*;

/// Every case under every transfer strategy of the CPU backend.
macro_rules! strategies {
    ($($case:ident),* $(,)?) => {
        mod unified {
            use super::Target;
            $(#[test] fn $case() { super::$case(Target::Cpu(gyre::TransferStrategy::Unified)) })*
        }
        mod sync {
            use super::Target;
            $(#[test] fn $case() { super::$case(Target::Cpu(gyre::TransferStrategy::Sync)) })*
        }
        mod async_copies {
            use super::Target;
            $(#[test] fn $case() { super::$case(Target::Cpu(gyre::TransferStrategy::Async)) })*
        }
        mod dma_polling {
            use super::Target;
            $(#[test] fn $case() {
                super::$case(Target::Cpu(
                    gyre::TransferStrategy::dma_polling(std::time::Duration::from_micros(20))
                        .expect("poll interval"),
                ))
            })*
        }
    };
}

strategies!(
    large_messages_round_trip_in_place,
    replies_may_shrink_or_grow_within_the_block,
    handler_errors_return_the_block_and_the_kernel_serves_on,
    corrupt_handles_are_refused_without_touching_the_pool,
    an_exhausted_pool_refuses_try_loan_and_async_loans_wait,
    a_panic_with_loans_in_flight_fails_them_and_shutdown_returns_every_block,
    a_restarted_kernel_answers_the_loans_its_predecessor_left,
    dropped_call_futures_return_their_block_only_after_the_reply,
    many_threads_loan_and_call_concurrently,
    bad_specs_are_refused_and_copies_move_loan_bytes,
    batches_of_loans_go_and_come_back_in_order,
    the_export_file_shows_the_pool,
    a_handle_sent_twice_never_gives_its_block_two_writers,
    a_loan_of_another_pool_is_refused_and_returns_to_it,
    a_reloaded_loan_kernel_serves_the_same_pool,
    host_code_resolves_no_handle_of_a_device_kernels_pool,
    a_watched_loan_kernel_reloads_over_the_same_pool,
);
