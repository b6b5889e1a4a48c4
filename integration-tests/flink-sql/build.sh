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

readonly HARNESS_NAME=flink-sql
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../harness-common.sh
source "$here/../harness-common.sh"
cache_dir="${FLINK_SQL_CACHE_DIR:-$here/.cache}"
fetch_timeout_s="${FLINK_SQL_FETCH_TIMEOUT_S:-300}"

require_jdk "Flink"

lock_cache "$cache_dir"

lib="$cache_dir/lib"
# The jars are fetched again when pom.xml changes (a version bumped, a module added).
pom_fingerprint="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"

fetch() {
    [[ -f "$lib/.pom.fingerprint" && "$(cat "$lib/.pom.fingerprint")" == "$pom_fingerprint" ]] \
        && return 0
    command -v mvn >/dev/null 2>&1 || skip "mvn not found on PATH and $lib holds no jars"
    local tmp="$lib.partial"
    local mvn_log="$cache_dir/mvn.log"
    local args=(-B -f "$here/pom.xml"
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies
        "-DoutputDirectory=$tmp")
    [[ -n "${FLINK_SQL_MAVEN_REPO:-}" ]] && args+=("-Dmaven.repo.local=$FLINK_SQL_MAVEN_REPO")
    rm -rf "$tmp"
    # Offline first: when Maven's repository already holds the jars this takes seconds and no
    # network at all.
    if ! mvn -o "${args[@]}" >"$mvn_log" 2>&1; then
        [[ "${FLINK_SQL_OFFLINE:-0}" == 1 ]] \
            && skip "Flink and the Fluss connector are not cached and FLINK_SQL_OFFLINE=1 (log: $mvn_log)"
        [[ -n "$(find "$cache_dir/fetch-failed" -mmin -15 2>/dev/null)" ]] \
            && skip "Maven could not fetch Flink and the Fluss connector less than 15 minutes ago ($(cat "$cache_dir/fetch-failed"); delete $cache_dir/fetch-failed to retry)"
        log "fetching Flink 1.20.3 and fluss-flink-1.20 from Maven Central (about 190 MB; at most ${fetch_timeout_s}s)"
        local started=$SECONDS status=0
        timeout "$fetch_timeout_s" mvn "${args[@]}" >"$mvn_log" 2>&1 || status=$?
        if ((status != 0)); then
            echo "exit $status at $(date -u +%FT%TZ), log: $mvn_log" >"$cache_dir/fetch-failed"
        fi
        if ((status == 124)); then
            skip "Maven did not fetch Flink and the Fluss connector within ${fetch_timeout_s}s (FLINK_SQL_FETCH_TIMEOUT_S; log: $mvn_log)"
        elif ((status != 0)); then
            grep -m 3 -E '^\[ERROR\] [^ ]' "$mvn_log" >&2 || true
            skip "Maven could not fetch Flink and the Fluss connector (exit $status; log: $mvn_log)"
        fi
        rm -f "$cache_dir/fetch-failed"
        log "fetched the jars in $((SECONDS - started))s"
    fi
    compgen -G "$tmp/fluss-flink-*.jar" >/dev/null \
        || fail "Maven succeeded but left no fluss-flink jar in $tmp (log: $mvn_log)"
    echo "$pom_fingerprint" >"$tmp/.pom.fingerprint"
    rm -rf "$lib"
    mv "$tmp" "$lib"
}

compile() {
    local sources
    mapfile -t sources < <(find "$here/src/main/java" -name '*.java' | sort)
    # What the classes depend on: every source file and the jars compiled against.
    local fingerprint
    fingerprint="$( (cat "${sources[@]}"; ls -l "$lib") | sha256sum | cut -d' ' -f1)"
    [[ -f "$cache_dir/classes.fingerprint" && "$(cat "$cache_dir/classes.fingerprint")" == "$fingerprint" ]] \
        && return 0
    rm -rf "$cache_dir/classes" "$cache_dir/classes.fingerprint"
    javac --release 17 -encoding UTF-8 -Xlint:all,-try,-processing,-classfile -Werror \
        -d "$cache_dir/classes" -cp "$lib/*" "${sources[@]}" \
        || fail "javac failed against Flink and the Fluss connector"
    echo "$fingerprint" >"$cache_dir/classes.fingerprint"
    log "compiled"
}

fetch
compile
