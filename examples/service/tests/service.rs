//! The service under load and under pressure, over real HTTP on an ephemeral port, on the
//! CPU backend: a steady load with no errors, 503 on a full ring, 504 past the timeout
//! (and the slots coming back), 503 while a faulted kernel restarts, 400 for malformed
//! bodies that never reach the kernel, `/metrics`, and SIGTERM mid-load (the binary, in
//! a process of its own).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gyre::KernelSpec;
use gyre_service::load::{self, LoadConfig, Orders};
use gyre_service::risk::{risk_check, Decision, Order, WireOrder};
use gyre_service::{Config, Service, Summary};
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A service of `config` on the CPU backend (`spec` or the risk kernel), serving until
/// the returned sender fires or is dropped.
async fn start(
    mut config: Config,
    spec: Option<KernelSpec<Order, Decision>>,
) -> (
    SocketAddr,
    oneshot::Sender<()>,
    JoinHandle<Summary>,
    Started,
) {
    config.backend = "cpu".into();
    config.export = String::new();
    let service = match spec {
        Some(s) => Service::bind_with(config, s).await,
        None => Service::bind(config).await,
    }
    .expect("the service starts");
    let addr = service.local_addr();
    let kernel = service.engine().kernel().cloned();
    let (tx, rx) = oneshot::channel::<()>();
    let run = tokio::spawn(async move {
        service
            .run(async {
                let _ = rx.await;
            })
            .await
            .expect("serving works")
    });
    (addr, tx, run, Started { kernel })
}

