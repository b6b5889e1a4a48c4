//! How every bench reports: one [`percentile`] definition and one [`Table`] printer, so the
//! p99 of one bench is computed as the p99 of another and every table reads the same.

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

    pub fn print(&self) {
        print!("{}", self.render());
    }

    pub fn print_markdown(&self) {
        print!("{}", self.render_markdown());
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
}
