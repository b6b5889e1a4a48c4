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

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 3 ]]; then
    echo "usage: run.sh <fluss-client version> <host:port> <scenario>... (or all)" >&2
    exit 2
fi
version="$1"
shift
out="${JAVA_CLIENT_CACHE_DIR:-$here/.cache}/fluss-$version"

"$here/build.sh" "$version"

# The client's Arrow and Netty reach into java.nio on Java 17, as Fluss's own launcher allows.
# C1 only (TieredStopAtLevel=1): these runs are short, and full JIT costs more than it saves on
# two cores.
exec java "-Xmx${JAVA_CLIENT_HEAP:-512m}" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    --add-opens=java.base/java.lang=ALL-UNNAMED \
    --add-opens=java.base/java.nio=ALL-UNNAMED \
    --add-opens=java.base/java.util=ALL-UNNAMED \
    --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
    -Dio.netty.tryReflectionSetAccessible=true \
    -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -Dorg.slf4j.simpleLogger.log.org.apache.fluss.client.token=error \
    -cp "$out/classes:$out/lib/*" dev.silt.javaclient.Main "$@"