/// What a test keeps of a started service: its kernel.
struct Started {
    kernel: Option<gyre::Kernel<Order, Decision>>,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

async fn send(addr: SocketAddr, method: &str, path: &str, ctype: &str, body: Bytes) -> Reply {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", ctype)
        .body(Full::new(body))
        .expect("a valid request");
    let resp = client.request(req).await.expect("an HTTP reply");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("a body").to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

async fn post_json(addr: SocketAddr, json: &str) -> Reply {
    send(
        addr,
        "POST",
        "/v1/risk",
        "application/json",
        Bytes::from(json.to_owned()),
    )
    .await
}

/// Stops the service and checks the stop was clean.
async fn stop_clean(stop: oneshot::Sender<()>, run: JoinHandle<Summary>) {
    let _ = stop.send(());
    assert!(run.await.expect("the server task").clean());
}

/// JSON orders of these ids, all sent at once: the tasks that await their replies.
fn post_concurrently(addr: SocketAddr, ids: impl Iterator<Item = u64>) -> Vec<JoinHandle<Reply>> {
    ids.map(|id| tokio::spawn(async move { post_json(addr, &order_json(id)).await }))
        .collect()
}

fn order_json(id: u64) -> String {
    format!(r#"{{"id":{id},"account":1,"symbol":"SYM000","side":"buy","qty":10,"price":100.5}}"#)
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(addr, "GET", path, "text/plain", Bytes::new()).await
}

fn body_json(r: &Reply) -> serde_json::Value {
    serde_json::from_slice(&r.body).expect("a JSON body")
}

/// The risk check, slow for orders with `id >= SLOW`.
const SLOW: u64 = 1_000_000;
fn slow_spec(delay: Duration) -> KernelSpec<Order, Decision> {
    KernelSpec::from_fn("risk", move |o: Order| {
        if o.id >= SLOW {
            std::thread::sleep(delay);
        }
        risk_check(o)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_seconds_at_2000_per_second_without_an_error() {
    let (addr, stop, run, svc) = start(Config::local(), None).await;
    let report = load::run(&LoadConfig {
        target: addr,
        rate: 2000.0,
        duration: Duration::from_secs(5),
        warmup: Duration::from_millis(200),
        concurrency: 64,
        binary: false,
        seed: 7,
        request_timeout: Duration::from_secs(10),
    })
    .await;
    assert_eq!(report.scheduled, 10_000);
    assert_eq!(
        (report.ok(), report.transport_errors, report.unfinished),
        (10_000, 0, 0),
        "every request answered 200: {:?}",
        report.by_status
    );
    // The kernel decided every one of them (and the warm-up's).
    let t = svc
        .kernel
        .expect("a kernel")
        .telemetry()
        .expect("telemetry");
    assert!(t.messages_out >= 10_000, "{t:?}");
    stop_clean(stop, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_and_json_orders_get_the_kernels_decision() {
    let (addr, stop, run, _svc) = start(Config::local(), None).await;
    let r = post_json(addr, &order_json(42)).await;
    assert_eq!(r.status, StatusCode::OK);
    let j = body_json(&r);
    assert_eq!(
        (j["id"].as_u64(), j["accepted"].as_bool()),
        (Some(42), Some(true))
    );
    assert_eq!(j["reason"], "ok");
    // 7% above the reference: outside the collar.
    let far = r#"{"id":43,"account":1,"symbol":"SYM000","side":"buy","qty":10,"price":107.0}"#;
    let j = body_json(&post_json(addr, far).await);
    assert_eq!(
        (j["accepted"].as_bool(), j["reason"].as_str()),
        (Some(false), Some("price_band"))
    );
    // The binary form: the decision's bytes.
    let mut orders = Orders::new(3);
    for _ in 0..50 {
        let (_, wire) = orders.next_order();
        let r = send(
            addr,
            "POST",
            "/v1/risk",
            "application/octet-stream",
            Bytes::copy_from_slice(gyre::bytemuck::bytes_of(&wire)),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        let d: Decision = gyre::bytemuck::pod_read_unaligned(&r.body);
        let expected = gyre_service::risk::RefData::default()
            .enrich_wire(&wire)
            .map(*risk_check)
            .expect("a valid order");
        assert_eq!(d, expected);
    }
    stop_clean(stop, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ring_answers_503_with_retry_after() {
    let mut config = Config::local();
    config.capacity = 2;
    config.timeout_ms = 10_000;
    let (addr, stop, run, _svc) = start(config, Some(slow_spec(Duration::from_millis(100)))).await;
    let calls = post_concurrently(addr, (0..12).map(|i| SLOW + i));
    let mut by_status = std::collections::BTreeMap::new();
    for c in calls {
        let r = c.await.expect("the call task");
        if r.status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(
                r.headers.get("retry-after").map(|v| v.as_bytes()),
                Some(&b"1"[..])
            );
            let j = body_json(&r);
            assert!(
                j["error"].as_str().is_some_and(|e| e.contains("full")),
                "{j}"
            );
        } else {
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        }
        *by_status.entry(r.status.as_u16()).or_insert(0) += 1;
    }
    // Two slots, a 100 ms handler: a few are taken, the rest shed at once, none queued.
    assert!(
        by_status.get(&503).copied().unwrap_or(0) >= 6,
        "{by_status:?}"
    );
    assert!(
        by_status.get(&200).copied().unwrap_or(0) >= 2,
        "{by_status:?}"
    );
    stop_clean(stop, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_answers_504_and_its_slot_comes_back() {
    let mut config = Config::local();
    config.capacity = 4;
    config.timeout_ms = 50;
    // Slow enough that the kernel is surely still busy with them when the next order comes.
    let (addr, stop, run, svc) = start(config, Some(slow_spec(Duration::from_millis(500)))).await;
    let slow = post_concurrently(addr, (0..4).map(|i| SLOW + i));
    for s in slow {
        assert_eq!(
            s.await.expect("the call task").status,
            StatusCode::GATEWAY_TIMEOUT
        );
    }
    // The kernel is still working through them: their slots are held, so a fast order
    // is shed rather than queued behind them.
    let busy = post_json(addr, &order_json(1)).await;
    assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE);
    // Once the kernel answered them, the discarded replies free all four slots.
    let k = svc.kernel.expect("a kernel");
    let deadline = Instant::now() + Duration::from_secs(10);
    while k.telemetry().expect("telemetry").messages_out < 4 {
        assert!(
            Instant::now() < deadline,
            "the kernel answers the timed-out orders"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut ok = 0;
    while ok < 4 {
        assert!(Instant::now() < deadline, "all four slots come back");
        let fast = post_concurrently(addr, (0..4).map(|i| 10 + i));
        ok = 0;
        for f in fast {
            ok += usize::from(f.await.expect("the call task").status == StatusCode::OK);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop_clean(stop, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulted_kernel_answers_503_and_is_restarted() {
    const POISON: u64 = 666;
    let mut config = Config::local();
    // Long enough that the test surely asks while the kernel waits to be relaunched.
    config.restart_backoff_ms = 1500;
    let spec = KernelSpec::from_fn("risk", |o: Order| {
        assert!(o.id != POISON, "the injected fault");
        risk_check(o)
    });
    let (addr, stop, run, _svc) = start(config, Some(spec)).await;
    assert_eq!(post_json(addr, &order_json(1)).await.status, StatusCode::OK);
    // The request that faulted the handler is a server error...
    let r = post_json(addr, &order_json(POISON)).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    // ...and while the kernel waits out its restart backoff, the service is unavailable.
    let h = get(addr, "/healthz").await;
    assert_eq!(
        h.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        body_json(&h)
    );
    assert!(h.headers.contains_key("retry-after"));
    let r = post_json(addr, &order_json(2)).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers.contains_key("retry-after"));
    // Then it is relaunched under the restart policy and serves again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let h = get(addr, "/healthz").await;
        if h.status == StatusCode::OK {
            assert_eq!(body_json(&h)["restarts"].as_u64(), Some(1));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the kernel restarts: {:?}",
            body_json(&h)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(post_json(addr, &order_json(3)).await.status, StatusCode::OK);
    stop_clean(stop, run).await;
}

/// A client that hangs up before its answer is counted as cancelled (499), not as a
/// request the service failed to answer: the stop is still clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_is_cancelled_not_lost() {
    use tokio::io::AsyncWriteExt;
    let (addr, stop, run, _svc) =
        start(Config::local(), Some(slow_spec(Duration::from_millis(300)))).await;
    let body = order_json(SLOW);
    let mut c = tokio::net::TcpStream::connect(addr)
        .await
        .expect("a connection");
    let req = format!(
        "POST /v1/risk HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.expect("sent");
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(c);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(post_json(addr, &order_json(1)).await.status, StatusCode::OK);
    let _ = stop.send(());
    let summary = run.await.expect("the server task");
    assert_eq!(
        (summary.accepted, summary.answered, summary.cancelled),
        (2, 1, 1),
        "{summary:?}"
    );
    assert!(summary.clean(), "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_answer_400_and_never_reach_the_kernel() {
    let (addr, stop, run, svc) = start(Config::local(), None).await;
    let bad_json = [
        "not json",
        r#"{"id":1}"#,
        r#"{"id":1,"account":1,"symbol":"SYM000","side":"buy","qty":10,"price":100.5,"x":1}"#,
        r#"{"id":1,"account":1,"symbol":"SYM000","side":"hold","qty":10,"price":100.5}"#,
        r#"{"id":1,"account":1,"symbol":"SYM000","side":"buy","qty":0,"price":100.5}"#,
        r#"{"id":1,"account":1,"symbol":"SYM000","side":"buy","qty":10,"price":-3}"#,
        r#"{"id":1,"account":1,"symbol":"SYM000","side":"buy","qty":10,"price":1e300}"#,
    ];
    for b in bad_json {
        let r = post_json(addr, b).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{b}");
        assert!(body_json(&r)["error"].is_string());
    }
    let short = send(
        addr,
        "POST",
        "/v1/risk",
        "application/octet-stream",
        Bytes::from_static(&[0; 31]),
    )
    .await;
    assert_eq!(short.status, StatusCode::BAD_REQUEST);
    let wire = WireOrder {
        id: 1,
        qty: 1,
        price: 0,
        account: 1,
        symbol_side: 0,
    };
    let zero_price = send(
        addr,
        "POST",
        "/v1/risk",
        "application/octet-stream",
        Bytes::copy_from_slice(gyre::bytemuck::bytes_of(&wire)),
    )
    .await;
    assert_eq!(zero_price.status, StatusCode::BAD_REQUEST);
    // Well formed, but of no symbol or account the service knows: 422.
    let unknown = r#"{"id":1,"account":1,"symbol":"NOPE","side":"buy","qty":10,"price":100.5}"#;
    assert_eq!(
        post_json(addr, unknown).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let k = svc.kernel.expect("a kernel");
    assert_eq!(
        k.telemetry().expect("telemetry").messages_in,
        0,
        "nothing reached the kernel"
    );
    stop_clean(stop, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_gyre_and_http_latency() {
    let (addr, stop, run, _svc) = start(Config::local(), None).await;
    for i in 0..20 {
        assert_eq!(post_json(addr, &order_json(i)).await.status, StatusCode::OK);
    }
    let m = get(addr, "/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    let text = String::from_utf8(m.body.to_vec()).expect("text");
    for needle in [
        "gyre_messages_out_total{kernel=\"risk\"}",
        "gyre_kernel_state{kernel=\"risk\"}",
        "gyre_queue_depth_requests{kernel=\"risk\"}",
        "http_request_duration_seconds_bucket{route=\"/v1/risk\",status=\"200\",le=\"0.001\"}",
        "http_requests_total{route=\"/v1/risk\",status=\"200\"}",
    ] {
        assert!(text.contains(needle), "/metrics lacks {needle}:\n{text}");
    }
    stop_clean(stop, run).await;
}

/// SIGTERM mid-load, to the binary: it stops accepting, answers everything it accepted,
/// shuts the kernel down (the export file goes), and exits 0 within 2 s.
#[test]
fn sigterm_mid_load_answers_everything_accepted_and_exits_0_within_2s() {
    let shm = std::env::temp_dir().join(format!("gyre-service-test-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_gyre-service"))
        .args([
            "--backend",
            "cpu",
            "--listen",
            "127.0.0.1:0",
            "--export",
            "svc-test",
        ])
        .env("GYRE_SHM_DIR", &shm)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the binary starts");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut head = Vec::new();
    for _ in 0..3 {
        let mut l = String::new();
        out.read_line(&mut l).expect("a line");
        head.push(l.trim().to_owned());
    }
    let addr: SocketAddr = head[0]
        .strip_prefix("listening http://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("a listening line: {head:?}"));
    let export = std::path::PathBuf::from(
        head[2]
            .strip_prefix("telemetry_export ")
            .expect("the export path"),
    );
    assert!(
        export.exists(),
        "the kernel exports its telemetry at {}",
        export.display()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let load = rt.spawn(async move {
        load::run(&LoadConfig {
            target: addr,
            rate: 2000.0,
            duration: Duration::from_secs(3),
            warmup: Duration::ZERO,
            concurrency: 64,
            binary: false,
            seed: 11,
            request_timeout: Duration::from_secs(10),
        })
        .await
    });
    std::thread::sleep(Duration::from_millis(1200));
    // SAFETY: kill(2) on the child this test spawned and has not reaped.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let sent = Instant::now();
    let status = child.wait().expect("the child ends");
    let took = sent.elapsed();
    let report = rt.block_on(load).expect("the load task");
    let mut rest = String::new();
    for l in out.lines() {
        rest.push_str(&l.expect("a line"));
        rest.push('\n');
    }
    let field = |k: &str| -> String {
        rest.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("no {k} in {rest}"))
    };
    assert!(status.success(), "exit status {status}: {rest}");
    let stop_ms: f64 = field("stop_ms").parse().expect("a number");
    assert!(stop_ms <= 2000.0, "the stop took {stop_ms} ms");
    // The process itself ends right after (generous for a loaded 2-core machine).
    assert!(
        took < Duration::from_millis(2500),
        "exit {took:?} after SIGTERM"
    );
    let accepted: u64 = field("requests_accepted").parse().expect("a number");
    let answered: u64 = field("requests_answered").parse().expect("a number");
    assert_eq!(
        accepted, answered,
        "every accepted request answered: {rest}"
    );
    // Every reply the server sent reached the client, and each was a 200; what it never
    // accepted (after the listener closed) failed to connect.
    let replies: u64 = report.by_status.values().sum();
    assert_eq!(replies, answered, "{:?}", report.by_status);
    assert_eq!(report.ok(), replies, "{:?}", report.by_status);
    assert!(answered >= 500, "load ran before the signal: {answered}");
    assert!(
        report.transport_errors > 0,
        "requests after the stop were refused"
    );
    assert_eq!(field("kernel_shutdown"), "ok");
    assert!(!export.exists(), "the export file is removed at shutdown");
    let _ = std::fs::remove_dir_all(&shm);
}
