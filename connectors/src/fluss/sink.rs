//! The Fluss sink: writes a changelog stream into another table through the fluss-rs client
//! (silt's hotstore or a real Fluss cluster).
//!
//! Modes:
//! - **append** into a log table: every row is appended (change types are not interpreted; a
//!   filter on `__change_type` upstream chooses what to keep).
//! - **upsert** into a primary-key table: `+A`, `+I` and `+U` rows are upserted, `-D` rows
//!   delete their key, `-U` rows are skipped (the `+U` that follows carries the new image).
//!
//! Columns are matched by name: the target table's columns, in its order, are taken from the
//! batch (system columns and any extra columns are ignored).
//!
//! **Delivery guarantee:** at-least-once across restarts, which is exactly-once for the target's
//! state in upsert mode. At each checkpoint barrier the sink flushes the client and waits for
//! every acknowledgement before it acknowledges the barrier, so every row before a completed
//! checkpoint is durable in the target. After a failure the job restores that checkpoint and the
//! rows after it are written again: the Fluss protocol gives a writer no transaction that could
//! be held open across a checkpoint and committed at `notify_checkpoint_complete` (writer ids do
//! not survive the client), so a two-phase commit is not available. In upsert mode the replay
//! re-applies the same changes in the same per-key order (one source bucket feeds one subtask in
//! order), so the table converges to the same latest image per key; the target's own changelog
//! may show the replayed changes again. In append mode replayed rows are duplicated.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use fluss::client::{AppendWriter, FlussConnection, UpsertWriter, WriteResultFuture};
use fluss::metadata::{RowType, TablePath};
use fluss::row::ColumnarRow;
use silt_engine::{Error, RestoredState, Result, Sink, TaskContext};

use super::source::connect_with;
use crate::changelog::{CHANGE_TYPE_COLUMN, ChangeType};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlussSinkMode {
    Append,
    Upsert,
}

#[derive(Debug, Clone)]
pub struct FlussSinkConfig {
    pub bootstrap_servers: String,
    pub database: String,
    pub table: String,
    pub mode: FlussSinkMode,
    /// Unacknowledged writes a subtask holds before it waits for them; bounds memory between
    /// checkpoints.
    pub pending_writes_max: usize,
    /// SASL/PLAIN credentials when the endpoint requires them.
    pub credentials: Option<super::FlussCredentials>,
}

impl FlussSinkConfig {
    pub fn new(
        bootstrap_servers: impl Into<String>,
        database: impl Into<String>,
        table: impl Into<String>,
        mode: FlussSinkMode,
    ) -> Self {
        FlussSinkConfig {
            bootstrap_servers: bootstrap_servers.into(),
            database: database.into(),
            table: table.into(),
            mode,
            pending_writes_max: 8192,
            credentials: None,
        }
    }
}

enum Writer {
    Append(AppendWriter),
    Upsert(UpsertWriter),
}

/// One subtask of the Fluss sink.
pub struct FlussSink {
    config: FlussSinkConfig,
    _connection: Option<FlussConnection>,
    writer: Option<Writer>,
    row_type: Option<Arc<RowType>>,
    target_schema: Option<SchemaRef>,
    pending: Vec<WriteResultFuture>,
}

fn fluss_error(context: String) -> impl Fn(fluss::error::Error) -> Error {
    move |e| Error::with_context(silt_engine::Cause::User, context.clone(), e)
}

impl FlussSink {
    pub fn new(config: FlussSinkConfig) -> Self {
        FlussSink {
            config,
            _connection: None,
            writer: None,
            row_type: None,
            target_schema: None,
            pending: Vec::new(),
        }
    }

    fn name(&self) -> String {
        format!("{}.{}", self.config.database, self.config.table)
    }

