//! Comparing what silt answered with what a reference server (a real Apache Fluss) answered:
//! each field of the two records that differs, and why, when the difference is a known one.

/// One field of two records that differs; `known` is the reason when the harness lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub field: String,
    pub ours: String,
    pub reference: String,
    pub known: Option<&'static str>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: ours {} vs reference {}",
            self.field, self.ours, self.reference
        )?;
        match self.known {
            Some(reason) => write!(f, " (known: {reason})"),
            None => write!(f, " (UNEXPLAINED)"),
        }
    }
}

/// Collects the fields that differ, compared by their `Debug` text; `known` lists the expected
/// differences as (field, reason).
pub struct Differences {
    known: &'static [(&'static str, &'static str)],
    pub found: Vec<Difference>,
}

impl Differences {
    pub fn new(known: &'static [(&'static str, &'static str)]) -> Self {
        Differences {
            known,
            found: Vec::new(),
        }
    }

    pub fn compare(
        &mut self,
        field: &str,
        ours: &dyn std::fmt::Debug,
        reference: &dyn std::fmt::Debug,
    ) {
        let (ours, reference) = (format!("{ours:?}"), format!("{reference:?}"));
        if ours != reference {
            let known = self
                .known
                .iter()
                .find(|(name, _)| *name == field)
                .map(|(_, why)| *why);
            self.found.push(Difference {
                field: field.to_string(),
                ours,
                reference,
                known,
            });
        }
    }
}

/// Prints every difference of `comparison` (e.g. `silt vs real Fluss, partitions`) on stderr,
/// each with its reason or `UNEXPLAINED`, and fails, listing them all, when one has no reason.
pub fn assert_all_explained(comparison: &str, differences: &[Difference]) -> anyhow::Result<()> {
    let unexplained = differences.iter().filter(|d| d.known.is_none()).count();
    let mut report = format!(
        "{comparison}: {} difference(s), {unexplained} unexplained\n",
        differences.len()
    );
    for difference in differences {
        report.push_str(&format!("  {difference}\n"));
    }
    // Straight to the stderr handle: the test harness captures eprintln!, and the differences
    // must be visible without --nocapture.
    std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes())?;
    assert_eq!(unexplained, 0, "{report}");
    Ok(())
}

/// Compares the named fields of two records one by one, each under its own name:
/// `compare_fields!(differences, ours, reference; log, changelog)` is
/// `differences.compare("log", &ours.log, &reference.log)` and so on, in that order.
#[macro_export]
macro_rules! compare_fields {
    ($differences:expr, $ours:expr, $reference:expr; $($field:ident),* $(,)?) => {
        $($differences.compare(stringify!($field), &$ours.$field, &$reference.$field);)*
    };
}
