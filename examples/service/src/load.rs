//! `gyre-load`'s engine: an open-loop load generator with coordinated-omission
//! correction, as wrk2 does it.
//!
//! Requests are scheduled at a fixed rate, request `i` at `start + i / rate`, whatever
//! happened to the ones before it, and each one's latency is measured **from its
//! scheduled time**, not from when it was sent. A server that stalls for 100 ms therefore
//! shows 100 ms of latency on every request scheduled in that window, as its users would
//! see it, instead of one slow sample (a closed loop that waits for each reply before
//! sending the next hides the stall: coordinated omission).
//!
//! A dispatcher thread of its own keeps the schedule: it sleeps with a timer slack of
//! 1 ns (`PR_SET_TIMERSLACK`), so its lateness is microseconds, not the tokio timer's
//! millisecond. At most `concurrency` requests are in flight: when all are, the next
//! waits for one to end, and its wait counts in its latency. The schedule's own lateness
//! (how late the dispatcher woke for a request it was on time for) is reported apart, as
//! `dispatch_lag_p99_us`, so a result can be told from the generator's noise. A request
//! with no reply within its timeout is given up, counted and timed at that point.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::http::OCTET_STREAM;
use crate::risk::{OrderJson, RefData, Side, WireOrder, TICKS_PER_UNIT};

/// One run at one rate and one concurrency.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The service.
    pub target: SocketAddr,
    /// Requests per second.
    pub rate: f64,
    /// How long to measure.
    pub duration: Duration,
    /// Sent before the measurement at the same rate, not recorded (connections open,
    /// caches warm).
    pub warmup: Duration,
    /// At most this many requests in flight.
    pub concurrency: usize,
    /// Send the binary form instead of JSON.
    pub binary: bool,
    /// The order stream's seed.
    pub seed: u64,
    /// A request with no reply after this long is given up and counted as a timeout
    /// (its latency, this long or more, is recorded).
    pub request_timeout: Duration,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Latency from each request's scheduled time to the end of its reply, in ns: of the
    /// `200` replies, and of the requests given up at `request_timeout` (so a stall stays
    /// in the tail). Other statuses are counted, not timed: a fast `503` would pull the
    /// percentiles down.
    pub latency: Histogram<u64>,
    /// How late the dispatcher sent requests it had a permit for, in ns.
    pub dispatch_lag: Histogram<u64>,
    /// Replies by HTTP status.
    pub by_status: BTreeMap<u16, u64>,
    /// Requests with no HTTP reply (connection refused or reset, a body cut short).
    pub transport_errors: u64,
    /// Requests given up after `request_timeout`.
    pub timeouts: u64,
    /// Requests still without an outcome when the run gave up on them (a second past the
    /// request timeout after its end; none unless the runtime starves).
    pub unfinished: u64,
    /// Requests scheduled in the measured window.
    pub scheduled: u64,
    /// From the first measured request's scheduled time to the last reply, or the
    /// configured duration if that is longer.
    pub window: Duration,
}

impl LoadReport {
    /// `200` replies per second of the window.
    pub fn achieved_rate(&self) -> f64 {
        self.ok() as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// Replies with status 200.
    pub fn ok(&self) -> u64 {
        self.by_status.get(&200).copied().unwrap_or(0)
    }

    /// Everything that was not a 200.
    pub fn errors(&self) -> u64 {
        self.scheduled.saturating_sub(self.ok())
    }

    /// A latency quantile, in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1e3
    }

    /// `key value` lines, each key prefixed with `prefix.`: `p50_us`, `p99_us`,
    /// `p99_9_us`, `max_us`, `rate_target`, `rate_achieved`, `scheduled`, `ok`,
    /// `status_<code>`, `transport_errors`, `timeouts`, `unfinished`,
    /// `dispatch_lag_p99_us`.
    pub fn lines(&self, prefix: &str, rate: f64) -> Vec<(String, String)> {
        let mut v = vec![
            ("p50_us", format!("{:.1}", self.quantile_us(0.5))),
            ("p99_us", format!("{:.1}", self.quantile_us(0.99))),
            ("p99_9_us", format!("{:.1}", self.quantile_us(0.999))),
            ("max_us", format!("{:.1}", self.latency.max() as f64 / 1e3)),
            ("rate_target", format!("{rate:.0}")),
            ("rate_achieved", format!("{:.0}", self.achieved_rate())),
            ("scheduled", self.scheduled.to_string()),
            ("ok", self.ok().to_string()),
        ]
        .into_iter()
        .map(|(k, val)| (format!("{prefix}.{k}"), val))
        .collect::<Vec<_>>();
        for (code, n) in &self.by_status {
            if *code != 200 {
                v.push((format!("{prefix}.status_{code}"), n.to_string()));
            }
        }
        v.push((
            format!("{prefix}.transport_errors"),
            self.transport_errors.to_string(),
        ));
        v.push((format!("{prefix}.timeouts"), self.timeouts.to_string()));
        v.push((format!("{prefix}.unfinished"), self.unfinished.to_string()));
        v.push((
            format!("{prefix}.dispatch_lag_p99_us"),
            format!(
                "{:.1}",
                self.dispatch_lag.value_at_quantile(0.99) as f64 / 1e3
            ),
        ));
        v
    }
}

