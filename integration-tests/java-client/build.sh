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
readonly HARNESS_NAME=java-client HARNESS_ENV=JAVA_CLIENT
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../harness-common.sh
source "$here/../harness-common.sh"
cache_dir="${JAVA_CLIENT_CACHE_DIR:-$here/.cache}"
fetch_timeout_s="${JAVA_CLIENT_FETCH_TIMEOUT_S:-300}"

require_jdk "the Fluss client"

versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=("${SUPPORTED_VERSIONS[@]}")

lock_cache "$cache_dir"

for version in "${versions[@]}"; do
    [[ " ${SUPPORTED_VERSIONS[*]} " == *" $version "* ]] \
        || fail "unknown fluss-client version $version (supported: ${SUPPORTED_VERSIONS[*]})"
    out="$cache_dir/fluss-$version"
    compgen -G "$out/lib/fluss-client-*.jar" >/dev/null \
        || fetch_jars "$out/lib" "$cache_dir/mvn-$version.log" 'fluss-client-*.jar' \
            "fluss-client $version" "70 MB" "-Dfluss.version=$version"
    compile_classes "$out" "$out/lib" "fluss-client $version" -Xlint:all,-try
done
