//! Paths built from database and table names: a lake table at `<lake_root>/<db>/<table>`, the
//! lake of a dropped table moved aside to `<lake_root>/__dropped/<db>.<table>-<id>`, a tiering
//! job's checkpoints at `<checkpoint_root>/<db>.<table>-<id>`, jobs' delta sinks below
//! `<lake_root>/__jobs/`.
//!
//! Names come from a Fluss endpoint (silt's hotstore, or any Fluss cluster), so they are
//! checked here with Fluss's own rules before they touch a path: 1 to 200 characters of ASCII
//! letters, digits, `_` and `-`, not starting with `__` (reserved for Fluss's internal names).
//! That excludes path separators, `.` and `..`, drive letters, URL syntax and NUL, so a name is
//! always exactly one normal path component and a built path can never leave its root;
//! [`child_of`] asserts that for every path it builds. It also keeps `__dropped` apart from
//! every database's directory.

use std::path::{Component, Path, PathBuf};

use anyhow::{Result, bail};

/// Checks a database or table name with Fluss's rule (`TablePath::detect_invalid_name`).
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let invalid = fluss::metadata::TablePath::detect_invalid_name(name)
        .or_else(|| fluss::metadata::TablePath::validate_prefix(name));
    if let Some(reason) = invalid {
        bail!(
            "{what} name {name:?} cannot name a path: {reason} (rename it to ASCII letters, digits, _ and -)"
        );
    }
    Ok(())
}

/// `root/component`, refusing anything but one normal component beneath `root`.
fn child_of(root: &Path, component: &str) -> Result<PathBuf> {
    let mut parts = Path::new(component).components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(_)), None) => {}
        _ => bail!("{component:?} is not a single path component"),
    }
    let path = root.join(component);
    assert!(
        path.starts_with(root) && path.components().count() == root.components().count() + 1,
        "{} must be directly under {}",
        path.display(),
        root.display()
    );
    Ok(path)
}

/// Where the lake table of `database.table` lives under `lake_root` (a directory or a URL).
pub fn lake_uri(lake_root: &str, database: &str, table: &str) -> Result<String> {
    check_name("database", database)?;
    check_name("table", table)?;
    Ok(format!(
        "{}/{database}/{table}",
        lake_root.trim_end_matches('/')
    ))
}

/// Where lakes of dropped tables are moved, under the lake root. `__` cannot start a Fluss
/// name, so no database's directory is called so.
pub const DROPPED_DIR: &str = "__dropped";

/// Where tiering workers keep their leases on tables, under the lake root (see silt-jobs'
/// tiering leases); `__`-named like [`DROPPED_DIR`].
pub const LEASES_DIR: &str = "__leases";

/// The lake of `database.table` relative to the lake root: `<db>/<table>`.
pub fn lake_relative(database: &str, table: &str) -> Result<String> {
    check_name("database", database)?;
    check_name("table", table)?;
    Ok(format!("{database}/{table}"))
}

/// Where the lake of `database.table` goes when it belongs to table id `owner` and another
/// table of that name tiers there now, relative to the lake root:
/// `__dropped/<db>.<table>-<owner>` (`-unknown` when the lake names no owner id).
pub fn dropped_lake_relative(database: &str, table: &str, owner: Option<i64>) -> Result<String> {
    check_name("database", database)?;
    check_name("table", table)?;
    let owner = owner.map_or_else(|| "unknown".to_string(), |id| id.to_string());
    Ok(format!("{DROPPED_DIR}/{database}.{table}-{owner}"))
}

/// Where jobs' delta sinks write under the lake root. Tiering owns `<root>/<db>/<table>` and
/// `<root>/__dropped`, so a job's table goes here, where default sink paths also go. `__`
/// cannot start a Fluss name, so no database's lake can be here (`_jobs` could: a table
/// `_jobs.<x>` would have tiered into a job's directory).
pub const JOBS_DIR: &str = "__jobs";

