//! Row-wise transforms compiled from DataFusion SQL: a filter (a boolean expression), a
//! projection (a list of expressions) and a SQL statement over the input stream, plus the print
//! sink. jobs/ compiles a definition's expressions here once per job; the engine only sees an
//! [`Operator`] that applies the compiled steps to each batch.
//!
//! **Contract (rows stay independent):** every transform maps one input batch to one output
//! batch with no state: a row's output depends on that row alone. So a transform needs no
//! checkpoint state, can run at any parallelism, and keeps the order of the rows it keeps. A SQL
//! statement is accepted only when its plan is made of projections, filters and aliases over the
//! table `input` (scalar functions are fine; aggregates, joins, sorts, limits, windows, DISTINCT
//! and subqueries are refused, because they relate rows to each other).
//!
//! **Contract (system columns travel along):** the changelog's system columns (`__bucket`,
//! `__offset`, `__timestamp`, `__change_type`, see [`crate::changelog`]) are appended to every
//! projection that does not name them, so the sinks downstream still see which bucket, offset and
//! change each row comes from. They are visible to expressions under their names.
//!
//! Expressions are simplified once at compile time, so a function of the query start such as
//! `now()` is a constant for the life of the job; use `__timestamp` for per-row time.

mod print;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::empty::EmptyTable;
use datafusion::logical_expr::{LogicalPlan, Projection};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::prelude::SessionContext;
use silt_engine::{Operator, Output, TaskContext};

pub use print::{PrintSink, PrintSinkConfig};

use crate::changelog::stream_system_fields;

/// The table name a `sql` statement reads from.
pub const INPUT_TABLE: &str = "input";

/// What can go wrong compiling or applying a transform. Messages are lowercase and say how
/// to fix the expression.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The SQL does not parse or does not type-check against the input columns.
    #[error("{0}")]
    Plan(String),
    /// The SQL is valid but relates rows to each other (or reads something but `input`).
    #[error("{0}")]
    Unsupported(String),
    /// Evaluating a compiled expression on a batch failed (a cast overflow, say).
    #[error("evaluating {what}: {message}")]
    Eval { what: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The SQL and the data it meets are the user's: kept whole, as the user's to fix.
impl From<Error> for silt_engine::Error {
    fn from(e: Error) -> Self {
        silt_engine::Error::external(silt_engine::Cause::User, e)
    }
}

/// Shortens DataFusion's messages (`Error during planning: ...`) to their point.
fn plan_error(e: datafusion::error::DataFusionError) -> Error {
    let text = e.to_string();
    let text = text
        .strip_prefix("Error during planning: ")
        .or_else(|| text.strip_prefix("SQL error: "))
        .or_else(|| text.strip_prefix("Schema error: "))
        .unwrap_or(&text);
    Error::Plan(text.lines().next().unwrap_or_default().to_string())
}

/// One compiled step, applied in order.
#[derive(Debug, Clone)]
enum Step {
    Filter(Arc<dyn PhysicalExpr>),
    Project {
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    },
}

/// A compiled row-wise transform: input schema in, output schema out, and the steps between.
#[derive(Debug, Clone)]
pub struct Transform {
    description: String,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    steps: Vec<Step>,
}

impl Transform {
    /// Keeps the rows for which `predicate` (a SQL boolean expression over the input columns) is
    /// true; null counts as false.
    pub async fn filter(input_schema: SchemaRef, predicate: &str) -> Result<Transform> {
        Self::sql(
            input_schema,
            &format!("SELECT * FROM {INPUT_TABLE} WHERE {predicate}"),
        )
        .await
        .map(|t| t.described(format!("filter {predicate}")))
    }

    /// Computes `expressions` (SQL, each optionally `... AS name`) per row; the system columns
    /// are appended.
    pub async fn project(input_schema: SchemaRef, expressions: &[String]) -> Result<Transform> {
        if expressions.is_empty() {
            return Err(Error::Plan(
                "a projection needs at least one expression".into(),
            ));
        }
        let list = expressions.join(", ");
        Self::sql(input_schema, &format!("SELECT {list} FROM {INPUT_TABLE}"))
            .await
            .map(|t| t.described(format!("project {list}")))
    }

    /// Compiles a SQL statement over the table `input` whose plan keeps rows independent.
    pub async fn sql(input_schema: SchemaRef, statement: &str) -> Result<Transform> {
        let ctx = SessionContext::new();
        ctx.register_table(INPUT_TABLE, Arc::new(EmptyTable::new(input_schema.clone())))
            .map_err(plan_error)?;
        let state = ctx.state();
        let plan = state
            .create_logical_plan(statement)
            .await
            .map_err(plan_error)?;
        let mut steps = Vec::new();
        let output_schema = lower(&plan, &ctx, &mut steps)?;
        Ok(Transform {
            description: statement.to_string(),
            input_schema,
            output_schema,
            steps,
        })
    }

    fn described(mut self, description: String) -> Self {
        self.description = description;
        self
    }

    pub fn input_schema(&self) -> &SchemaRef {
        &self.input_schema
    }

    /// The schema of every batch [`Transform::apply`] returns.
    pub fn output_schema(&self) -> &SchemaRef {
        &self.output_schema
    }

    /// Applies the steps to one batch. The batch must have the input schema's columns in order.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let eval_error = |e: &dyn std::fmt::Display| Error::Eval {
            what: self.description.clone(),
            message: e.to_string(),
        };
        let mut batch = batch.clone();
        for step in &self.steps {
            batch = match step {
                Step::Filter(predicate) => {
                    let mask = predicate
                        .evaluate(&batch)
                        .and_then(|v| v.into_array(batch.num_rows()))
                        .map_err(|e| eval_error(&e))?;
                    let mask = mask
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .ok_or_else(|| eval_error(&"the filter is not a boolean expression"))?;
                    filter_record_batch(&batch, mask).map_err(|e| eval_error(&e))?
                }
                Step::Project { exprs, schema } => {
                    let columns = exprs
                        .iter()
                        .map(|e| {
                            e.evaluate(&batch)
                                .and_then(|v| v.into_array(batch.num_rows()))
                        })
                        .collect::<datafusion::error::Result<Vec<ArrayRef>>>()
                        .map_err(|e| eval_error(&e))?;
                    RecordBatch::try_new(schema.clone(), columns).map_err(|e| eval_error(&e))?
                }
            };
        }
        debug_assert_eq!(batch.schema().fields(), self.output_schema.fields());
        Ok(batch)
    }
}