/// A deterministic stream of orders, mostly accepted: random symbols and sides, 1..=1000
/// lots, prices within 6% of the reference (so about one in six is outside the 5%
/// collar against the order and rejected).
pub struct Orders {
    state: u64,
    refdata: RefData,
    next_id: u64,
}

impl Orders {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed | 1,
            refdata: RefData::default(),
            next_id: 0,
        }
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The next order: its JSON form and its binary form.
    pub fn next_order(&mut self) -> (OrderJson, WireOrder) {
        let r = self.next_u64();
        let symbols = self.refdata.symbols();
        let sym = (r % symbols.len() as u64) as usize;
        let sell = (r >> 20) & 1 == 1;
        let qty = 1 + ((r >> 21) % 1000) as i64;
        let reference = symbols[sym].1;
        // -6% .. +6% of the reference, in basis points.
        let bps = ((r >> 32) % 1201) as i64 - 600;
        let price = reference + reference * bps / 10_000;
        let account = ((r >> 44) % u64::from(self.refdata.accounts())) as u32;
        self.next_id += 1;
        let json = OrderJson {
            id: self.next_id,
            account,
            symbol: symbols[sym].0.clone(),
            side: if sell { Side::Sell } else { Side::Buy },
            qty,
            price: price as f64 / TICKS_PER_UNIT as f64,
        };
        let wire = WireOrder {
            id: self.next_id,
            qty,
            price,
            account,
            symbol_side: sym as u32 | (u32::from(sell) << 31),
        };
        (json, wire)
    }

    /// The next order as a request body, and its content type.
    pub fn next_body(&mut self, binary: bool) -> (Bytes, &'static str) {
        let (json, wire) = self.next_order();
        if binary {
            (
                Bytes::copy_from_slice(gyre::bytemuck::bytes_of(&wire)),
                OCTET_STREAM,
            )
        } else {
            // Serializing a struct of plain fields cannot fail.
            let body = serde_json::to_vec(&json).unwrap_or_default();
            (Bytes::from(body), "application/json")
        }
    }
}

/// One recorded outcome.
enum Outcome {
    Status(u16),
    Transport,
    Timeout,
}

/// Replies by status, transport errors, timeouts.
type Counts = (BTreeMap<u16, u64>, u64, u64);

struct Shared {
    latency: Mutex<Histogram<u64>>,
    outcomes: Mutex<Counts>,
    /// When the last measured request ended.
    last_done: Mutex<Option<Instant>>,
}

