//! A hand-written progress bar on stderr, fed by a shared counter.
//!
//! Only drawn when stderr is a terminal and the run has lasted about a second; redrawn
//! in place with `\r` at most ten times per second; erased when done.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How often the bar is redrawn.
const TICK: Duration = Duration::from_millis(100);
/// Runs shorter than this never show a bar.
const SHOW_AFTER: Duration = Duration::from_secs(1);
/// Width of the bar itself, in cells.
const BAR_CELLS: usize = 30;

/// Shared between the producers (who add to `done`) and the drawing thread.
#[derive(Debug, Default)]
pub struct Progress {
    /// Messages completed so far (producers add in batches, relaxed).
    pub done: AtomicU64,
    /// Set once the run is over; the drawing thread then erases the bar and returns.
    pub finished: AtomicBool,
}

impl Progress {
    /// Whether a bar should be drawn at all (stderr is a terminal).
    pub fn wanted() -> bool {
        std::io::stderr().is_terminal()
    }

    /// The drawing loop: run on its own thread; returns once `finished` is set (unpark
    /// the thread to make it notice at once).
    pub fn draw_until_finished(&self, total: u64, start: Instant) {
        let mut shown = false;
        let mut width = 0;
        while !self.finished.load(Relaxed) {
            std::thread::park_timeout(TICK);
            if self.finished.load(Relaxed) {
                break;
            }
            let elapsed = start.elapsed();
            if elapsed < SHOW_AFTER {
                continue;
            }
            let line = render(self.done.load(Relaxed), total, elapsed);
            width = width.max(line.chars().count());
            // Best effort: a failing stderr must not stop the run.
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{line}");
            let _ = err.flush();
            shown = true;
        }
        if shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:width$}\r", "");
            let _ = err.flush();
        }
    }
}

/// One frame: `[#########.....]  45%  45000/100000 msgs  1.2 s`.
pub fn render(done: u64, total: u64, elapsed: Duration) -> String {
    let done = done.min(total);
    let fraction = |scale: u64| {
        done.saturating_mul(scale)
            .checked_div(total)
            .unwrap_or(scale)
    };
    let pct = fraction(100);
    let filled = usize::try_from(fraction(BAR_CELLS as u64))
        .unwrap_or(BAR_CELLS)
        .min(BAR_CELLS);
    format!(
        "[{}{}] {pct:>3}%  {done}/{total} msgs  {:.1} s",
        "#".repeat(filled),
        ".".repeat(BAR_CELLS - filled),
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let d = Duration::from_millis(1500);
        assert_eq!(
            render(0, 100, d),
            "[..............................]   0%  0/100 msgs  1.5 s"
        );
        assert_eq!(
            render(50, 100, d),
            "[###############...............]  50%  50/100 msgs  1.5 s"
        );
        // Over-counting and a zero total never overflow the bar.
        assert!(render(200, 100, d).contains("100%"));
        assert!(render(0, 0, d).contains("100%"));
    }
}
