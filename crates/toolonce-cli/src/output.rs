//! Plain-text output shared by the subcommands: aligned tables, short durations and UTC
//! timestamps (RFC 3339), without pulling in a date or table crate for three functions.
//!
//! Everything meant for stdout goes through [`out!`] and [`outln!`], which return the write
//! error instead of panicking as `print!` does: a reader that closes the pipe early
//! (`toolonce ls | head -1`) then ends the command quietly (see `crate::exit`).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Writes formatted text to stdout, returning the error (`?` it).
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.flush()
}

/// `print!` that hands a failed write (a closed pipe) back to the caller with `?`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))?
    };
}

/// `println!` that hands a failed write (a closed pipe) back to the caller with `?`.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))?
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))?
    };
}

pub(crate) use {out, outln};

/// How a column's cells line up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A table printed with columns padded to their widest cell.
pub(crate) struct Table {
    headers: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
    separator: &'static str,
}

impl Table {
    /// A table with these column headers, columns separated by `separator`.
    pub(crate) fn new(headers: &[(&str, Align)], separator: &'static str) -> Self {
        Table {
            headers: headers.iter().map(|&(h, a)| (h.to_owned(), a)).collect(),
            rows: Vec::new(),
            separator,
        }
    }

    /// Adds a row (one cell per column).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    /// The table as text: the header, a rule, the rows; no trailing spaces.
    pub(crate) fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].0.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let header: Vec<String> = self.headers.iter().map(|(h, _)| h.clone()).collect();
        let mut out = String::new();
        self.line(&header, &widths, &mut out);
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        self.line(&rule, &widths, &mut out);
        for row in &self.rows {
            self.line(row, &widths, &mut out);
        }
        out
    }

    fn line(&self, cells: &[String], widths: &[usize], out: &mut String) {
        let mut line = String::new();
        for (c, cell) in cells.iter().enumerate() {
            if c > 0 {
                line.push_str(self.separator);
            }
            let pad = " ".repeat(widths[c] - cell.chars().count());
            match self.headers[c].1 {
                Align::Left => {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
                Align::Right => {
                    line.push_str(&pad);
                    line.push_str(cell);
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// `text` wrapped at `width` columns, each line after `first` indented like it is long.
pub(crate) fn wrap(first: &str, text: &str, width: usize) -> String {
    let indent = " ".repeat(first.chars().count());
    let mut out = String::from(first);
    let mut column = out.chars().count();
    let mut line_empty = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !line_empty && column + 1 + len > width {
            out.push('\n');
            out.push_str(&indent);
            column = indent.len();
            line_empty = true;
        }
        if !line_empty {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += len;
        line_empty = false;
    }
    out.push('\n');
    out
}

/// A duration in at most two units: `0.4s`, `12s`, `3m05s`, `2h10m`, `4d03h`.
pub(crate) fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..10 => format!("{:.1}s", d.as_secs_f64()),
        10..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86400, secs % 86400 / 3600),
    }
}

/// `time` as RFC 3339 in UTC with milliseconds: `2026-11-29T08:15:00.123Z`.
pub(crate) fn timestamp(time: SystemTime) -> String {
    let ms = millis_since_epoch(time);
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let s = ms_of_day / 1000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s % 3600 / 60,
        s % 60,
        ms_of_day % 1000
    )
}

/// Milliseconds since the Unix epoch (negative before it).
pub(crate) fn millis_since_epoch(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc_3339_in_utc() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_000_000_123);
        assert_eq!(timestamp(t), "2026-11-30T00:53:20.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(timestamp(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn wrapped_text_keeps_words_whole_and_indents_continuations() {
        assert_eq!(
            wrap("1. ", "one two three four", 13),
            "1. one two\n   three four\n"
        );
        assert_eq!(wrap("", "a-very-long-word b", 4), "a-very-long-word\nb\n");
    }

    #[test]
    fn durations_use_two_units_at_most() {
        assert_eq!(duration(Duration::from_millis(400)), "0.4s");
        assert_eq!(duration(Duration::from_secs(12)), "12s");
        assert_eq!(duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(duration(Duration::from_secs(7800)), "2h10m");
        assert_eq!(duration(Duration::from_secs(356_400)), "4d03h");
    }

    #[test]
    fn tables_pad_columns_and_leave_no_trailing_space() {
        let mut t = Table::new(&[("name", Align::Left), ("n", Align::Right)], "  ");
        t.row(vec!["a".into(), "10".into()]);
        t.row(vec!["long name".into(), "2".into()]);
        assert_eq!(
            t.render(),
            "name        n\n---------  --\na          10\nlong name   2\n"
        );
    }
}
