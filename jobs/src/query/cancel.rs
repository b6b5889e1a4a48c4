//! Cancellation that reaches DataFusion's operators. Dropping a query's stream stops its plan
//! only where the plan's tasks yield, and an operator looping over its input (an aggregate over
//! a cross join) may not yield for seconds: the plan went on computing long after its caller
//! had its deadline error. [`insert_cancel_points`] puts a [`CancelPointExec`] on every input of
//! DataFusion's own operators; its stream fails with [`Cancelled`] at the first poll after the
//! query's deadline or its cancellation, so the plan unwinds within one batch of work wherever
//! it computes.
//!
//! **Contract:** only DataFusion's own operators (a fixed list) are rebuilt with new inputs;
//! nodes of other crates and everything below them are left as planned. deltalake's
//! deletion-vector scan refuses a Parquet child that anything rebuilt (`DV child changed Parquet
//! source`), so a cancel point goes above a foreign node, never inside it. A node missing from
//! the list only loses cancel points (the plan stops later), never a result.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    RecordBatchStream, ReplaceChildrenOptions, SendableRecordBatchStream,
    replace_children_if_necessary,
};
use futures::{Stream, StreamExt as _};

/// One query's cancellation: its deadline, or an explicit [`Cancel::cancel`] (its caller left).
#[derive(Debug)]
pub struct Cancel {
    deadline: Instant,
    cancelled: AtomicBool,
}

impl Cancel {
    pub fn new(deadline: Instant) -> Arc<Cancel> {
        Arc::new(Cancel {
            deadline,
            cancelled: AtomicBool::new(false),
        })
    }

    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
}

/// The error a cancel point fails its stream with.
#[derive(Debug, thiserror::Error)]
#[error("the query was cancelled: its deadline passed or its caller left")]
pub struct Cancelled;

/// `plan` with a [`CancelPointExec`] on every input of each of DataFusion's own operators,
/// down to the first node of another crate or a leaf (see the module doc).
pub fn insert_cancel_points(
    plan: Arc<dyn ExecutionPlan>,
    cancel: &Arc<Cancel>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if plan.children().is_empty() || !rebuilds_safely(plan.as_ref()) {
        return Ok(plan);
    }
    let children = plan
        .children()
        .into_iter()
        .map(|child| {
            let child = insert_cancel_points(Arc::clone(child), cancel)?;
            Ok(Arc::new(CancelPointExec::new(child, cancel.clone())) as Arc<dyn ExecutionPlan>)
        })
        .collect::<Result<Vec<_>>>()?;
    replace_children_if_necessary(plan, children)
}

/// DataFusion's operators that take new inputs and keep everything else: their dynamic filters
/// (a cancel point has its input's properties, so they are rebuilt as they were). Recursive
/// queries are left out: their work table links two subtrees.
fn rebuilds_safely(plan: &dyn ExecutionPlan) -> bool {
    use datafusion::physical_plan::{
        aggregates::AggregateExec, analyze::AnalyzeExec,
        coalesce_partitions::CoalescePartitionsExec, coop::CooperativeExec, filter::FilterExec,
        joins::CrossJoinExec, joins::HashJoinExec, joins::NestedLoopJoinExec,
        joins::SortMergeJoinExec, joins::SymmetricHashJoinExec, limit::GlobalLimitExec,
        limit::LocalLimitExec, projection::ProjectionExec, repartition::RepartitionExec,
        sorts::partial_sort::PartialSortExec, sorts::sort::SortExec,
        sorts::sort_preserving_merge::SortPreservingMergeExec, union::InterleaveExec,
        union::UnionExec, unnest::UnnestExec, windows::BoundedWindowAggExec,
        windows::WindowAggExec,
    };
    plan.is::<ProjectionExec>()
        || plan.is::<FilterExec>()
        || plan.is::<AggregateExec>()
        || plan.is::<HashJoinExec>()
        || plan.is::<CrossJoinExec>()
        || plan.is::<NestedLoopJoinExec>()
        || plan.is::<SortMergeJoinExec>()
        || plan.is::<SymmetricHashJoinExec>()
        || plan.is::<SortExec>()
        || plan.is::<PartialSortExec>()
        || plan.is::<SortPreservingMergeExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<RepartitionExec>()
        || plan.is::<UnionExec>()
        || plan.is::<InterleaveExec>()
        || plan.is::<GlobalLimitExec>()
        || plan.is::<LocalLimitExec>()
        || plan.is::<WindowAggExec>()
        || plan.is::<BoundedWindowAggExec>()
        || plan.is::<UnnestExec>()
        || plan.is::<CooperativeExec>()
        || plan.is::<AnalyzeExec>()
}

/// Passes its input's batches through until the query is cancelled, then fails.
#[derive(Debug)]
pub struct CancelPointExec {
    input: Arc<dyn ExecutionPlan>,
    cancel: Arc<Cancel>,
}

impl CancelPointExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, cancel: Arc<Cancel>) -> Self {
        CancelPointExec { input, cancel }
    }
}

