//! silt's configuration: `conf/silt.yaml` (compiled in) < a config file < `SILT_*`
//! environment variables < CLI flags. Unknown keys are errors that name the key.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_yaml_ng::Value;

/// The defaults, as shipped in `conf/silt.yaml`.
pub const DEFAULTS_YAML: &str = include_str!("../../../conf/silt.yaml");

/// Environment variables the CLI reads itself.
const CLI_ENV: &[&str] = &["SILT_CONFIG", "SILT_LOG", "SILT_LOG_STDERR"];

/// Environment variables of the test build's fault hooks (the hot store reads them itself);
/// the product build does not know them, so they are unknown keys there.
#[cfg(feature = "fault-injection")]
const FAULT_HOOK_ENV: &[&str] =
    &[silt_hotstore::storage::durability::ABORT_AFTER_DURABLE_WRITE_ENV];
#[cfg(not(feature = "fault-injection"))]
const FAULT_HOOK_ENV: &[&str] = &[];

/// The shortest `tiering.lease_ms` other than 0: two renewals (discovery passes) per lease.
const TIERING_LEASE_MS_MIN: u64 = 4000;

/// The smallest `log.file_bytes_max`: a file holds at least a few records.
const LOG_FILE_BYTES_MIN: u64 = 4096;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub data_dir: PathBuf,
    pub hot_tier: HotTierConfig,
    pub tiering: TieringSettings,
    pub hotstore: HotstoreConfig,
    pub engine: EngineConfig,
    pub rest: RestConfig,
    pub query: QuerySettings,
    pub lake: LakeSettings,
    pub log: LogSettings,
}

/// The log file of the services (`log:` in conf/silt.yaml; see [`crate::logging`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub file_bytes_max: u64,
    pub files_max: usize,
}

/// Where the lake is and how to reach it (`lake:` in conf/silt.yaml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LakeSettings {
    /// The lake format (one of [`silt_connectors::formats::FORMATS`]).
    pub format: String,
    /// Empty: `<data_dir>/lake`.
    pub root: String,
    /// Scalars of any kind; the object store gets them as strings.
    pub storage_options: std::collections::BTreeMap<String, Value>,
    pub deletion_vectors: bool,
    pub file_retention_ms: u64,
    pub key_index_cache_bytes: u64,
    pub vacuum_removes_bytes_max: usize,
}

/// Where the hot tier is (`hot_tier:` in conf/silt.yaml): this process's own hot store, or a
/// Fluss cluster at `bootstrap`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotTierConfig {
    /// Empty: the embedded hot store. Else `HOST:PORT[,HOST:PORT...]` of a Fluss cluster.
    pub bootstrap: String,
    pub sasl: HotTierSasl,
}

/// How this process shares tiering with others (`tiering:` in conf/silt.yaml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieringSettings {
    /// 0: this process tiers every table; else the lease duration of shared tiering.
    pub lease_ms: u64,
}

/// The credentials for an external hot tier (`hot_tier.sasl`); an empty username: none.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotTierSasl {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for HotTierSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotTierSasl")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotstoreConfig {
    pub listen: String,
    pub buckets_default: u32,
    pub frame_bytes_max: usize,
    pub connections_max: usize,
    pub requests_in_flight_max: usize,
    pub request_bytes_in_flight_max: usize,
    pub fsync: String,
    pub group_commit_window_ms: u64,
    pub flush_interval_ms: u64,
    pub segment_bytes_max: u64,
    pub kv_memtable_bytes_max: u64,
    pub kv_cache_bytes: u64,
    /// Negative: no TTL.
    pub log_ttl_ms: i64,
    pub retention_check_interval_ms: u64,
    pub kv_snapshot_interval_ms: u64,
    pub kv_snapshots_retained: usize,
    pub kv_snapshot_concurrency_max: usize,
    pub kv_snapshot_leased_max: usize,
    pub kv_snapshot_lease_duration_max_ms: u64,
    pub produce_decode_check: bool,
    pub bucket_count_max: i32,
    pub buckets_max: i64,
    pub fetch_wait_max_ms: u64,
    pub fetch_response_bytes_max: usize,
    pub lookup_keys_max: usize,
    pub limit_scan_rows_max: usize,
    pub prefix_lookup_rows_max: usize,
    pub partitions_per_table_max: usize,
    pub auto_partition_check_interval_ms: u64,
    pub frame_read_timeout_ms: u64,
    pub authentication_timeout_ms: u64,
    pub shutdown_grace_ms: u64,
    pub sasl: SaslConfig,
}

