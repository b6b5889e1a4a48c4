#!/usr/bin/env bash
# Builds the Flink SQL harness once: Maven fetches Flink 1.20.3 and the Fluss connector
# (fluss-flink-1.20 0.9.1-incubating) into <cache>/lib, javac compiles src/ into
# <cache>/classes. Both are reused by later runs: the jars as long as they are there, the
# classes as long as the sources and the jars are unchanged. Prints nothing on stdout; progress
# and errors go to stderr.
#
# Exit codes: 0 built (or up to date), 1 failed (e.g. a compile error), 77 skipped: java or
# javac is missing, or the jars are not cached and mvn is missing or cannot fetch them in time.
# A fetch that failed is not tried again for 15 minutes (<cache>/fetch-failed; delete it to
# retry at once), so the tests of one `cargo test` do not each wait for an unreachable Maven.
#
# Environment (all optional):
#   FLINK_SQL_CACHE_DIR        jars and classes (default: <this dir>/.cache)
#   FLINK_SQL_FETCH_TIMEOUT_S  bound on Maven's fetch (default 300)
#   FLINK_SQL_OFFLINE          1: never go online; missing jars skip (.ci/run sets it after a
#                              failed fetch, so the test does not wait for the network again)
#   FLINK_SQL_MAVEN_REPO       -Dmaven.repo.local for the fetch (default: Maven's own)
set -euo pipefail

readonly HARNESS_NAME=flink-sql HARNESS_ENV=FLINK_SQL
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../harness-common.sh
source "$here/../harness-common.sh"
cache_dir="${FLINK_SQL_CACHE_DIR:-$here/.cache}"
fetch_timeout_s="${FLINK_SQL_FETCH_TIMEOUT_S:-300}"
fetch_failed="$cache_dir/fetch-failed"

require_jdk "Flink"

lock_cache "$cache_dir"

lib="$cache_dir/lib"
# The jars are fetched again when pom.xml changes (a version bumped, a module added).
pom_fingerprint="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
if ! [[ -f "$lib/.pom.fingerprint" && "$(cat "$lib/.pom.fingerprint")" == "$pom_fingerprint" ]]; then
    fetch_jars "$lib" "$cache_dir/mvn.log" 'fluss-flink-*.jar' \
        "Flink 1.20.3 and the Fluss connector (fluss-flink-1.20)" "190 MB"
    echo "$pom_fingerprint" >"$lib/.pom.fingerprint"
fi
compile_classes "$cache_dir" "$lib" "Flink and the Fluss connector" \
    -Xlint:all,-try,-processing,-classfile