impl DisplayAs for CancelPointExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CancelPointExec")
    }
}

impl ExecutionPlan for CancelPointExec {
    fn name(&self) -> &str {
        "CancelPointExec"
    }

    /// The input's own properties, so a parent rebuilt over it keeps its own.
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "CancelPointExec takes one input, got {}",
                children.len()
            )));
        }
        Ok(Arc::new(CancelPointExec::new(
            children.swap_remove(0),
            self.cancel.clone(),
        )))
    }

    #[allow(deprecated)]
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        self.replace_children(children, options)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if self.cancel.is_cancelled() {
            return Err(DataFusionError::External(Box::new(Cancelled)));
        }
        Ok(Box::pin(CancelPointStream {
            input: self.input.execute(partition, context)?,
            cancel: self.cancel.clone(),
        }))
    }
}

struct CancelPointStream {
    input: SendableRecordBatchStream,
    cancel: Arc<Cancel>,
}

impl Stream for CancelPointStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Checked before the input computes its next batch, not after.
        if self.cancel.is_cancelled() {
            return Poll::Ready(Some(Err(DataFusionError::External(Box::new(Cancelled)))));
        }
        self.input.poll_next_unpin(cx)
    }
}

impl RecordBatchStream for CancelPointStream {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use datafusion::physical_plan::displayable;
    use datafusion::prelude::SessionContext;

    use super::*;

    /// The physical plan of `sql` over two 4-partition tables `a` and `b` of `rows` rows each.
    async fn plan(sql: &str, rows: i64) -> (SessionContext, Arc<dyn ExecutionPlan>) {
        let ctx = SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_target_partitions(4),
        );
        for name in ["a", "b"] {
            let sql = format!("CREATE TABLE {name} AS SELECT value AS id FROM range({rows})");
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        }
        let frame = ctx.sql(sql).await.unwrap();
        let physical = frame.create_physical_plan().await.unwrap();
        (ctx, physical)
    }

    fn shape(plan: &Arc<dyn ExecutionPlan>) -> String {
        displayable(plan.as_ref()).indent(false).to_string()
    }

    /// A plan that never yields (an aggregate over a cross join) stops at its deadline with
    /// [`Cancelled`] instead of running to its end, and the points leave its answer alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cross_join_stops_at_its_deadline() {
        let cross = "SELECT a.id, count(*) AS n FROM a CROSS JOIN b GROUP BY a.id";
        let (ctx, small) = plan(cross, 100).await;
        let cancel = Cancel::new(Instant::now() + Duration::from_secs(600));
        let points = insert_cancel_points(small.clone(), &cancel).unwrap();
        assert!(
            shape(&points).contains("CancelPointExec"),
            "{}",
            shape(&points)
        );
        let rows = |batches: Vec<RecordBatch>| batches.iter().map(|b| b.num_rows()).sum::<usize>();
        let task = ctx.task_ctx();
        let got = datafusion::physical_plan::collect(points, task.clone()).await;
        assert_eq!(rows(got.unwrap()), 100);

        let (_, big) = plan(cross, 50_000).await;
        let cancel = Cancel::new(Instant::now() + Duration::from_millis(50));
        let points = insert_cancel_points(big, &cancel).unwrap();
        let started = Instant::now();
        let e = datafusion::physical_plan::collect(points, task)
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(e.find_root().to_string().contains("cancelled"), "{e}");
        assert!(took < Duration::from_secs(2), "stopped after {took:?}");
    }

    /// A node of another crate is not rebuilt, nor anything below it.
    #[tokio::test]
    async fn foreign_nodes_are_left_as_planned() {
        let (_, physical) = plan("SELECT id FROM a WHERE id > 3", 10).await;
        let foreign: Arc<dyn ExecutionPlan> = Arc::new(Foreign(physical));
        let cancel = Cancel::new(Instant::now() + Duration::from_secs(60));
        let same = insert_cancel_points(foreign.clone(), &cancel).unwrap();
        assert!(Arc::ptr_eq(&same, &foreign), "{}", shape(&same));
    }

    /// Stands in for a node of another crate (deltalake's scans).
    #[derive(Debug)]
    struct Foreign(Arc<dyn ExecutionPlan>);

    impl DisplayAs for Foreign {
        fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Foreign")
        }
    }

    impl ExecutionPlan for Foreign {
        fn name(&self) -> &str {
            "Foreign"
        }
        fn properties(&self) -> &Arc<PlanProperties> {
            self.0.properties()
        }
        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            vec![&self.0]
        }
        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
        ) -> Result<TreeNodeRecursion> {
            Ok(TreeNodeRecursion::Continue)
        }
        #[allow(deprecated)]
        fn with_new_children(
            self: Arc<Self>,
            _children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            panic!("a foreign node was rebuilt")
        }
        fn execute(
            &self,
            partition: usize,
            context: Arc<TaskContext>,
        ) -> Result<SendableRecordBatchStream> {
            self.0.execute(partition, context)
        }
    }
}
