//! Waits with deadlines: [`until`] polls a condition, [`for_rows`] polls a reader until it
//! returns the expected rows as a multiset. Neither waits past its timeout; each failure names
//! what it waited for and what it saw last.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Polls `check` every `every` until it answers `Some`, and answers that; fails naming `what`
/// and the last error once `timeout` has passed. `check` answering `Err` ends the wait at once.
pub async fn until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("{what}: not reached within {timeout:?}");
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
    let (missing, extra) = diff(expected, &last);
    bail!(
        "{what}: after {timeout:?} the output differs: {} rows expected, {} read; missing {:?}; extra {:?}",
        expected.len(),
        last.len(),
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