/// Checks a job's explicit delta-sink `path` against the lake: it must lie strictly below
/// `<lake_root>/__jobs` (a local absolute path under a local root, a URL of the same store under
/// a URL root), with no `.`, `..`, empty or percent-encoded component, and, on a local disk,
/// no symbolic link that leads out of the root. Returns the path to write.
pub fn confine_sink_path(path: &str, lake_root: &str) -> Result<String> {
    let allowed = format!("{}/{JOBS_DIR}", lake_root.trim_end_matches('/'));
    let outside = |why: &str| {
        anyhow::anyhow!(
            "path {path:?} is outside the lake: {why}; a delta-sink writes only below {allowed}/ (e.g. {allowed}/my-table), or leave path out for the default"
        )
    };
    let Some(below) = path
        .strip_prefix(allowed.as_str())
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return Err(outside("it does not start with the allowed directory"));
    };
    let below = below.trim_end_matches('/');
    for part in below.split('/') {
        let bad = part.is_empty()
            || part == "."
            || part == ".."
            || part
                .chars()
                .any(|c| c.is_control() || matches!(c, '\\' | '%' | '?' | '#'));
        if bad {
            return Err(outside(&format!(
                "its component {part:?} is empty, a dot segment or holds \\, %, ?, # or a control character"
            )));
        }
    }
    if !lake_root.contains("://") {
        let (path_buf, allowed_buf) = (Path::new(path), Path::new(&allowed));
        if !path_buf.is_absolute() {
            return Err(outside("it is relative"));
        }
        // A symbolic link inside the root may lead out of it: resolve what exists already.
        if let Ok(root) = allowed_buf.canonicalize() {
            let existing = path_buf
                .ancestors()
                .find(|p| p.exists())
                .unwrap_or(path_buf);
            let resolved = existing
                .canonicalize()
                .map_err(|e| anyhow::anyhow!("resolving {}: {e}", existing.display()))?;
            if existing.starts_with(allowed_buf) && !resolved.starts_with(&root) {
                return Err(outside(&format!(
                    "{} leads to {}",
                    existing.display(),
                    resolved.display()
                )));
            }
        }
    }
    Ok(format!("{allowed}/{below}"))
}

