//! The lake catalog for DataFusion: silt's tables as SQL tables, each read at one pinned
//! point so a query sees one consistent snapshot.
//!
//! - `db.t$lake`: the lake table at one pinned version, as stored: the user's columns, then
//!   `__bucket`, `__offset`, `__timestamp`.
//! - `db.t`: the real-time view, user columns only: the pinned lake version plus the hot tail
//!   read through the Fluss client from the version's txn offsets up to the high watermarks
//!   captured after pinning. Log table: union all. Primary-key table: the tail reduced to the
//!   last change per key overrides the lake row of that key, and a delete removes it.
//! - `db.t$lake$snapshots`: the lake's versions with commit time, operation and the per-bucket
//!   txn offsets after each commit.
//!
//! Naming: DataFusion's default (generic) SQL dialect accepts `$` inside an identifier, so
//! `SELECT * FROM db.t$lake` parses as schema `db`, table `t$lake`; a name that starts with `$`
//! or has other special characters needs double quotes (`db."t$lake"`). Unquoted names are
//! lowercased by DataFusion, as usual.
//!
//! The lake is read through the configured [`LakeFormat`] (Delta Lake in the product).
//!
//! **Contract:** [`LakeCatalog::pin_lake`] pins the newest lake version; its txn offsets are
//! where the tail starts, so rows are neither lost nor doubled between the tiers as long as the
//! high watermarks are captured after pinning (the lake never runs ahead of the hot store).
//!
//! **Limits:** the hot tail of one table is read into memory, at most `tail_bytes_max` bytes;
//! past that the query fails with a user error (wait for tiering, or raise the bound). Between
//! queries the catalog keeps tails (at most `kept_tails_bytes_max` bytes in all, see
//! [`kept_tail`]), so the next query of a table reads only the offsets that arrived since.

mod error;
mod kept_tail;
pub mod layout;
mod progress;
mod realtime;
mod snapshots;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionState;
use datafusion::prelude::SessionContext;
use fluss::client::FlussConnection;
use fluss::metadata::TablePath;
use fluss::rpc::message::OffsetSpec;

pub use error::{Error, Result};
pub use progress::{BucketWait, QueryProgress, Stage};

use crate::changelog::BucketKey;
use crate::lake_format::{LakeFormat, PinnedVersion};

/// Suffix of a table's lake tier.
pub const LAKE_SUFFIX: &str = "$lake";
/// Suffix of a table's lake version list.
pub const SNAPSHOTS_SUFFIX: &str = "$lake$snapshots";

/// Where the catalog finds things, and its bounds.
#[derive(Debug, Clone)]
pub struct LakeCatalogConfig {
    /// The format lake tables are stored in (`lake.format`).
    pub format: Arc<dyn LakeFormat>,
    /// The Fluss endpoint (silt's hotstore or a Fluss cluster).
    pub bootstrap_servers: String,
    /// Lake tables live under `<lake_root>/<db>/<table>`, as the tiering service writes them.
    pub lake_root: String,
    pub storage_options: HashMap<String, String>,
    /// Most bytes of hot tail one table may hold in memory for a real-time view.
    pub tail_bytes_max: usize,
    /// Most bytes of hot tails kept between queries, all tables together (0: none kept).
    pub kept_tails_bytes_max: usize,
    /// Most lake versions `$lake$snapshots` reads (the newest ones).
    pub snapshots_max: usize,
    /// SASL/PLAIN credentials when the hot store requires them.
    pub credentials: Option<crate::fluss::FlussCredentials>,
}

impl LakeCatalogConfig {
    pub const TAIL_BYTES_DEFAULT: usize = 256 * 1024 * 1024;
    pub const KEPT_TAILS_BYTES_DEFAULT: usize = 128 * 1024 * 1024;
    pub const SNAPSHOTS_DEFAULT: usize = 10_000;

    pub fn new(bootstrap_servers: impl Into<String>, lake_root: impl Into<String>) -> Self {
        LakeCatalogConfig {
            format: crate::formats::default_format(),
            bootstrap_servers: bootstrap_servers.into(),
            lake_root: lake_root.into(),
            storage_options: HashMap::new(),
            tail_bytes_max: Self::TAIL_BYTES_DEFAULT,
            kept_tails_bytes_max: Self::KEPT_TAILS_BYTES_DEFAULT,
            snapshots_max: Self::SNAPSHOTS_DEFAULT,
            credentials: None,
        }
    }

