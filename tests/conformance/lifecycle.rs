//! The API's promises about refusals, shutdown, the end of a kernel and what a handler
//! may answer. Each takes the backend to run on.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures_core::Stream;
use gyre::{codes, Error, KernelSpec, KernelState, TrySendError};

use super::common::{eventually, host_handlers, rt, tokio_rt, Target};

/// Bounds an await that must finish: a hang guard, not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: still pending after {HANG_GUARD:?} (hang guard)"),
    }
}

/// Every item of `stream` until its end.
async fn collect<T>(stream: impl Stream<Item = T>) -> Vec<T> {
    let mut stream = std::pin::pin!(stream);
    let mut items = Vec::new();
    while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        items.push(item);
    }
    items
}

fn is_closed<T: std::fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::Closed { .. }))
}

/// A request refused after a shutdown was never accepted: `Closed` (or
/// `TrySendError::Closed`) on every path — blocking and async, single and batch — never
/// `KernelTerminated`, whether the shutdown was blocking or async.
pub fn refused_requests_are_closed_on_every_path(b: Target) {
    let trt = tokio_rt();
    for async_shutdown in [false, true] {
        let k = rt(b).launch(KernelSpec::<u64, u64>::echo()).unwrap();
        assert_eq!(k.call_blocking(1).unwrap(), 1);
        if async_shutdown {
            trt.block_on(k.shutdown()).unwrap();
        } else {
            k.shutdown_blocking().unwrap();
        }
        let r = k.call_blocking(2);
        assert!(is_closed(&r), "call_blocking: {r:?}");
        let r = k.send_blocking(3);
        assert!(is_closed(&r), "send_blocking: {r:?}");
        let r = k.call_timeout(4, Duration::from_secs(1));
        assert!(is_closed(&r), "call_timeout: {r:?}");
        let r = trt.block_on(k.call(5));
        assert!(is_closed(&r), "call().await: {r:?}");
        let r = trt.block_on(k.send(6));
        assert!(is_closed(&r), "send().await: {r:?}");
        assert_eq!(k.try_send(7), Err(TrySendError::Closed(7)));
        assert_eq!(
            k.try_send_batch(&[8, 9]),
            Err(TrySendError::Closed(&[8, 9][..]))
        );
        // The end of `recv` is not a refusal: it says how the kernel stopped.
        assert!(matches!(
            k.try_recv(),
            Err(Error::KernelTerminated { code: 0, .. })
        ));
        assert_eq!(k.state(), KernelState::Terminated { code: 0 });
    }
}

fn export_path(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "gyre-lifecycle-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let path = dir.join("svc").join("echo");
    (dir, path)
}

