//! A filter pushed down with a FetchLog (Fluss 1.0; fluss-rs's `new_scan().filter(..)`): the
//! server leaves out whole batches whose statistics prove that no row matches, and keeps every
//! other batch whole, so every answer is a superset of the matching rows. The clients do not
//! filter the rows of the batches they get (pyfluss and fluss-rs say a filtered scan "still
//! returns a superset"), so which batches are left out is what a user sees: the rules are
//! Fluss's (`org.apache.fluss.predicate`), batch by batch. A batch without statistics, a
//! column without them, a function or literal this module cannot judge: the batch is kept.
//! Rows are never filtered here.

use std::cmp::Ordering;

use fluss::metadata::DataType;

use crate::codec::Batch;
use crate::codec::statistics::{self, BatchStatistics, ColumnStatistics, Scalar};
use crate::protocol::messages::{PbLiteralValue, PbPredicate};
use crate::protocol::{ApiError, code};
use crate::tablets::TableRuntime;

const LEAF: i32 = 0;
const COMPOUND: i32 = 1;
const AND: i32 = 0;
const OR: i32 = 1;

/// A predicate over a table's columns, judged against a batch's statistics.
#[derive(Debug, Clone, PartialEq)]
pub enum LogFilter {
    /// Anything this module cannot judge: every batch may match.
    Unknown,
    And(Vec<LogFilter>),
    Or(Vec<LogFilter>),
    Leaf {
        column: usize,
        function: Function,
        /// The literals in the column's kind; `None` for a null literal.
        literals: Vec<Option<Scalar>>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Equal,
    NotEqual,
    LessThan,
    LessOrEqual,
    GreaterThan,
    GreaterOrEqual,
    IsNull,
    IsNotNull,
    In,
    NotIn,
    StartsWith,
    /// CONTAINS, ENDS_WITH: kept (a string's bounds do not settle them).
    Other,
}

impl Function {
    fn of(code: i32) -> Function {
        match code {
            0 => Function::Equal,
            1 => Function::NotEqual,
            2 => Function::LessThan,
            3 => Function::LessOrEqual,
            4 => Function::GreaterThan,
            5 => Function::GreaterOrEqual,
            6 => Function::IsNull,
            7 => Function::IsNotNull,
            8 => Function::StartsWith,
            11 => Function::In,
            12 => Function::NotIn,
            _ => Function::Other,
        }
    }
}

/// The filter of a FetchLog's table request, or `None` without one. A predicate without a
/// schema id is refused (as Fluss refuses it); one over another schema than the table's, or
/// over columns the table does not have, reads unfiltered.
pub fn from_request(
    table: &TableRuntime,
    predicate: Option<&PbPredicate>,
    schema_id: Option<i32>,
) -> Result<Option<LogFilter>, ApiError> {
    let Some(predicate) = predicate else {
        return Ok(None);
    };
    let Some(schema_id) = schema_id.filter(|id| *id >= 0) else {
        return Err(ApiError::new(
            code::UNKNOWN_SERVER_ERROR,
            format!(
                "the FetchLog filter of {} has no filter_schema_id; send the schema id the \
                 predicate's field ids refer to with it",
                table.entry.qualified_name()
            ),
        ));
    };
    if schema_id != table.entry.schema_id {
        return Ok(None);
    }
    let columns = table.entry.descriptor.schema().columns();
    let compiled = compile(predicate, &|field_id| {
        columns
            .iter()
            .position(|c| c.id() == field_id)
            .map(|index| (index, columns[index].data_type().clone()))
    });
    Ok(Some(compiled))
}

/// Bounded by the message's own nesting (prost decodes it within the frame size limit).
fn compile(
    predicate: &PbPredicate,
    column_of: &dyn Fn(i32) -> Option<(usize, DataType)>,
) -> LogFilter {
    match (predicate.r#type, &predicate.leaf, &predicate.compound) {
        (LEAF, Some(leaf), _) => {
            let Some((column, data_type)) = column_of(leaf.field_id) else {
                return LogFilter::Unknown;
            };
            let mut literals = Vec::with_capacity(leaf.literals.len());
            for literal in &leaf.literals {
                match literal_scalar(literal, &data_type) {
                    Ok(value) => literals.push(value),
                    Err(()) => return LogFilter::Unknown,
                }
            }
            LogFilter::Leaf {
                column,
                function: Function::of(leaf.function),
                literals,
            }
        }
        (COMPOUND, _, Some(compound)) => {
            let children = compound
                .children
                .iter()
                .map(|child| compile(child, column_of))
                .collect();
            match compound.function {
                AND => LogFilter::And(children),
                OR => LogFilter::Or(children),
                _ => LogFilter::Unknown,
            }
        }
        _ => LogFilter::Unknown,
    }
}

/// A literal as a scalar of its column's kind: `Ok(None)` for null, `Err` when it does not fit
/// the column (the filter then judges nothing).
fn literal_scalar(literal: &PbLiteralValue, data_type: &DataType) -> Result<Option<Scalar>, ()> {
    if literal.is_null {
        return Ok(None);
    }
    let value = match data_type {
        DataType::Boolean(_) => Scalar::Bool(literal.boolean_value.ok_or(())?),
        DataType::TinyInt(_) | DataType::SmallInt(_) | DataType::Int(_) | DataType::Time(_) => {
            Scalar::Int(i64::from(literal.int_value.ok_or(())?))
        }
        DataType::BigInt(_) | DataType::Date(_) => Scalar::Int(literal.bigint_value.ok_or(())?),
        DataType::Float(_) => Scalar::Float(f64::from(literal.float_value.ok_or(())?)),
        DataType::Double(_) => Scalar::Float(literal.double_value.ok_or(())?),
        DataType::String(_) | DataType::Char(_) => {
            Scalar::Str(literal.string_value.clone().ok_or(())?.into_bytes())
        }
        DataType::Decimal(_) => match (&literal.decimal_value, &literal.decimal_bytes) {
            (Some(unscaled), _) => Scalar::Decimal(i128::from(*unscaled)),
            (None, Some(bytes)) if !bytes.is_empty() && bytes.len() <= 16 => {
                let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
                let mut wide = [fill; 16];
                wide[16 - bytes.len()..].copy_from_slice(bytes);
                Scalar::Decimal(i128::from_be_bytes(wide))
            }
            _ => return Err(()),
        },
        DataType::Timestamp(_) | DataType::TimestampLTz(_) => Scalar::Timestamp(
            literal.timestamp_millis_value.ok_or(())?,
            literal.timestamp_nano_of_millis_value.unwrap_or(0),
        ),
        _ => return Err(()),
    };
    Ok(Some(value))
}

impl LogFilter {
    /// Whether `batch` may hold a row the filter matches (true unless its statistics prove
    /// otherwise).
    pub fn may_match_batch(&self, batch: &Batch, column_types: &[DataType]) -> bool {
        let Some(block) = batch.statistics() else {
            return true;
        };
        match statistics::parse(block, batch.record_count(), column_types) {
            Some(stats) => self.may_match(&stats),
            None => true,
        }
    }

