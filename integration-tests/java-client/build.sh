#!/usr/bin/env bash
# Builds the Java client harness once per fluss-client version: Maven fetches the jars into
# <cache>/fluss-<version>/lib, javac compiles src/ into <cache>/fluss-<version>/classes. Both are
# reused by later runs: the jars as long as they are there, the classes as long as the sources
# and the jars are unchanged. Prints nothing on stdout; progress and errors go to stderr.
#
#   build.sh [<version>...]      default: every supported version (1.0.0 0.9.1-incubating)
#
# Exit codes: 0 built (or up to date), 1 failed (e.g. a compile error), 77 skipped: java or
# javac is missing, or the jars are not cached and mvn is missing or cannot fetch them in time.
#
# Environment (all optional):
#   JAVA_CLIENT_CACHE_DIR        jars and classes (default: <this dir>/.cache)
#   JAVA_CLIENT_FETCH_TIMEOUT_S  bound on Maven's fetch of one version (default 300)
#   JAVA_CLIENT_OFFLINE          1: never go online; missing jars skip (.ci/run sets it after a
#                                failed fetch, so the test does not wait for the network again)
#   JAVA_CLIENT_MAVEN_REPO       -Dmaven.repo.local for the fetch (default: Maven's own)
set -euo pipefail

readonly SUPPORTED_VERSIONS=(1.0.0 0.9.1-incubating)
readonly HARNESS_NAME=java-client
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../harness-common.sh
source "$here/../harness-common.sh"
cache_dir="${JAVA_CLIENT_CACHE_DIR:-$here/.cache}"
fetch_timeout_s="${JAVA_CLIENT_FETCH_TIMEOUT_S:-300}"

require_jdk "the Fluss client"

versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=("${SUPPORTED_VERSIONS[@]}")

lock_cache "$cache_dir"

fetch() { # $1 = version; fills <cache>/fluss-$1/lib
    local version="$1"
    local lib="$cache_dir/fluss-$version/lib"
    compgen -G "$lib/fluss-client-*.jar" >/dev/null && return 0
    command -v mvn >/dev/null 2>&1 || skip "mvn not found on PATH and $lib holds no jars"
    local tmp="$lib.partial"
    local mvn_log="$cache_dir/mvn-$version.log"
    local args=(-B -f "$here/pom.xml" "-Dfluss.version=$version"
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies
        "-DoutputDirectory=$tmp")
    [[ -n "${JAVA_CLIENT_MAVEN_REPO:-}" ]] && args+=("-Dmaven.repo.local=$JAVA_CLIENT_MAVEN_REPO")
    rm -rf "$tmp"
    # Offline first: when Maven's repository already holds the jars this takes seconds and no
    # network at all.
    if ! mvn -o "${args[@]}" >"$mvn_log" 2>&1; then
        [[ "${JAVA_CLIENT_OFFLINE:-0}" == 1 ]] \
            && skip "fluss-client $version is not cached and JAVA_CLIENT_OFFLINE=1 (log: $mvn_log)"
        log "fetching fluss-client $version from Maven Central (about 70 MB; at most ${fetch_timeout_s}s)"
        local started=$SECONDS status=0
        timeout "$fetch_timeout_s" mvn "${args[@]}" >"$mvn_log" 2>&1 || status=$?
        if ((status == 124)); then
            skip "Maven did not fetch fluss-client $version within ${fetch_timeout_s}s (JAVA_CLIENT_FETCH_TIMEOUT_S; log: $mvn_log)"
        elif ((status != 0)); then
            grep -m 3 -E '^\[ERROR\] [^ ]' "$mvn_log" >&2 || true
            skip "Maven could not fetch fluss-client $version (exit $status; log: $mvn_log)"
        fi
        log "fetched fluss-client $version in $((SECONDS - started))s"
    fi
    compgen -G "$tmp/fluss-client-*.jar" >/dev/null \
        || fail "Maven succeeded but left no fluss-client jar in $tmp (log: $mvn_log)"
    rm -rf "$lib"
    mv "$tmp" "$lib"
}

compile() { # $1 = version; fills <cache>/fluss-$1/classes
    local version="$1"
    local out="$cache_dir/fluss-$version"
    local sources
    mapfile -t sources < <(find "$here/src/main/java" -name '*.java' | sort)
    # What the classes depend on: every source file and the jars compiled against.
    local fingerprint
    fingerprint="$( (cat "${sources[@]}"; ls -l "$out/lib") | sha256sum | cut -d' ' -f1)"
    [[ -f "$out/classes.fingerprint" && "$(cat "$out/classes.fingerprint")" == "$fingerprint" ]] \
        && return 0
    rm -rf "$out/classes" "$out/classes.fingerprint"
    javac --release 17 -encoding UTF-8 -Xlint:all,-try -Werror -d "$out/classes" \
        -cp "$out/lib/*" "${sources[@]}" \
        || fail "javac failed against fluss-client $version"
    echo "$fingerprint" >"$out/classes.fingerprint"
    log "compiled against fluss-client $version"
}

for version in "${versions[@]}"; do
    [[ " ${SUPPORTED_VERSIONS[*]} " == *" $version "* ]] \
        || fail "unknown fluss-client version $version (supported: ${SUPPORTED_VERSIONS[*]})"
    fetch "$version"
    compile "$version"
done
