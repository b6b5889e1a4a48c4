//! Log scans through the official client with a deadline: a [`Read`] polls a record scanner
//! ([`Read::records`]) or a record-batch scanner ([`Read::batches`]) until what it made of the
//! polled data holds a given number of items. It never waits past its timeout; the failure
//! names what was read and how many items had arrived.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use fluss::client::{LogScanner, RecordBatchLogScanner};
use fluss::record::{ScanBatch, ScanRecord};

use crate::hotstore::DEADLINE;

/// A read of a log until `count` items have arrived, each poll waiting at most `poll`, the
/// whole read at most `timeout`.
#[derive(Debug, Clone, Copy)]
pub struct Read<'a> {
    what: &'a str,
    count: usize,
    poll: Duration,
    timeout: Duration,
}

impl<'a> Read<'a> {
    /// A read of `count` items named `what` (for the failure message): polls of 300 ms, within
    /// [`DEADLINE`].
    pub fn new(what: &'a str, count: usize) -> Self {
        let (poll, timeout) = (Duration::from_millis(300), DEADLINE);
        Read {
            what,
            count,
            poll,
            timeout,
        }
    }

    /// The longest one poll waits for data.
    pub fn poll(self, poll: Duration) -> Self {
        Read { poll, ..self }
    }

    /// The longest the whole read takes before it fails.
    pub fn timeout(self, timeout: Duration) -> Self {
        Read { timeout, ..self }
    }

    /// Polls `scanner` until `each` has made `count` items of the records, and answers them
    /// in arrival order. An `each` that answers `Err` ends the read.
    pub async fn records<T>(
        &self,
        scanner: &LogScanner,
        mut each: impl FnMut(&ScanRecord) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.until_count(scanner, |record| Ok([each(&record)?]))
            .await
    }

    /// Polls `scanner` until the items `each` makes of the batches (any number a batch) reach
    /// `count`, and answers them in arrival order. An `each` that answers `Err` ends the read.
    pub async fn batches<T>(
        &self,
        scanner: &RecordBatchLogScanner,
        mut each: impl FnMut(&ScanBatch) -> Result<Vec<T>>,
    ) -> Result<Vec<T>> {
        self.until_count(scanner, |batch| each(&batch)).await
    }

    async fn until_count<S: Scanner, T, I: IntoIterator<Item = T>>(
        &self,
        scanner: &S,
        mut each: impl FnMut(S::Polled) -> Result<I>,
    ) -> Result<Vec<T>> {
        let Read {
            what,
            count,
            poll,
            timeout,
        } = *self;
        let started = Instant::now();
        let mut items = Vec::new();
        while items.len() < count {
            ensure!(
                started.elapsed() < timeout,
                "{what}: read {} of {count} within {timeout:?}",
                items.len()
            );
            for polled in scanner.poll_once(poll).await? {
                items.extend(each(polled)?);
            }
        }
        Ok(items)
    }
}

/// The two scanners of the official client, as what one poll answers.
trait Scanner {
    type Polled;
    async fn poll_once(&self, poll: Duration) -> Result<Vec<Self::Polled>>;
}

impl Scanner for LogScanner {
    type Polled = ScanRecord;
    async fn poll_once(&self, poll: Duration) -> Result<Vec<ScanRecord>> {
        Ok(self.poll(poll).await?.into_iter().collect())
    }
}

impl Scanner for RecordBatchLogScanner {
    type Polled = ScanBatch;
    async fn poll_once(&self, poll: Duration) -> Result<Vec<ScanBatch>> {
        Ok(self.poll(poll).await?)
    }
}