    pub fn may_match(&self, stats: &BatchStatistics) -> bool {
        match self {
            LogFilter::Unknown => true,
            LogFilter::And(children) => children.iter().all(|c| c.may_match(stats)),
            LogFilter::Or(children) => children.iter().any(|c| c.may_match(stats)),
            LogFilter::Leaf {
                column,
                function,
                literals,
            } => match stats.column(*column) {
                Some(column) => leaf_may_match(*function, literals, column, stats.record_count),
                None => true,
            },
        }
    }
}

fn leaf_may_match(
    function: Function,
    literals: &[Option<Scalar>],
    column: &ColumnStatistics,
    record_count: i32,
) -> bool {
    match function {
        Function::IsNull => return column.null_count > 0,
        Function::IsNotNull => return column.null_count < record_count,
        Function::Other => return true,
        _ => {}
    }
    // Every other function is false on a null value: a batch of nulls only matches none.
    if column.null_count >= record_count {
        return false;
    }
    let (Some(min), Some(max)) = (&column.min, &column.max) else {
        return true;
    };
    // `Some(ordering)` only when the literal is comparable with the bounds; else keep.
    let with = |literal: &Option<Scalar>, bound: &Scalar| -> Option<Ordering> {
        literal.as_ref().and_then(|l| l.compare(bound))
    };
    let within = |literal: &Option<Scalar>| match (with(literal, min), with(literal, max)) {
        (Some(low), Some(high)) => low != Ordering::Less && high != Ordering::Greater,
        _ => true,
    };
    let is_only_value = |literal: &Option<Scalar>| {
        with(literal, min) == Some(Ordering::Equal) && with(literal, max) == Some(Ordering::Equal)
    };
    // Whether the literal's order against a bound is one of `accepted`; not comparable: kept.
    let holds = |literal: &Option<Scalar>, bound: &Scalar, accepted: &[Ordering]| {
        with(literal, bound).is_none_or(|o| accepted.contains(&o))
    };
    let first = literals.first();
    match function {
        Function::Equal => first.is_none_or(within),
        // No row is in an empty set, nor equal to a null.
        Function::In => literals.iter().any(|l| l.is_some() && within(l)),
        Function::NotEqual => first.is_none_or(|l| !is_only_value(l)),
        // `x NOT IN (.., NULL)` holds for no row.
        Function::NotIn => !literals.iter().any(|l| l.is_none() || is_only_value(l)),
        Function::StartsWith => first.is_none_or(|l| starts_with_may_match(l, min, max)),
        // min < v, min <= v, max > v, max >= v (the literal's order against the bound).
        Function::LessThan => first.is_none_or(|l| holds(l, min, &[Ordering::Greater])),
        Function::LessOrEqual => {
            first.is_none_or(|l| holds(l, min, &[Ordering::Greater, Ordering::Equal]))
        }
        Function::GreaterThan => first.is_none_or(|l| holds(l, max, &[Ordering::Less])),
        Function::GreaterOrEqual => {
            first.is_none_or(|l| holds(l, max, &[Ordering::Less, Ordering::Equal]))
        }
        Function::IsNull | Function::IsNotNull | Function::Other => true,
    }
}

/// Whether a string between `min` and `max` may start with `prefix`: each bound starts with it
/// or lies on the side of it where such strings can be (Fluss's rule). Byte order of UTF-8 is
/// the code points' order; anything but strings is kept.
fn starts_with_may_match(prefix: &Option<Scalar>, min: &Scalar, max: &Scalar) -> bool {
    let (Some(Scalar::Str(prefix)), Scalar::Str(min), Scalar::Str(max)) = (prefix, min, max) else {
        return true;
    };
    (min.starts_with(prefix) || min <= prefix) && (max.starts_with(prefix) || max >= prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(null_count: i32, min: Option<i64>, max: Option<i64>) -> BatchStatistics {
        BatchStatistics {
            record_count: 10,
            columns: vec![(
                0,
                ColumnStatistics {
                    null_count,
                    min: min.map(Scalar::Int),
                    max: max.map(Scalar::Int),
                },
            )],
        }
    }

    fn leaf(function: Function, literals: &[i64]) -> LogFilter {
        LogFilter::Leaf {
            column: 0,
            function,
            literals: literals.iter().map(|v| Some(Scalar::Int(*v))).collect(),
        }
    }

    #[test]
    fn comparisons_prune_only_what_the_bounds_exclude() {
        let batch = stats(0, Some(10), Some(20));
        let cases = [
            (Function::Equal, vec![9], false),
            (Function::Equal, vec![10], true),
            (Function::Equal, vec![20], true),
            (Function::Equal, vec![21], false),
            (Function::LessThan, vec![10], false),
            (Function::LessThan, vec![11], true),
            (Function::LessOrEqual, vec![10], true),
            (Function::LessOrEqual, vec![9], false),
            (Function::GreaterThan, vec![20], false),
            (Function::GreaterThan, vec![19], true),
            (Function::GreaterOrEqual, vec![20], true),
            (Function::GreaterOrEqual, vec![21], false),
            (Function::In, vec![1, 2, 30], false),
            (Function::In, vec![1, 15], true),
            (Function::In, vec![], false),
            (Function::NotEqual, vec![15], true),
            (Function::NotIn, vec![10, 20], true),
            (Function::IsNull, vec![], false),
            (Function::IsNotNull, vec![], true),
            (Function::Other, vec![], true),
        ];
        for (function, literals, expected) in cases {
            assert_eq!(
                leaf(function, &literals).may_match(&batch),
                expected,
                "{function:?} {literals:?} over [10, 20]"
            );
        }
        // One value only: NOT_EQUAL and NOT_IN of it prune.
        let single = stats(0, Some(7), Some(7));
        assert!(!leaf(Function::NotEqual, &[7]).may_match(&single));
        assert!(!leaf(Function::NotIn, &[7, 8]).may_match(&single));
        assert!(leaf(Function::NotEqual, &[8]).may_match(&single));
    }

    #[test]
    fn nulls_unknown_columns_and_compounds() {
        let all_null = stats(10, None, None);
        assert!(!leaf(Function::Equal, &[1]).may_match(&all_null));
        assert!(!leaf(Function::IsNotNull, &[]).may_match(&all_null));
        assert!(leaf(Function::IsNull, &[]).may_match(&all_null));
        let batch = stats(2, Some(10), Some(20));
        assert!(leaf(Function::IsNull, &[]).may_match(&batch));
        // A column without statistics, or a filter this module cannot judge, keeps the batch.
        let other_column = LogFilter::Leaf {
            column: 3,
            function: Function::Equal,
            literals: vec![Some(Scalar::Int(0))],
        };
        assert!(other_column.may_match(&batch));
        assert!(LogFilter::Unknown.may_match(&batch));
        // A literal of another kind than the bounds is not comparable: kept.
        let text = LogFilter::Leaf {
            column: 0,
            function: Function::Equal,
            literals: vec![Some(Scalar::Str(b"x".to_vec()))],
        };
        assert!(text.may_match(&batch));
        let miss = leaf(Function::Equal, &[5]);
        let hit = leaf(Function::Equal, &[15]);
        assert!(!LogFilter::And(vec![hit.clone(), miss.clone()]).may_match(&batch));
        assert!(LogFilter::Or(vec![miss.clone(), hit]).may_match(&batch));
        assert!(!LogFilter::Or(vec![miss.clone(), miss]).may_match(&batch));
        // A null in a set matches no row: IN (NULL) prunes, NOT IN (.., NULL) too.
        let with_null = |function| LogFilter::Leaf {
            column: 0,
            function,
            literals: vec![None, Some(Scalar::Int(99))],
        };
        assert!(!with_null(Function::In).may_match(&batch));
        assert!(!with_null(Function::NotIn).may_match(&batch));
    }

    /// STARTS_WITH prunes a batch whose string bounds exclude the prefix, as Fluss does.
    #[test]
    fn starts_with_prunes_by_the_string_bounds() {
        let strings = |min: &str, max: &str| BatchStatistics {
            record_count: 3,
            columns: vec![(
                0,
                ColumnStatistics {
                    null_count: 0,
                    min: Some(Scalar::Str(min.as_bytes().to_vec())),
                    max: Some(Scalar::Str(max.as_bytes().to_vec())),
                },
            )],
        };
        let starts_with = |prefix: &str| LogFilter::Leaf {
            column: 0,
            function: Function::StartsWith,
            literals: vec![Some(Scalar::Str(prefix.as_bytes().to_vec()))],
        };
        let cases = [
            (("low-1", "low-3"), "high", false),
            (("high-101", "high-103"), "high", true),
            (("apple", "zebra"), "m", true),
            (("apple", "banana"), "m", false),
            (("n", "zebra"), "m", false),
            (("ma", "mz"), "m", true),
            (("a", "z"), "", true),
        ];
        for ((min, max), prefix, expected) in cases {
            assert_eq!(
                starts_with(prefix).may_match(&strings(min, max)),
                expected,
                "starts_with({prefix:?}) over [{min:?}, {max:?}]"
            );
        }
    }
}