    /// The target's columns, in its order, taken by name from `batch` (cast where the types
    /// differ only in encoding, e.g. Utf8 and LargeUtf8; jobs/ refuses other differences).
    fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let schema = self
            .target_schema
            .clone()
            .ok_or_else(|| Error::Internal("fluss sink used before open".into()))?;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = batch.column_by_name(field.name()).ok_or_else(|| {
                Error::operator(format!(
                    "fluss-sink {}: the input has no column {:?} (project it upstream)",
                    self.name(),
                    field.name()
                ))
            })?;
            if column.data_type() == field.data_type() {
                columns.push(column.clone());
            } else {
                // Not `safe`: a value that does not fit fails the write instead of becoming null.
                let options = arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                };
                columns.push(arrow::compute::cast_with_options(
                    column,
                    field.data_type(),
                    &options,
                )?);
            }
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    async fn wait_pending(&mut self) -> Result<()> {
        let name = self.name();
        for write in self.pending.drain(..) {
            write
                .await
                .map_err(fluss_error(format!("writing {name}")))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for FlussSink {
    async fn open(&mut self, _ctx: &TaskContext, _restored: RestoredState) -> Result<()> {
        let name = self.name();
        let connection = connect_with(
            &self.config.bootstrap_servers,
            self.config.credentials.as_ref(),
        )
        .await?;
        let path = TablePath::new(self.config.database.clone(), self.config.table.clone());
        let table = connection
            .get_table(&path)
            .await
            .map_err(fluss_error(format!("table {name}")))?;
        let has_key = table.has_primary_key();
        let row_type = Arc::new(table.get_table_info().get_row_type().clone());
        let writer = match (self.config.mode, has_key) {
            (FlussSinkMode::Append, false) => Writer::Append(
                table
                    .new_append()
                    .and_then(|a| a.create_writer())
                    .map_err(fluss_error(format!("append writer for {name}")))?,
            ),
            (FlussSinkMode::Upsert, true) => Writer::Upsert(
                table
                    .new_upsert()
                    .and_then(|u| u.create_writer())
                    .map_err(fluss_error(format!("upsert writer for {name}")))?,
            ),
            (FlussSinkMode::Append, true) => {
                return Err(Error::operator(format!(
                    "{name} has a primary key: use mode upsert"
                )));
            }
            (FlussSinkMode::Upsert, false) => {
                return Err(Error::operator(format!(
                    "{name} is a log table: use mode append"
                )));
            }
        };
        self.target_schema = Some(
            fluss::record::to_arrow_schema(&row_type)
                .map_err(fluss_error(format!("schema of {name}")))?,
        );
        self.row_type = Some(row_type);
        self.writer = Some(writer);
        drop(table);
        self._connection = Some(connection);
        Ok(())
    }

    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let name = self.name();
        let changes = batch
            .column_by_name(CHANGE_TYPE_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<Int8Array>().cloned());
        let rows = self.conform(&batch)?;
        match self.writer.as_ref() {
            Some(Writer::Append(writer)) => {
                let write = writer
                    .append_arrow_batch(rows)
                    .map_err(fluss_error(format!("appending to {name}")))?;
                self.pending.push(write);
            }
            Some(Writer::Upsert(writer)) => {
                let row_type = self.row_type.clone().expect("set with the writer");
                let mut row = ColumnarRow::new(Arc::new(rows.clone()), row_type, 0, None)
                    .map_err(fluss_error(format!("rows for {name}")))?;
                for i in 0..rows.num_rows() {
                    let change = match changes.as_ref().filter(|c| !c.is_null(i)) {
                        Some(c) => ChangeType::from_i8(c.value(i)).ok_or_else(|| {
                            Error::operator(format!("unknown change type {}", c.value(i)))
                        })?,
                        None => ChangeType::AppendOnly,
                    };
                    row.set_row_id(i);
                    let write = match change {
                        ChangeType::UpdateBefore => continue,
                        ChangeType::Delete => writer.delete(&row),
                        _ => writer.upsert(&row),
                    }
                    .map_err(fluss_error(format!("upserting into {name}")))?;
                    self.pending.push(write);
                }
            }
            None => return Err(Error::Internal("fluss sink used before open".into())),
        }
        if self.pending.len() >= self.config.pending_writes_max {
            self.wait_pending().await?;
        }
        Ok(())
    }

    /// Flushes and waits for every acknowledgement: what came before the barrier is durable
    /// in the target before this subtask acknowledges the checkpoint.
    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<bytes::Bytes> {
        let name = self.name();
        match self.writer.as_ref() {
            Some(Writer::Append(w)) => w.flush().await,
            Some(Writer::Upsert(w)) => w.flush().await,
            None => Ok(()),
        }
        .map_err(fluss_error(format!("flushing {name}")))?;
        self.wait_pending().await?;
        Ok(bytes::Bytes::new())
    }

    async fn finish(&mut self) -> Result<()> {
        self.snapshot(0).await.map(|_| ())
    }
}
