//! How every bench reports: one [`percentile`] definition and one [`Table`] printer, so the
//! p99 of one bench is computed as the p99 of another and every table reads the same.
//!
//! Output follows silt's rule (`silt_jobs::output`): under `silt bench --format json` stdout
//! holds only the tables, each as one line of JSON ([`Table::to_json`]), and every line for
//! people ([`say!`]) goes to stderr; under the default text format both go to stdout.

use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use silt_jobs::output::Format;

static OUTPUT: OnceLock<(Format, &'static str)> = OnceLock::new();

/// Sets, once per process, how tables print and which bench they belong to (the `bench` field
/// of their JSON). Later calls change nothing.
pub fn set_output(format: Format, bench: &'static str) {
    let _ = OUTPUT.set((format, bench));
}

/// Whether stdout is JSON lines (`--format json`): then lines for people go to stderr.
pub fn json_output() -> bool {
    matches!(OUTPUT.get(), Some((Format::Json, _)))
}

/// `println!` for a line a person reads beside the tables: stdout in text, stderr under
/// `--format json` (stdout then holds only the tables' JSON).
macro_rules! say {
    ($($arg:tt)*) => {
        if $crate::report::json_output() {
            eprintln!($($arg)*);
        } else {
            println!($($arg)*);
        }
    };
}
pub(crate) use say;

/// The `q` quantile (0.0..=1.0) of samples sorted ascending: the sample at rank
/// `round((n - 1) * q)`, so p0 is the minimum, p100 the maximum and p50 the median of an odd
/// count. `None` for no samples.
pub fn percentile<T: Copy + PartialOrd>(sorted: &[T], q: f64) -> Option<T> {
    assert!((0.0..=1.0).contains(&q), "quantile {q} is outside 0..=1");
    debug_assert!(sorted.is_sorted(), "percentile of unsorted samples");
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[(last as f64 * q).round() as usize])
}

/// [`percentile`] of `f64` samples, NaN for none (prints as `NaN` in a table).
pub fn percentile_f64(sorted: &[f64], q: f64) -> f64 {
    percentile(sorted, q).unwrap_or(f64::NAN)
}

/// A table of figures. Every column is as wide as its widest cell; the first column (the
/// labels) is left-aligned, the others right-aligned unless [`Table::values_left`] says so.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// What the table shows, for its JSON (`table`); text output prints its own heading.
    name: String,
    header: Vec<String>,
    rows: Vec<Line>,
    values_left: bool,
}

#[derive(Debug, Clone)]
enum Line {
    Cells(Vec<String>),
    /// A remark printed as it is, outside the columns.
    Note(String),
}

