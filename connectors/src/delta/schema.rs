//! Arrow types of the changelog → Arrow types Delta stores. Only lossless mappings are made
//! (a wider integer unit, a view type to its plain type); anything else is an error at open that
//! names the column, never a silent cast.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use super::error::{Error, Result};
use crate::changelog::{
    BUCKET_COLUMN, CHANGE_TYPE_COLUMN, OFFSET_COLUMN, PARTITION_ID_COLUMN, TIMESTAMP_COLUMN,
};

/// The Arrow type the lake stores for a column of type `data_type`.
pub fn lake_data_type(column: &str, data_type: &DataType) -> Result<DataType> {
    let unsupported = |hint: &str| Error::UnsupportedType {
        column: column.to_string(),
        data_type: data_type.to_string(),
        hint: hint.to_string(),
    };
    Ok(match data_type {
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Date32 => data_type.clone(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => DataType::Binary,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s)
            if *p <= 38 && *s >= 0 =>
        {
            DataType::Decimal128(*p, *s)
        }
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => {
            return Err(unsupported(
                "Delta decimals have precision 1..=38 and scale >= 0 (narrow the column)",
            ));
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            return Err(unsupported(
                "Delta timestamps have microsecond precision (declare the column TIMESTAMP(6) or TIMESTAMP_LTZ(6), or cast it in a transform)",
            ));
        }
        // Seconds and milliseconds widen to microseconds exactly.
        DataType::Timestamp(_, None) => DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Timestamp(_, Some(_)) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            return Err(unsupported(
                "Delta has no time-of-day type (declare the column INT, for milliseconds of the day, or STRING, or cast it in a transform)",
            ));
        }
        DataType::Date64 => return Err(unsupported("use a DATE (date32) or a TIMESTAMP column")),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            return Err(unsupported(
                "Delta has no unsigned integers (cast to a wider signed integer)",
            ));
        }
        DataType::List(item)
        | DataType::LargeList(item)
        | DataType::ListView(item)
        | DataType::LargeListView(item)
        | DataType::FixedSizeList(item, _) => {
            let inner = lake_data_type(&format!("{column}.element"), item.data_type())?;
            DataType::List(Arc::new(Field::new("element", inner, item.is_nullable())))
        }
        DataType::Struct(fields) => DataType::Struct(lake_fields(column, fields)?),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(unsupported(
                    "a map's entries must be a struct of key and value",
                ));
            };
            let kv = lake_fields(column, kv)?;
            DataType::Map(
                Arc::new(Field::new("key_value", DataType::Struct(kv), false)),
                false,
            )
        }
        DataType::Dictionary(_, value) => lake_data_type(column, value)?,
        _ => {
            return Err(unsupported(
                "there is no Delta type for it (cast it in a transform)",
            ));
        }
    })
}

/// Checks that the lake can store a table of Fluss row type `row_type` (CreateTable of a
/// lake-enabled table asks, so a table is refused before it is written, not when it is
/// tiered): no column is named as a system column, and Delta has a type for every column and
/// for every element, key, value and field inside one. The error names the column (`c`,
/// `c.element`, `c.key`, `c.value`, `c.field`) and its Fluss type, and says what to declare.
pub fn check_lake_row_type(row_type: &fluss::metadata::RowType) -> Result<()> {
    for field in row_type.fields() {
        if is_system_column(field.name()) {
            return Err(Error::Config(format!(
                "user column {:?} clashes with a system column (rename it)",
                field.name()
            )));
        }
        check_fluss_type(field.name(), field.data_type())?;
    }
    Ok(())
}

