//! `gyre top`: a live table of the kernels that export their telemetry (see
//! `docs/telemetry.md`). Attaches read-only; never writes to an export file.

use std::collections::HashMap;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use gyre_core::loan::LoanStats;
use gyre_core::shm::{
    self, ExportError, ExportInfo, ExportSnapshot, LifecycleSnapshot, TelemetryReader,
};
use gyre_core::telemetry::{rates, Rates};

use crate::args::TopArgs;
use crate::signal;
use crate::table::{self, state_name};

/// A writer whose copy or kernel heartbeat is older than this is shown as stale.
pub const STALE_AFTER_MS: u64 = 2_000;

/// Why `gyre top` failed.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The export named with `--path` could not be read.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// Nothing to show.
    #[error(
        "no telemetry exports under {dir}{}; start a kernel with export_telemetry \
         (e.g. `gyre demo --serve`) or set GYRE_SHM_DIR",
        match .service { Some(s) => format!(" for service '{s}'"), None => String::new() }
    )]
    NoExports {
        /// The directory searched.
        dir: PathBuf,
        /// `--service`, if given.
        service: Option<String>,
    },
    /// The export directory could not be listed.
    #[error("listing {dir}: {source}")]
    List {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `--interval-ms 0`.
    #[error("invalid --interval-ms 0: must be at least 1")]
    Interval,
    /// Writing the table failed.
    #[error("writing output: {0}")]
    Output(#[from] io::Error),
}

/// One read of one export.
#[derive(Debug)]
enum Sample {
    Ok {
        info: ExportInfo,
        snap: Box<ExportSnapshot>,
        alive: bool,
        at: Instant,
    },
    Err(String),
}

/// `gyre top`, with its own error reporting (exit code 1 on error).
pub fn main(args: &TopArgs, out: &mut dyn Write) -> ExitCode {
    match run(args, out).and_then(|()| out.flush().map_err(TopError::from)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(TopError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::FAILURE,
        Err(e) => {
            let _ = out.flush();
            let _ = writeln!(io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `gyre top` until interrupted, or once with `--once`.
pub fn run(args: &TopArgs, out: &mut dyn Write) -> Result<(), TopError> {
    if args.interval_ms == 0 {
        return Err(TopError::Interval);
    }
    let interval = Duration::from_millis(args.interval_ms);
    let mut prev: HashMap<PathBuf, (Instant, ExportSnapshot)> = HashMap::new();
    if args.once {
        // Rates need two reads: sample, wait one interval, sample again.
        let first = sample_all(args)?;
        remember(&mut prev, &first);
        sleep_unless_stopped(interval);
        let second = sample_all(args)?;
        return render(out, &second, &prev, args, false).map_err(TopError::from);
    }
    signal::install_stop_handler().map_err(TopError::Output)?;
    let redraw = io::stdout().is_terminal();
    while !signal::stop_requested() {
        let rows = match sample_all(args) {
            Ok(rows) => rows,
            // Kernels come and go: an empty directory is a message, not the end.
            Err(e @ (TopError::NoExports { .. } | TopError::Export(_))) => {
                vec![(PathBuf::new(), Sample::Err(e.to_string()))]
            }
            Err(e) => return Err(e),
        };
        if redraw {
            // Home, clear screen.
            write!(out, "\x1b[H\x1b[2J")?;
        }
        render(out, &rows, &prev, args, true)?;
        out.flush()?;
        remember(&mut prev, &rows);
        sleep_unless_stopped(interval);
    }
    Ok(())
}

fn sleep_unless_stopped(d: Duration) {
    let end = Instant::now() + d;
    while !signal::stop_requested() {
        let now = Instant::now();
        if now >= end {
            break;
        }
        thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

fn remember(prev: &mut HashMap<PathBuf, (Instant, ExportSnapshot)>, rows: &[(PathBuf, Sample)]) {
    prev.clear();
    for (p, s) in rows {
        if let Sample::Ok { snap, at, .. } = s {
            prev.insert(p.clone(), (*at, **snap));
        }
    }
}

/// The export files to show: `--path`, or every file under the export directory.
fn paths(args: &TopArgs) -> Result<Vec<PathBuf>, TopError> {
    if let Some(p) = &args.path {
        return Ok(vec![p.clone()]);
    }
    let dir = shm::default_dir();
    let found = shm::discover(&dir, args.service.as_deref()).map_err(|source| TopError::List {
        dir: dir.clone(),
        source,
    })?;
    if found.is_empty() {
        return Err(TopError::NoExports {
            dir,
            service: args.service.clone(),
        });
    }
    Ok(found)
}

fn sample_all(args: &TopArgs) -> Result<Vec<(PathBuf, Sample)>, TopError> {
    let mut rows = Vec::new();
    for p in paths(args)? {
        let s = match read_one(&p) {
            Ok(s) => s,
            // With --path, an unreadable file is the answer; in a directory, one row.
            Err(e) if args.path.is_some() => return Err(e.into()),
            Err(e) => Sample::Err(e.to_string()),
        };
        rows.push((p, s));
    }
    Ok(rows)
}

fn read_one(path: &Path) -> Result<Sample, ExportError> {
    let r = TelemetryReader::open(path)?;
    let snap = Box::new(r.snapshot()?);
    Ok(Sample::Ok {
        info: r.info().clone(),
        snap,
        alive: r.writer_alive(),
        at: Instant::now(),
    })
}

const HEADERS: [&str; 17] = [
    "SERVICE",
    "KERNEL",
    "PID",
    "STATE",
    "IN/s",
    "OUT/s",
    "IN",
    "OUT",
    "REQ-Q",
    "REPLY-Q",
    "ERRORS",
    "ERR/s",
    "UTIL",
    "GEN",
    "RELOADS",
    "RESTARTS",
    "HEARTBEAT",
];

const POOL_HEADERS: [&str; 11] = [
    "SERVICE",
    "KERNEL",
    "POOL",
    "IN USE",
    "PEAK",
    "BLOCKS",
    "HITS",
    "MISSES",
    "RETURNS",
    "EXHAUSTED",
    "FRAG",
];

/// Bytes in KiB, MiB or GiB with one decimal (plain bytes below 1 KiB).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// One row of the loan-pool table.
fn pool_row(info: &ExportInfo, p: &LoanStats) -> Vec<String> {
    vec![
        info.service.clone(),
        info.kernel.clone(),
        bytes(p.pool_bytes),
        bytes(p.in_use_bytes),
        bytes(p.peak_in_use_bytes),
        table::count(p.in_use_blocks),
        table::count(p.hits),
        table::count(p.misses),
        table::count(p.returns),
        table::count(p.exhausted),
        format!("{:.0}%", p.fragmentation() * 100.0),
    ]
}

/// Whether a sample's writer is stale, and why.
fn staleness(snap: &ExportSnapshot, alive: bool, now_ms: u64) -> Option<String> {
    if !alive {
        return Some("stale: writer gone".into());
    }
    let published = now_ms.saturating_sub(snap.control.published_unix_ms);
    if published > STALE_AFTER_MS {
        return Some(format!(
            "stale: no update for {}",
            table::duration(Duration::from_millis(published))
        ));
    }
    let hb = now_ms.saturating_sub(snap.control.heartbeat_unix_ms);
    if hb > STALE_AFTER_MS && !gyre_abi::state::is_final(snap.control.state) {
        return Some("stale: kernel heartbeat stopped".into());
    }
    None
}

/// A line under the table for a kernel that was restarted after a fault: how often and
/// how long ago (operators want to see a crash loop, not only a count).
fn restart_note(l: &LifecycleSnapshot, now_ms: u64) -> Option<String> {
    if l.restarts == 0 {
        return None;
    }
    let ago = Duration::from_millis(now_ms.saturating_sub(l.last_restart_unix_ms));
    Some(format!(
        "restarted after a fault {} time{}, last {} ago",
        l.restarts,
        if l.restarts == 1 { "" } else { "s" },
        table::duration(ago)
    ))
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn rate(x: f64) -> String {
    table::count(x.max(0.0).round() as u64)
}

fn render(
    out: &mut dyn Write,
    rows: &[(PathBuf, Sample)],
    prev: &HashMap<PathBuf, (Instant, ExportSnapshot)>,
    args: &TopArgs,
    live: bool,
) -> io::Result<()> {
    let now_ms = shm::unix_ms();
    let mut cells: Vec<Vec<String>> = Vec::new();
    let mut pools: Vec<Vec<String>> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for (path, s) in rows {
        match s {
            Sample::Ok {
                info,
                snap,
                alive,
                at,
            } => {
                let r = match prev.get(path) {
                    Some((t0, s0)) => rates(&s0.telemetry, &snap.telemetry, at.duration_since(*t0)),
                    None => Rates::default(),
                };
                let t = &snap.telemetry;
                let c = &snap.control;
                let l = &snap.lifecycle;
                let mut state = state_name(c.state).to_owned();
                if c.error_code != 0 {
                    state = format!("{state} ({})", gyre_abi::error::name(c.error_code));
                }
                let hb = Duration::from_millis(now_ms.saturating_sub(c.heartbeat_unix_ms));
                let mut heartbeat = table::duration(hb);
                if let Some(why) = staleness(snap, *alive, now_ms) {
                    heartbeat = format!("{heartbeat} STALE");
                    notes.push(format!("{}: {why}", path.display()));
                }
                cells.push(vec![
                    info.service.clone(),
                    info.kernel.clone(),
                    info.pid.to_string(),
                    state,
                    rate(r.messages_in_per_s),
                    rate(r.messages_out_per_s),
                    table::count(t.messages_in),
                    table::count(t.messages_out),
                    c.requests_queued().to_string(),
                    c.replies_queued().to_string(),
                    table::count(t.errors),
                    rate(r.errors_per_s),
                    format!("{:.0}%", r.busy_ratio * 100.0),
                    l.generation.to_string(),
                    table::count(l.reloads),
                    table::count(l.restarts),
                    heartbeat,
                ]);
                if let Some(n) = restart_note(l, now_ms) {
                    notes.push(format!("{}: {n}", path.display()));
                }
                if snap.loans.pool_bytes > 0 {
                    pools.push(pool_row(info, &snap.loans));
                }
            }
            Sample::Err(msg) => notes.push(msg.clone()),
        }
    }
    let dir = match &args.path {
        Some(p) => p.display().to_string(),
        None => shm::default_dir().display().to_string(),
    };
    writeln!(
        out,
        "gyre top — {dir} — {} kernel{}{}",
        cells.len(),
        if cells.len() == 1 { "" } else { "s" },
        if live {
            format!(", every {} ms (Ctrl-C to quit)", args.interval_ms)
        } else {
            String::new()
        }
    )?;
    if !cells.is_empty() {
        write_table(out, &HEADERS, 4, &cells)?;
    }
    if !pools.is_empty() {
        writeln!(out, "loan pools")?;
        write_table(out, &POOL_HEADERS, 2, &pools)?;
    }
    for n in notes {
        writeln!(out, "  ! {n}")?;
    }
    Ok(())
}

/// Header and rows, each column padded to its widest cell (text left, numbers right).
fn write_table(
    out: &mut dyn Write,
    headers: &[&str],
    text_cols: usize,
    rows: &[Vec<String>],
) -> io::Result<()> {
    let mut w: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let left = |i: usize| i < text_cols;
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut s = String::new();
        for (i, c) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = w[i].saturating_sub(c.chars().count());
            if left(i) {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(&mut headers.iter().copied()))?;
    for r in rows {
        writeln!(out, "{}", line(&mut r.iter().map(String::as_str)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_when_writer_gone_or_silent() {
        let mut s = ExportSnapshot::default();
        s.control.state = gyre_abi::state::ACTIVE;
        s.control.published_unix_ms = 10_000;
        s.control.heartbeat_unix_ms = 10_000;
        assert_eq!(staleness(&s, true, 10_500), None);
        assert!(staleness(&s, false, 10_500).unwrap().contains("gone"));
        assert!(staleness(&s, true, 13_000).unwrap().contains("no update"));
        s.control.published_unix_ms = 13_000;
        assert!(staleness(&s, true, 13_000).unwrap().contains("heartbeat"));
        s.control.state = gyre_abi::state::TERMINATED;
        assert_eq!(staleness(&s, true, 13_000), None);
    }

    #[test]
    fn pool_rows_show_sizes_and_fragmentation() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(16 << 20), "16.0 MiB");
        let info = ExportInfo {
            service: "svc".into(),
            kernel: "k".into(),
            pid: 1,
            created_unix_ms: 0,
            abi_version: gyre_abi::ABI_VERSION,
        };
        let p = LoanStats {
            pool_bytes: 1 << 20,
            in_use_bytes: 3 << 10,
            free_bytes: 4096,
            largest_free_bytes: 1024,
            ..LoanStats::default()
        };
        let row = pool_row(&info, &p);
        assert_eq!(row.len(), POOL_HEADERS.len());
        assert_eq!((row[2].as_str(), row[3].as_str()), ("1.0 MiB", "3.0 KiB"));
        assert_eq!(row[10], "75%");
    }

    #[test]
    fn restarts_get_a_note_with_their_age() {
        let mut l = LifecycleSnapshot {
            generation: 3,
            reloads: 1,
            ..LifecycleSnapshot::default()
        };
        assert_eq!(restart_note(&l, 10_000), None, "reloads are no fault");
        l.restarts = 2;
        l.last_restart_unix_ms = 7_000;
        let n = restart_note(&l, 10_000).unwrap();
        assert!(n.contains("2 times") && n.contains("3"), "{n}");
    }

    #[test]
    fn table_columns_align() {
        let mut buf = Vec::new();
        let row = |k: &str| {
            let mut r = vec![String::from("svc"), k.to_owned()];
            r.extend((0..HEADERS.len() - 2).map(|i| "9".repeat(i % 3 + 1)));
            r
        };
        write_table(
            &mut buf,
            &HEADERS,
            4,
            &[row("echo"), row("a-much-longer-kernel")],
        )
        .unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let col = |l: &str| l.find("PID").or_else(|| l.find(" 9 ")).unwrap_or(0);
        assert!(col(lines[0]) > 0);
        assert_eq!(lines[1].len(), lines[2].len());
    }
}
