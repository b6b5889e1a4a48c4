//! Waits with deadlines: [`until`] polls a condition, [`for_rows`] polls a reader until it
//! returns the expected rows as a multiset. Neither waits past its timeout; each failure names
//! what it waited for and what it saw last.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// What one look of [`until`] saw: the condition holds (with a value), or not yet (with what
/// was seen, for the message if the deadline passes).
pub enum Look<T> {
    Done(T),
    NotYet(String),
}

/// Looks every `every` until `look` answers [`Look::Done`], and answers its value; fails
/// naming `what` and the last thing seen once `timeout` has passed. A look that answers `Err`
/// ends the wait at once.
pub async fn until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut look: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match look().await? {
            Look::Done(value) => return Ok(value),
            Look::NotYet(seen) => seen,
        };
        if Instant::now() > deadline {
            bail!("{what} did not happen within {timeout:?}: {seen}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `read` until it returns `expected` (as multisets) or `timeout` passes; the error shows
/// what is missing and what is extra.
pub async fn for_rows<F, Fut>(
    what: &str,
    expected: &[String],
    timeout: Duration,
    read: F,
) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Vec<String>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = Vec::new();
    while Instant::now() < deadline {
        match read().await {
            Ok(rows) if rows == expected => return Ok(()),
            Ok(rows) => last = rows,
            Err(e) => last = vec![format!("read error: {e:#}")],
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bail!(
        "{what}: after {timeout:?} the output differs: {}",
        describe_diff(expected, &last)
    )
}

/// How two multisets of rows differ, for a failure message: the counts and the first ten rows
/// missing and extra.
pub fn describe_diff(expected: &[String], actual: &[String]) -> String {
    let (missing, extra) = diff(expected, actual);
    format!(
        "{} rows expected, {} read; missing {:?}; extra {:?}",
        expected.len(),
        actual.len(),
        missing.iter().take(10).collect::<Vec<_>>(),
        extra.iter().take(10).collect::<Vec<_>>()
    )
}

/// Multiset difference both ways: (in `expected` only, in `actual` only).
pub fn diff(expected: &[String], actual: &[String]) -> (Vec<String>, Vec<String>) {
    let mut counts: BTreeMap<&String, i64> = BTreeMap::new();
    for r in expected {
        *counts.entry(r).or_default() += 1;
    }
    for r in actual {
        *counts.entry(r).or_default() -= 1;
    }
    let (mut missing, mut extra) = (Vec::new(), Vec::new());
    for (row, n) in counts {
        for _ in 0..n.max(0) {
            missing.push(row.clone());
        }
        for _ in 0..(-n).max(0) {
            extra.push(row.clone());
        }
    }
    (missing, extra)
}
