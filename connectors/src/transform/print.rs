//! The print sink: writes each row to stdout as one line, prefixed with the sink's name and
//! subtask (`orders-print[0]> +I id=1 amount=5.0`). For trying pipelines out; it keeps no state
//! and gives no delivery guarantee (rows after the last checkpoint print again after a restore).

use arrow::array::{Array, Int8Array, RecordBatch};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use silt_engine::{RestoredState, Sink, TaskContext};

use crate::changelog::{CHANGE_TYPE_COLUMN, ChangeType};

#[derive(Debug, Clone)]
pub struct PrintSinkConfig {
    /// Rows printed per batch at most; the rest are counted in one `... n more rows` line, so a
    /// fast stream cannot flood the terminal with unbounded output per batch.
    pub rows_per_batch_max: usize,
    /// Print the system columns (`__bucket`, `__offset`, ...) too.
    pub system_columns: bool,
}

impl Default for PrintSinkConfig {
    fn default() -> Self {
        PrintSinkConfig {
            rows_per_batch_max: 100,
            system_columns: false,
        }
    }
}

pub struct PrintSink {
    config: PrintSinkConfig,
    prefix: String,
}

impl PrintSink {
    pub fn new(config: PrintSinkConfig) -> Self {
        PrintSink {
            config,
            prefix: String::new(),
        }
    }

    /// The lines a batch prints as (without the prefix).
    pub fn format(&self, batch: &RecordBatch) -> Result<Vec<String>, arrow::error::ArrowError> {
        let options = FormatOptions::default().with_null("null");
        let schema = batch.schema();
        let mut columns = Vec::new();
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            if !self.config.system_columns && field.name().starts_with("__") {
                continue;
            }
            columns.push((
                field.name().clone(),
                ArrayFormatter::try_new(column.as_ref(), &options)?,
            ));
        }
        let changes = batch
            .column_by_name(CHANGE_TYPE_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<Int8Array>().cloned());
        let shown = batch.num_rows().min(self.config.rows_per_batch_max);
        let mut lines = Vec::with_capacity(shown + 1);
        for row in 0..shown {
            let change = match changes.as_ref().filter(|c| !c.is_null(row)) {
                Some(c) => match ChangeType::from_i8(c.value(row)) {
                    Some(ChangeType::AppendOnly) => "+A",
                    Some(ChangeType::Insert) => "+I",
                    Some(ChangeType::UpdateBefore) => "-U",
                    Some(ChangeType::UpdateAfter) => "+U",
                    Some(ChangeType::Delete) => "-D",
                    None => "?",
                },
                None => "+A",
            };
            let cells: Vec<String> = columns
                .iter()
                .map(|(name, f)| format!("{name}={}", f.value(row)))
                .collect();
            lines.push(format!("{change} {}", cells.join(" ")));
        }
        if batch.num_rows() > shown {
            lines.push(format!("... {} more rows", batch.num_rows() - shown));
        }
        Ok(lines)
    }
}

#[async_trait]
impl Sink for PrintSink {
    async fn open(
        &mut self,
        ctx: &TaskContext,
        _restored: RestoredState,
    ) -> silt_engine::Result<()> {
        self.prefix = format!("{}[{}]> ", ctx.vertex_name, ctx.subtask_index);
        Ok(())
    }

    async fn write(&mut self, batch: RecordBatch) -> silt_engine::Result<()> {
        use std::io::Write;
        let lines = self.format(&batch)?;
        let mut stdout = std::io::stdout().lock();
        for line in lines {
            // A closed stdout must not fail the job.
            let _ = writeln!(stdout, "{}{line}", self.prefix);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn lines(rows_per_batch_max: usize, system_columns: bool) -> Vec<String> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new(CHANGE_TYPE_COLUMN, DataType::Int8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
                Arc::new(Int8Array::from(vec![1, 2, 4])),
            ],
        )
        .unwrap();
        PrintSink::new(PrintSinkConfig {
            rows_per_batch_max,
            system_columns,
        })
        .format(&batch)
        .unwrap()
    }

    #[test]
    fn rows_print_with_their_change_type_and_a_bound() {
        assert_eq!(
            lines(10, false),
            vec!["+I id=1 name=a", "-U id=2 name=null", "-D id=3 name=c"]
        );
        assert_eq!(lines(1, false), vec!["+I id=1 name=a", "... 2 more rows"]);
        assert_eq!(lines(1, true)[0], "+I id=1 name=a __change_type=1");
    }
}