/// SASL/PLAIN on the Fluss port (`hotstore.sasl`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    pub enabled: bool,
    pub users: Vec<SaslUser>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslUser {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|u| u.username.as_str()).collect();
        f.debug_struct("SaslConfig")
            .field("enabled", &self.enabled)
            .field("users", &users)
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    pub channel_capacity_messages: usize,
    pub channel_capacity_bytes: u64,
    pub checkpoint_interval_ms: u64,
    pub checkpoint_timeout_ms: u64,
    pub checkpoints_retained_max: usize,
    pub restart_delay_ms: u64,
    pub restart_attempts_max: u32,
    pub blocking_threads_max: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestConfig {
    pub listen: String,
    /// When non-empty, REST (and Flight SQL) requests must carry this bearer token.
    pub token: String,
}

/// The query service's bounds (`silt sql`, `POST /v1/query`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuerySettings {
    pub deadline_default_ms: u64,
    pub deadline_max_ms: u64,
    pub wait_poll_interval_ms: u64,
    pub tail_bytes_max: usize,
    pub kept_tails_bytes_max: usize,
    pub result_bytes_max: usize,
    pub memory_bytes_max: usize,
    pub concurrent_max: usize,
    pub waiting_max: usize,
    /// Arrow Flight SQL (gRPC) address; empty turns the endpoint off.
    pub flight_listen: String,
    pub flight_result_ttl_ms: u64,
    pub flight_results_bytes_max: usize,
}

impl Config {
    /// The lake root: `lake.root`, or `<data_dir>/lake` when it is empty.
    /// The lake format `lake.format` names (checked when the configuration was loaded).
    pub fn lake_format(&self) -> std::sync::Arc<dyn silt_connectors::lake_format::LakeFormat> {
        silt_connectors::formats::format_named(&self.lake.format)
            .unwrap_or_else(|_| silt_connectors::formats::default_format())
    }

    /// The lake's settings as tiering applies them.
    pub fn lake_settings(&self) -> silt_connectors::lake_format::LakeSettings {
        silt_connectors::lake_format::LakeSettings {
            deletion_vectors: self.lake.deletion_vectors,
            file_retention: std::time::Duration::from_millis(self.lake.file_retention_ms),
            key_index_cache_bytes: self.lake.key_index_cache_bytes,
            vacuum_removes_bytes_max: self.lake.vacuum_removes_bytes_max,
            ..silt_connectors::lake_format::LakeSettings::default()
        }
    }

    pub fn lake_root(&self) -> String {
        if self.lake.root.is_empty() {
            self.data_dir.join("lake").to_string_lossy().to_string()
        } else {
            self.lake.root.trim_end_matches('/').to_string()
        }
    }

