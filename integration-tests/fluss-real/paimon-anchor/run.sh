#!/usr/bin/env bash
# The control measurement: Apache Fluss 0.9.1's own lake tiering service (its Flink job, run in a
# local MiniCluster) tiering a real single-node Fluss cluster into Paimon. For each
# configuration (default, tuned) it starts a fresh cluster with the Paimon lake configured
# (../start.sh), runs the bench (dev.silt.paimonanchor.Main: throughput from a pre-filled
# backlog, then freshness at an offered load), stops the cluster, and at the end prints a table
# of the figures on stdout. Progress goes to stderr; logs to .cache/logs/<config>/.
#
# Exit codes: 0 measured, 1 failed, 77 skipped (java, javac or mvn missing, or the jars could
# not be fetched); "SKIPPED: paimon-anchor: <reason>" goes to stderr then.
#
# Environment (all optional):
#   PAIMON_ANCHOR_CONFIGS     configurations to run, in order (default "default tuned")
#   PAIMON_ANCHOR_ROWS        rows pre-filled for the throughput phase (default 1000000)
#   PAIMON_ANCHOR_RATE        offered rows/s of the freshness phase (default 100000)
#   PAIMON_ANCHOR_SECONDS     seconds of the freshness phase's load (default 20)
#   PAIMON_ANCHOR_FLUSH_MS    flush interval of the freshness writer (default 100)
#   PAIMON_ANCHOR_PHASES      "throughput,freshness" (default), or one of them
#   PAIMON_ANCHOR_TIMEOUT_S   bound on one configuration's bench JVM (default 3600)
#   PAIMON_ANCHOR_HEAP        -Xmx of the bench JVM: Flink MiniCluster + writer (default 1g)
#   PAIMON_ANCHOR_TUNED_FRESHNESS    table.datalake.freshness of "tuned" (default 1s)
#   PAIMON_ANCHOR_TUNED_PARALLELISM  tiering job parallelism of "tuned" (default 2)
#   PAIMON_ANCHOR_TUNED_POLL         tiering.poll.table.interval of "tuned" (default 100ms)
#   PAIMON_ANCHOR_TUNED_ARGS         more tiering-job arguments for "tuned" (default none)
#   PAIMON_ANCHOR_ZK_PORT / _COORDINATOR_PORT / _TABLET_PORT  (default 12381 / 9423 / 9424)
#   PAIMON_ANCHOR_MAVEN_REPO  -Dmaven.repo.local for the fetch (default: Maven's own)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HARNESS_NAME=paimon-anchor
# shellcheck source=../../harness-common.sh
source "$here/../../harness-common.sh"
fluss_real="$(cd "$here/.." && pwd)"
cache="$here/.cache"
lib="$cache/lib"
classes="$cache/classes"
work="$cache/run"
plugins="$cache/plugins"


command -v java >/dev/null 2>&1 || skip "java not found on PATH (Java 17 runs Flink 1.20 and Fluss 0.9)"
command -v javac >/dev/null 2>&1 || skip "javac not found on PATH (a JDK 17 is needed)"
mkdir -p "$cache"

# --- 1. jars -----------------------------------------------------------------------------------
readonly lake_paimon="org.apache.fluss:fluss-lake-paimon:0.9.1-incubating"
pom_fingerprint="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
if ! [[ -f "$lib/.pom.fingerprint" && "$(cat "$lib/.pom.fingerprint")" == "$pom_fingerprint" ]]; then
    command -v mvn >/dev/null 2>&1 || skip "mvn not found on PATH and $lib holds no jars"
    log "fetching Flink 1.20.3, the Fluss 0.9.1 connector, tiering and Paimon plugin, paimon-bundle 1.3.1 (about 190 MB)"
    repo_args=()
    [[ -n "${PAIMON_ANCHOR_MAVEN_REPO:-}" ]] && repo_args=("-Dmaven.repo.local=$PAIMON_ANCHOR_MAVEN_REPO")
    tmp="$lib.partial"
    rm -rf "$tmp"
    if ! timeout 600 mvn -B -f "$here/pom.xml" "${repo_args[@]}" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        "-DoutputDirectory=$tmp" >"$cache/mvn.log" 2>&1; then
        grep -m 3 -E '^\[ERROR\] [^ ]' "$cache/mvn.log" >&2 || true
        skip "Maven could not fetch the jars (log: $cache/mvn.log)"
    fi
    # fluss-lake-paimon's parent POM (org.apache.fluss:fluss-lake) is not on Maven Central, so
    # Maven cannot resolve it as a dependency; `get` without transitive resolution fetches the
    # jar alone (its dependencies are all "provided" and on the class path already).
    if ! timeout 300 mvn -B "${repo_args[@]}" org.apache.maven.plugins:maven-dependency-plugin:2.8:get \
        "-Dartifact=$lake_paimon" -Dtransitive=false \
        "-Ddest=$tmp/fluss-lake-paimon-0.9.1-incubating.jar" >>"$cache/mvn.log" 2>&1; then
        grep -m 3 -E '^\[ERROR\] [^ ]' "$cache/mvn.log" >&2 || true
        skip "Maven could not fetch $lake_paimon (log: $cache/mvn.log)"
    fi
    for jar in fluss-flink-1.20-0.9.1-incubating fluss-flink-tiering-0.9.1-incubating \
        fluss-lake-paimon-0.9.1-incubating paimon-bundle-1.3.1 flink-runtime-1.20.3 \
        flink-shaded-hadoop-2-uber-2.8.3-10.0; do
        [[ -f "$tmp/$jar.jar" ]] || skip "Maven left no $jar.jar in $tmp (log: $cache/mvn.log)"
    done
    rm -rf "$lib"
    mv "$tmp" "$lib"
    echo "$pom_fingerprint" >"$lib/.pom.fingerprint"
    rm -rf "$classes"
