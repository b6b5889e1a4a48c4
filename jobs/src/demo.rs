//! The example dataflow `silt demo` runs on the engine alone: a generator of orders, a keyed
//! running revenue per customer (state checkpointed), and a sink that prints a summary each
//! time a checkpoint completes. Ctrl-C stops it with a final checkpoint; running it again
//! resumes from there.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use arrow::array::{AsArray, Float64Array, Int64Array};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use silt_engine::{
    JobConfig, JobGraph, JobManager, JobState, Partitioning, RestoredState, Sink, Source,
    SourcePoll, TaskContext,
};

const CUSTOMERS: i64 = 100;

#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Orders per second per source subtask.
    pub rate_per_s: u64,
    /// Stop after this many orders per subtask (bounded run); `None` runs until Ctrl-C.
    pub orders_max: Option<u64>,
    pub parallelism: u32,
    pub checkpoint_interval: Duration,
}

fn orders_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("customer", DataType::Int64, false),
        Field::new("amount", DataType::Float64, false),
    ]))
}

/// Deterministic orders: order `n` of subtask `s` has id `n * parallelism + s`.
struct OrderGenerator {
    next: u64,
    subtask: u64,
    parallelism: u64,
    rate_per_s: u64,
    orders_max: Option<u64>,
}

#[async_trait]
impl Source for OrderGenerator {
    async fn open(
        &mut self,
        _ctx: &TaskContext,
        restored: RestoredState,
    ) -> silt_engine::Result<()> {
        if let Some(mut s) = restored.own().cloned() {
            self.next = s.get_u64();
        }
        Ok(())
    }

    async fn poll_next(&mut self) -> silt_engine::Result<SourcePoll> {
        if self.orders_max.is_some_and(|max| self.next >= max) {
            return Ok(SourcePoll::End);
        }
        // Ten batches a second at the configured rate.
        let mut rows = (self.rate_per_s / 10).max(1);
        if let Some(max) = self.orders_max {
            rows = rows.min(max - self.next);
        }
        let ids: Vec<i64> = (self.next..self.next + rows)
            .map(|n| (n * self.parallelism + self.subtask) as i64)
            .collect();
        let customers =
            Int64Array::from_iter_values(ids.iter().map(|id| id.wrapping_mul(7919) % CUSTOMERS));
        let amounts = Float64Array::from_iter_values(ids.iter().map(|id| (id % 97) as f64 + 0.5));
        self.next += rows;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let batch = RecordBatch::try_new(
            orders_schema(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(customers),
                Arc::new(amounts),
            ],
        )?;
        Ok(SourcePoll::Batch(batch))
    }

    async fn snapshot(&mut self, _id: u64) -> silt_engine::Result<Bytes> {
        let mut b = BytesMut::new();
        b.put_u64(self.next);
        Ok(b.freeze())
    }
}

/// Revenue and order count per customer, kept as checkpointed state.
#[derive(Default)]
struct RevenuePerCustomer {
    totals: BTreeMap<i64, (u64, f64)>,
    subtask: u32,
}

#[async_trait]
impl Sink for RevenuePerCustomer {
    async fn open(
        &mut self,
        ctx: &TaskContext,
        restored: RestoredState,
    ) -> silt_engine::Result<()> {
        self.subtask = ctx.subtask_index;
        if let Some(mut s) = restored.own().cloned() {
            while s.has_remaining() {
                self.totals.insert(s.get_i64(), (s.get_u64(), s.get_f64()));
            }
        }
        Ok(())
    }

    async fn write(&mut self, batch: RecordBatch) -> silt_engine::Result<()> {
        let customers = batch.column(1).as_primitive::<Int64Type>();
        let amounts = batch.column(2).as_primitive::<Float64Type>();
        for (c, a) in customers.values().iter().zip(amounts.values()) {
            let t = self.totals.entry(*c).or_default();
            t.0 += 1;
            t.1 += a;
        }
        Ok(())
    }

    async fn snapshot(&mut self, _id: u64) -> silt_engine::Result<Bytes> {
        let mut b = BytesMut::new();
        for (c, (n, total)) in &self.totals {
            b.put_i64(*c);
            b.put_u64(*n);
            b.put_f64(*total);
        }
        Ok(b.freeze())
    }

    async fn notify_checkpoint_complete(&mut self, id: u64) -> silt_engine::Result<()> {
        let orders: u64 = self.totals.values().map(|t| t.0).sum();
        let revenue: f64 = self.totals.values().map(|t| t.1).sum();
        let top = self.totals.iter().max_by(|a, b| a.1.1.total_cmp(&b.1.1));
        if let Some((customer, (n, total))) = top {
            println!(
                "checkpoint {id:>4} | subtask {} | {} customers, {orders} orders, revenue {revenue:.2} | top customer {customer}: {n} orders, {total:.2}",
                self.subtask,
                self.totals.len()
            );
        }
        Ok(())
    }
}

/// Runs the demo job until Ctrl-C (stop with a final checkpoint) or the bounded input ends.
pub async fn run(data_dir: &Path, options: DemoOptions) -> Result<()> {
    let checkpoints = data_dir.join("checkpoints").join("demo");
    let storage = silt_engine::storage_for(&checkpoints.to_string_lossy())?;
    let mut graph = JobGraph::new();
    let (rate, max, parallelism) = (options.rate_per_s, options.orders_max, options.parallelism);
    let source = graph.add_source(
        "orders",
        parallelism,
        move |ctx: &TaskContext| -> silt_engine::Result<Box<dyn Source>> {
            Ok(Box::new(OrderGenerator {
                next: 0,
                subtask: ctx.subtask_index as u64,
                parallelism: ctx.parallelism as u64,
                rate_per_s: rate,
                orders_max: max,
            }))
        },
    );
    let revenue = graph.add_sink("revenue-per-customer", parallelism, |_: &TaskContext| {
        RevenuePerCustomer::default()
    });
    graph.connect(
        source,
        revenue,
        Partitioning::Hash {
            key_columns: vec!["customer".into()],
        },
    );

    let mut config = JobConfig::new("demo", storage);
    config.checkpoint.interval = Some(options.checkpoint_interval);
    println!(
        "demo job: orders x{parallelism} -> revenue-per-customer x{parallelism}; checkpoints in {}",
        checkpoints.display()
    );
    println!("press Ctrl-C to stop with a final checkpoint; run again to resume");
    let job = JobManager::new().submit(graph, config)?;
    tokio::select! {
        state = job.wait() => report(state, &job),
        _ = tokio::signal::ctrl_c() => {
            let id = job.stop().await?;
            println!("stopped with final checkpoint {id}");
            report(job.state(), &job)
        }
    }
}

fn report(state: JobState, job: &silt_engine::JobHandle) -> Result<()> {
    let m = job.metrics();
    for op in &m.operators {
        println!(
            "{:<22} records in {:>9} out {:>9} | backpressured {} ms | state {} B",
            op.name, op.records_in, op.records_out, op.backpressured_ms, op.last_checkpoint_bytes
        );
    }
    println!(
        "job {state}: {} checkpoints, {} restarts",
        m.checkpoints_completed, m.restarts
    );
    match state {
        JobState::Finished => Ok(()),
        other => anyhow::bail!("demo job ended {other}"),
    }
}