/// The compound types are walked here, so that an error names the Fluss type of the part that
/// fails; each scalar is mapped as tiering maps it (`lake_data_type` of the Arrow type the
/// Fluss client reads), so the two cannot disagree.
fn check_fluss_type(column: &str, data_type: &fluss::metadata::DataType) -> Result<()> {
    use fluss::metadata::DataType as Fluss;
    match data_type {
        Fluss::Array(array) => {
            check_fluss_type(&format!("{column}.element"), array.get_element_type())
        }
        Fluss::Map(map) => {
            check_fluss_type(&format!("{column}.key"), map.key_type())?;
            check_fluss_type(&format!("{column}.value"), map.value_type())
        }
        Fluss::Row(row) => row
            .fields()
            .iter()
            .try_for_each(|f| check_fluss_type(&format!("{column}.{}", f.name()), f.data_type())),
        scalar => {
            let arrow =
                fluss::record::to_arrow_type(scalar).map_err(|e| Error::UnsupportedType {
                    column: column.to_string(),
                    data_type: scalar.to_string(),
                    hint: format!("it has no Arrow type ({e})"),
                })?;
            match lake_data_type(column, &arrow) {
                Ok(_) => Ok(()),
                Err(Error::UnsupportedType { hint, .. }) => Err(Error::UnsupportedType {
                    column: column.to_string(),
                    data_type: scalar.to_string(),
                    hint,
                }),
                Err(other) => Err(other),
            }
        }
    }
}

fn lake_fields(column: &str, fields: &Fields) -> Result<Fields> {
    fields
        .iter()
        .map(|f| {
            let t = lake_data_type(&format!("{column}.{}", f.name()), f.data_type())?;
            Ok(Arc::new(Field::new(f.name(), t, f.is_nullable())))
        })
        .collect::<Result<Vec<_>>>()
        .map(Fields::from)
}

fn is_system_column(name: &str) -> bool {
    [
        PARTITION_ID_COLUMN,
        BUCKET_COLUMN,
        OFFSET_COLUMN,
        TIMESTAMP_COLUMN,
        CHANGE_TYPE_COLUMN,
    ]
    .contains(&name)
}

/// The lake table's Arrow schema: the user columns (mapped), then `__bucket`, `__offset`,
/// `__timestamp` (microseconds, as Delta stores timestamps).
pub fn lake_arrow_schema(user_schema: &Schema) -> Result<SchemaRef> {
    lake_arrow_schema_of(user_schema, false)
}

/// The lake's Arrow schema of a table: a partitioned one's has `__partition_id` before
/// `__bucket`.
pub fn lake_arrow_schema_of(user_schema: &Schema, partitioned: bool) -> Result<SchemaRef> {
    let mut fields = Vec::with_capacity(user_schema.fields().len() + 4);
    for f in user_schema.fields() {
        if is_system_column(f.name()) {
            return Err(Error::Config(format!(
                "user column {:?} clashes with a system column (rename it)",
                f.name()
            )));
        }
        fields.push(Field::new(
            f.name(),
            lake_data_type(f.name(), f.data_type())?,
            f.is_nullable(),
        ));
    }
    if partitioned {
        fields.push(crate::changelog::partition_id_field());
    }
    fields.push(Field::new(BUCKET_COLUMN, DataType::Int32, false));
    fields.push(Field::new(OFFSET_COLUMN, DataType::Int64, false));
    fields.push(Field::new(
        TIMESTAMP_COLUMN,
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        false,
    ));
    Ok(Arc::new(Schema::new(fields)))
}

/// [`conform`] of a changelog batch on its way into the lake: a user column the lake's schema
/// lacks is an error rather than dropped (the table gained it after the job read its schema;
/// the tiering service starts the job again under the new schema, whose sink adds it).
pub fn conform_changes(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let schema = batch.schema();
    if let Some(unknown) = schema
        .fields()
        .iter()
        .find(|f| !is_system_column(f.name()) && target.index_of(f.name()).is_err())
    {
        return Err(Error::Batch(format!(
            "the changelog has column {:?}, which the lake's schema lacks (the table gained it \
             after this job read its schema; the job starts again under the new one)",
            unknown.name()
        )));
    }
    conform(batch, target)
}

