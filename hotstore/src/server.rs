//! The TCP server: accepts connections, reads frames, runs requests, writes responses.
//!
//! Each connection has a reader loop and a writer task. Requests run as their own tasks, at most
//! `requests_in_flight_max` per connection, so a long-polling fetch does not block a produce on
//! the same connection; the Fluss client matches responses to requests by request id. A frame
//! that cannot be read (negative length, over `frame_bytes_max`, shorter than a header, body not
//! arrived within `frame_read_timeout_ms`) closes its connection with a log line. A handler that
//! panics answers UNKNOWN_SERVER_ERROR instead of taking the server down.
//!
//! With SASL on, the reader asks the connection's [`ConnectionAuth`] about every frame before
//! dispatching it: only ApiVersions and Authenticate pass until the connection authenticated,
//! a failed attempt closes it, and so does not authenticating within `authentication_timeout_ms`.
//! Beyond `connections_max` a connection is closed on accept.

use crate::auth::{ConnectionAuth, Decision};
pub use crate::config::{LakeSchemaCheck, ServerConfig};
use crate::handlers;
use crate::protocol::{self, ApiError, Frame, RequestHeader, code};
use crate::service::Service;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

/// Entry point of the hotstore.
pub struct Server;

impl Server {
    /// Opens the data directory, binds the listener and starts serving in the background.
    pub async fn start(config: ServerConfig) -> crate::error::Result<ServerHandle> {
        if config.requests_in_flight_max == 0 || config.connections_max == 0 {
            return Err(crate::error::Error::Config {
                message: "connections_max and requests_in_flight_max must be at least 1".into(),
            });
        }
        if config.kv_snapshots_retained == 0 || config.kv_snapshot_concurrency_max == 0 {
            return Err(crate::error::Error::Config {
                message: format!(
                    "kv_snapshots_retained ({}) and kv_snapshot_concurrency_max ({}) must be at \
                     least 1",
                    config.kv_snapshots_retained, config.kv_snapshot_concurrency_max
                ),
            });
        }
        if let Some(sasl) = &config.sasl {
            sasl.validate()
                .map_err(|message| crate::error::Error::Config { message })?;
        }
        let mut config = config;
        config.request_bytes_in_flight_max = config
            .request_bytes_in_flight_max
            .max(config.frame_bytes_max);
        if config.request_bytes_in_flight_max / 1024 > Semaphore::MAX_PERMITS
            || config.frame_bytes_max > i32::MAX as usize
        {
            return Err(crate::error::Error::Config {
                message: format!(
                    "frame_bytes_max {} and request_bytes_in_flight_max {} must fit a frame's i32 length",
                    config.frame_bytes_max, config.request_bytes_in_flight_max
                ),
            });
        }
        let listener = TcpListener::bind(config.bind_addr)
            .await
            .map_err(|source| crate::error::Error::Bind {
                addr: config.bind_addr,
                source,
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| crate::error::Error::Bind {
                addr: config.bind_addr,
                source,
            })?;
        let advertised_host = config.advertised_host.clone().unwrap_or_else(|| {
            if local_addr.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                local_addr.ip().to_string()
            }
        });
        let advertised_port = config.advertised_port.unwrap_or(local_addr.port());
        let service =
            Arc::new(Service::open(config.clone(), advertised_host, advertised_port).await?);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        if config.log.fsync == crate::storage::FsyncPolicy::Never {
            // Under `fsync: never`: every log is flushed each interval, publishing what became
            // durable.
            let interval = Duration::from_millis(config.log_flush_interval_ms.max(1));
            spawn_every(&service, interval, &shutdown_rx, |service| async move {
                let _ = tokio::task::spawn_blocking(move || service.tablets.flush_all_logs()).await;
            });
        }
        let interval = Duration::from_millis(config.retention_check_interval_ms.max(100));
        spawn_every(&service, interval, &shutdown_rx, |service| async move {
            run_retention(&service).await;
        });
        // Its first run is at start: a bucket whose kv state moved since its latest snapshot
        // (a data directory from before kv snapshots, whose changelog retention may have cut)
        // gets one at once.
        let interval = Duration::from_millis(config.kv_snapshot_interval_ms.max(100));
        spawn_every(&service, interval, &shutdown_rx, |service| async move {
            run_kv_snapshots(&service).await;
        });
        // Its first run is at start, as Fluss schedules every auto-partitioned table then.
        let interval = Duration::from_millis(config.auto_partition_check_interval_ms.max(100));
        spawn_every(&service, interval, &shutdown_rx, |service| async move {
            run_auto_partitioning(&service).await;
        });
        tracing::info!(addr = %local_addr, sasl = config.sasl.is_some(), "hotstore listening (Fluss wire protocol)");
        let accept = tokio::spawn(accept_loop(listener, service.clone(), config, shutdown_rx));
        Ok(ServerHandle {
            local_addr,
            service,
            shutdown_tx,
            accept: Some(accept),
        })
    }
}

