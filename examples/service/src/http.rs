//! The HTTP surface: `POST /v1/risk` (JSON, or the binary [`WireOrder`]), `GET /healthz`
//! and `GET /metrics`, and the middleware that gives every request its span, its latency
//! sample and its place in the accepted / answered count.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gyre::bytemuck;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::Instrument;

use crate::engine::{Engine, Reject};
use crate::risk::{BadOrder, Decision, DecisionJson, OrderJson, RefData, WireOrder};

/// The binary form's media type.
pub const OCTET_STREAM: &str = "application/octet-stream";

/// The HTTP latency histogram's buckets, in seconds (10 us .. 1 s).
const BUCKETS: [f64; 15] = [
    10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3,
    500e-3, 1.0,
];

/// What every request handler shares.
pub struct AppState {
    /// Where decisions are made.
    pub engine: Engine,
    /// Reference prices and account limits.
    pub refdata: RefData,
    /// A 503's `Retry-After`.
    pub retry_after: HeaderValue,
    /// Requests whose handling started.
    pub accepted: AtomicU64,
    /// Requests answered (any status).
    pub answered: AtomicU64,
    /// Requests whose client went away before the answer (counted as status 499).
    pub cancelled: AtomicU64,
    metrics: PrometheusHandle,
}

impl AppState {
    /// The state of a service over `engine`.
    pub fn new(engine: Engine, refdata: RefData, retry_after_s: u64) -> Self {
        Self {
            engine,
            refdata,
            retry_after: HeaderValue::from(retry_after_s),
            accepted: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            metrics: prometheus(),
        }
    }
}

/// The process's Prometheus recorder: installed by the first service (a test process may
/// run several); where another recorder was installed first, one of our own that only
/// `/metrics` renders (the `metrics` macros then go to the other).
fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("http_request_duration_seconds".into()),
                    &BUCKETS,
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!(
                    "a metrics recorder was installed already: /metrics shows only gyre's own"
                );
            }
            handle
        })
        .clone()
}

/// The service's routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/risk", post(risk))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// Per request: a span, the accepted / answered / cancelled counts, the in-flight gauge
/// and the latency histogram (never anything per message inside gyre).
async fn track(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route: &'static str = match req.uri().path() {
        "/v1/risk" => "/v1/risk",
        "/healthz" => "/healthz",
        "/metrics" => "/metrics",
        _ => "other",
    };
    let span = tracing::info_span!("request", method = %req.method(), route, status = tracing::field::Empty);
    // Counts the request as cancelled unless it is answered: hyper drops this future when
    // the client goes away first.
    let mut guard = InFlight::new(&s, route);
    let resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    span.record("status", status);
    guard.answered(status);
    resp
}

/// One request in flight: counted in on creation, out (answered, or cancelled when
/// dropped first) exactly once.
struct InFlight<'a> {
    s: &'a AppState,
    route: &'static str,
    start: Instant,
    done: bool,
}

impl<'a> InFlight<'a> {
    fn new(s: &'a AppState, route: &'static str) -> Self {
        s.accepted.fetch_add(1, Relaxed);
        metrics::gauge!("http_requests_in_flight").increment(1.0);
        Self {
            s,
            route,
            start: Instant::now(),
            done: false,
        }
    }

    fn finish(&mut self, status: u16) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        metrics::gauge!("http_requests_in_flight").decrement(1.0);
        let status = status.to_string();
        metrics::histogram!("http_request_duration_seconds", "route" => self.route, "status" => status.clone())
            .record(self.start.elapsed().as_secs_f64());
        metrics::counter!("http_requests_total", "route" => self.route, "status" => status)
            .increment(1);
    }

    fn answered(&mut self, status: u16) {
        self.finish(status);
        self.s.answered.fetch_add(1, Relaxed);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            // 499: the client closed the request (nginx's convention).
            self.finish(499);
            self.s.cancelled.fetch_add(1, Relaxed);
        }
    }
}

fn is_binary(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(OCTET_STREAM))
}

fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": msg.to_string() })),
    )
        .into_response()
}

fn bad_order(e: BadOrder) -> Response {
    let status = match e {
        BadOrder::Malformed(_) | BadOrder::OutOfRange { .. } => StatusCode::BAD_REQUEST,
        BadOrder::UnknownSymbol(_) | BadOrder::UnknownAccount(_) => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
    };
    error(status, e)
}

/// `POST /v1/risk`.
async fn risk(State(s): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let binary = is_binary(&headers);
    let order = if binary {
        match bytemuck::try_pod_read_unaligned::<WireOrder>(&body) {
            Ok(w) => s.refdata.enrich_wire(&w),
            Err(_) => Err(BadOrder::Malformed(format!(
                "a binary order is {} bytes, not {}",
                size_of::<WireOrder>(),
                body.len()
            ))),
        }
    } else {
        serde_json::from_slice::<OrderJson>(&body)
            .map_err(|e| BadOrder::Malformed(e.to_string()))
            .and_then(|o| s.refdata.enrich_json(&o))
    };
    let order = match order {
        Ok(o) => o,
        Err(e) => return bad_order(e),
    };
    match s.engine.decide(order).await {
        Ok(d) if binary => decision_bytes(d),
        Ok(d) => Json(DecisionJson::from(d)).into_response(),
        Err(r) => reject(&s, r),
    }
}

fn decision_bytes(d: Decision) -> Response {
    let mut r = Response::new(Body::from(bytemuck::bytes_of(&d).to_vec()));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(OCTET_STREAM));
    r
}

fn reject(s: &AppState, r: Reject) -> Response {
    let status = match r {
        Reject::Full { .. } | Reject::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        Reject::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        Reject::Faulted(_) | Reject::Other(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut resp = error(status, &r);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, s.retry_after.clone());
    }
    resp
}

/// `GET /healthz`: `200` while the kernel takes requests, `503` (with `Retry-After`)
/// while it relaunches after a fault or once it stopped for good.
async fn healthz(State(s): State<Arc<AppState>>) -> Response {
    let (ok, state) = match s.engine.health() {
        Ok(st) => (true, st),
        Err(st) => (false, st),
    };
    let mut body = serde_json::json!({
        "status": if ok { "ok" } else { "unavailable" },
        "backend": s.engine.backend_name(),
        "state": format!("{state:?}"),
    });
    if let Some(k) = s.engine.kernel() {
        let r = k.relaunches();
        body["kernel"] = k.name().into();
        body["strategy"] = format!("{:?}", k.transfer_strategy()).into();
        body["restarts"] = r.restarts.into();
        body["capacity"] = k.capacity().into();
    }
    let mut resp = Json(body).into_response();
    if !ok {
        *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        resp.headers_mut()
            .insert(header::RETRY_AFTER, s.retry_after.clone());
    }
    resp
}

/// `GET /metrics`: Prometheus text; the kernel's telemetry is recorded at each scrape.
async fn metrics_text(State(s): State<Arc<AppState>>) -> Response {
    if let Some(k) = s.engine.kernel() {
        if let Err(e) = k.record_metrics() {
            tracing::debug!(error = %e, "no telemetry snapshot this scrape");
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        s.metrics.render(),
    )
        .into_response()
}

/// The counts a stopped service reports: accepted, answered, cancelled.
pub fn counts(s: &AppState) -> (u64, u64, u64) {
    (
        s.accepted.load(Relaxed),
        s.answered.load(Relaxed),
        s.cancelled.load(Relaxed),
    )
}

/// Keeps the Prometheus histograms bounded: without a scrape their samples would pile up.
pub async fn upkeep(s: Arc<AppState>) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        every.tick().await;
        s.metrics.run_upkeep();
    }
}