/// Turns the plan into steps (innermost first) and returns the schema its batches will have.
/// That schema can be wider than the node's own: projections get the system columns appended.
fn lower(plan: &LogicalPlan, ctx: &SessionContext, steps: &mut Vec<Step>) -> Result<SchemaRef> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            if scan.table_name.table() != INPUT_TABLE {
                return Err(Error::Unsupported(format!(
                    "reads table {} (a transform reads only `{INPUT_TABLE}`)",
                    scan.table_name
                )));
            }
            if !scan.filters.is_empty() || scan.fetch.is_some() {
                return Err(Error::Unsupported(
                    "the scan of `input` carries filters or a limit".into(),
                ));
            }
            Ok(Arc::new(scan.projected_schema.as_arrow().clone()))
        }
        LogicalPlan::SubqueryAlias(alias) => lower(&alias.input, ctx, steps),
        LogicalPlan::Filter(filter) => {
            let actual = lower(&filter.input, ctx, steps)?;
            let predicate = ctx
                .create_physical_expr(filter.predicate.clone(), filter.input.schema())
                .map_err(plan_error)?;
            steps.push(Step::Filter(predicate));
            Ok(actual)
        }
        LogicalPlan::Projection(projection) => {
            let actual = lower(&projection.input, ctx, steps)?;
            let (exprs, schema) = project(projection, &actual, ctx)?;
            steps.push(Step::Project {
                exprs,
                schema: schema.clone(),
            });
            Ok(schema)
        }
        other => Err(Error::Unsupported(format!(
            "{} relates rows to each other; a transform may only project, filter and call scalar functions",
            node_name(other)
        ))),
    }
}