impl Table {
    /// A table with this header row; an empty header prints no header row.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            ..Table::default()
        }
    }

    /// Names the table in its JSON form (`"table": name`), e.g. `freshness`.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Left-aligns the value columns too (for text values such as lists).
    pub fn values_left(mut self) -> Self {
        self.values_left = true;
        self
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows
            .push(Line::Cells(cells.into_iter().map(Into::into).collect()));
        self
    }

    pub fn note(&mut self, text: impl Into<String>) -> &mut Self {
        self.rows.push(Line::Note(text.into()));
        self
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = Vec::new();
        let cells = std::iter::once(&self.header).chain(self.rows.iter().filter_map(|l| match l {
            Line::Cells(c) => Some(c),
            Line::Note(_) => None,
        }));
        for row in cells {
            for (i, cell) in row.iter().enumerate() {
                let n = cell.chars().count();
                match widths.get_mut(i) {
                    Some(w) => *w = (*w).max(n),
                    None => widths.push(n),
                }
            }
        }
        widths
    }

    fn cell(&self, i: usize, text: &str, width: usize) -> String {
        if i == 0 || self.values_left {
            format!("{text:<width$}")
        } else {
            format!("{text:>width$}")
        }
    }

    /// The table as aligned plain text, one line per row.
    pub fn render(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| self.cell(i, c, widths[i]))
                .collect();
            cells.join("  ").trim_end().to_string() + "\n"
        };
        let mut out = String::new();
        if !self.header.is_empty() {
            out += &line(&self.header);
        }
        for row in &self.rows {
            match row {
                Line::Cells(cells) => out += &line(cells),
                Line::Note(text) => out += &format!("{text}\n"),
            }
        }
        out
    }

    /// The table in Markdown (the form the README's benchmark tables take); notes follow it.
    pub fn render_markdown(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| {
            let cells: Vec<String> = (0..widths.len())
                .map(|i| self.cell(i, cells.get(i).map_or("", String::as_str), widths[i]))
                .collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = line(&self.header);
        let rule: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let w = (*w).max(3);
                if i == 0 || self.values_left {
                    "-".repeat(w)
                } else {
                    format!("{}:", "-".repeat(w - 1))
                }
            })
            .collect();
        out += &format!("| {} |\n", rule.join(" | "));
        let mut notes = String::new();
        for row in &self.rows {
            match row {
                Line::Cells(cells) => out += &line(cells),
                Line::Note(text) => notes += &format!("{text}\n"),
            }
        }
        out + &notes
    }

    /// The table as one JSON object: `bench`, `table` (its name), `columns` (the header), `rows`
    /// (an object per row, cells keyed by column, as printed but without the indent that groups
    /// them: figures keep their units), and
    /// `notes`. A table without a header (label, value) has `rows` as one object instead,
    /// label to value.
    pub fn to_json(&self, bench: &str) -> Value {
        let notes: Vec<&str> = self
            .rows
            .iter()
            .filter_map(|l| match l {
                Line::Note(text) => Some(text.trim()),
                Line::Cells(_) => None,
            })
            .collect();
        let cells = self.rows.iter().filter_map(|l| match l {
            Line::Cells(cells) => Some(cells),
            Line::Note(_) => None,
        });
        let rows = if self.header.is_empty() {
            let mut values = Map::new();
            for row in cells {
                let (label, rest) = row.split_first().map_or(("", &[][..]), |(l, r)| (l, r));
                values.insert(label.trim().to_string(), Value::String(rest.join(" ")));
            }
            Value::Object(values)
        } else {
            Value::Array(
                cells
                    .map(|row| {
                        let mut object = Map::new();
                        for (i, column) in self.header.iter().enumerate() {
                            let cell = row.get(i).map_or("", |c| c.trim());
                            object.insert(column.clone(), Value::String(cell.to_string()));
                        }
                        Value::Object(object)
                    })
                    .collect(),
            )
        };
        json!({
            "bench": bench,
            "table": self.name,
            "columns": self.header,
            "rows": rows,
            "notes": notes,
        })
    }

    /// Prints the table as aligned text, or as its JSON line under `--format json`.
    pub fn print(&self) {
        self.print_as(Self::render);
    }

    /// Prints the table in Markdown, or as its JSON line under `--format json`.
    pub fn print_markdown(&self) {
        self.print_as(Self::render_markdown);
    }

    fn print_as(&self, text: fn(&Self) -> String) {
        match OUTPUT.get() {
            Some((Format::Json, bench)) => println!("{}", self.to_json(bench)),
            _ => print!("{}", text(self)),
        }
    }
}

/// `debug` or `release`: the profile a report was measured with.
pub fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_sample_at_the_rounded_rank() {
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let hundred: Vec<u32> = (1..=100).collect();
        for (q, of_ten, of_hundred) in [
            (0.0, 1.0, 1),
            (0.5, 6.0, 51),
            (0.9, 9.0, 90),
            (0.99, 10.0, 99),
            (1.0, 10.0, 100),
        ] {
            assert_eq!(percentile(&ten, q), Some(of_ten), "p{q} of 1..=10");
            assert_eq!(percentile(&hundred, q), Some(of_hundred), "p{q} of 1..=100");
        }
        assert_eq!(percentile::<f64>(&[], 0.5), None);
        assert!(percentile_f64(&[], 0.5).is_nan());
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
    }

    #[test]
    fn tables_align_labels_left_and_values_right() {
        let mut table = Table::new(["figure", "value"]);
        table.row(["rows/s", "12"]).row(["a longer label", "3.5"]);
        table.note("  one note");
        assert_eq!(
            table.render(),
            "figure          value\n\
             rows/s             12\n\
             a longer label    3.5\n  \
             one note\n"
        );
        assert_eq!(
            table.render_markdown(),
            "| figure         | value |\n\
             | -------------- | ----: |\n\
             | rows/s         |    12 |\n\
             | a longer label |   3.5 |\n  \
             one note\n"
        );
        let mut left = Table::new(Vec::<String>::new()).values_left();
        left.row(["rows lost", "0"]).row(["faults", "kill 2"]);
        assert_eq!(left.render(), "rows lost  0\nfaults     kill 2\n");
    }

    #[test]
    fn tables_as_json_key_cells_by_column_and_keep_notes_apart() {
        let mut table = Table::new(["figure", "value"]).named("tiering");
        table.row(["rows/s", "12"]).row(["  short row"]);
        table.note("  one note");
        assert_eq!(
            table.to_json("tiering"),
            serde_json::json!({
                "bench": "tiering",
                "table": "tiering",
                "columns": ["figure", "value"],
                "rows": [
                    {"figure": "rows/s", "value": "12"},
                    {"figure": "short row", "value": ""},
                ],
                "notes": ["one note"],
            })
        );
        let mut left = Table::new(Vec::<String>::new()).values_left();
        left.row(["rows lost", "0"]).row(["faults", "kill", "2"]);
        let json = left.to_json("trials");
        assert_eq!(json["rows"]["rows lost"], "0");
        assert_eq!(json["rows"]["faults"], "kill 2");
        assert_eq!(json["columns"], serde_json::json!([]));
    }
}
