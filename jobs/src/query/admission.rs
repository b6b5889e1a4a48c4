//! How many queries run at once. A running query may hold DataFusion's memory pool
//! (`query.memory_bytes_max`), a hot tail per real-time table it names (`query.tail_bytes_max`)
//! and its result (`query.result_bytes_max`), so the number running is what bounds the memory
//! queries take together.
//!
//! **Contract:** a query takes a slot before it resolves a table, and its driver holds the slot
//! until its plan has stopped, also when the caller left at the deadline (the plan stops at its
//! next cancel point). With every one of `query.concurrent_max` slots taken, a query waits for
//! one (first come, first served) inside its own deadline, if fewer than `query.waiting_max`
//! wait already; past its deadline it gets [`QueryError::DeadlinePassed`] saying it waited for a
//! slot. One more is refused at once with [`QueryError::Busy`]: nothing ran, a retry may pass.
//! Waiting rather than refusing serves a burst of short queries (a dashboard opening) that
//! would otherwise fail; `query.waiting_max: 0` refuses whenever every slot is taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::QueryError;

/// The right to run one query; given back when dropped.
pub(super) type Slot = OwnedSemaphorePermit;

/// The query slots of one service, shared by its clones.
#[derive(Debug)]
pub(super) struct Admission {
    slots: Arc<Semaphore>,
    concurrent_max: usize,
    waiting: AtomicUsize,
    waiting_max: usize,
}

impl Admission {
    pub(super) fn new(concurrent_max: usize, waiting_max: usize) -> Self {
        assert!(concurrent_max > 0, "query.concurrent_max is at least 1");
        Admission {
            slots: Arc::new(Semaphore::new(concurrent_max)),
            concurrent_max,
            waiting: AtomicUsize::new(0),
            waiting_max,
        }
    }

    /// A slot for a query whose deadline of `deadline` falls at `deadline_at`: at once when
    /// one is free, else after waiting for one (see the module doc).
    pub(super) async fn enter(
        &self,
        deadline_at: tokio::time::Instant,
        deadline: Duration,
    ) -> Result<Slot, QueryError> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok(slot);
        }
        let Some(_waiting) = self.start_waiting() else {
            return Err(QueryError::Busy {
                running: self.concurrent_max,
                waiting: self.waiting_max,
            });
        };
        match tokio::time::timeout_at(deadline_at, self.slots.clone().acquire_owned()).await {
            Ok(Ok(slot)) => Ok(slot),
            Ok(Err(_)) => Err(QueryError::Internal(
                "the query slots were closed while a query waited (a bug)".into(),
            )),
            Err(_) => Err(QueryError::DeadlinePassed {
                deadline,
                progress: format!(
                    "while waiting for a query slot (all {} of query.concurrent_max were taken)",
                    self.concurrent_max
                ),
            }),
        }
    }

    /// Counts one more waiting query, unless `waiting_max` wait already.
    fn start_waiting(&self) -> Option<Waiting<'_>> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.waiting_max).then_some(n + 1)
            })
            .ok()
            .map(|_| Waiting(&self.waiting))
    }
}

/// One waiting query, counted until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