    /// Where the lake table of `database.table` lives (the tiering service's layout); names
    /// that cannot name a path are refused.
    pub fn lake_uri(&self, database: &str, table: &str) -> Result<String> {
        layout::lake_uri(&self.lake_root, database, table)
            .map_err(|e| Error::user(format!("{e:#}")))
    }
}

/// Which view of a table a name asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableVariant {
    /// `db.t`: lake + hot tail, user columns.
    RealTime,
    /// `db.t$lake`: the pinned Delta version, system columns included.
    Lake,
    /// `db.t$lake$snapshots`: the lake's versions.
    LakeSnapshots,
}

/// A table name as SQL spells it, split into the silt table and the variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    pub database: String,
    pub table: String,
    pub variant: TableVariant,
}

impl TableName {
    /// `name` is the table part of `database.name` (`t`, `t$lake`, `t$lake$snapshots`).
    pub fn parse(database: &str, name: &str) -> TableName {
        let (table, variant) = if let Some(t) = name.strip_suffix(SNAPSHOTS_SUFFIX) {
            (t, TableVariant::LakeSnapshots)
        } else if let Some(t) = name.strip_suffix(LAKE_SUFFIX) {
            (t, TableVariant::Lake)
        } else {
            (name, TableVariant::RealTime)
        };
        TableName {
            database: database.to_string(),
            table: table.to_string(),
            variant,
        }
    }

    /// The table part as SQL names it.
    pub fn sql_table(&self) -> String {
        match self.variant {
            TableVariant::RealTime => self.table.clone(),
            TableVariant::Lake => format!("{}{LAKE_SUFFIX}", self.table),
            TableVariant::LakeSnapshots => format!("{}{SNAPSHOTS_SUFFIX}", self.table),
        }
    }

    /// `db.t`, without the variant.
    pub fn base(&self) -> String {
        format!("{}.{}", self.database, self.table)
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.database, self.sql_table())
    }
}

/// What the catalog knows of one silt table.
#[derive(Debug, Clone)]
pub struct TableMeta {
    pub database: String,
    pub table: String,
    pub table_id: i64,
    /// 0 when unknown (an offline catalog reads no hot metadata).
    pub buckets: u32,
    /// The columns a partitioned table is partitioned by (empty: unpartitioned).
    pub partition_keys: Vec<String>,
    /// Empty for a log table.
    pub primary_key: Vec<String>,
    /// The user's columns as the Fluss client reads them.
    pub user_schema: SchemaRef,
    pub lake_enabled: bool,
    pub lake_uri: String,
}

impl TableMeta {
    pub fn name(&self) -> String {
        format!("{}.{}", self.database, self.table)
    }

    pub fn bucket_ids(&self) -> Vec<i32> {
        (0..self.buckets as i32).collect()
    }

    pub fn is_partitioned(&self) -> bool {
        !self.partition_keys.is_empty()
    }
}

/// A real-time view as one query reads it.
pub struct RealtimeView {
    pub provider: Arc<dyn TableProvider>,
    /// Offsets of the hot tail this query read from the hot store; the rest of the tail was
    /// kept from an earlier query of the table.
    pub tail_offsets_read: i64,
}

/// The lake tier of a table pinned at one version (or absent: nothing tiered yet).
#[derive(Debug, Clone)]
pub struct PinnedLake {
    pub table: Option<Arc<dyn PinnedVersion>>,
    /// The pinned version.
    pub version: Option<u64>,
    /// Per bucket (of each partition the hot store has, for a partitioned table), the txn end
    /// offset of the pinned version (absent: nothing tiered).
    pub offsets: BTreeMap<BucketKey, i64>,
}

impl PinnedLake {
    /// Whether the lake holds every offset below `high_watermarks`.
    pub fn covers(&self, high_watermarks: &BTreeMap<BucketKey, i64>) -> bool {
        high_watermarks
            .iter()
            .all(|(b, hw)| *hw <= 0 || self.offsets.get(b).is_some_and(|o| o >= hw))
    }
}

/// Opens silt's tables for one query at a time. Cheap to clone.
///
/// An offline catalog ([`LakeCatalog::offline`]) has no hot store: it serves `$lake` and
/// `$lake$snapshots` from the Delta tables under `lake_root` and refuses the real-time view.
#[derive(Clone)]
pub struct LakeCatalog {
    config: Arc<LakeCatalogConfig>,
    connection: Option<Arc<FlussConnection>>,
    /// Handed to the lake's scans for DataFusion's Parquet settings (row-level filter
    /// pushdown off by default, as for any listing table); without one deltalake forces
    /// pushdown, measured 1.7x slower on a scan + aggregate keeping half the rows. Built once.
    scan_settings: Arc<SessionState>,
    /// Hot tails of real-time views kept for the next query of their table.
    kept_tails: Arc<kept_tail::KeptTails>,
}

