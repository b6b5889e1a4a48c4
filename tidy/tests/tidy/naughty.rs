//! The naughty lists of the tidy test: the offenders the tree had when the rule came in. They may
//! only shrink. Generated: after a merge moved code, `TIDY_BLESS=1 cargo test -p silt-tidy`
//! rewrites both from the tree (a new entry needs a reason in review). Not formatted by rustfmt,
//! so that what the test writes is what `cargo fmt --check` accepts.

/// Product functions over `FN_LINES_MAX` lines: `<file> <Type::function>`.
#[rustfmt::skip]
pub const LONG_FNS: &[&str] = &[
    "connectors/src/delta/schema.rs lake_data_type", // 83 lines
    "connectors/src/fluss/source.rs FlussSource::poll_next", // 71 lines
    "connectors/src/lake/realtime.rs read_tail", // 74 lines
    "engine/src/graph.rs JobGraph::validate", // 72 lines
    "engine/src/job.rs run_attempt", // 93 lines
    "hotstore/src/handlers/kv.rs put", // 80 lines
    "hotstore/src/handlers/log.rs fetch", // 73 lines
    "hotstore/src/handlers/mod.rs respond", // 100 lines
    "hotstore/src/server.rs Server::start", // 89 lines
    "hotstore/src/server.rs serve_connection", // 104 lines
    "hotstore/src/storage/log_tablet.rs LogTablet::open", // 101 lines
    "hotstore/src/storage/log_tablet.rs LogTablet::write", // 85 lines
];

/// Product files over `FILE_LINES_MAX` lines, test code left out.
#[rustfmt::skip]
pub const LONG_FILES: &[&str] = &[
    "connectors/src/fluss/source.rs", // 1137 lines
];