fi
classpath="$(printf '%s:' "$lib"/*.jar)"
classpath="${classpath%:}"

# The Fluss servers load the lake plugin from FLUSS_PLUGINS_DIR/<name>/, as a Fluss
# distribution does from plugins/paimon/ (the coordinator creates the Paimon table when a
# lake-enabled table is created, and commits the lake snapshots).
mkdir -p "$plugins/paimon"
cp -u "$lib/fluss-lake-paimon-0.9.1-incubating.jar" "$lib/paimon-bundle-1.3.1.jar" \
    "$lib/flink-shaded-hadoop-2-uber-2.8.3-10.0.jar" "$plugins/paimon/"

# --- 2. compile --------------------------------------------------------------------------------
src_fingerprint="$(cat "$here"/src/main/java/dev/silt/paimonanchor/*.java | sha256sum | cut -d' ' -f1)"
if ! [[ -f "$classes/.fingerprint" && "$(cat "$classes/.fingerprint")" == "$src_fingerprint" ]]; then
    rm -rf "$classes"
    mkdir -p "$classes"
    javac -d "$classes" -cp "$classpath" "$here"/src/main/java/dev/silt/paimonanchor/*.java \
        || fail "javac failed"
    echo "$src_fingerprint" >"$classes/.fingerprint"
fi

# --- 3. measure --------------------------------------------------------------------------------
export FLUSS_REAL_WORK_DIR="$work"
export FLUSS_REAL_ZK_PORT="${PAIMON_ANCHOR_ZK_PORT:-12381}"
export FLUSS_REAL_COORDINATOR_PORT="${PAIMON_ANCHOR_COORDINATOR_PORT:-9423}"
export FLUSS_REAL_TABLET_PORT="${PAIMON_ANCHOR_TABLET_PORT:-9424}"
export FLUSS_PLUGINS_DIR="$plugins"
[[ -n "${PAIMON_ANCHOR_MAVEN_REPO:-}" ]] && export FLUSS_REAL_MAVEN_REPO="$PAIMON_ANCHOR_MAVEN_REPO"
warehouse="$work/paimon"
export FLUSS_REAL_EXTRA_CONF="datalake.format: paimon
datalake.paimon.metastore: filesystem
datalake.paimon.warehouse: $warehouse"

cluster_up=0
stop_cluster() {
    if ((cluster_up)); then
        FLUSS_REAL_KEEP_DATA=1 "$fluss_real/stop.sh" || true
        cluster_up=0
    fi
}
trap stop_cluster EXIT

results="$cache/results.tsv"
: >"$results"
rows="${PAIMON_ANCHOR_ROWS:-1000000}"
started=$SECONDS
for config in ${PAIMON_ANCHOR_CONFIGS:-default tuned}; do
    case "$config" in
        # Fluss's defaults: table.datalake.freshness 3min, tiering.poll.table.interval 30s, and
        # parallelism 1 (parallelism.default of a stock Flink cluster's config).
        default) knobs=(--parallelism 1) ;;
        tuned) knobs=(--freshness "${PAIMON_ANCHOR_TUNED_FRESHNESS:-1s}"
                      --parallelism "${PAIMON_ANCHOR_TUNED_PARALLELISM:-2}"
                      --poll-interval "${PAIMON_ANCHOR_TUNED_POLL:-100ms}")
               [[ -n "${PAIMON_ANCHOR_TUNED_ARGS:-}" ]] && knobs+=(--tiering-args "$PAIMON_ANCHOR_TUNED_ARGS") ;;
        *) fail "unknown configuration $config (default or tuned)" ;;
    esac
    log "=== $config: starting a fresh Fluss 0.9.1 cluster with the Paimon lake in $warehouse"
    # Whatever start.sh left running, even when it failed half way, stop.sh stops.
    cluster_up=1
    set +e
    bootstrap="$("$fluss_real/start.sh" | tail -n 1)"
    status=$?  # start.sh's, through pipefail
    set -e
    if ((status == EXIT_SKIP)); then skip "../start.sh skipped (see above)"; fi
    ((status == 0)) || fail "../start.sh failed ($status)"
    mkdir -p "$cache/logs/$config"
    cat >"$cache/logs/$config/log4j2.properties" <<EOF
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = Main
appender.main.name = Main
appender.main.type = File
appender.main.fileName = $cache/logs/$config/bench.log
appender.main.append = false
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{HH:mm:ss,SSS} %-5p %-40c{1.} %t - %m%n
logger.flink.name = org.apache.flink
logger.flink.level = WARN
logger.paimon.name = org.apache.paimon
logger.paimon.level = WARN
logger.netty.name = org.apache.fluss.shaded
logger.netty.level = WARN
EOF
    config_started=$SECONDS
    set +e
    timeout "${PAIMON_ANCHOR_TIMEOUT_S:-3600}" java "-Xmx${PAIMON_ANCHOR_HEAP:-1g}" -XX:+UseG1GC -Djava.net.preferIPv4Stack=true \
        "-Dlog4j.configurationFile=file:$cache/logs/$config/log4j2.properties" \
        "${FLINK_JAVA17_OPTIONS[@]}" \
        --add-opens=java.base/jdk.internal.misc=ALL-UNNAMED \
        -Dio.netty.tryReflectionSetAccessible=true \
        -cp "$classes:$classpath" dev.silt.paimonanchor.Main \
        --bootstrap "$bootstrap" --warehouse "$warehouse" --label "$config" --rows "$rows" \
        --rate "${PAIMON_ANCHOR_RATE:-100000}" --seconds "${PAIMON_ANCHOR_SECONDS:-20}" \
        --flush-ms "${PAIMON_ANCHOR_FLUSH_MS:-100}" \
        --phases "${PAIMON_ANCHOR_PHASES:-throughput,freshness}" "${knobs[@]}" \
        >"$cache/logs/$config/stdout" 2> >(tee "$cache/logs/$config/stderr" >&2)
    status=$?
    set -e
    grep '^RESULT' "$cache/logs/$config/stdout" >>"$results" || true
    echo "$((SECONDS - config_started))" >"$cache/logs/$config/seconds"
    stop_cluster
    cp -r "$work/logs" "$cache/logs/$config/cluster" 2>/dev/null || true
    ((status == 0)) || fail "the bench of $config failed ($status); logs in $cache/logs/$config"
    log "=== $config done in $((SECONDS - config_started)) s"
done

# --- 4. report ---------------------------------------------------------------------------------
field() { # $1 = line, $2 = key
    tr '\t' '\n' <<<"$1" | sed -n "s/^$2=//p"
}
echo "Apache Fluss 0.9.1 lake tiering (Flink 1.20.3 MiniCluster) into Paimon 1.3.1, $rows pre-filled rows; $((SECONDS - started)) s in all"
printf '%-8s  %12s  %8s  %9s  %17s  %10s  %9s  %12s  %7s  %7s  %7s\n' config "tier rows/s" "tier s" "submit s" "rows/s past submit" "1st snap s" "snapshots" "fresh rows/s" "p50 s" "p99 s" "max s"
for config in ${PAIMON_ANCHOR_CONFIGS:-default tuned}; do
    t="$(grep -P "^RESULT\t$config\tthroughput" "$results" || true)"
    f="$(grep -P "^RESULT\t$config\tfreshness" "$results" || true)"
    printf '%-8s  %12s  %8s  %9s  %17s  %10s  %9s  %12s  %7s  %7s  %7s\n' "$config" \
        "$(field "$t" rows_per_s)" "$(field "$t" seconds)" "$(field "$t" submit_s)" \
        "$(field "$t" rows_per_s_after_submit)" "$(field "$t" first_snapshot_s)" "$(field "$t" snapshots)" \
        "$(field "$f" achieved)" "$(field "$f" p50_s)" "$(field "$f" p99_s)" "$(field "$f" max_s)"
done
