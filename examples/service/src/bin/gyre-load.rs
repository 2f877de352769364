//! `gyre-load`: open-loop load against `gyre-service`, with coordinated-omission
//! correction (see `gyre_service::load`).
//!
//! With `--url` it drives a service already running. Without, it compares engines in one
//! run: for each of `--engines` (default: `inline`, `cpu`, and `cuda` when this machine
//! has a usable CUDA device) it starts a `gyre-service` of that backend (the binary next
//! to this one, or `--service-bin`), drives it at every rate and concurrency, stops it,
//! and prints each engine's figures and its difference from `inline`: gyre's cost end to
//! end. Output: `key value` lines, or `--json`.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use clap::Parser;
use gyre_service::load::{self, LoadConfig, LoadReport};

#[derive(Parser, Debug)]
#[command(name = "gyre-load", version)]
struct Args {
    /// A running service (`http://host:port`); without it, engines are started and
    /// compared.
    #[arg(long)]
    url: Option<String>,
    /// The engines to start and compare: `inline` (no gyre) and gyre backends (`cpu`,
    /// `cuda`, `opencl`, ...); default `inline,cpu`, plus `cuda` when usable here.
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Requests per second, one run each (0.001 ..= 10 000 000).
    #[arg(long, value_delimiter = ',', default_value = "1000,5000", value_parser = rate)]
    rates: Vec<f64>,
    /// Requests in flight at most, one run each (1 ..= 65 536).
    #[arg(long, value_delimiter = ',', default_value = "1,64,512",
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    concurrency: Vec<u32>,
    /// Seconds measured per run.
    #[arg(long, default_value = "5", value_parser = seconds)]
    duration: Duration,
    /// Seconds of warm-up before each run, not recorded.
    #[arg(long, default_value = "1", value_parser = seconds)]
    warmup: Duration,
    /// Seconds after which a request with no reply is given up (a timeout).
    #[arg(long, default_value = "10", value_parser = seconds)]
    request_timeout: Duration,
    /// Send the binary form of orders instead of JSON.
    #[arg(long)]
    binary: bool,
    /// Print one JSON document instead of `key value` lines.
    #[arg(long)]
    json: bool,
    /// The `gyre-service` binary (default: the one next to this binary).
    #[arg(long)]
    service_bin: Option<PathBuf>,
    /// Extra flags for every started service (repeat), e.g. `--service-arg=--capacity=4096`.
    #[arg(long)]
    service_arg: Vec<String>,
}

fn rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.001..=1e7).contains(&r) => Ok(r),
        _ => Err(format!(
            "{s}: a rate from 0.001 to 10000000 requests a second"
        )),
    }
}

fn seconds(s: &str) -> Result<Duration, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| (0.0..=86_400.0).contains(v))
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .ok_or_else(|| format!("{s}: seconds from 0 to 86400"))
}