/// A running hotstore. Dropping it without [`ServerHandle::shutdown`] stops accepting but does
/// not wait for in-flight requests.
pub struct ServerHandle {
    local_addr: SocketAddr,
    service: Arc<Service>,
    shutdown_tx: watch::Sender<bool>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl ServerHandle {
    /// The address the server listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Resolves, with the reason, once the hot store's storage has failed in a way only a new
    /// process recovers from (a failed fsync, a kv store poisoned by a failed journal write).
    /// The server keeps answering, with storage errors; its owner should stop the process so
    /// a restart runs recovery.
    pub async fn storage_failed(&self) -> String {
        self.service.tablets.failure().wait().await
    }

    /// The request handlers, for tests that call them without a connection.
    #[cfg(test)]
    pub(crate) fn service(&self) -> &Arc<Service> {
        &self.service
    }

    /// Stops accepting, lets in-flight requests finish (bounded by `shutdown_grace_ms`) and
    /// closes the tablets.
    pub async fn shutdown(mut self) -> crate::error::Result<()> {
        let _ = self.shutdown_tx.send(true);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        self.service.close().await;
        tracing::info!(addr = %self.local_addr, "hotstore stopped");
        Ok(())
    }

    /// Records the latest lake snapshot of a table: the snapshot id and, per `(partition id,
    /// bucket, offset)`, the log offset up to which the lake holds that bucket, exclusive (the
    /// partition id is `None` for an unpartitioned table's buckets, as
    /// [`crate::LakeSnapshot::tiered_offsets`] yields them). Called by the tiering committer
    /// after each Delta commit; clients read it through GetLakeSnapshot. Entries absent keep
    /// their previous offset and offsets never move backwards. A partition id that was dropped
    /// is ignored (the committer may report a partition dropped since); a bucket out of range,
    /// a partition id of another table or one never created is refused, and so is a partition
    /// id for a table without partition keys.
    ///
    /// The table is named by its id, never by its name: a table dropped and created again under
    /// the same name is another table, and a late update for the dropped one (its tiering job
    /// committed before it learned of the drop) is refused, so it can never raise the lake
    /// offsets the new table's retention trusts.
    pub fn set_lake_snapshot(
        &self,
        table_id: i64,
        snapshot_id: i64,
        offsets: &[(Option<i64>, i32, i64)],
    ) -> crate::error::Result<()> {
        let buckets: Vec<(i32, i64)> = offsets
            .iter()
            .filter(|(partition, _, _)| partition.is_none())
            .map(|&(_, bucket, offset)| (bucket, offset))
            .collect();
        let partitions: Vec<(i64, i32, i64)> = offsets
            .iter()
            .filter_map(|&(partition, bucket, offset)| partition.map(|p| (p, bucket, offset)))
            .collect();
        // The table's own buckets; an update naming no bucket at all still records its id.
        if !buckets.is_empty() || partitions.is_empty() {
            self.service
                .set_lake_snapshot(table_id, snapshot_id, &buckets)?;
        }
        if !partitions.is_empty() {
            self.service
                .set_partitioned_lake_snapshot(table_id, snapshot_id, &partitions)?;
        }
        Ok(())
    }

    /// The id of the table `database.table` now; an error naming the table when there is none.
    pub fn table_id(&self, database: &str, table: &str) -> crate::error::Result<i64> {
        self.service
            .catalog
            .table(database, table)
            .map(|entry| entry.id)
            .map_err(|error| crate::error::Error::UnknownTable {
                message: error.message,
            })
    }

    /// The primary-key tables' kv store in memory: block cache and memtables.
    pub fn kv_memory(&self) -> crate::KvMemory {
        self.service.tablets.kv_memory()
    }

    /// Per bucket of every table: log start offset, hot bytes and segments, and whether
    /// retention is held back by tiering, as of the last retention run.
    pub fn hot_retention(&self) -> Vec<crate::BucketRetention> {
        copy_of(&self.service.retention)
    }

    /// Runs retention now instead of at the next interval, and returns its report.
    pub async fn apply_retention(&self) -> Vec<crate::BucketRetention> {
        run_retention(&self.service).await
    }

    /// Takes a kv snapshot of every primary-key bucket whose kv state moved since its latest
    /// one, now instead of at the next interval, and reports every bucket's latest snapshot.
    pub async fn take_kv_snapshots(&self) -> Vec<crate::BucketKvSnapshot> {
        run_kv_snapshots(&self.service).await
    }

    /// Per auto-partitioned table, what the last auto-partitioning run created, dropped, and
    /// kept for tiering.
    pub fn auto_partitioning(&self) -> Vec<crate::AutoPartitionRun> {
        copy_of(&self.service.auto_partitioning)
    }

    /// Runs auto-partitioning now instead of at the next interval, and returns its report.
    pub async fn apply_auto_partitioning(&self) -> Vec<crate::AutoPartitionRun> {
        run_auto_partitioning(&self.service).await
    }

    /// The latest lake snapshot recorded for a table, if any.
    pub fn lake_snapshot(
        &self,
        database: &str,
        table: &str,
    ) -> crate::error::Result<Option<crate::LakeSnapshot>> {
        self.service.lake_snapshot(database, table)
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
    }
}

async fn run_retention(service: &Arc<Service>) -> Vec<crate::BucketRetention> {
    let worker = service.clone();
    let report = tokio::task::spawn_blocking(move || {
        let mut bounds = worker
            .retention_lake_bounds
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        worker.apply_retention(crate::catalog::now_ms(), &mut bounds)
    })
    .await
    .unwrap_or_default();
    *service.retention.lock().unwrap_or_else(|p| p.into_inner()) = report.clone();
    report
}

async fn run_kv_snapshots(service: &Arc<Service>) -> Vec<crate::BucketKvSnapshot> {
    let worker = service.clone();
    tokio::task::spawn_blocking(move || worker.run_kv_snapshots())
        .await
        .unwrap_or_default()
}

async fn run_auto_partitioning(service: &Arc<Service>) -> Vec<crate::AutoPartitionRun> {
    let report = service.auto_partition(crate::catalog::now_ms()).await;
    for run in &report {
        if !run.created.is_empty() || !run.dropped.is_empty() {
            tracing::info!(table = %run.table, created = ?run.created, dropped = ?run.dropped,
                held_by_tiering = run.held_by_tiering.len(), "auto partitioning");
        }
    }
    *service
        .auto_partitioning
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = report.clone();
    report
}

/// Runs `task` every `interval` until shutdown (a run that overruns delays the next).
/// A copy of what `mutex` holds (a report the background runs keep); a panic while it was
/// held leaves the last value readable.
fn copy_of<T: Clone>(mutex: &std::sync::Mutex<T>) -> T {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Spawns [`every`] with a task of the service, which it runs at once and then each `interval`
/// until shutdown.
fn spawn_every<F, Fut>(
    service: &Arc<Service>,
    interval: Duration,
    shutdown: &watch::Receiver<bool>,
    task: F,
) where
    F: Fn(Arc<Service>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let service = service.clone();
    tokio::spawn(every(interval, shutdown.clone(), move || {
        task(service.clone())
    }));
}

async fn every<F, Fut>(interval: Duration, mut shutdown: watch::Receiver<bool>, mut task: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tick.tick() => task().await,
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    service: Arc<Service>,
    config: ServerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections = Arc::new(Semaphore::new(config.connections_max));
    // Counted in KiB so the permit count stays small; a frame takes its size rounded up.
    let request_kib = Arc::new(Semaphore::new(
        config.request_bytes_in_flight_max.div_ceil(1024),
    ));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Running out of file descriptors is transient; back off briefly.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = connections.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, connections_max = config.connections_max,
                        "closing connection: connections_max reached (raise hotstore connections_max)");
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let service = service.clone();
                let config = config.clone();
                let shutdown = shutdown.clone();
                let request_kib = request_kib.clone();
                tasks.spawn(async move {
                    serve_connection(stream, peer, service, config, request_kib, shutdown).await;
                    drop(permit);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drop(listener);
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    if tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tracing::warn!("hotstore shutdown grace period passed; aborting remaining connections");
        tasks.abort_all();
    }
}

/// Answers one request; a handler that panics answers UNKNOWN_SERVER_ERROR (and is logged as
/// the bug it is) instead of taking the connection down.
async fn handle_guarded(service: &Service, header: RequestHeader, body: Bytes) -> Frame {
    std::panic::AssertUnwindSafe(handlers::respond(service, header, body))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            tracing::error!(
                api_key = header.api_key,
                "request handler panicked; this is a bug"
            );
            protocol::encode_error(
                header.request_id,
                &ApiError::new(
                    code::UNKNOWN_SERVER_ERROR,
                    "internal error in silt's hotstore",
                ),
            )
            .into()
        })
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    service: Arc<Service>,
    config: ServerConfig,
    request_kib: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (mut reader, writer) = stream.into_split();
    let (response_tx, response_rx) = mpsc::channel::<Frame>(config.requests_in_flight_max);
    let writer_task = tokio::spawn(write_responses(writer, response_rx));
    let in_flight = Arc::new(Semaphore::new(config.requests_in_flight_max));
    let mut requests = JoinSet::new();
    // Writes of one connection run in arrival order. A client pipelines a writer's batches
    // (sequence n, n+1, ...) on one connection; handled concurrently, n+1 could reach the
    // tablet first and n would be refused as out of order, which fluss-rs then counts as
    // "already committed": an acknowledged write lost. Reads stay concurrent.
    let mut last_write: Option<tokio::sync::oneshot::Receiver<()>> = None;
    let frame_read_timeout = Duration::from_millis(config.frame_read_timeout_ms);
    let mut auth = ConnectionAuth::new(config.sasl.as_ref());
    let auth_deadline =
        tokio::time::Instant::now() + Duration::from_millis(config.authentication_timeout_ms);
    loop {
        let frame = tokio::select! {
            _ = shutdown.changed() => break,
            _ = tokio::time::sleep_until(auth_deadline), if !auth.is_authenticated() => {
                tracing::warn!(%peer, timeout_ms = config.authentication_timeout_ms,
                    "closing connection: it did not authenticate in time (SASL is on)");
                break;
            }
            frame = read_frame(&mut reader, frame_limit(&auth, config.frame_bytes_max), &request_kib, frame_read_timeout) => frame,
        };
        let (frame, bytes_permit) = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(reason) => {
                tracing::warn!(%peer, %reason, "closing connection: malformed frame");
                break;
            }
        };
        let (header, body) = match protocol::parse_request(frame) {
            Ok(parsed) => parsed,
            Err(reason) => {
                tracing::warn!(%peer, %reason, "closing connection: malformed frame");
                break;
            }
        };
        match auth.decide(header.api_key, header.request_id, body.clone()) {
            Decision::Pass => {}
            Decision::Answer(response) => {
                if response_tx.send(response.into()).await.is_err() {
                    break;
                }
                continue;
            }
            Decision::AnswerAndClose(response) => {
                tracing::warn!(%peer, "closing connection: authentication failed");
                let _ = response_tx.send(response.into()).await;
                break;
            }
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let service = service.clone();
        let response_tx = response_tx.clone();
        let is_write =
            header.api_key == protocol::api::PRODUCE_LOG || header.api_key == protocol::api::PUT_KV;
        let (after, done) = if is_write {
            let (done, next) = tokio::sync::oneshot::channel::<()>();
            (last_write.replace(next), Some(done))
        } else {
            (None, None)
        };
        requests.spawn(async move {
            if let Some(previous) = after {
                // Err means the previous write's task ended without signalling (it panicked or
                // was aborted): it is over either way.
                let _ = previous.await;
            }
            let response = handle_guarded(&service, header, body).await;
            if let Some(done) = done {
                let _ = done.send(());
            }
            drop(bytes_permit);
            let _ = response_tx.send(response).await;
            drop(permit);
        });
        // Reap finished requests so the set stays bounded by requests_in_flight_max.
        while requests.try_join_next().is_some() {}
    }
    // Let running requests answer before the writer closes (bounded by the shutdown grace).
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    if tokio::time::timeout(grace, async {
        while requests.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        requests.abort_all();
    }
    drop(response_tx);
    let _ = writer_task.await;
}

/// Largest frame a connection may send before it authenticated (SASL on): enough for
/// ApiVersions and a SASL/PLAIN Authenticate (credentials of a few hundred bytes), so peers that
/// never authenticate cannot hold the server's request byte budget with large frames.
pub const UNAUTHENTICATED_FRAME_BYTES_MAX: usize = 16 * 1024;

fn frame_limit(auth: &ConnectionAuth<'_>, frame_bytes_max: usize) -> usize {
    if auth.is_authenticated() {
        frame_bytes_max
    } else {
        frame_bytes_max.min(UNAUTHENTICATED_FRAME_BYTES_MAX)
    }
}

/// Bytes read (and budgeted) per step of a frame body.
const FRAME_CHUNK_BYTES: usize = 64 * 1024;

/// Reads one frame, holding its share of `request_bytes_in_flight_max`; `Ok(None)` on a
/// clean end of stream between frames. The wait between frames is unbounded (clients keep
/// idle connections), but once a length prefix arrived the body must follow within
/// `frame_read_timeout`.
async fn read_frame(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    frame_bytes_max: usize,
    request_kib: &Arc<Semaphore>,
    frame_read_timeout: Duration,
) -> Result<Option<(Bytes, tokio::sync::OwnedSemaphorePermit)>, String> {
    let mut prefix = [0u8; 4];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error.to_string()),
    }
    let length = protocol::frame_length(prefix, frame_bytes_max).map_err(|e| e.to_string())?;
    tokio::time::timeout(frame_read_timeout, read_body(reader, length, request_kib))
        .await
        .map_err(|_| {
            format!(
                "frame of {length} bytes did not arrive within {} ms",
                frame_read_timeout.as_millis()
            )
        })?
        .map(Some)
}