/// Every shutdown — blocking or async — removes the telemetry export file, and
/// `telemetry_export_path` reports `None` afterwards.
pub fn every_shutdown_removes_the_export(b: Target) {
    let trt = tokio_rt();
    for async_shutdown in [false, true] {
        let (dir, path) = export_path(if async_shutdown { "async" } else { "blocking" });
        let k = rt(b)
            .launch(KernelSpec::<u64, u64>::echo().export_telemetry_to(&path))
            .unwrap();
        assert_eq!(k.telemetry_export_path().as_deref(), Some(path.as_path()));
        assert!(path.exists());
        assert_eq!(k.call_blocking(1).unwrap(), 1);
        if async_shutdown {
            trt.block_on(k.shutdown()).unwrap();
        } else {
            k.shutdown_blocking().unwrap();
        }
        assert_eq!(k.telemetry_export_path(), None, "async: {async_shutdown}");
        assert!(!path.exists(), "async: {async_shutdown}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Dropping the last `Kernel` handle ends the kernel although a `replies()` stream and a
/// pending `recv()` are alive: the stream yields every reply already accepted, then ends;
/// the pending `recv` resolves to the end.
pub fn last_handle_ends_streams_and_receivers(b: Target) {
    let trt = tokio_rt();
    trt.block_on(async {
        // The producer/consumer shape: a consumer task owns the stream.
        let k = rt(b).launch(KernelSpec::<u64, u64>::echo()).unwrap();
        let consumer = tokio::spawn(collect(k.replies()));
        for i in 0..100 {
            k.send(i).await.unwrap();
        }
        drop(k);
        let items = bounded("the replies stream", consumer).await.unwrap();
        let got: Vec<u64> = items.into_iter().map(Result::unwrap).collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>());

        // A receiver waiting when the last handle goes.
        let k = rt(b).launch(KernelSpec::<u64, u64>::echo()).unwrap();
        let receiver = tokio::spawn(k.recv());
        tokio::task::yield_now().await;
        drop(k);
        let r = bounded("the pending recv", receiver).await.unwrap();
        assert!(
            matches!(r, Err(Error::KernelTerminated { code: 0, .. })),
            "{r:?}"
        );
    });
}

/// A gate a handler waits on.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.cv.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }
}

/// Dropping the last handle on a tokio worker while the kernel is busy returns without
/// waiting for the kernel (its handler is still running when `drop` returns); the kernel
/// then answers what it accepted and ends on its own.
pub fn dropping_the_last_handle_never_waits_for_the_kernel(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let gate = Arc::new(Gate::default());
    let entered = Arc::new(AtomicBool::new(false));
    let returned = Arc::new(AtomicBool::new(false));
    let (g, e, r) = (gate.clone(), entered.clone(), returned.clone());
    let k = rt(b)
        .launch(KernelSpec::from_fn("gated", move |x: u64| {
            e.store(true, Ordering::SeqCst);
            g.wait();
            r.store(true, Ordering::SeqCst);
            x + 1
        }))
        .unwrap();
    let replies = k.replies();
    k.try_send(1).unwrap();
    eventually("the handler runs", || entered.load(Ordering::SeqCst));
    // A current-thread runtime: its only thread is the one that drops the handle.
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    single.block_on(async move {
        drop(k);
        assert!(
            !returned.load(Ordering::SeqCst),
            "the handler cannot have returned: the gate is shut"
        );
        gate.open();
        let items = bounded("the replies stream", collect(replies)).await;
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(items[0].as_ref().ok(), Some(&2));
    });
}

/// A handler's error status never passes for one of the protocol's codes: below
/// `USER_BASE` only `HANDLER_REJECTED` (and `UNKNOWN_TYPE`) go through; every other code,
/// `0` included, is answered as `HANDLER_REJECTED` — not a protocol error, not a panic,
/// and the kernel keeps serving. `USER_BASE` and above reach the caller unchanged.
pub fn handler_statuses_never_pass_for_protocol_codes(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(KernelSpec::try_from_fn("status", |code: u32| {
            if code == u32::MAX {
                Ok(0)
            } else {
                Err(code)
            }
        }))
        .unwrap();
    for (code, reported) in [
        (0, codes::HANDLER_REJECTED),
        (codes::HANDLER_PANIC, codes::HANDLER_REJECTED),
        (codes::BAD_SEQUENCE, codes::HANDLER_REJECTED),
        (codes::BAD_LENGTH, codes::HANDLER_REJECTED),
        (codes::KERNEL_GONE, codes::HANDLER_REJECTED),
        (codes::USER_BASE - 1, codes::HANDLER_REJECTED),
        (codes::HANDLER_REJECTED, codes::HANDLER_REJECTED),
        (codes::BAD_LOAN, codes::BAD_LOAN),
        (codes::USER_BASE, codes::USER_BASE),
        (codes::USER_BASE + 7, codes::USER_BASE + 7),
    ] {
        match k.call_blocking(code) {
            Err(Error::Handler { status, .. }) => {
                assert_eq!(status, reported, "Err({code}) reported as {status}")
            }
            other => panic!("Err({code}): {other:?}"),
        }
        assert_eq!(k.state(), KernelState::Active, "after Err({code})");
    }
    assert_eq!(k.call_blocking(u32::MAX).unwrap(), 0);
    // The same rule for a raw handler.
    let raw = rt(b)
        .launch(KernelSpec::<u32, u32>::raw(
            "raw",
            |_ty: u32, _req: &[u8], _reply: &mut [u8]| Err(codes::HANDLER_PANIC),
        ))
        .unwrap();
    assert!(matches!(
        raw.call_blocking(1),
        Err(Error::Handler { status, .. }) if status == codes::HANDLER_REJECTED
    ));
    assert_eq!(raw.state(), KernelState::Active);
    k.shutdown_blocking().unwrap();
    raw.shutdown_blocking().unwrap();
}

/// A raw handler answering more bytes than the reply slot holds is reported as a reply
/// error (`ReplyTooLong`), not as a request error; the kernel keeps serving.
pub fn raw_reply_too_long_is_a_reply_error(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(KernelSpec::<[u8; 8], [u8; 8]>::raw(
            "long",
            |_ty: u32, req: &[u8], reply: &mut [u8]| {
                if req[0] == 0 {
                    return Ok(reply.len() + 1);
                }
                reply[..req.len()].copy_from_slice(req);
                Ok(req.len())
            },
        ))
        .unwrap();
    match k.call_blocking([0; 8]) {
        Err(Error::ReplyTooLong { payload, .. }) => assert_eq!(payload, k.payload()),
        other => panic!("{other:?}"),
    }
    assert_eq!(k.call_blocking([1; 8]).unwrap(), [1; 8]);
    assert_eq!(k.protocol_errors(), 0);
    k.shutdown_blocking().unwrap();
}