    /// `lake.storage_options` as the object store takes them.
    pub fn lake_storage_options(&self) -> std::collections::HashMap<String, String> {
        self.lake
            .storage_options
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    other => serde_yaml_ng::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                };
                (k.clone(), text)
            })
            .collect()
    }

    /// The Fluss cluster that is the hot tier (`hot_tier.bootstrap`), or `None` when this
    /// process runs its own hot store.
    pub fn external_hot_tier(&self) -> Option<&str> {
        let bootstrap = self.hot_tier.bootstrap.trim();
        (!bootstrap.is_empty()).then_some(bootstrap)
    }

    /// Where silt's clients (tiering, jobs, queries, `silt verify`) reach the hot tier: the
    /// external cluster, else the embedded hot store's `hotstore.listen`.
    pub fn hot_tier_bootstrap(&self) -> String {
        self.external_hot_tier()
            .unwrap_or(&self.hotstore.listen)
            .to_string()
    }

    /// The credentials silt's own Fluss clients (tiering, demo workload, CLI commands) use
    /// against the hot tier: `hot_tier.sasl` for an external cluster, else the first of
    /// `hotstore.sasl.users` when the embedded hot store has SASL on.
    pub fn fluss_credentials(&self) -> Option<silt_connectors::fluss::FlussCredentials> {
        if self.external_hot_tier().is_some() {
            let sasl = &self.hot_tier.sasl;
            return (!sasl.username.is_empty()).then(|| silt_connectors::fluss::FlussCredentials {
                username: sasl.username.clone(),
                password: sasl.password.clone(),
            });
        }
        let sasl = &self.hotstore.sasl;
        if !sasl.enabled {
            return None;
        }
        sasl.users
            .first()
            .map(|user| silt_connectors::fluss::FlussCredentials {
                username: user.username.clone(),
                password: user.password.clone(),
            })
    }

    /// Loads the layered configuration. `overrides` are `key.path=value` pairs from the CLI.
    pub fn load(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
        overrides: &[(String, String)],
    ) -> Result<Config> {
        let mut merged: Value = serde_yaml_ng::from_str(DEFAULTS_YAML)
            .context("the built-in conf/silt.yaml is not valid YAML (a bug)")?;
        if let Some(file) = file {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read config file {}", file.display()))?;
            let overlay: Value = serde_yaml_ng::from_str(&text)
                .with_context(|| format!("config file {} is not valid YAML", file.display()))?;
            merge(&mut merged, overlay);
        }
        for (name, value) in env {
            // SILT_CONFIG, SILT_LOG and SILT_LOG_STDERR belong to the command line, the fault
            // hooks' to the hot store, not to this file's keys.
            if CLI_ENV.contains(&name.as_str()) || FAULT_HOOK_ENV.contains(&name.as_str()) {
                continue;
            }
            let Some(path) = name.strip_prefix("SILT_") else {
                continue;
            };
            let path = path.to_ascii_lowercase().replace("__", ".");
            set(
                &mut merged,
                &path,
                &value,
                &format!("environment variable {name}"),
            )?;
        }
        for (path, value) in overrides {
            set(&mut merged, path, value, &format!("flag setting {path}"))?;
        }
        let defaults: Value = serde_yaml_ng::from_str(DEFAULTS_YAML)
            .context("the built-in conf/silt.yaml is not valid YAML (a bug)")?;
        check_kinds(&defaults, &merged, "")?;
        let config: Config = serde_yaml_ng::from_value(merged).map_err(|e| {
            anyhow::anyhow!(
                "invalid configuration: {e} (see conf/silt.yaml for the keys and their types)"
            )
        })?;
        config.check()?;
        Ok(config)
    }

    /// Relations between keys that their types cannot say.
    fn check(&self) -> Result<()> {
        if let Some(bootstrap) = self.external_hot_tier() {
            check_bootstrap(bootstrap)?;
        }
        if self.tiering.lease_ms != 0 && self.tiering.lease_ms < TIERING_LEASE_MS_MIN {
            bail!(
                "invalid configuration: tiering.lease_ms ({}) is below {TIERING_LEASE_MS_MIN}: a \
                 lease is renewed every discovery pass (2 s), so a shorter one would expire under \
                 a live worker; use 0 (no sharing) or at least {TIERING_LEASE_MS_MIN}",
                self.tiering.lease_ms
            );
        }
        silt_connectors::formats::format_named(&self.lake.format)
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e:#}"))?;
        if self.lake.file_retention_ms < self.query.deadline_max_ms {
            bail!(
                "invalid configuration: lake.file_retention_ms ({}) is shorter than \
                 query.deadline_max_ms ({}): a query could read a file that lake maintenance \
                 already deleted; raise lake.file_retention_ms or lower query.deadline_max_ms",
                self.lake.file_retention_ms,
                self.query.deadline_max_ms
            );
        }
        if self.log.file_bytes_max < LOG_FILE_BYTES_MIN || !(1..=100).contains(&self.log.files_max)
        {
            bail!(
                "invalid configuration: log.file_bytes_max ({}) must be at least {LOG_FILE_BYTES_MIN} \
                 and log.files_max ({}) from 1 to 100; the log keeps at most their product in bytes",
                self.log.file_bytes_max,
                self.log.files_max
            );
        }
        if self.query.concurrent_max == 0 {
            bail!(
                "invalid configuration: query.concurrent_max is 0, so no query could ever run; \
                 set it to at least 1"
            );
        }
        Ok(())
    }
}

/// `hot_tier.bootstrap`: one or more `HOST:PORT`, comma-separated, each with a port number.
fn check_bootstrap(bootstrap: &str) -> Result<()> {
    for server in bootstrap.split(',').map(str::trim) {
        let port = server
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        if !matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
            bail!(
                "invalid configuration: hot_tier.bootstrap {bootstrap:?} has {server:?}, which is \
                 not HOST:PORT; give the Fluss cluster's addresses as HOST:PORT[,HOST:PORT...]"
            );
        }
    }
    Ok(())
}

fn merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Mapping(base), Value::Mapping(overlay)) => {
            for (k, v) in overlay {
                match base.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        base.insert(k, v);
                    }
                }
            }
        }
        (base, overlay) => *base = overlay,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Every key present in the defaults must keep its kind (a number stays a number), so a bad
