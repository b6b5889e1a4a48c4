//! Where an operator's batches go: one writer per outgoing edge, each partitioning batches
//! over the downstream subtasks' channels.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

use crate::channel::{Barrier, ChannelSender, Message};
use crate::error::{Error, Result};
use crate::metrics::VertexCounters;
use std::fmt;

/// How records move from the subtasks of one vertex to those of the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Subtask i feeds subtask i; both sides must have the same parallelism.
    Forward,
    /// Rows go to the subtask chosen by a stable hash of these columns.
    Hash { key_columns: Vec<String> },
    /// Whole batches go round-robin.
    Rebalance,
    /// Every batch goes to every subtask.
    Broadcast,
}

impl fmt::Display for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partitioning::Forward => write!(f, "forward"),
            Partitioning::Hash { key_columns } => write!(f, "hash({})", key_columns.join(", ")),
            Partitioning::Rebalance => write!(f, "rebalance"),
            Partitioning::Broadcast => write!(f, "broadcast"),
        }
    }
}

/// The outputs of one subtask. Operators call `emit`; the runtime sends barriers and
/// end-of-data through every channel.
pub struct Output {
    edges: Vec<EdgeWriter>,
    counters: Arc<VertexCounters>,
}

struct EdgeWriter {
    partitioning: Partitioning,
    /// One per downstream subtask (a forward edge has exactly one).
    senders: Vec<ChannelSender>,
    round_robin: usize,
}

impl Output {
    pub(crate) fn new(counters: Arc<VertexCounters>) -> Self {
        Output {
            edges: Vec::new(),
            counters,
        }
    }

    pub(crate) fn add_edge(&mut self, partitioning: Partitioning, senders: Vec<ChannelSender>) {
        self.edges.push(EdgeWriter {
            partitioning,
            senders,
            round_robin: 0,
        });
    }

    /// Sends a batch downstream, waiting while a channel is full (backpressure).
    pub async fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.counters
            .record_out(batch.num_rows(), batch.get_array_memory_size());
        for edge in &mut self.edges {
            edge.write(&batch, &self.counters).await?;
        }
        Ok(())
    }

    pub(crate) async fn broadcast_barrier(&mut self, barrier: Barrier) -> Result<()> {
        self.broadcast(|| Message::Barrier(barrier)).await
    }

    pub(crate) async fn broadcast_end_of_data(&mut self) -> Result<()> {
        self.broadcast(|| Message::EndOfData).await
    }

    async fn broadcast(&mut self, message: impl Fn() -> Message) -> Result<()> {
        for edge in &self.edges {
            for s in &edge.senders {
                s.send_control(message())
                    .await
                    .map_err(|_| downstream_gone())?;
            }
        }
        Ok(())
    }
}

fn downstream_gone() -> Error {
    Error::Internal("a downstream subtask is gone while this one still runs".into())
}

