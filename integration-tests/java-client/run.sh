#!/usr/bin/env bash
# Runs scenarios of the Java client harness against a Fluss endpoint, building it first if
# needed (build.sh). Stdout: one line per scenario, `<name> ok: ...` or `<name> FAILED: ...`.
#
#   run.sh <fluss-client version> <host:port> <scenario>... | all
#   run.sh 1.0.0 127.0.0.1:9123 three-batches
#
# Exit codes: 0 every scenario passed, 1 one failed (or the build failed), 2 usage, 77 skipped
# (see build.sh). Environment: build.sh's, and JAVA_CLIENT_HEAP (-Xmx, default 512m).
set -euo pipefail

readonly HARNESS_NAME=java-client
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../harness-common.sh
source "$here/../harness-common.sh"
require_args 3 $# "run.sh <fluss-client version> <host:port> <scenario>... (or all)"
version="$1"
shift

"$here/build.sh" "$version"

# The client's Arrow and Netty reach into java.nio on Java 17, as Fluss's own launcher allows.
out="${JAVA_CLIENT_CACHE_DIR:-$here/.cache}/fluss-$version"
exec_jvm "$out" "${JAVA_CLIENT_HEAP:-512m}" dev.silt.javaclient.Main \
    --add-opens=java.base/java.lang=ALL-UNNAMED \
    --add-opens=java.base/java.nio=ALL-UNNAMED \
    --add-opens=java.base/java.util=ALL-UNNAMED \
    --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
    -- "$@"
