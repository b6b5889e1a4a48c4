//! What a definition is checked against: the tables of the hot store and their lakes, and
//! how error paths are named (JSON or a YAML pipeline's own paths).

use super::*;
use std::collections::BTreeMap;

/// One table as the catalog describes it.
#[derive(Debug, Clone)]
pub struct TableFacts {
    pub database: String,
    pub table: String,
    pub table_id: i64,
    pub buckets: u32,
    pub primary_key: Vec<String>,
    /// The user columns.
    pub schema: SchemaRef,
    /// `table.datalake.enabled`: its history may be in the lake only (hot retention).
    pub lake_enabled: bool,
    /// `PARTITIONED BY` columns (empty: unpartitioned).
    pub partition_keys: Vec<String>,
}

/// Table lookups through the Fluss client, cached for one compilation.
pub struct Catalog {
    connection: Option<fluss::client::FlussConnection>,
    bootstrap: String,
    credentials: Option<silt_connectors::fluss::FlussCredentials>,
    known: Option<Vec<String>>,
    /// Tables (`db.table`) that must still be the table id a job was submitted for.
    pinned: BTreeMap<String, i64>,
}

impl Catalog {
    pub fn new(
        bootstrap: &str,
        credentials: Option<silt_connectors::fluss::FlussCredentials>,
    ) -> Self {
        Catalog {
            connection: None,
            bootstrap: bootstrap.to_string(),
            credentials,
            known: None,
            pinned: BTreeMap::new(),
        }
    }

    /// Lookups of the tables in `pinned` (`db.table` → id) fail unless the table still has
    /// that id: a job resumed after its table was dropped and created again under the same name
    /// holds the old table's offsets, which mean nothing in the new one.
    pub fn pinned(mut self, pinned: BTreeMap<String, i64>) -> Self {
        self.pinned = pinned;
        self
    }

    async fn connection(&mut self) -> Result<&fluss::client::FlussConnection, String> {
        if self.connection.is_none() {
            let c =
                silt_connectors::fluss::connect_with(&self.bootstrap, self.credentials.as_ref())
                    .await
                    .map_err(|e| format!("{e} (is silt up running?)"))?;
            self.connection = Some(c);
        }
        Ok(self.connection.as_ref().expect("set above"))
    }

    async fn known_tables(&mut self) -> Result<Vec<String>, String> {
        if let Some(known) = &self.known {
            return Ok(known.clone());
        }
        let admin = self
            .connection()
            .await?
            .get_admin()
            .map_err(|e| e.to_string())?;
        let mut known = Vec::new();
        for db in admin.list_databases().await.map_err(|e| e.to_string())? {
            for t in admin.list_tables(&db).await.map_err(|e| e.to_string())? {
                known.push(format!("{db}.{t}"));
            }
        }
        known.sort();
        self.known = Some(known.clone());
        Ok(known)
    }

    /// Looks up `database.table`; the error lists the tables that exist.
    pub async fn table(&mut self, qualified: &str) -> Result<TableFacts, String> {
        let Some((database, table)) = qualified.split_once('.') else {
            return Err(format!(
                "{qualified:?} is not a table name like database.table"
            ));
        };
        let path = fluss::metadata::TablePath::new(database.to_string(), table.to_string());
        let pinned = self.pinned.get(qualified).copied();
        let connection = self.connection().await?;
        let admin = connection.get_admin().map_err(|e| e.to_string())?;
        let info = match admin.get_table_info(&path).await {
            Ok(info) => info,
            Err(_) => {
                let known = self.known_tables().await?;
                let shown: Vec<&str> = known.iter().take(20).map(String::as_str).collect();
                let more = if known.len() > shown.len() {
                    format!(", and {} more", known.len() - shown.len())
                } else {
                    String::new()
                };
                return Err(format!(
                    "unknown table {qualified} (known: {}{more})",
                    if shown.is_empty() {
                        "none; create it first".to_string()
                    } else {
                        shown.join(", ")
                    }
                ));
            }
        };
        if let Some(submitted) = pinned
            && submitted != info.get_table_id()
        {
            return Err(format!(
                "{qualified} is now table id {}, but this job was submitted for table id {submitted}: the table was dropped and created again, and the job's checkpoints hold the old table's offsets; submit the job again to read the new table",
                info.get_table_id()
            ));
        }
        let schema = silt_connectors::fluss::table_arrow_schema(connection, database, table)
            .await
            .map_err(|e| e.to_string())?;
        Ok(TableFacts {
            database: database.to_string(),
            table: table.to_string(),
            table_id: info.get_table_id(),
            buckets: info.get_num_buckets().max(1) as u32,
            primary_key: info.get_primary_keys().clone(),
            schema,
            lake_enabled: silt_connectors::fluss::is_lake_enabled(&info),
            partition_keys: info.get_partition_keys().to_vec(),
        })
    }
}

/// How a problem's path is spelled: the definition's own (`operators[2].config.table`), or the
/// YAML pipeline it was compiled from (`source.table`).
pub trait PathNames: Send + Sync {
    /// `field` is `""` for the operator itself, `type`, `parallelism` or `config.<key>`.
    fn operator(&self, index: usize, field: &str) -> String;
    fn edge(&self, index: usize, field: &str) -> String;
    /// A top-level field: `name`, `parallelism`, `checkpoint.interval_ms`.
    fn job(&self, field: &str) -> String {
        field.to_string()
    }
}

/// The definition's own paths.
pub struct JsonPaths;

impl PathNames for JsonPaths {
    fn operator(&self, index: usize, field: &str) -> String {
        if field.is_empty() {
            format!("operators[{index}]")
        } else {
            format!("operators[{index}].{field}")
        }
    }
    fn edge(&self, index: usize, field: &str) -> String {
        if field.is_empty() {
            format!("edges[{index}]")
        } else {
            format!("edges[{index}].{field}")
        }
    }
}
