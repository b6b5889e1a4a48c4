#!/usr/bin/env bash
# Runs SQL scripts through Flink (in-process, local mini cluster) and the official Fluss
# connector against a Fluss endpoint, building the harness first if needed (build.sh).
#
#   run.sh <host:port> <script.sql>...
#   run.sh 127.0.0.1:9123 examples/basics.sql
#
# `${bootstrap}` in a script becomes <host:port>. Stdout: JSON lines, one per result row and one
# per statement (see src/main/java/dev/silt/flinksql/Main.java). Exit codes: 0 every statement
# succeeded, 1 one failed (or the build failed), 2 usage, 77 skipped (see build.sh).
# Environment: build.sh's, FLINK_SQL_HEAP (-Xmx, default 1g), FLINK_SQL_STATEMENT_TIMEOUT_S
# (120), FLINK_SQL_PARALLELISM (1).
set -euo pipefail

readonly HARNESS_NAME=flink-sql
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../harness-common.sh
source "$here/../harness-common.sh"
require_args 2 $# "run.sh <host:port> <script.sql>..."

"$here/build.sh"

exec_jvm "${FLINK_SQL_CACHE_DIR:-$here/.cache}" "${FLINK_SQL_HEAP:-1g}" dev.silt.flinksql.Main \
    "${FLINK_JAVA17_OPTIONS[@]}" \
    -- "$@"
