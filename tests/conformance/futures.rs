//! The async API's cases: futures and streams (`call`, `send`, `recv`, `replies`), what a
//! dropped future leaves behind, and an async shutdown. Each takes the backend to run on.

use std::collections::HashMap;
use std::time::Duration;

use gyre::{Error, KernelSpec};

use super::common::{host_handlers, rt, tokio_rt, Target};

pub fn async_call_send_recv_stream(b: Target) {
    use futures_core::Stream;
    let k = rt(b)
        .launch(KernelSpec::<u64, u64>::echo().capacity(32))
        .unwrap();
    tokio_rt().block_on(async {
        // Many concurrent tasks calling.
        let tasks: Vec<_> = (0..8u64)
            .map(|t| {
                let k = k.clone();
                tokio::spawn(async move {
                    for i in 0..2000u64 {
                        let v = t * 1_000_000 + i;
                        assert_eq!(k.call(v).await.unwrap(), v);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        for i in 0..20u64 {
            k.send(i).await.unwrap();
        }
        for i in 0..10u64 {
            assert_eq!(k.recv().await.unwrap(), i);
        }
        let mut stream = std::pin::pin!(k.replies());
        let mut got = Vec::new();
        while got.len() < 10 {
            let item = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await;
            got.push(item.expect("stream item").unwrap());
        }
        assert_eq!(got, (10..20).collect::<Vec<_>>());
        k.shutdown().await.unwrap();
        // After shutdown the stream ends.
        let end = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await;
        assert!(end.is_none());
    });
}

/// Dropping `call` futures at every await point never loses, corrupts or leaks a slot.
pub fn dropped_call_futures_release_slots(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("slow", |x: u64| {
                std::thread::sleep(Duration::from_micros(50));
                x
            })
            .capacity(8)
            .async_spin(Duration::ZERO),
        )
        .unwrap();
    let trt = tokio_rt();
    trt.block_on(async {
        for round in 0..200u64 {
            // Start a call, poll it a few times, drop it.
            let mut fut = Box::pin(k.call(round));
            for _ in 0..(round % 4) {
                let _ = futures_poll_once(fut.as_mut()).await;
            }
            drop(fut);
        }
        // Ring of 8: if any dropped call leaked its slot, these would stall.
        for i in 0..100u64 {
            let r = tokio::time::timeout(Duration::from_secs(5), k.call(i)).await;
            assert_eq!(r.expect("no leaked slot").unwrap(), i);
        }
    });
    k.shutdown_blocking().unwrap();
}

async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut f).poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

pub fn async_shutdown_drains(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("slowish", |x: u64| {
                std::thread::sleep(Duration::from_micros(20));
                x
            })
            .capacity(256),
        )
        .unwrap();
    tokio_rt().block_on(async {
        for i in 0..200u64 {
            k.send(i).await.unwrap();
        }
        let calls: Vec<_> = (0..20u64)
            .map(|i| {
                let k = k.clone();
                tokio::spawn(async move { k.call(1000 + i).await })
            })
            .collect();
        tokio::task::yield_now().await;
        k.shutdown().await.unwrap();
        let mut results = HashMap::new();
        for (i, c) in calls.into_iter().enumerate() {
            match c.await.unwrap() {
                Ok(v) => assert_eq!(v, 1000 + i as u64),
                Err(e) => *results.entry(e.to_string()).or_insert(0) += 1,
            }
        }
        // Every accepted send is answered, in order.
        for i in 0..200u64 {
            assert_eq!(k.recv().await.unwrap(), i);
        }
        assert!(k.recv().await.is_err());
        assert!(k.send(1).await.is_err());
    });
}

/// The error of the last `send` is an item of the replies stream, not its end.
pub fn replies_stream_yields_last_error(b: Target) {
    use futures_core::Stream;
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(KernelSpec::try_from_fn("reject3", |x: u32| {
            if x == 3 {
                Err(gyre_abi::error::USER_BASE)
            } else {
                Ok(x)
            }
        }))
        .unwrap();
    for x in 1..=3u32 {
        k.send_blocking(x).unwrap();
    }
    k.shutdown_blocking().unwrap();
    let items = tokio_rt().block_on(async {
        let mut stream = std::pin::pin!(k.replies());
        let mut items = Vec::new();
        while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
            items.push(item);
        }
        items
    });
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(items[0], Ok(1));
    assert_eq!(items[1], Ok(2));
    assert!(matches!(
        items[2],
        Err(Error::Handler {
            status: gyre_abi::error::USER_BASE,
            ..
        })
    ));
}
