//! The fault-injection suite, written once against a backend parameter (like
//! `tests/conformance`).
//!
//! A backend's test file expands [`faults_suite!`] with its [`gyre::Backend`]; each case
//! injects one fault and counts outcomes: every accepted request must end in exactly one
//! reply or one typed error — none lost, none duplicated. Every case runs under a hang
//! guard ([`guarded`]), so a regression fails instead of hanging CI. `docs/reliability.md`
//! maps each fault to its case. The macro's case list is checked against the case files
//! ([`check_listed`]), so a new case cannot be silently left out.

#![allow(dead_code)]

pub mod cases;
pub mod host_killed;
pub mod ring_cases;

use std::time::Duration;

use gyre::{Backend, Runtime};

#[path = "../support/wait.rs"]
mod wait;
pub use wait::eventually;

/// Expands every fault case as a `#[test]` running on `$backend`, plus the child-process
/// entry point of the host-killed case. With `guard = expr`, each test first evaluates
/// `expr` and holds it until the case returns (the OpenCL suite serialises its cases and
/// arms a watchdog that way).
#[macro_export]
macro_rules! faults_suite {
    ($backend:expr) => {
        $crate::faults_suite!($backend, guard = ());
    };
    ($backend:expr, guard = $guard:expr) => {
        $crate::faults_suite!(@cases ($backend) ($guard);
            handler_panic_mid_batch, stuck_handler_watchdog, kernel_fault_error_code,
            host_process_killed, shutdown_in_flight_random_timing, stalled_consumer,
            corrupted_slot_headers, corrupted_message_type, dropped_futures_every_await_point,
            producer_dies_mid_claim
        );

        /// Not a test of its own: the host process of `host_process_killed`, started by it
        /// (does nothing otherwise).
        #[test]
        fn host_child_process() {
            $crate::faults::host_killed::child_main();
        }
    };
    (@cases ($backend:expr) ($guard:expr); $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                #[allow(clippy::let_unit_value)]
                let _guard = $guard;
                let target: $crate::faults::Target = $backend.into();
                $crate::faults::guarded(stringify!($name), move || {
                    $crate::faults::cases::$name(target)
                });
            }
        )*

        /// Every case of the case files is in the list above, and nothing else.
        #[test]
        fn suite_lists_every_case() {
            $crate::faults::check_listed(&[$(stringify!($name)),*]);
        }
    };
}

/// The case files: a case is a top-level `pub fn` of one of them (a line starting
/// `pub fn `), except [`NOT_CASES`]. `suite_lists_every_case` (expanded with the suite)
/// fails when the macro's list and these files disagree.
pub const CASE_FILES: [&str; 3] = [
    include_str!("cases.rs"),
    include_str!("ring_cases.rs"),
    include_str!("host_killed.rs"),
];

/// Top-level `pub fn`s of the case files that are not cases: the host-killed case's child
/// process entry (expanded as `host_child_process`).
pub const NOT_CASES: [&str; 1] = ["child_main"];

/// Panics, naming them, when the cases declared in [`CASE_FILES`] and `listed` differ.
pub fn check_listed(listed: &[&str]) {
    let mut declared: Vec<&str> = CASE_FILES
        .iter()
        .flat_map(|text| text.lines())
        .filter_map(|line| {
            let rest = line.strip_prefix("pub fn ")?;
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
            Some(&rest[..end])
        })
        .filter(|name| !NOT_CASES.contains(name))
        .collect();
    declared.sort_unstable();
    let missing: Vec<&&str> = declared.iter().filter(|c| !listed.contains(c)).collect();
    let unknown: Vec<&&str> = listed.iter().filter(|c| !declared.contains(c)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "the fault suite's case list is out of date: not listed {missing:?}, listed but not \
         declared {unknown:?} (add each case to faults_suite!'s list)"
    );
}

/// Longest a case may run before it is declared hung (a guard, not a timing assertion:
/// every case takes well under a tenth of this).
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// Runs `f` on its own thread and fails the test if it does not finish within
/// [`HANG_GUARD`]; a panic in `f` is re-raised here.
pub fn guarded(name: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::Builder::new()
        .name(format!("fault-{name}"))
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        })
        .expect("spawn the case thread");
    match rx.recv_timeout(HANG_GUARD) {
        Ok(Ok(())) => {
            let _ = t.join();
        }
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{name}: hung for {HANG_GUARD:?} (hang guard)"),
    }
}

/// Where a fault case runs: a backend, and the CPU backend's cost model (checked rings,
/// read in waves as a PCIe GPU reads them) when asked.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub backend: Backend,
    pub cost_model: Option<Duration>,
}

impl From<Backend> for Target {
    fn from(backend: Backend) -> Self {
        Self {
            backend,
            cost_model: None,
        }
    }
}

pub fn rt(b: Target) -> Runtime {
    let mut builder = Runtime::builder().backend(b.backend);
    if let Some(e) = b.cost_model {
        builder = builder.cost_model(e);
    }
    builder.build().expect("runtime")
}

pub fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// Whether `b` runs Rust closure handlers (the CPU backend); prints why a case skips.
pub fn host_handlers(b: Target) -> bool {
    let resolved = rt(b).backend();
    if resolved != Backend::Cpu {
        eprintln!(
            "SKIP: this case uses a Rust closure handler; {resolved} runs device handlers only"
        );
        return false;
    }
    true
}

/// Polls `fut` once with a no-op waker.
pub fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(fut).poll(&mut cx)
}

/// Every item of the kernel's replies stream until its end (the kernel stopped and every
/// accepted `send` was answered or failed).
pub fn drain_replies<T: gyre::Pod>(k: &gyre::Kernel<T, T>) -> Vec<gyre::Result<T>> {
    use futures_core::Stream;
    tokio_rt().block_on(async {
        let mut stream = std::pin::pin!(k.replies());
        let mut items = Vec::new();
        while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
            items.push(item);
        }
        items
    })
}

/// The ring counters: (claimed, h2k_head, h2k_tail, k2h_head, k2h_tail).
pub fn counters<Req: gyre::Pod, Resp: gyre::Pod>(
    k: &gyre::Kernel<Req, Resp>,
) -> (u64, u64, u64, u64, u64) {
    use std::sync::atomic::Ordering::Acquire;
    let ch = k.raw_channel();
    let cb = ch.region().control();
    (
        ch.claimed(),
        cb.h2k_head.load(Acquire),
        cb.h2k_tail.load(Acquire),
        cb.k2h_head.load(Acquire),
        cb.k2h_tail.load(Acquire),
    )
}

/// Nothing leaked: once every caller is done, every accepted request's reply slot was
/// released (taken or discarded), so `k2h_tail` reaches the claim count.
pub fn assert_all_released<Req: gyre::Pod, Resp: gyre::Pod>(k: &gyre::Kernel<Req, Resp>) {
    eventually("every reply slot released", || {
        let (claimed, .., k2h_tail) = counters(k);
        k2h_tail == claimed
    });
}