/// [`conform`] of rows read back from a lake file or a staged file: one written before the
/// table gained a column (Fluss's ADD COLUMN, always nullable) lacks it, and its rows read it
/// as null, as Delta readers do.
pub fn conform_stored(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let schema = batch.schema();
    let gained: Vec<_> = target
        .fields()
        .iter()
        .filter(|field| field.is_nullable() && schema.index_of(field.name()).is_err())
        .collect();
    if gained.is_empty() {
        return conform(batch, target);
    }
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    let mut columns = batch.columns().to_vec();
    for field in gained {
        columns.push(arrow::array::new_null_array(
            field.data_type(),
            batch.num_rows(),
        ));
        fields.push(field.clone());
    }
    let widened = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::Batch(format!("null columns for a stored batch: {e}")))?;
    conform(&widened, target)
}

/// Projects a changelog batch onto `target` by column name, converting each column to the
/// target type. Only the lossless conversions `lake_data_type` allows are made.
/// Columns of the batch that `target` does not name (e.g. `__change_type`) are dropped.
pub fn conform(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    let schema = batch.schema();
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(target.fields().len());
    for field in target.fields() {
        let Ok(index) = schema.index_of(field.name()) else {
            let known: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(Error::Batch(format!(
                "column {:?} is missing (batch columns: {})",
                field.name(),
                known.join(", ")
            )));
        };
        let column = batch.column(index);
        // Only the lossless conversions `lake_data_type` chose are made; any other type
        // difference (a string where the table has a number, say) is an error, not a cast.
        let mapped = lake_data_type(field.name(), column.data_type())?;
        if &mapped != field.data_type() {
            return Err(Error::Batch(format!(
                "column {:?} is {} in the batch but the table stores {} (the changelog schema changed; restart the job with the new schema)",
                field.name(),
                column.data_type(),
                field.data_type()
            )));
        }
        if column.data_type() == field.data_type() {
            columns.push(column.clone());
        } else {
            columns.push(
                cast_with_options(column, field.data_type(), &options).map_err(|e| {
                    Error::Batch(format!(
                        "column {:?} of type {} does not convert to {}: {e}",
                        field.name(),
                        column.data_type(),
                        field.data_type()
                    ))
                })?,
            );
        }
        if !field.is_nullable() && columns.last().is_some_and(|c| c.null_count() > 0) {
            return Err(Error::Batch(format!(
                "column {:?} is declared NOT NULL but holds nulls",
                field.name()
            )));
        }
    }
    Ok(RecordBatch::try_new(target.clone(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Ok(type)` or the error message, for one column.
    fn map(t: DataType) -> std::result::Result<DataType, String> {
        lake_data_type("c", &t).map_err(|e| e.to_string())
    }

    #[test]
    fn every_fluss_type_maps_or_names_the_column() {
        let utc = Some("UTC".into());
        let ok = [
            (DataType::Boolean, DataType::Boolean),
            (DataType::Int8, DataType::Int8),
            (DataType::Int16, DataType::Int16),
            (DataType::Int32, DataType::Int32),
            (DataType::Int64, DataType::Int64),
            (DataType::Float32, DataType::Float32),
            (DataType::Float64, DataType::Float64),
            (DataType::Utf8, DataType::Utf8),
            (DataType::Binary, DataType::Binary),
            (DataType::FixedSizeBinary(16), DataType::Binary),
            (DataType::Decimal128(38, 10), DataType::Decimal128(38, 10)),
            (DataType::Date32, DataType::Date32),
            (
                DataType::Timestamp(TimeUnit::Second, None),
                DataType::Timestamp(TimeUnit::Microsecond, None),
            ),
            (
                DataType::Timestamp(TimeUnit::Millisecond, None),
                DataType::Timestamp(TimeUnit::Microsecond, None),
            ),
            (
                DataType::Timestamp(TimeUnit::Microsecond, utc.clone()),
                DataType::Timestamp(TimeUnit::Microsecond, utc.clone()),
            ),
            (
                DataType::Timestamp(TimeUnit::Millisecond, Some("+02:00".into())),
                DataType::Timestamp(TimeUnit::Microsecond, utc),
            ),
        ];
        for (from, to) in ok {
            assert_eq!(map(from.clone()), Ok(to), "{from}");
        }
        let errors = [
            (DataType::Time32(TimeUnit::Millisecond), "time-of-day"),
            (
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                "microsecond",
            ),
            (DataType::UInt32, "unsigned"),
            (DataType::Decimal256(50, 2), "precision"),
            (DataType::Null, "no Delta type"),
        ];
        for (t, fix) in errors {
            let e = map(t.clone()).expect_err("should fail");
            assert!(
                e.starts_with(&format!("column c has type {t} which Delta cannot store;"))
                    && e.contains(fix),
                "{e}"
            );
        }
    }

    #[test]
    fn nested_types_map_their_children() {
        let list = DataType::List(Arc::new(Field::new(
            "item",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        )));
        assert_eq!(
            map(list),
            Ok(DataType::List(Arc::new(Field::new(
                "element",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true
            ))))
        );
        let bad = DataType::Struct(Fields::from(vec![Field::new(
            "t",
            DataType::Time64(TimeUnit::Nanosecond),
            true,
        )]));
        assert!(map(bad).unwrap_err().starts_with("column c.t has type"));
    }

    /// The column `c` of Fluss type `t` as CreateTable of a lake-enabled table checks it: `Ok`
    /// or the error message.
    fn check(t: fluss::metadata::DataType) -> std::result::Result<(), String> {
        let row = fluss::metadata::RowType::new(vec![fluss::metadata::DataTypes::field("c", t)]);
        check_lake_row_type(&row).map_err(|e| e.to_string())
    }

    #[test]
    fn create_table_checks_every_fluss_type_and_names_the_part_delta_cannot_store() {
        use fluss::metadata::DataTypes as T;
        let time = T::time_with_precision(3);
        let row = |fields| T::row(fields);
        for ok in [
            T::boolean(),
            T::tinyint(),
            T::decimal(38, 10),
            T::binary(4),
            T::timestamp_with_precision(6),
            T::timestamp_ltz_with_precision(0),
            T::array(T::array(T::int().as_non_nullable())),
            T::map(T::date(), row(vec![T::field("x", T::bytes())])),
        ] {
            assert_eq!(check(ok.clone()), Ok(()), "{ok}");
        }
        let refused = [
            (time.clone(), "column c has type TIME(3)", "time-of-day"),
            (
                T::timestamp_with_precision(9),
                "column c has type TIMESTAMP(9)",
                "declare the column TIMESTAMP(6)",
            ),
            (
                T::timestamp_ltz_with_precision(7),
                "column c has type TIMESTAMP_LTZ(7)",
                "microsecond",
            ),
            (
                T::array(time.clone()),
                "column c.element has type TIME(3)",
                "INT",
            ),
            (
                T::map(T::string(), T::array(time.clone())),
                "column c.value.element has type TIME(3)",
                "STRING",
            ),
            (
                row(vec![T::field("ok", T::int()), T::field("t", time)]),
                "column c.t has type TIME(3)",
                "time-of-day",
            ),
        ];
        for (t, names, fix) in refused {
            let e = check(t.clone()).expect_err("refused");
            assert!(e.starts_with(names) && e.contains(fix), "{t}: {e}");
        }
        let clash = fluss::metadata::RowType::new(vec![T::field("__offset", T::bigint())]);
        assert!(check_lake_row_type(&clash).is_err());
    }

    #[test]
    fn conform_converts_losslessly_and_refuses_other_types() {
        use arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
        let target = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("t", DataType::Timestamp(TimeUnit::Microsecond, None), false),
        ]));
        let batch = |a: ArrayRef| {
            let schema = Schema::new(vec![
                Field::new("a", a.data_type().clone(), false),
                Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), false),
                Field::new("extra", DataType::Int64, false),
            ]);
            let t: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![1_500]));
            RecordBatch::try_new(
                Arc::new(schema),
                vec![a, t, Arc::new(Int64Array::from(vec![0]))],
            )
            .unwrap()
        };
        let out = conform(&batch(Arc::new(Int64Array::from(vec![7]))), &target).unwrap();
        assert_eq!(out.schema(), target);
        let t = out
            .column(1)
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(t.value(0), 1_500_000);
        let err = conform(&batch(Arc::new(StringArray::from(vec!["7"]))), &target)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("column \"a\" is Utf8 in the batch but the table stores Int64"),
            "{err}"
        );
    }
}