/// value is reported with its key path wherever it came from.
fn check_kinds(defaults: &Value, merged: &Value, path: &str) -> Result<()> {
    let (Value::Mapping(d), Value::Mapping(m)) = (defaults, merged) else {
        if std::mem::discriminant(defaults) != std::mem::discriminant(merged) {
            bail!(
                "invalid configuration: {path} must be {}, got {} ({merged:?})",
                kind(defaults),
                kind(merged)
            );
        }
        return Ok(());
    };
    for (k, dv) in d {
        let key = k.as_str().unwrap_or_default();
        let child = if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        };
        if let Some(mv) = m.get(k) {
            check_kinds(dv, mv, &child)?;
        }
    }
    Ok(())
}

/// Sets `a.b.c` to a scalar parsed as YAML (so numbers stay numbers). The key must exist in
/// the defaults, which catches typos in environment names.
fn set(root: &mut Value, path: &str, raw: &str, origin: &str) -> Result<()> {
    let mut node = root;
    let mut walked = String::new();
    for part in path.split('.') {
        let Value::Mapping(map) = node else {
            bail!("{origin}: {path:?} is not a configuration key")
        };
        let known: Vec<String> = map
            .keys()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
        // Object store options are open-ended: any key may be added under them.
        let open_ended = walked == "lake.storage_options";
        if open_ended && !map.contains_key(part) {
            map.insert(Value::String(part.to_string()), Value::Null);
        }
        walked = if walked.is_empty() {
            part.to_string()
        } else {
            format!("{walked}.{part}")
        };
        node = match map.get_mut(part) {
            Some(child) => child,
            None => bail!(
                "{origin}: unknown key {part:?} in {path:?} (known here: {})",
                known.join(", ")
            ),
        };
    }
    let parsed = serde_yaml_ng::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    let value: Value = if walked.starts_with("lake.storage_options.") {
        // Kept verbatim: a secret or an endpoint is never reinterpreted.
        Value::String(raw.to_string())
    } else if node.is_string() && !parsed.is_string() {
        // Where a string belongs, a value that reads as a number or a boolean (a password
        // `1234`, a token `true`) stays the text given; a quoted YAML string (`""`) is read.
        Value::String(raw.to_string())
    } else {
        parsed
    };
    *node = value;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::assert_mentions;

    fn load(
        file_yaml: Option<&str>,
        env: &[(&str, &str)],
        flags: &[(&str, &str)],
    ) -> Result<Config> {
        let dir = tempfile::tempdir().unwrap();
        let file = file_yaml.map(|y| {
            let p = dir.path().join("silt.yaml");
            std::fs::write(&p, y).unwrap();
            p
        });
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let flags: Vec<_> = flags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load(file.as_deref(), env, &flags)
    }

    #[test]
    fn the_hot_tier_is_embedded_unless_a_bootstrap_is_given() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(c.external_hot_tier(), None);
        assert_eq!(c.hot_tier_bootstrap(), "127.0.0.1:9123");
        assert!(c.fluss_credentials().is_none());
        let c = load(
            None,
            &[
                ("SILT_HOT_TIER__BOOTSTRAP", "10.0.0.1:9123, fluss-2:9123"),
                ("SILT_HOT_TIER__SASL__USERNAME", "tierer"),
                ("SILT_HOT_TIER__SASL__PASSWORD", "1234"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.external_hot_tier(), Some("10.0.0.1:9123, fluss-2:9123"));
        assert_eq!(c.hot_tier_bootstrap(), "10.0.0.1:9123, fluss-2:9123");
        let credentials = c.fluss_credentials().expect("the cluster's credentials");
        assert_eq!(
            (credentials.username.as_str(), credentials.password.as_str()),
            ("tierer", "1234"),
            "a password of digits stays a string"
        );
        assert!(
            !format!("{c:?}").contains("1234"),
            "the password is not printed"
        );
        // A quoted YAML string is read as one (`""` turns Flight SQL off), where a bare number
        // stays text.
        let c = load(None, &[("SILT_QUERY__FLIGHT_LISTEN", "\"\"")], &[]).unwrap();
        assert_eq!(c.query.flight_listen, "");
        for bad in ["fluss", "fluss:port", ":9123", "a:1,,b:2"] {
            let e = load(None, &[], &[("hot_tier.bootstrap", bad)]).unwrap_err();
            assert_mentions(&e, &["hot_tier.bootstrap", "HOST:PORT"]);
        }
    }

    #[test]
    fn layers_apply_in_order() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(c.hotstore.listen, "127.0.0.1:9123");
        let c = load(Some("hotstore:\n  buckets_default: 5\n"), &[], &[]).unwrap();
        assert_eq!(c.hotstore.buckets_default, 5);
        let c = load(
            Some("hotstore:\n  buckets_default: 5\n"),
            &[("SILT_HOTSTORE__BUCKETS_DEFAULT", "7")],
            &[],
        )
        .unwrap();
        assert_eq!(c.hotstore.buckets_default, 7);
        let c = load(
            None,
            &[
                ("SILT_HOTSTORE__BUCKETS_DEFAULT", "7"),
                ("SILT_LOG", "debug"),
            ],
            &[("hotstore.buckets_default", "9")],
        )
        .unwrap();
        assert_eq!(c.hotstore.buckets_default, 9);
        assert_eq!(
            c.rest.listen, "127.0.0.1:8081",
            "untouched keys keep their defaults"
        );
    }

    #[test]
    fn the_lake_root_and_object_store_options_come_from_any_layer() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(
            c.lake_root(),
            c.data_dir.join("lake").to_string_lossy().to_string()
        );
        assert!(c.lake_storage_options().is_empty());
        assert!(c.lake.deletion_vectors);
        let c = load(
            Some("lake:\n  root: s3://bucket/lake/\n  storage_options:\n    allow_http: true\n    aws_region: us-east-1\n"),
            &[
                ("SILT_LAKE__STORAGE_OPTIONS__AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
                ("SILT_LAKE__STORAGE_OPTIONS__AWS_SECRET_ACCESS_KEY", "0123"),
            ],
            &[("lake.deletion_vectors", "false")],
        )
        .unwrap();
        assert_eq!(c.lake_root(), "s3://bucket/lake");
        let options = c.lake_storage_options();
        assert_eq!(options["allow_http"], "true");
        assert_eq!(options["aws_region"], "us-east-1");
        assert_eq!(options["aws_endpoint_url"], "http://127.0.0.1:9000");
        // Kept verbatim, not read as the number 123.
        assert_eq!(options["aws_secret_access_key"], "0123");
        assert!(!c.lake.deletion_vectors);
        let e = load(None, &[("SILT_LAKE__ROOTS", "x")], &[]).unwrap_err();
        assert_mentions(e, &["unknown key", "storage_options"]);
    }

    #[test]
    fn a_file_retention_shorter_than_the_longest_query_is_refused() {
        let c = load(None, &[], &[]).unwrap();
        assert_eq!(c.lake.file_retention_ms, 7 * 24 * 3600 * 1000);
        let e = load(None, &[("SILT_LAKE__FILE_RETENTION_MS", "60000")], &[]).unwrap_err();
        let named = ["lake.file_retention_ms (60000)", "query.deadline_max_ms"];
        assert_mentions(e, &named);
        let c = load(
            None,
            &[("SILT_LAKE__FILE_RETENTION_MS", "60000")],
            &[("query.deadline_max_ms", "60000")],
        )
        .unwrap();
        assert_eq!(c.lake.file_retention_ms, 60_000);
    }

    #[test]
    fn no_query_slot_is_refused() {
        let e = load(None, &[("SILT_QUERY__CONCURRENT_MAX", "0")], &[]).unwrap_err();
        assert_mentions(e, &["query.concurrent_max", "at least 1"]);
        let c = load(None, &[("SILT_QUERY__WAITING_MAX", "0")], &[]).unwrap();
        assert_eq!((c.query.concurrent_max, c.query.waiting_max), (4, 0));
    }

    #[test]
    fn mistakes_are_named() {
        let e = load(None, &[("SILT_HOTSTORE__LISTN", "x")], &[]).unwrap_err();
        assert_mentions(e, &["SILT_HOTSTORE__LISTN", "\"listn\"", "listen"]);
        let e = load(Some("hotstore:\n  nope: 1\n"), &[], &[]).unwrap_err();
        assert_mentions(e, &["nope"]);
        let e = load(Some("hotstore: [unclosed\n"), &[], &[]).unwrap_err();
        assert!(format!("{e:#}").contains("not valid YAML"), "{e:#}");
        let e = load(None, &[], &[("engine.checkpoint_interval_ms", "soon")]).unwrap_err();
        assert_mentions(e, &["checkpoint_interval_ms"]);
    }
}