impl EdgeWriter {
    async fn write(&mut self, batch: &RecordBatch, counters: &VertexCounters) -> Result<()> {
        match &self.partitioning {
            Partitioning::Forward => send(&self.senders[0], batch.clone(), counters).await,
            Partitioning::Rebalance => {
                let i = self.round_robin % self.senders.len();
                self.round_robin = self.round_robin.wrapping_add(1);
                send(&self.senders[i], batch.clone(), counters).await
            }
            Partitioning::Broadcast => {
                for s in &self.senders {
                    send(s, batch.clone(), counters).await?;
                }
                Ok(())
            }
            Partitioning::Hash { key_columns } => {
                let parts = split_by_key(batch, key_columns, self.senders.len())?;
                for (target, part) in parts.into_iter().enumerate() {
                    if let Some(part) = part {
                        send(&self.senders[target], part, counters).await?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Sends one batch; the time spent waiting for room counts as backpressure.
async fn send(sender: &ChannelSender, batch: RecordBatch, counters: &VertexCounters) -> Result<()> {
    let started = Instant::now();
    let sent = sender
        .send_batch(batch)
        .await
        .map_err(|_| downstream_gone());
    counters.backpressured(started.elapsed());
    sent
}

/// Splits a batch by a stable hash of the key columns into one batch per target (or `None`
/// where no row goes).
pub fn split_by_key(
    batch: &RecordBatch,
    key_columns: &[String],
    targets: usize,
) -> Result<Vec<Option<RecordBatch>>> {
    let targets_per_row = key_targets(batch, key_columns, targets)?;
    // Common when batches come per key group (the Fluss source emits one bucket per batch):
    // every row goes to one target, and the batch goes as it is, without copying a column.
    if let Some(&first) = targets_per_row.first()
        && targets_per_row.iter().all(|&t| t == first)
    {
        let mut parts = vec![None; targets];
        parts[first] = Some(batch.clone());
        return Ok(parts);
    }
    let mut indices: Vec<Vec<u32>> = vec![Vec::new(); targets];
    for (row, &t) in targets_per_row.iter().enumerate() {
        indices[t].push(row as u32);
    }
    indices
        .into_iter()
        .map(|rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let rows = UInt32Array::from(rows);
            let columns = batch
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &rows, None))
                .collect::<Result<Vec<ArrayRef>, _>>()?;
            Ok(Some(RecordBatch::try_new(batch.schema(), columns)?))
        })
        .collect()
}

/// The target subtask of every row: FNV-1a over the row-format encoding of the key columns.
/// Stable across runs and versions of silt, so keyed state restores onto the right subtask.
pub fn key_targets(
    batch: &RecordBatch,
    key_columns: &[String],
    targets: usize,
) -> Result<Vec<usize>> {
    let schema = batch.schema();
    let mut columns = Vec::with_capacity(key_columns.len());
    for name in key_columns {
        let index = schema.index_of(name).map_err(|_| {
            let known: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            Error::operator(format!(
                "hash key column {name:?} is not in the batch (columns: {})",
                known.join(", ")
            ))
        })?;
        columns.push(batch.column(index).clone());
    }
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let rows = converter.convert_columns(&columns)?;
    Ok(rows
        .iter()
        .map(|row| (fnv1a(row.as_ref()) % targets as u64) as usize)
        .collect())
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= b as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn a_batch_whose_rows_share_a_target_is_passed_on_without_a_copy() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![7; 100])),
                Arc::new(StringArray::from_iter_values(
                    (0..100).map(|i| format!("v{i}")),
                )),
            ],
        )
        .unwrap();
        let parts = split_by_key(&batch, &["k".to_string()], 4).unwrap();
        let sent: Vec<&RecordBatch> = parts.iter().flatten().collect();
        assert_eq!(sent.len(), 1);
        assert!(
            sent[0]
                .columns()
                .iter()
                .zip(batch.columns())
                .all(|(a, b)| Arc::ptr_eq(a, b)),
            "the columns are the same arrays, not copies"
        );
    }

    #[test]
    fn hash_split_keeps_every_row_once_and_keys_together() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let keys: Vec<String> = (0..1000).map(|i| format!("key-{}", i % 37)).collect();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(Int64Array::from_iter_values(0..1000)),
            ],
        )
        .unwrap();
        let parts = split_by_key(&batch, &["k".to_string()], 4).unwrap();
        let mut seen = Vec::new();
        let mut owner = std::collections::HashMap::new();
        for (t, part) in parts.iter().enumerate() {
            let Some(part) = part else { continue };
            let k = part
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            let v = part
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            for i in 0..part.num_rows() {
                seen.push(v.value(i));
                assert_eq!(
                    *owner.entry(k.value(i).to_string()).or_insert(t),
                    t,
                    "a key went to two targets"
                );
            }
        }
        seen.sort();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
        assert!(
            parts.iter().filter(|p| p.is_some()).count() > 1,
            "37 keys should spread over 4 targets"
        );
    }

    #[test]
    fn unknown_key_column_is_named() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1]))]).unwrap();
        let err = split_by_key(&batch, &["nope".to_string()], 2)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"nope\"") && err.contains("columns: v"),
            "{err}"
        );
    }
}
