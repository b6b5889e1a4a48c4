//! Where queries run: on the process's query runtime, worker threads of their own
//! (`silt-query`), never on the caller's. A plan that computes without yielding then holds up
//! neither the caller's deadline (its timer runs on the caller's runtime, so the deadline error
//! comes on time whatever the plan does) nor the hot store, REST or tiering on the main runtime.
//!
//! A query is one task on that runtime, its *driver*: it plans (resolving tables, reading hot
//! tails), executes, and sends what it gets through a channel of [`BATCHES_AHEAD`] messages,
//! so a plan runs at most that far ahead of its reader. The caller holds an [`Execution`];
//! dropping it (the deadline passed, the stream was dropped, the result is complete) cancels
//! the query's [`Cancel`], which stops the plan at its next cancel point (see [`super::cancel`]),
//! and aborts the driver at its next await. [`PlansRunning`] counts drivers until they end, so
//! the CPU an abandoned plan spends after its deadline can be seen and measured.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use futures::StreamExt as _;
use silt_connectors::lake::QueryProgress;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::admission::Slot;
use super::cancel::Cancel;
use super::{QueryConfig, QueryError, QueryRequest, QueryService, TableRead};

/// Messages a driver sends ahead of its reader.
pub(super) const BATCHES_AHEAD: usize = 2;

/// Threads of the query runtime's pool for blocking work (deltalake's snapshot loads).
const BLOCKING_THREADS_MAX: usize = 16;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The query runtime, started at the first query: a worker thread per core.
fn runtime() -> Result<&'static Runtime, QueryError> {
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let built = tokio::runtime::Builder::new_multi_thread()
        .thread_name("silt-query")
        .max_blocking_threads(BLOCKING_THREADS_MAX)
        .enable_all()
        .build()
        .map_err(|e| {
            QueryError::Internal(format!(
                "cannot start the query runtime's threads: {e}; the machine is out of threads or memory"
            ))
        })?;
    if let Err(lost) = RUNTIME.set(built) {
        // Another query started it first; this one is not needed (and must not block here).
        lost.shutdown_background();
    }
    Ok(RUNTIME.get().expect("the query runtime was just set"))
}

/// Where the queries of `config` run: its runtime, else the process's query runtime.
fn handle(config: &QueryConfig) -> Result<tokio::runtime::Handle, QueryError> {
    match &config.runtime {
        Some(handle) => Ok(handle.clone()),
        None => Ok(runtime()?.handle().clone()),
    }
}

/// Runs `future` where the queries of `config` run; the returned handle aborts it when dropped.
pub(super) fn spawn<T: Send + 'static>(
    config: &QueryConfig,
    future: impl Future<Output = T> + Send + 'static,
) -> Result<AbortOnDrop<T>, QueryError> {
    Ok(AbortOnDrop(handle(config)?.spawn(future)))
}

/// A task on the query runtime, aborted when its handle is dropped.
pub(super) struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a driver sends its reader.
pub(super) enum Message {
    /// Planned and executing: the result's schema and what each table was read at.
    Opened {
        schema: SchemaRef,
        tables: Vec<TableRead>,
    },
    Batch(RecordBatch),
    /// Every batch was sent.
    End,
    Failed(QueryError),
}

/// A query running on the query runtime, from its caller's side. Dropping it cancels the query.
pub(super) struct Execution {
    messages: mpsc::Receiver<Message>,
    cancel: Arc<Cancel>,
    driver: AbortHandle,
}

impl Execution {
    /// Starts the driver of `request`, whose plan stops at `cancel`; the driver holds `slot`
    /// until it ends.
    pub(super) fn start(
        service: QueryService,
        request: QueryRequest,
        slot: Slot,
        progress: Arc<QueryProgress>,
        cancel: Arc<Cancel>,
    ) -> Result<Execution, QueryError> {
        let (tx, messages) = mpsc::channel(BATCHES_AHEAD);
        let running = service.running.enter();
        let driver_cancel = cancel.clone();
        let driver = handle(&service.config)?.spawn(async move {
            let _held = (running, slot);
            drive(service, request, progress, driver_cancel, tx).await;
        });
        Ok(Execution {
            messages,
            cancel,
            driver: driver.abort_handle(),
        })
    }

    pub(super) fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Message>> {
        self.messages.poll_recv(cx)
    }

    pub(super) async fn recv(&mut self) -> Option<Message> {
        self.messages.recv().await
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.driver.abort();
    }
}

/// Plans and executes `request`, sending what it gets to `tx` until the plan ends, fails or is
/// cancelled, or the reader is gone.
async fn drive(
    service: QueryService,
    request: QueryRequest,
    progress: Arc<QueryProgress>,
    cancel: Arc<Cancel>,
    tx: mpsc::Sender<Message>,
) {
    let deadline_error = || QueryError::DeadlinePassed {
        deadline: request.deadline,
        progress: progress.describe(),
    };
    let (mut stream, tables) = match service.open(&request, &progress, &cancel).await {
        Ok(opened) => opened,
        Err(e) => {
            let e = if cancel.is_cancelled() {
                deadline_error()
            } else {
                e
            };
            let _ = tx.send(Message::Failed(e)).await;
            return;
        }
    };
    let opened = Message::Opened {
        schema: stream.schema(),
        tables,
    };
    if tx.send(opened).await.is_err() {
        return;
    }
    while let Some(batch) = stream.next().await {
        let message = match batch {
            Ok(batch) => Message::Batch(batch),
            // A cancel point's error, or whatever failed as the plan unwound.
            Err(_) if cancel.is_cancelled() => Message::Failed(deadline_error()),
            Err(e) => Message::Failed(e.into()),
        };
        let failed = matches!(message, Message::Failed(_));
        if tx.send(message).await.is_err() || failed {
            return;
        }
    }
    let _ = tx.send(Message::End).await;
}

/// How many query drivers run, including those whose caller has gone (abandoned at their
/// deadline, until their plan reaches a cancel point).
#[derive(Debug, Default, Clone)]
pub(super) struct PlansRunning(Arc<AtomicUsize>);

impl PlansRunning {
    fn enter(&self) -> RunningGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        RunningGuard(self.0.clone())
    }

    pub(super) fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One running driver; counted until dropped with its task.
struct RunningGuard(Arc<AtomicUsize>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