/// One engine's started service.
struct Started {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Started {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid this process spawned and has not reaped; it touches
        // no memory.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

fn start(bin: &PathBuf, engine: &str, extra: &[String]) -> Result<Started, String> {
    let mut child = Command::new(bin)
        .args([
            "--backend",
            engine,
            "--listen",
            "127.0.0.1:0",
            "--export",
            "",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let Some(out) = child.stdout.take() else {
        return Err("no stdout".into());
    };
    let mut line = String::new();
    let read = BufReader::new(out).read_line(&mut line);
    let addr = line
        .trim()
        .strip_prefix("listening http://")
        .and_then(|a| a.parse().ok());
    match (read, addr) {
        (Ok(_), Some(addr)) => Ok(Started { child, addr }),
        _ => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            Err(format!(
                "gyre-service --backend {engine} did not start ({status})"
            ))
        }
    }
}

fn cuda_usable() -> Result<(), String> {
    gyre::backends()
        .into_iter()
        .find(|b| b.name == "cuda")
        .map_or(Err("not compiled".into()), |b| b.available)
}

fn parse_url(u: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let hostport = u.trim_start_matches("http://").trim_end_matches('/');
    hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("--url {u}: expected http://host:port"))
}

struct Row {
    engine: String,
    rate: f64,
    concurrency: u32,
    report: LoadReport,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gyre-load: {e}");
            return ExitCode::from(2);
        }
    };
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    // A requested engine that did not start: the run measured less than it was asked to.
    let mut failed = false;
    // (label, a running service's address, or None: start that engine)
    let mut targets: Vec<(String, Option<SocketAddr>)> = Vec::new();
    let bin = args.service_bin.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("gyre-service")))
            .unwrap_or_else(|| PathBuf::from("gyre-service"))
    });
    if let Some(u) = &args.url {
        match parse_url(u) {
            Ok(a) => targets.push(("target".into(), Some(a))),
            Err(e) => {
                eprintln!("gyre-load: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        if !bin.exists() {
            eprintln!(
                "gyre-load: no gyre-service binary at {} (build it first: cargo build \
                 --release -p gyre-service; or pass --service-bin or --url)",
                bin.display()
            );
            return ExitCode::from(2);
        }
        let mut engines = args.engines.clone();
        if engines.is_empty() {
            engines = vec!["inline".into(), "cpu".into()];
            match cuda_usable() {
                Ok(()) => engines.push("cuda".into()),
                Err(why) => lines.push(("cuda.skipped".into(), why.replace('\n', " "))),
            }
        }
        targets.extend(engines.into_iter().map(|e| (e, None)));
    }
    // One engine at a time, started just before its runs and stopped after them, so two
    // engines never share the machine.
    for (engine, running) in targets {
        let (addr, started) = match running {
            Some(a) => (a, None),
            None => match start(&bin, &engine, &args.service_arg) {
                Ok(s) => (s.addr, Some(s)),
                Err(why) => {
                    lines.push((format!("{engine}.skipped"), why));
                    failed = true;
                    continue;
                }
            },
        };
        for &rate in &args.rates {
            for &c in &args.concurrency {
                let cfg = LoadConfig {
                    target: addr,
                    rate,
                    duration: args.duration,
                    warmup: args.warmup,
                    concurrency: c as usize,
                    binary: args.binary,
                    seed: 0x5eed,
                    request_timeout: args.request_timeout,
                };
                let report = rt.block_on(load::run(&cfg));
                rows.push(Row {
                    engine: engine.clone(),
                    rate,
                    concurrency: c,
                    report,
                });
            }
        }
        drop(started);
    }
    for r in &rows {
        let prefix = format!("{}.rate{}.conc{}", r.engine, r.rate, r.concurrency);
        lines.extend(r.report.lines(&prefix, r.rate));
    }
    // gyre's cost end to end: each engine's latency minus inline's at the same load.
    for r in rows.iter().filter(|r| r.engine != "inline") {
        let Some(base) = rows
            .iter()
            .find(|b| b.engine == "inline" && b.rate == r.rate && b.concurrency == r.concurrency)
        else {
            continue;
        };
        let prefix = format!(
            "{}_minus_inline.rate{}.conc{}",
            r.engine, r.rate, r.concurrency
        );
        for (q, name) in [(0.5, "p50_us"), (0.99, "p99_us")] {
            lines.push((
                format!("{prefix}.{name}"),
                format!(
                    "{:.1}",
                    r.report.quantile_us(q) - base.report.quantile_us(q)
                ),
            ));
        }
    }
    let mut out = std::io::stdout();
    if args.json {
        let map: serde_json::Map<String, serde_json::Value> = lines
            .into_iter()
            .map(|(k, v)| {
                let val = v
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(serde_json::Value::String(v), serde_json::Value::Number);
                (k, val)
            })
            .collect();
        let _ = writeln!(out, "{}", serde_json::Value::Object(map));
    } else {
        for (k, v) in lines {
            let _ = writeln!(out, "{k} {v}");
        }
    }
    // Measured nothing, or lost requests on the way: not a result to trust.
    if failed || rows.is_empty() || rows.iter().any(|r| r.report.transport_errors > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