/// Starts the message of every error an offline catalog gives for what needs the hot store.
pub const OFFLINE_HINT: &str = "needs the hot store";

impl LakeCatalog {
    pub async fn connect(config: LakeCatalogConfig) -> Result<LakeCatalog> {
        let connection =
            crate::fluss::connect_with(&config.bootstrap_servers, config.credentials.as_ref())
                .await
                .map_err(|e| Error::Fluss(e.to_string()))?;
        Ok(LakeCatalog {
            kept_tails: Arc::new(kept_tail::KeptTails::new(config.kept_tails_bytes_max)),
            config: Arc::new(config),
            connection: Some(Arc::new(connection)),
            scan_settings: Arc::new(SessionContext::new().state()),
        })
    }

    /// A catalog over the lake alone, for when no hot store runs.
    pub fn offline(config: LakeCatalogConfig) -> LakeCatalog {
        LakeCatalog {
            kept_tails: Arc::new(kept_tail::KeptTails::new(0)),
            config: Arc::new(config),
            connection: None,
            scan_settings: Arc::new(SessionContext::new().state()),
        }
    }

    pub fn is_offline(&self) -> bool {
        self.connection.is_none()
    }

    pub fn config(&self) -> &LakeCatalogConfig {
        &self.config
    }

    /// Every table as `db.t`, sorted (offline: every lake table under `lake_root`).
    pub async fn known_tables(&self) -> Result<Vec<String>> {
        if self.is_offline() {
            return Ok(self.lake_tables());
        }
        let admin = self.admin()?;
        let mut out = Vec::new();
        for database in admin
            .list_databases()
            .await
            .map_err(Error::fluss("list databases"))?
        {
            for table in admin
                .list_tables(&database)
                .await
                .map_err(Error::fluss("list tables"))?
            {
                out.push(format!("{database}.{table}"));
            }
        }
        out.sort();
        Ok(out)
    }

    fn admin(&self) -> Result<Arc<fluss::client::FlussAdmin>> {
        match &self.connection {
            Some(c) => c.get_admin().map_err(Error::fluss("fluss admin")),
            None => Err(Error::user(format!(
                "this {OFFLINE_HINT}, and none is connected"
            ))),
        }
    }

    /// `db.t` of every lake table under a local `lake_root` (not the lakes of dropped tables
    /// under `__dropped`: `__` starts no database's name).
    fn lake_tables(&self) -> Vec<String> {
        let root = std::path::Path::new(&self.config.lake_root);
        let mut out = Vec::new();
        let databases = std::fs::read_dir(root).into_iter().flatten().flatten();
        for db in databases.filter(|db| !db.file_name().to_string_lossy().starts_with("__")) {
            for table in std::fs::read_dir(db.path()).into_iter().flatten().flatten() {
                if self.config.format.is_lake_dir(&table.path()) {
                    out.push(format!(
                        "{}.{}",
                        db.file_name().to_string_lossy(),
                        table.file_name().to_string_lossy()
                    ));
                }
            }
        }
        out.sort();
        out
    }

    /// Offline: what the lake table itself says (the table id it records, the user columns
    /// from its schema; buckets unknown, so no offsets).
    async fn lake_table_meta(&self, name: &TableName) -> Result<TableMeta> {
        if name.variant == TableVariant::RealTime {
            return Err(Error::user(format!(
                "the real-time view {name} {OFFLINE_HINT} (start it with `silt up`); offline, query {name}$lake"
            )));
        }
        let uri = self.config.lake_uri(&name.database, &name.table)?;
        let described = self
            .config
            .format
            .describe(&uri, &self.config.storage_options)
            .await
            .map_err(Error::format(&uri))?;
        let Some(lake) = described else {
            let known = self.lake_tables();
            return Err(Error::UnknownTable {
                name: name.to_string(),
                known: if known.is_empty() {
                    format!("none under {}", self.config.lake_root)
                } else {
                    known.join(", ")
                },
            });
        };
        let table_id = lake
            .table_id
            .ok_or_else(|| Error::user(format!("{uri} is not a lake table tiered by silt")))?;
        let system = [
            crate::changelog::PARTITION_ID_COLUMN,
            crate::changelog::BUCKET_COLUMN,
            crate::changelog::OFFSET_COLUMN,
            crate::changelog::TIMESTAMP_COLUMN,
        ];
        let fields: Vec<_> = lake
            .schema
            .fields()
            .iter()
            .filter(|f| !system.contains(&f.name().as_str()))
            .cloned()
            .collect();
        Ok(TableMeta {
            database: name.database.clone(),
            table: name.table.clone(),
            table_id,
            buckets: 0,
            partition_keys: lake.partition_keys,
            primary_key: Vec::new(),
            user_schema: Arc::new(arrow::datatypes::Schema::new(fields)),
            lake_enabled: true,
            lake_uri: uri,
        })
    }