/// The expressions and output schema of a projection over batches of the `actual` schema: its
/// own expressions, then the system columns of `actual` it does not name, so they travel on.
fn project(
    projection: &Projection,
    actual: &SchemaRef,
    ctx: &SessionContext,
) -> Result<(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)> {
    let input_df = projection.input.schema();
    let mut exprs = Vec::with_capacity(projection.expr.len() + 4);
    let mut fields = Vec::with_capacity(projection.expr.len() + 4);
    for (expr, field) in projection
        .expr
        .iter()
        .zip(projection.schema.fields().iter())
    {
        let physical = ctx
            .create_physical_expr(expr.clone(), input_df)
            .map_err(plan_error)?;
        let returned = physical
            .return_field(input_df.as_arrow())
            .map_err(plan_error)?;
        fields.push(Field::new(
            field.name(),
            returned.data_type().clone(),
            returned.is_nullable(),
        ));
        exprs.push(physical);
    }
    for system in stream_system_fields() {
        if fields.iter().any(|f| f.name() == system.name()) {
            continue;
        }
        if let Ok(index) = actual.index_of(system.name()) {
            exprs.push(Arc::new(Column::new(system.name(), index)));
            fields.push(actual.field(index).clone());
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in &fields {
        if !seen.insert(f.name().as_str()) {
            return Err(Error::Plan(format!(
                "the output names column {:?} twice (give one an alias with AS)",
                f.name()
            )));
        }
    }
    Ok((exprs, Arc::new(Schema::new(fields))))
}

fn node_name(plan: &LogicalPlan) -> String {
    let display = plan.display().to_string();
    let name = display
        .split([':', ' ', '('])
        .next()
        .unwrap_or("this statement");
    match plan {
        LogicalPlan::Aggregate(_) => "an aggregate (GROUP BY, count, sum, ...)".into(),
        LogicalPlan::Join(_) => "a join".into(),
        LogicalPlan::Sort(_) => "ORDER BY".into(),
        LogicalPlan::Limit(_) => "LIMIT".into(),
        LogicalPlan::Window(_) => "a window function".into(),
        LogicalPlan::Distinct(_) => "DISTINCT".into(),
        LogicalPlan::Union(_) => "UNION".into(),
        LogicalPlan::EmptyRelation(_) | LogicalPlan::Values(_) => {
            "a statement without FROM input".into()
        }
        _ => format!("{name} (not a query over input)"),
    }
}

/// The operator that applies a [`Transform`] to every batch. Stateless (see the module's
/// contract), so it snapshots nothing.
pub struct TransformOperator {
    transform: Arc<Transform>,
}

impl TransformOperator {
    pub fn new(transform: Arc<Transform>) -> Self {
        TransformOperator { transform }
    }

    /// A factory for the engine: every subtask shares the compiled transform.
    pub fn factory(
        transform: Arc<Transform>,
    ) -> impl Fn(&TaskContext) -> silt_engine::Result<Box<dyn Operator>> + Send + Sync + 'static
    {
        move |_: &TaskContext| -> silt_engine::Result<Box<dyn Operator>> {
            Ok(Box::new(TransformOperator::new(transform.clone())))
        }
    }
}

#[async_trait]
impl Operator for TransformOperator {
    async fn process(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> silt_engine::Result<()> {
        let result = self.transform.apply(&batch)?;
        if result.num_rows() > 0 {
            out.emit(result).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int8Array, Int32Array, Int64Array, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::DataType;

    fn input() -> RecordBatch {
        let mut fields = vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("amount", DataType::Int64, true),
        ];
        fields.extend(stream_system_fields());
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
                Arc::new(Int64Array::from(vec![Some(5), Some(50), None])),
                Arc::new(Int32Array::from(vec![0, 1, 0])),
                Arc::new(Int64Array::from(vec![10, 11, 12])),
                Arc::new(TimestampMillisecondArray::from(vec![7, 8, 9]).with_timezone("UTC")),
                Arc::new(Int8Array::from(vec![0, 0, 0])),
            ],
        )
        .unwrap()
    }

    /// Compiles `statement`, applies it to [`input`] and returns the output as one line per
    /// row (`column=value` pairs), or the compile error.
    fn run(statement: &str) -> std::result::Result<Vec<String>, String> {
        let batch = input();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let t = rt
            .block_on(Transform::sql(batch.schema(), statement))
            .map_err(|e| e.to_string())?;
        let out = t.apply(&batch).map_err(|e| e.to_string())?;
        assert_eq!(out.schema(), *t.output_schema());
        let mut rows = Vec::new();
        for i in 0..out.num_rows() {
            let cells: Vec<String> = out
                .schema()
                .fields()
                .iter()
                .zip(out.columns())
                .map(|(f, c)| {
                    let v = arrow::util::display::array_value_to_string(c, i).unwrap();
                    format!("{}={v}", f.name())
                })
                .collect();
            rows.push(cells.join(" "));
        }
        Ok(rows)
    }

    #[test]
    fn projections_and_filters_keep_system_columns() {
        assert_eq!(
            run("SELECT id, upper(name) AS n FROM input WHERE amount > 1").unwrap(),
            vec![
                "id=1 n=A __bucket=0 __offset=10 __timestamp=1970-01-01T00:00:00.007Z __change_type=0",
                "id=2 n= __bucket=1 __offset=11 __timestamp=1970-01-01T00:00:00.008Z __change_type=0",
            ]
        );
        // Nested projections: the inner one appends the system columns, the outer passes them.
        assert_eq!(
            run("SELECT x * 2 AS y FROM (SELECT id + 1 AS x FROM input) WHERE x > 2").unwrap(),
            vec![
                "y=6 __bucket=1 __offset=11 __timestamp=1970-01-01T00:00:00.008Z __change_type=0",
                "y=8 __bucket=0 __offset=12 __timestamp=1970-01-01T00:00:00.009Z __change_type=0"
            ]
        );
        // Type coercion: an Int64 column against a float literal.
        assert_eq!(
            run("SELECT id FROM input WHERE amount >= 4.5 AND __bucket = 0").unwrap(),
            vec![
                "id=1 __bucket=0 __offset=10 __timestamp=1970-01-01T00:00:00.007Z __change_type=0"
            ]
        );
    }

    #[test]
    fn statements_that_relate_rows_are_refused() {
        let cases = [
            ("SELECT count(*) FROM input", "aggregate"),
            ("SELECT id FROM input ORDER BY id", "ORDER BY"),
            ("SELECT id FROM input LIMIT 1", "LIMIT"),
            ("SELECT DISTINCT name FROM input", "DISTINCT"),
            (
                "SELECT a.id FROM input a JOIN input b ON a.id = b.id",
                "join",
            ),
            (
                "SELECT id, row_number() OVER (ORDER BY id) FROM input",
                "window",
            ),
            ("SELECT 1", "without FROM input"),
            ("SELECT idd FROM input", "idd"),
            ("SELECT id FROM other", "other"),
            ("SELECT id, id FROM input", "same name"),
        ];
        for (statement, expected) in cases {
            let err = run(statement).expect_err(statement);
            assert!(
                err.contains(expected),
                "{statement}: {err:?} lacks {expected:?}"
            );
        }
    }
}
