//! The user row of the hot store's primary-key tests, `(id INT PRIMARY KEY, name STRING, score
//! BIGINT)`: its table, a builder of a (possibly partial) row, a reader of a row the client
//! returned (or of an Arrow batch of them, as a limit scan gives) and a lookup by key.

use anyhow::{Context, Result};
use fluss::client::{Lookuper, UpsertWriter};
use fluss::metadata::{DataTypes, Schema, TableDescriptor};
use fluss::row::{DataGetters, GenericRow};

/// A row of the user table; `None` is a null (or, in a partial update, an unset) column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    pub id: i32,
    pub name: Option<String>,
    pub score: Option<i64>,
}

/// The user table's schema.
pub fn user_schema() -> Result<Schema> {
    Ok(Schema::builder()
        .column("id", DataTypes::int())
        .column("name", DataTypes::string())
        .column("score", DataTypes::bigint())
        .primary_key(vec!["id"])?
        .build()?)
}

/// The user table, in one bucket so the changelog offsets of a sequence of upserts are
/// contiguous.
pub fn user_table() -> Result<TableDescriptor> {
    user_table_of(1)
}

/// The user table in `buckets` buckets.
pub fn user_table_of(buckets: i32) -> Result<TableDescriptor> {
    Ok(TableDescriptor::builder()
        .schema(user_schema()?)
        .distributed_by(Some(buckets), vec![])
        .build()?)
}

/// A change to write: a name for its failure, the row, and whether it deletes the row's key.
pub type Step = (&'static str, GenericRow<'static>, bool);

/// Writes `steps` in order, each acknowledged before the next is sent, so that the changelog
/// order is the order of `steps`.
pub async fn write_each(writer: &UpsertWriter, steps: Vec<Step>) -> Result<()> {
    for (step, row, delete) in steps {
        let ack = if delete {
            writer.delete(&row)?
        } else {
            writer.upsert(&row)?
        };
        ack.await.context(step)?;
    }
    Ok(())
}

/// The user changes whose changelog the primary-key tests check: insert (1, alice, 10), insert
/// (2, bob, 20), update 1 to (alice2, 11), delete 2 (`+I +I -U +U -D`).
pub fn alice_and_bob() -> Vec<Step> {
    vec![
        ("upsert(1)", user(1, Some("alice"), Some(10)), false),
        ("upsert(2)", user(2, Some("bob"), Some(20)), false),
        ("upsert(1')", user(1, Some("alice2"), Some(11)), false),
        ("delete(2)", user(2, None, None), true),
    ]
}

/// A user row to write; columns given as `None` are left unset.
pub fn user(id: i32, name: Option<&str>, score: Option<i64>) -> GenericRow<'static> {
    let mut row = GenericRow::new(3);
    row.set_field(0, id);
    if let Some(name) = name {
        row.set_field(1, name.to_string());
    }
    if let Some(score) = score {
        row.set_field(2, score);
    }
    row
}

/// The user row the client returned.
pub fn read_user<R: DataGetters + ?Sized>(row: &R) -> Result<UserRow> {
    Ok(UserRow {
        id: row.get_int(0)?,
        name: if row.is_null_at(1)? {
            None
        } else {
            Some(row.get_string(1)?.to_string())
        },
        score: if row.is_null_at(2)? {
            None
        } else {
            Some(row.get_long(2)?)
        },
    })
}

/// The user rows of an Arrow batch of the user table (a limit scan's answer).
pub fn users_in(batch: &arrow::array::RecordBatch) -> Result<Vec<UserRow>> {
    use arrow::array::{Array, Int32Array, Int64Array, StringArray};
    let ids = batch.column(0).as_any().downcast_ref::<Int32Array>();
    let names = batch.column(1).as_any().downcast_ref::<StringArray>();
    let scores = batch.column(2).as_any().downcast_ref::<Int64Array>();
    let (Some(ids), Some(names), Some(scores)) = (ids, names, scores) else {
        anyhow::bail!(
            "a user batch is (INT, STRING, BIGINT): {:?}",
            batch.schema()
        );
    };
    Ok((0..batch.num_rows())
        .map(|i| UserRow {
            id: ids.value(i),
            name: (!names.is_null(i)).then(|| names.value(i).to_string()),
            score: (!scores.is_null(i)).then(|| scores.value(i)),
        })
        .collect())
}

/// The user of key `id`, or `None` if there is none.
pub async fn lookup_user(lookuper: &mut Lookuper, id: i32) -> Result<Option<UserRow>> {
    let mut key = GenericRow::new(1);
    key.set_field(0, id);
    let result = lookuper
        .lookup(&key)
        .await
        .with_context(|| format!("lookup({id})"))?;
    result
        .get_single_row()?
        .map(|row| read_user(&row))
        .transpose()
}