    /// Describes `name`'s silt table; an unknown one is a user error listing the known tables.
    pub async fn table(&self, name: &TableName) -> Result<TableMeta> {
        if self.is_offline() {
            return self.lake_table_meta(name).await;
        }
        let admin = self.admin()?;
        let path = TablePath::new(name.database.clone(), name.table.clone());
        let info = match admin.get_table_info(&path).await {
            Ok(info) => info,
            Err(e) => {
                let known = self.known_tables().await?;
                if known.contains(&name.base()) {
                    return Err(Error::Fluss(format!("table {}: {e}", name.base())));
                }
                return Err(Error::UnknownTable {
                    name: name.to_string(),
                    known: if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    },
                });
            }
        };
        let user_schema = fluss::record::to_arrow_schema(info.get_row_type())
            .map_err(Error::fluss(&format!("schema of {}", name.base())))?;
        let lake_enabled = crate::fluss::is_lake_enabled(&info);
        Ok(TableMeta {
            database: name.database.clone(),
            table: name.table.clone(),
            table_id: info.get_table_id(),
            buckets: info.get_num_buckets().max(1) as u32,
            partition_keys: info.get_partition_keys().to_vec(),
            primary_key: if info.has_primary_key() {
                info.get_primary_keys().clone()
            } else {
                Vec::new()
            },
            user_schema,
            lake_enabled,
            lake_uri: self.config.lake_uri(&name.database, &name.table)?,
        })
    }

    /// The hot store's high watermark of every bucket (of every partition), now.
    pub async fn high_watermarks(&self, meta: &TableMeta) -> Result<BTreeMap<BucketKey, i64>> {
        self.bucket_offsets(meta, OffsetSpec::Latest).await
    }

    /// The offsets `spec` names of every bucket of the table (of every partition it has now).
    async fn bucket_offsets(
        &self,
        meta: &TableMeta,
        spec: OffsetSpec,
    ) -> Result<BTreeMap<BucketKey, i64>> {
        let Some(connection) = &self.connection else {
            return Err(Error::user(format!(
                "this {OFFLINE_HINT}, and none is connected"
            )));
        };
        let path = TablePath::new(meta.database.clone(), meta.table.clone());
        crate::fluss::list_bucket_offsets(connection, &path, spec)
            .await
            .map_err(|e| Error::Fluss(format!("list offsets of {}: {e}", meta.name())))
    }

    /// The buckets whose lake offsets a pin reads: the table's, or each of its partitions'
    /// (offline, a partitioned table's are not known: its pin holds no offsets).
    async fn pinned_buckets(&self, meta: &TableMeta) -> Result<Vec<BucketKey>> {
        if !meta.is_partitioned() {
            return Ok(meta
                .bucket_ids()
                .into_iter()
                .map(BucketKey::table)
                .collect());
        }
        if self.is_offline() {
            return Ok(Vec::new());
        }
        Ok(self
            .bucket_offsets(meta, OffsetSpec::Earliest)
            .await?
            .into_keys()
            .collect())
    }

    /// Pins the newest version of the table's lake tier and reads its offsets.
    pub async fn pin_lake(&self, meta: &TableMeta) -> Result<PinnedLake> {
        let uri = meta.lake_uri.as_str();
        let buckets = self.pinned_buckets(meta).await?;
        let pinned = self
            .config
            .format
            .pin(uri, &self.config.storage_options, meta.table_id, &buckets)
            .await
            .map_err(Error::format(uri))?;
        Ok(match pinned {
            Some((table, offsets)) => PinnedLake {
                version: Some(table.version()),
                table: Some(table),
                offsets,
            },
            None => PinnedLake {
                table: None,
                version: None,
                offsets: BTreeMap::new(),
            },
        })
    }

    /// `db.t$lake`: the pinned version as stored. Its scans are the format's, untouched (see
    /// [`QueryProgress::watch_file_scans`] for how their files are counted).
    pub async fn lake_provider(
        &self,
        meta: &TableMeta,
        pinned: &PinnedLake,
    ) -> Result<Arc<dyn TableProvider>> {
        let Some(table) = &pinned.table else {
            if !meta.lake_enabled {
                return Err(Error::user(format!(
                    "table {} has no lake tier (table.datalake.enabled is not true and nothing was tiered); query {} for its hot data",
                    meta.name(),
                    meta.name()
                )));
            }
            let schema = self
                .config
                .format
                .lake_schema(&meta.user_schema, meta.is_partitioned())
                .map_err(Error::format(&meta.lake_uri))?;
            return Ok(Arc::new(MemTable::try_new(schema, vec![vec![]])?));
        };
        table
            .table_provider(self.scan_settings.clone())
            .await
            .map_err(Error::format(&meta.lake_uri))
    }

    /// `db.t`: the pinned lake version plus the hot tail up to `high_watermarks`.
    pub async fn realtime_provider(
        &self,
        meta: &TableMeta,
        pinned: &PinnedLake,
        high_watermarks: &BTreeMap<BucketKey, i64>,
        progress: &Arc<QueryProgress>,
    ) -> Result<RealtimeView> {
        realtime::provider(self, meta, pinned, high_watermarks, progress).await
    }

    /// `db.t$lake$snapshots`: the lake's versions up to the pinned one.
    pub async fn snapshots_provider(
        &self,
        meta: &TableMeta,
        pinned: &PinnedLake,
    ) -> Result<Arc<dyn TableProvider>> {
        snapshots::provider(self, meta, pinned).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_table_and_variant() {
        let cases = [
            ("t", "t", TableVariant::RealTime),
            ("t$lake", "t", TableVariant::Lake),
            ("t$lake$snapshots", "t", TableVariant::LakeSnapshots),
            ("a$b", "a$b", TableVariant::RealTime),
        ];
        for (sql, table, variant) in cases {
            let name = TableName::parse("db", sql);
            assert_eq!(
                (name.table.as_str(), name.variant),
                (table, variant),
                "{sql}"
            );
            assert_eq!(name.to_string(), format!("db.{sql}"));
            assert_eq!(name.base(), format!("db.{table}"));
        }
    }

    #[test]
    fn a_pin_covers_high_watermarks_only_when_every_bucket_reaches_them() {
        let pin = |offsets: &[(i32, i64)]| PinnedLake {
            table: None,
            version: None,
            offsets: crate::changelog::table_buckets(offsets.iter().copied()),
        };
        let hw = crate::changelog::table_buckets([(0, 10), (1, 0), (2, 5)]);
        assert!(
            pin(&[(0, 10), (2, 5)]).covers(&hw),
            "an empty bucket needs nothing"
        );
        assert!(pin(&[(0, 12), (1, 0), (2, 5)]).covers(&hw));
        assert!(!pin(&[(0, 9), (2, 5)]).covers(&hw));
        assert!(!pin(&[(0, 10)]).covers(&hw), "a bucket the lake never saw");
    }

    #[test]
    fn progress_says_where_the_query_was() {
        let p = QueryProgress::new();
        assert_eq!(p.describe(), "while planning");
        let buckets = [
            (
                0,
                BucketWait {
                    reached: 3,
                    needed: 9,
                },
            ),
            (
                1,
                BucketWait {
                    reached: 4,
                    needed: 4,
                },
            ),
        ];
        p.set_stage(Stage::WaitingForTiering {
            tables: [(
                "db.t".to_string(),
                buckets
                    .into_iter()
                    .map(|(b, w)| (BucketKey::table(b), w))
                    .collect(),
            )]
            .into_iter()
            .collect(),
        });
        assert_eq!(
            p.describe(),
            "while waiting for tiering: lake offsets reached vs needed: db.t bucket 0 at 3 of 9"
        );
        p.set_stage(Stage::Executing);
        p.add_rows_returned(7);
        assert!(
            p.describe().contains("0 of 0 lake files scanned"),
            "{}",
            p.describe()
        );
        assert!(p.describe().contains("7 rows returned"), "{}", p.describe());
        assert_eq!(
            snapshots::offsets_json(&crate::changelog::table_buckets([(0, 120), (2, 7)])),
            r#"{"0":120,"2":7}"#
        );
        assert_eq!(
            snapshots::offsets_json(
                &[
                    (BucketKey::partition(12, 0), 5),
                    (BucketKey::partition(12, 1), 3)
                ]
                .into_iter()
                .collect()
            ),
            r#"{"p12/0":5,"p12/1":3}"#
        );
    }
}
