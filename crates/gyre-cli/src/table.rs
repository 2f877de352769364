//! Output helpers: aligned two-column tables and human-readable units.

use std::io::{self, Write};
use std::time::Duration;

/// A titled table of `label  value` rows, labels padded to a common width.
#[derive(Debug, Default)]
pub struct Table {
    title: String,
    rows: Vec<(String, String)>,
}

impl Table {
    /// An empty table printed under `title`.
    pub fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, label: impl Into<String>, value: impl ToString) -> &mut Self {
        self.rows.push((label.into(), value.to_string()));
        self
    }

    /// Writes the title, then the rows indented by two spaces, then a blank line.
    pub fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{}", self.title)?;
        let width = self
            .rows
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        for (label, value) in &self.rows {
            writeln!(out, "  {label:<width$}  {value}")?;
        }
        writeln!(out)
    }
}

/// A nanosecond count in the largest unit that keeps it >= 1: `850 ns`, `12.3 µs`,
/// `4.56 ms`, `1.20 s`.
pub fn nanos(ns: u64) -> String {
    // Precision loss above 2^53 ns (104 days) is irrelevant for display.
    #[allow(clippy::cast_precision_loss)]
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{} µs", three_digits(f / 1e3))
    } else if ns < 1_000_000_000 {
        format!("{} ms", three_digits(f / 1e6))
    } else {
        format!("{} s", three_digits(f / 1e9))
    }
}

/// A duration in human units (see [`nanos`]).
pub fn duration(d: Duration) -> String {
    nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A number with a thousands separator every three digits: `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// About three significant digits: `1.23`, `12.3`, `123`.
fn three_digits(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A raw `gyre_abi::state` value in words.
pub fn state_name(s: u32) -> &'static str {
    use gyre_abi::state;
    match s {
        state::UNINIT => "not started",
        state::LAUNCHING => "launching",
        state::ACTIVE => "active",
        state::PAUSED => "paused",
        state::DRAINING => "draining",
        state::TERMINATED => "terminated",
        state::FAULTED => "faulted",
        state::HANDED_OVER => "relaunching",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(nanos(0), "0 ns");
        assert_eq!(nanos(999), "999 ns");
        assert_eq!(nanos(1_000), "1.00 µs");
        assert_eq!(nanos(12_345), "12.3 µs");
        assert_eq!(nanos(4_560_000), "4.56 ms");
        assert_eq!(nanos(123_400_000), "123 ms");
        assert_eq!(nanos(1_200_000_000), "1.20 s");
        assert_eq!(duration(Duration::from_micros(5)), "5.00 µs");
    }

    #[test]
    fn counts() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn table_aligns() {
        let mut t = Table::new("t");
        t.row("a", 1).row("long label", "x");
        let mut out = Vec::new();
        t.write_to(&mut out).ok();
        let s = String::from_utf8_lossy(&out);
        assert_eq!(s, "t\n  a           1\n  long label  x\n\n");
    }
}