/// Reads a frame body of `length` bytes. Memory and the byte budget grow with the bytes that
/// actually arrived, so a peer that declares a large frame and stalls holds almost nothing.
async fn read_body(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    length: usize,
    request_kib: &Arc<Semaphore>,
) -> Result<(Bytes, tokio::sync::OwnedSemaphorePermit), String> {
    use bytes::BufMut;
    let acquire = |kib: usize| {
        let request_kib = request_kib.clone();
        async move {
            let kib = u32::try_from(kib).map_err(|_| "frame too large".to_string())?;
            request_kib
                .acquire_many_owned(kib)
                .await
                .map_err(|e| e.to_string())
        }
    };
    let mut permit = acquire(1).await?;
    let mut held_kib = 1usize;
    let mut frame = BytesMut::with_capacity(length.min(FRAME_CHUNK_BYTES));
    while frame.len() < length {
        let want = (length - frame.len()).min(FRAME_CHUNK_BYTES);
        let needed_kib = (frame.len() + want).div_ceil(1024);
        if needed_kib > held_kib {
            permit.merge(acquire(needed_kib - held_kib).await?);
            held_kib = needed_kib;
        }
        if frame.capacity() - frame.len() < want {
            // Grow geometrically so a large frame is not copied once per chunk.
            frame.reserve(want.max(frame.len()).min(length - frame.len()));
        }
        let read = reader
            .read_buf(&mut (&mut frame).limit(want))
            .await
            .map_err(|e| format!("truncated frame: {e}"))?;
        if read == 0 {
            return Err(format!(
                "truncated frame: the peer closed after {} of {length} bytes",
                frame.len()
            ));
        }
    }
    Ok((frame.freeze(), permit))
}