fn histogram() -> Histogram<u64> {
    // 1 ns .. 100 s at 3 significant digits; the bounds are valid, so this cannot fail.
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

/// Sets this thread's timer slack to 1 ns, so its sleeps end when asked (Linux; elsewhere
/// nothing happens).
fn tight_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long and changes only this thread's
    // timer slack; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Runs `cfg` against its target: a warm-up, then the measured window; waits for the
/// requests of the window to end (at most 10 s after it).
///
/// Must be called from within a multi-thread tokio runtime: requests run as tasks of it,
/// the schedule on a thread of its own.
pub async fn run(cfg: &LoadConfig) -> LoadReport {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(cfg.concurrency.max(1))
        .build_http();
    let shared = Arc::new(Shared {
        latency: Mutex::new(histogram()),
        outcomes: Mutex::new((BTreeMap::new(), 0, 0)),
        last_done: Mutex::new(None),
    });
    let permits = Arc::new(Semaphore::new(
        cfg.concurrency
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize)),
    ));
    let handle = tokio::runtime::Handle::current();
    let uri: hyper::Uri = format!("http://{}/v1/risk", cfg.target)
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("http://127.0.0.1/v1/risk"));
    let interval = Duration::from_secs_f64(1.0 / cfg.rate.max(1e-3));
    let warm = (cfg.warmup.as_secs_f64() * cfg.rate) as u64;
    let total = warm + (cfg.duration.as_secs_f64() * cfg.rate) as u64;
    let (binary, seed, request_timeout) = (cfg.binary, cfg.seed, cfg.request_timeout);
    let sh = shared.clone();
    let p = permits.clone();
    let dispatcher = std::thread::Builder::new()
        .name("gyre-load-dispatch".into())
        .spawn(move || {
            tight_timer_slack();
            let mut orders = Orders::new(seed);
            let mut lag = histogram();
            let start = Instant::now() + Duration::from_millis(5);
            let measured_from = start + interval.mul_f64(warm as f64);
            for i in 0..total {
                let due = start + interval.mul_f64(i as f64);
                let now = Instant::now();
                let slept = due > now;
                if slept {
                    std::thread::sleep(due - now);
                }
                let permit = match p.clone().try_acquire_owned() {
                    Ok(permit) => {
                        // The generator's own lateness: only where it was on time to
                        // sleep (behind, after a wait for a permit, it is the server's).
                        if slept {
                            let _ = lag.record(due.elapsed().as_nanos().max(1) as u64);
                        }
                        permit
                    }
                    // All in flight: wait (the wait counts in the request's latency).
                    Err(_) => match handle.block_on(p.clone().acquire_owned()) {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                };
                let (body, ctype) = orders.next_body(binary);
                let req = Request::post(uri.clone())
                    .header(hyper::header::CONTENT_TYPE, ctype)
                    .body(Full::new(body));
                let Ok(req) = req else { break };
                let client = client.clone();
                let sh = sh.clone();
                let measured = i >= warm;
                handle.spawn(async move {
                    let exchange = async {
                        match client.request(req).await {
                            Ok(resp) => {
                                let status = resp.status().as_u16();
                                match resp.into_body().collect().await {
                                    Ok(_) => Outcome::Status(status),
                                    Err(_) => Outcome::Transport,
                                }
                            }
                            Err(_) => Outcome::Transport,
                        }
                    };
                    let outcome = tokio::time::timeout(request_timeout, exchange)
                        .await
                        .unwrap_or(Outcome::Timeout);
                    let took = due.elapsed().as_nanos() as u64;
                    if measured {
                        if matches!(outcome, Outcome::Status(200) | Outcome::Timeout) {
                            let _ = sh.latency.lock().record(took.max(1));
                        }
                        let mut o = sh.outcomes.lock();
                        match outcome {
                            Outcome::Status(s) => *o.0.entry(s).or_insert(0) += 1,
                            Outcome::Transport => o.1 += 1,
                            Outcome::Timeout => o.2 += 1,
                        }
                        let now = Instant::now();
                        let mut last = sh.last_done.lock();
                        if last.is_none_or(|l| l < now) {
                            *last = Some(now);
                        }
                    }
                    // Last: the run's end waits for every permit, so for every record.
                    drop(permit);
                });
            }
            (lag, measured_from)
        });
    let fallback = || (histogram(), Instant::now());
    let (dispatch_lag, measured_from) = match dispatcher {
        Ok(t) => {
            // The dispatcher blocks on the runtime only through `block_on` of a permit;
            // joining it from a blocking section keeps this worker free.
            tokio::task::spawn_blocking(move || t.join().unwrap_or_else(|_| fallback()))
                .await
                .unwrap_or_else(|_| fallback())
        }
        Err(_) => fallback(),
    };
    // Wait for the requests in flight: every permit back (each request ends by its
    // timeout), with a second of grace.
    let n = u32::try_from(cfg.concurrency.max(1)).unwrap_or(u32::MAX);
    let all_back = tokio::time::timeout(
        cfg.request_timeout + Duration::from_secs(1),
        permits.acquire_many(n),
    )
    .await;
    let scheduled = (cfg.duration.as_secs_f64() * cfg.rate) as u64;
    let latency = shared.latency.lock().clone();
    let (by_status, transport_errors, timeouts) = shared.outcomes.lock().clone();
    let done = by_status.values().sum::<u64>() + transport_errors + timeouts;
    // The window the replies took: the schedule's, or longer when the service fell
    // behind it (the achieved rate is then below the target).
    let took = shared.last_done.lock().map_or(Duration::ZERO, |l| {
        l.saturating_duration_since(measured_from)
    });
    LoadReport {
        latency,
        dispatch_lag,
        by_status,
        transport_errors,
        timeouts,
        unfinished: if all_back.is_ok() {
            0
        } else {
            scheduled.saturating_sub(done)
        },
        scheduled,
        window: took.max(cfg.duration),
    }
}