/// The directory of the tiering job of `database.table` (table id `table_id`) under `root`:
/// its checkpoints under the checkpoint root, its key index under the key index root.
pub fn tiering_checkpoint_dir(
    checkpoint_root: &Path,
    database: &str,
    table: &str,
    table_id: i64,
) -> Result<PathBuf> {
    check_name("database", database)?;
    check_name("table", table)?;
    child_of(checkpoint_root, &format!("{database}.{table}-{table_id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn assert_mentions(error: impl std::fmt::Display, parts: &[&str]) {
        let message = error.to_string();
        for part in parts {
            assert!(message.contains(part), "{part:?} is not in: {message}");
        }
    }
    use proptest::prelude::*;

    /// Regression (issue 33, item 4): job sinks lived under `<lake>/_jobs`, and `_jobs` is a
    /// legal Fluss database name, so a table `_jobs.<x>` tiered into the directory of job `x`
    /// (its vacuum deleted the job's files; moving a "foreign" lake aside moved the job's live
    /// output). The directories silt keeps beside the tables now start with `__`, which no
    /// legal name can: no table's lake is ever inside them, whatever its names.
    #[test]
    fn no_table_lake_lies_in_a_directory_silt_keeps_for_itself() {
        for reserved in [JOBS_DIR, DROPPED_DIR, LEASES_DIR] {
            assert!(check_name("database", reserved).is_err(), "{reserved}");
            for (database, table) in [("_jobs", "x"), ("_dropped", "y"), ("jobs", "_x")] {
                check_name("database", database).unwrap();
                let lake = lake_relative(database, table).unwrap();
                assert!(
                    !lake.starts_with(&format!("{reserved}/")) && lake != reserved,
                    "{database}.{table} tiers into {lake}, inside {reserved}"
                );
            }
        }
    }

    const HOSTILE: &[&str] = &[
        "",
        ".",
        "..",
        "../x",
        "x/..",
        "/etc",
        "a/b",
        "a\\b",
        "C:",
        "c:\\x",
        "s3://bucket",
        "a\0b",
        "~",
        "a b",
        "naïve",
        "a.b",
        "%2e%2e",
        "a\nb",
        "__dropped",
        "__x",
    ];

    #[test]
    fn hostile_names_are_refused() {
        let root = Path::new("/data/checkpoints/tiering");
        for name in HOSTILE {
            assert!(lake_uri("/data/lake", name, "t").is_err(), "db {name:?}");
            assert!(
                lake_uri("/data/lake", "db", name).is_err(),
                "table {name:?}"
            );
            assert!(
                tiering_checkpoint_dir(root, name, "t", 1).is_err(),
                "{name:?}"
            );
            assert!(
                tiering_checkpoint_dir(root, "db", name, 1).is_err(),
                "{name:?}"
            );
        }
        let long = "x".repeat(201);
        assert!(lake_uri("/data/lake", &long, "t").is_err());
        let error = lake_uri("/data/lake", "shop", "../orders").unwrap_err();
        assert_mentions(error, &["table name \"../orders\"", "rename"]);
    }

    #[test]
    fn valid_names_build_the_expected_paths() {
        assert_eq!(
            lake_uri("/data/lake/", "shop", "orders").unwrap(),
            "/data/lake/shop/orders"
        );
        assert_eq!(
            lake_uri("s3://bucket/lake", "a-b", "C_9").unwrap(),
            "s3://bucket/lake/a-b/C_9"
        );
        assert_eq!(
            tiering_checkpoint_dir(Path::new("/cp"), "shop", "orders", 7).unwrap(),
            PathBuf::from("/cp/shop.orders-7")
        );
        assert_eq!(lake_relative("shop", "orders").unwrap(), "shop/orders");
        assert_eq!(
            dropped_lake_relative("shop", "orders", Some(12)).unwrap(),
            "__dropped/shop.orders-12"
        );
        assert_eq!(
            dropped_lake_relative("shop", "orders", None).unwrap(),
            "__dropped/shop.orders-unknown"
        );
        assert!(dropped_lake_relative("..", "orders", Some(1)).is_err());
        assert!(
            lake_relative("a_b", "_c").is_ok(),
            "one underscore is a name"
        );
        let longest = "y".repeat(200);
        assert!(lake_uri("/l", &longest, &longest).is_ok());
    }

    #[test]
    fn sink_paths_stay_below_the_lakes_job_directory() {
        // (path, lake root, Ok(confined) | Err(part of the message))
        #[rustfmt::skip]
        let cases: &[(&str, &str, Result<&str, &str>)] = &[
            ("/data/lake/__jobs/t", "/data/lake", Ok("/data/lake/__jobs/t")),
            ("/data/lake/__jobs/a/b/", "/data/lake/", Ok("/data/lake/__jobs/a/b")),
            ("s3://b/lake/__jobs/t", "s3://b/lake", Ok("s3://b/lake/__jobs/t")),
            ("/etc/cron.d", "/data/lake", Err("does not start with")),
            ("/data/lake/shop/orders", "/data/lake", Err("does not start with")),
            ("/data/lake/__dropped/x", "/data/lake", Err("does not start with")),
            ("/data/lake/__jobs", "/data/lake", Err("does not start with")),
            ("/data/lake/__jobsx/t", "/data/lake", Err("does not start with")),
            ("/data/lake/__jobs/../../etc", "/data/lake", Err("\"..\"")),
            ("/data/lake/__jobs/a/./b", "/data/lake", Err("\".\"")),
            ("/data/lake/__jobs//b", "/data/lake", Err("\"\"")),
            ("/data/lake/__jobs/%2e%2e/x", "/data/lake", Err("%")),
            ("/data/lake/__jobs/a\\..\\b", "/data/lake", Err("holds")),
            ("s3://other/lake/__jobs/t", "s3://b/lake", Err("does not start with")),
            ("s3://b/lake/__jobs/../t", "s3://b/lake", Err("\"..\"")),
            ("file:///data/lake/__jobs/t", "/data/lake", Err("does not start with")),
            ("data/lake/__jobs/t", "data/lake", Err("relative")),
        ];
        for (path, root, want) in cases {
            match (confine_sink_path(path, root), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{path}"),
                (Err(e), Err(part)) => {
                    let e = e.to_string();
                    assert!(e.contains(part) && e.contains("__jobs/"), "{path}: {e}");
                }
                (got, want) => panic!("{path} under {root}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_out_of_the_lake_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (lake, outside) = (dir.path().join("lake"), dir.path().join("elsewhere"));
        std::fs::create_dir_all(lake.join("__jobs")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, lake.join("__jobs").join("link")).unwrap();
        let root = lake.to_string_lossy();
        let through = format!("{root}/__jobs/link/t");
        assert_mentions(
            confine_sink_path(&through, &root).unwrap_err(),
            &["leads to"],
        );
        let inside = format!("{root}/__jobs/real/t");
        assert_eq!(confine_sink_path(&inside, &root).unwrap(), inside);
    }

    proptest! {
        /// Whatever the names, a built path is refused or stays inside its root as exactly the
        /// components the layout names.
        #[test]
        fn built_paths_never_leave_their_roots(database in ".{0,12}|[a-zA-Z0-9_.-]{0,12}", table in ".{0,12}|[a-zA-Z0-9_/.-]{0,12}", table_id in any::<i64>()) {
            let lake_root = Path::new("/data/lake");
            if let Ok(uri) = lake_uri("/data/lake", &database, &table) {
                let path = PathBuf::from(&uri);
                let below: Vec<Component> = path.strip_prefix(lake_root).unwrap().components().collect();
                prop_assert_eq!(below.len(), 2, "{}", uri);
                prop_assert!(below.iter().all(|c| matches!(c, Component::Normal(_))));
            }
            let checkpoints = Path::new("/data/checkpoints/tiering");
            if let Ok(dir) = tiering_checkpoint_dir(checkpoints, &database, &table, table_id) {
                prop_assert_eq!(dir.parent(), Some(checkpoints));
                prop_assert!(matches!(dir.components().next_back(), Some(Component::Normal(_))));
            }
        }
    }
}