/// Writes each response frame's chunks to the socket with vectored writes, without copying
/// them. Frames already waiting join the write while it holds less than [`WRITE_BATCH_BYTES`],
/// so the writer holds at most one frame beyond that outside the channel, as a buffered writer
/// would (the channel itself holds `requests_in_flight_max` frames).
async fn write_responses(
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    mut responses: mpsc::Receiver<Frame>,
) {
    let mut frames = Vec::new();
    while let Some(frame) = responses.recv().await {
        let mut batched = frame.wire_len();
        frames.push(frame);
        while batched < WRITE_BATCH_BYTES
            && let Ok(frame) = responses.try_recv()
        {
            batched += frame.wire_len();
            frames.push(frame);
        }
        let chunks = frames.iter().flat_map(Frame::chunks);
        if write_all_vectored(&mut writer, chunks).await.is_err() {
            return;
        }
        frames.clear();
    }
    let _ = writer.shutdown().await;
}

/// Bytes of waiting frames gathered into one write; the frame that takes a write past it is
/// its last.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Buffers handed to one vectored write (Linux's `IOV_MAX` is 1024).
const IO_SLICES_MAX: usize = 1024;

/// Writes every chunk, in order, [`IO_SLICES_MAX`] buffers per vectored write at most.
async fn write_all_vectored<'a>(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    chunks: impl Iterator<Item = &'a Bytes>,
) -> std::io::Result<()> {
    let chunks: Vec<&Bytes> = chunks.filter(|c| !c.is_empty()).collect();
    for group in chunks.chunks(IO_SLICES_MAX) {
        let mut slices: Vec<std::io::IoSlice<'_>> =
            group.iter().map(|c| std::io::IoSlice::new(c)).collect();
        let mut remaining = &mut slices[..];
        while !remaining.is_empty() {
            let written = writer.write_vectored(remaining).await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            std::io::IoSlice::advance_slices(&mut remaining, written);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::*;
    use crate::test_server::{connect, create_table, start, start_connected};
    use bytes::{Buf, BufMut};
    use fluss::metadata::{DataTypes, Schema, TableDescriptor, TablePath};
    use prost::Message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn log_table() -> TableDescriptor {
        let schema = Schema::builder()
            .column("id", DataTypes::int())
            .build()
            .unwrap();
        TableDescriptor::builder()
            .schema(schema)
            .distributed_by(Some(2), vec![])
            .property("table.datalake.enabled", "true")
            .build()
            .unwrap()
    }

    /// Sends one request over a fresh connection and returns (response type, body).
    async fn call(server: &ServerHandle, api_key: i16, body: &impl Message) -> (u8, Bytes) {
        let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
        let body = body.encode_to_vec();
        let mut frame = Vec::new();
        frame.put_i32(8 + body.len() as i32);
        frame.put_i16(api_key);
        frame.put_i16(0);
        frame.put_i32(1);
        frame.extend_from_slice(&body);
        stream.write_all(&frame).await.unwrap();
        let length = stream.read_i32().await.unwrap();
        let mut response = vec![0u8; length as usize];
        stream.read_exact(&mut response).await.unwrap();
        let mut response = Bytes::from(response);
        let kind = response.get_u8();
        assert_eq!(response.get_i32(), 1);
        (kind, response)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lake_snapshot_registry_is_served_to_clients() {
        let (dir, server, connection) = start_connected().await;
        let (path, _) = create_table(&connection, "tiered", &log_table()).await;
        let admin = connection.get_admin().unwrap();

        let missing = admin.get_latest_lake_snapshot(&path).await.unwrap_err();
        assert_eq!(
            missing.api_error(),
            Some(fluss::rpc::FlussError::LakeSnapshotNotExist),
            "{missing}"
        );
        assert!(
            server
                .set_lake_snapshot(987_654, 1, &[(None, 0, 5)])
                .is_err(),
            "unknown table"
        );
        assert!(
            server
                .set_lake_snapshot(
                    server.table_id("fluss", "tiered").unwrap(),
                    1,
                    &[(None, 2, 5)]
                )
                .is_err(),
            "bucket out of range"
        );
        let unpartitioned = server
            .set_lake_snapshot(
                server.table_id("fluss", "tiered").unwrap(),
                1,
                &[(Some(1), 0, 5)],
            )
            .unwrap_err();
        assert!(
            unpartitioned.to_string().contains("is not partitioned"),
            "a partition id for a table without partition keys: {unpartitioned}"
        );

        server
            .set_lake_snapshot(
                server.table_id("fluss", "tiered").unwrap(),
                7,
                &[(None, 0, 10), (None, 1, 3)],
            )
            .unwrap();
        let snapshot = admin.get_latest_lake_snapshot(&path).await.unwrap();
        assert_eq!(snapshot.snapshot_id(), 7);
        let mut offsets: Vec<(i32, i64)> = snapshot
            .table_buckets_offset()
            .iter()
            .map(|(b, o)| (b.bucket_id(), *o))
            .collect();
        offsets.sort();
        assert_eq!(offsets, [(0, 10), (1, 3)]);
        server.shutdown().await.unwrap();

        // The registry survives a restart.
        let server = start(dir.path()).await;
        let snapshot = server.lake_snapshot("fluss", "tiered").unwrap().unwrap();
        assert_eq!(snapshot.snapshot_id, 7);
        server.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partitioned_lake_snapshots_are_served_with_partition_ids() {
        let (dir, server, connection) = start_connected().await;
        let admin = connection.get_admin().unwrap();
        let schema = Schema::builder()
            .column("dt", DataTypes::string())
            .column("id", DataTypes::int())
            .build()
            .unwrap();
        let descriptor = TableDescriptor::builder()
            .schema(schema)
            .partitioned_by(vec!["dt"])
            .distributed_by(Some(2), vec![])
            .property("table.datalake.enabled", "true")
            .build()
            .unwrap();
        let (path, _) = create_table(&connection, "daily", &descriptor).await;
        let day = |dt: &str| {
            fluss::metadata::PartitionSpec::new(std::collections::HashMap::from([("dt", dt)]))
        };
        for dt in ["20240501", "20240502", "20240503"] {
            admin
                .create_partition(&path, &day(dt), false)
                .await
                .unwrap();
        }
        let ids: std::collections::HashMap<String, i64> = admin
            .list_partition_infos(&path)
            .await
            .unwrap()
            .iter()
            .map(|p| (p.get_partition_name(), p.get_partition_id()))
            .collect();
        let (first, second, third) = (ids["20240501"], ids["20240502"], ids["20240503"]);
        admin
            .drop_partition(&path, &day("20240503"), false)
            .await
            .unwrap();
        admin
            .create_table(&TablePath::new("fluss", "other"), &descriptor, false)
            .await
            .unwrap();
        admin
            .create_partition(&TablePath::new("fluss", "other"), &day("20240501"), false)
            .await
            .unwrap();
        let others = admin
            .list_partition_infos(&TablePath::new("fluss", "other"))
            .await
            .unwrap()[0]
            .get_partition_id();

        // (offsets, refused): a bucket out of range, another table's partition, an id never
        // given out.
        for (offsets, why) in [
            (vec![(Some(first), 2, 5)], "bucket out of range"),
            (vec![(Some(others), 0, 5)], "another table's partition"),
            (
                vec![(Some(others + 100), 0, 5)],
                "a partition id never created",
            ),
        ] {
            assert!(
                server
                    .set_lake_snapshot(server.table_id("fluss", "daily").unwrap(), 1, &offsets)
                    .is_err(),
                "{why}"
            );
        }
        assert!(
            server
                .set_lake_snapshot(987_654, 1, &[(Some(first), 0, 1)])
                .is_err(),
            "unknown table"
        );
        // A dropped partition's offsets are ignored, the others recorded.
        server
            .set_lake_snapshot(
                server.table_id("fluss", "daily").unwrap(),
                4,
                &[
                    (Some(first), 0, 10),
                    (Some(first), 1, 3),
                    (Some(second), 1, 7),
                    (Some(third), 0, 9),
                ],
            )
            .unwrap();
        let served = |snapshot: fluss::metadata::LakeSnapshot| {
            let mut offsets: Vec<(Option<i64>, i32, i64)> = snapshot
                .table_buckets_offset()
                .iter()
                .map(|(b, o)| (b.partition_id(), b.bucket_id(), *o))
                .collect();
            offsets.sort();
            (snapshot.snapshot_id(), offsets)
        };
        let snapshot = admin.get_latest_lake_snapshot(&path).await.unwrap();
        assert_eq!(
            served(snapshot),
            (
                4,
                vec![
                    (Some(first), 0, 10),
                    (Some(first), 1, 3),
                    (Some(second), 1, 7)
                ]
            )
        );
        // Dropping a partition forgets its offsets, also across a restart.
        admin
            .drop_partition(&path, &day("20240501"), false)
            .await
            .unwrap();
        server.shutdown().await.unwrap();
        let server = start(dir.path()).await;
        let connection = connect(&server).await;
        let snapshot = connection
            .get_admin()
            .unwrap()
            .get_latest_lake_snapshot(&path)
            .await
            .unwrap();
        assert_eq!(served(snapshot), (4, vec![(Some(second), 1, 7)]));
        server.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retried_batches_are_acknowledged_once_and_gaps_are_out_of_order() {
        let (_dir, server, connection) = start_connected().await;
        let (path, table_id) = create_table(&connection, "idem", &log_table()).await;
        let admin = connection.get_admin().unwrap();

        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int32, true),
        ]));
        let rows = arrow::array::RecordBatch::try_new(
            schema,
            vec![std::sync::Arc::new(arrow::array::Int32Array::from(vec![
                1, 2, 3,
            ]))],
        )
        .unwrap();
        let message = crate::codec::arrow::encode_arrow_message(&rows).unwrap();
        let batch = |sequence: i32| {
            crate::codec::build::build_batch(
                crate::codec::build::HeaderFields {
                    base_offset: 0,
                    commit_timestamp: 0,
                    schema_id: 1,
                    append_only: true,
                    writer_id: 42,
                    batch_sequence: sequence,
                    record_count: 3,
                },
                &[],
                &message,
            )
        };
        let produce = |sequence: i32| ProduceLogRequest {
            acks: -1,
            table_id,
            timeout_ms: 10_000,
            buckets_req: vec![PbWriteReqForBucket {
                partition_id: None,
                bucket_id: 0,
                records: batch(sequence),
                original_partition_name: None,
                routing_bucket_count: None,
            }],
        };
        let base_offset = |body: Bytes| {
            let response = ProduceLogResponse::decode(body).unwrap();
            let bucket = &response.buckets_resp[0];
            (bucket.error_code, bucket.base_offset)
        };
        let (kind, body) = call(&server, crate::protocol::api::PRODUCE_LOG, &produce(0)).await;
        assert_eq!((kind, base_offset(body)), (0, (None, Some(0))));
        let (_, body) = call(&server, crate::protocol::api::PRODUCE_LOG, &produce(1)).await;
        assert_eq!(base_offset(body), (None, Some(3)));
        // A retry of sequence 1 is acknowledged with its original offset and not appended.
        let (_, body) = call(&server, crate::protocol::api::PRODUCE_LOG, &produce(1)).await;
        assert_eq!(base_offset(body), (None, Some(3)));
        // A gap is out of order (31), which makes the client reset its writer.
        let (_, body) = call(&server, crate::protocol::api::PRODUCE_LOG, &produce(5)).await;
        let (code, _) = base_offset(body);
        assert_eq!(code, Some(crate::protocol::code::OUT_OF_ORDER_SEQUENCE));
        let latest = admin
            .list_offsets(&path, &[0], fluss::rpc::message::OffsetSpec::Latest)
            .await
            .unwrap();
        assert_eq!(
            latest[&0], 6,
            "two batches of three rows, the retry not appended"
        );
        server.shutdown().await.unwrap();
    }

    /// Regression guard for crash recovery: the kv tablets are rebuilt from the changelog (the
    /// write-ahead log) when their applied offset lags, here after losing the kv store entirely.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kv_state_is_replayed_from_the_changelog() {
        let dir = tempfile::tempdir().unwrap();
        let path = TablePath::new("fluss", "users");
        let row = |id: i32, name: &str| {
            let mut row = fluss::row::GenericRow::new(2);
            row.set_field(0, id);
            row.set_field(1, name.to_string());
            row
        };
        {
            let server = start(dir.path()).await;
            let connection = connect(&server).await;
            // (id INT PRIMARY KEY, name STRING) in two buckets.
            let descriptor = crate::fuzz_tests::pk_descriptor();
            connection
                .get_admin()
                .unwrap()
                .create_table(&path, &descriptor, false)
                .await
                .unwrap();
            let table = connection.get_table(&path).await.unwrap();
            let writer = table.new_upsert().unwrap().create_writer().unwrap();
            for id in 0..50 {
                writer.upsert(&row(id, "a")).unwrap().await.unwrap();
            }
            writer.upsert(&row(7, "b")).unwrap().await.unwrap();
            writer.delete(&row(9, "a")).unwrap().await.unwrap();
            drop(writer);
            server.shutdown().await.unwrap();
        }
        std::fs::remove_dir_all(dir.path().join("tables").join("kv")).unwrap();

        let server = start(dir.path()).await;
        let connection = connect(&server).await;
        let table = connection.get_table(&path).await.unwrap();
        let mut lookuper = table.new_lookup().unwrap().create_lookuper().unwrap();
        for (id, expected) in [
            (0, Some("a")),
            (7, Some("b")),
            (9, None),
            (49, Some("a")),
            (50, None),
        ] {
            let mut key = fluss::row::GenericRow::new(1);
            key.set_field(0, id);
            let result = lookuper.lookup(&key).await.unwrap();
            let found = result.get_single_row().unwrap().map(|r| {
                use fluss::row::DataGetters;
                r.get_string(1).unwrap().to_string()
            });
            assert_eq!(found.as_deref(), expected, "key {id} after replay");
        }
        server.shutdown().await.unwrap();
    }

    /// A fetch at the high watermark waits for data (up to max_wait_ms) and returns as soon
    /// as an append lands, with the records; without data it returns empty at the deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fetch_long_polls_until_data_arrives() {
        let (_dir, server, connection) = start_connected().await;
        let (path, table_id) = create_table(&connection, "poll", &log_table()).await;
        let fetch = |max_wait_ms: i32| FetchLogRequest {
            max_wait_ms: Some(max_wait_ms),
            ..FetchLogRequest::of_buckets(table_id, &[(0, 0), (1, 0)])
        };
        let records = |body: Bytes| -> usize {
            FetchLogResponse::decode(body).unwrap().tables_resp[0]
                .buckets_resp
                .iter()
                .map(|b| b.records.as_ref().map_or(0, Bytes::len))
                .sum()
        };

        let started = std::time::Instant::now();
        let (_, body) = call(&server, crate::protocol::api::FETCH_LOG, &fetch(300)).await;
        assert_eq!(records(body), 0);
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "an empty fetch waits for max_wait_ms"
        );

        let writer_table = connection.get_table(&path).await.unwrap();
        let writer = writer_table.new_append().unwrap().create_writer().unwrap();
        let started = std::time::Instant::now();
        let long_poll = fetch(20_000);
        let (poll, ()) = tokio::join!(
            call(&server, crate::protocol::api::FETCH_LOG, &long_poll),
            async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let mut row = fluss::row::GenericRow::new(1);
                row.set_field(0, 1i32);
                writer.append(&row).unwrap();
                writer.flush().await.unwrap();
            }
        );
        assert!(
            records(poll.1) > 0,
            "the long poll returns the appended batch"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the long poll wakes on the append"
        );
        server.shutdown().await.unwrap();
    }
}
