#!/usr/bin/env bash
# Starts a real single-node Apache Fluss cluster (ZooKeeper + CoordinatorServer + TabletServer)
# on loopback, from jars fetched from Maven Central, and prints its bootstrap address as the
# last line of stdout. Progress and errors go to stderr.
#
# Exit codes: 0 started (or already running), 1 failed, 77 skipped (java or mvn missing, or
# the jars could not be fetched). 77 is the conventional "skipped" code of automake and meson.
#
# Environment (all optional):
#   FLUSS_REAL_CACHE_DIR        jars are collected here (default: <this dir>/.cache)
#   FLUSS_REAL_WORK_DIR         config, data, logs and pid files (default: <cache>/run)
#   FLUSS_REAL_ZK_PORT          ZooKeeper client port      (default 12181)
#   FLUSS_REAL_COORDINATOR_PORT coordinator = bootstrap    (default 9223)
#   FLUSS_REAL_TABLET_PORT      tablet server              (default 9224; tablet server i of
#                               several listens on this + 10 * i)
#   FLUSS_REAL_TABLETS          tablet servers, ids 0.. (default 1); default.replication.factor
#                               is the smaller of this and 3
#   FLUSS_REAL_START_TIMEOUT_S  how long to wait for readiness (default 120)
#   FLUSS_REAL_HEAP             -Xmx of each JVM (default 1g)
#   FLUSS_REAL_MAVEN_REPO       -Dmaven.repo.local for the fetch (default: Maven's own)
#   FLUSS_REAL_EXTRA_CONF       extra server.yaml lines for both servers, e.g.
#                               "log.flush.interval-messages: 1" (fsync every batch)
#   FLUSS_REAL_SASL_USERS       "user:password ..." opens a second listener on each server with
#                               SASL/PLAIN for these users, as Fluss's own test cluster does (the
#                               plaintext one stays); its ports are FLUSS_REAL_COORDINATOR_SASL_PORT
#                               (default 9225) and FLUSS_REAL_TABLET_SASL_PORT (default 9226), and
#                               stdout's second-last line is the SASL bootstrap address
#
# `start.sh --restart-tablet [I]` instead stops the running cluster's tablet server I (default 0;
# SIGTERM, a clean shutdown) and starts it again over the same data; `--crash-tablet [I]` does
# the same with SIGKILL. Both print the bootstrap address as usual once the tablet server
# registered again. `--kill-tablet I` only kills it (SIGKILL); `--start-tablet I` starts it
# again.
set -euo pipefail
mode="${1:-start}"

readonly EXIT_SKIP=77
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_dir="${FLUSS_REAL_CACHE_DIR:-$here/.cache}"
work_dir="${FLUSS_REAL_WORK_DIR:-$cache_dir/run}"
zk_port="${FLUSS_REAL_ZK_PORT:-12181}"
coordinator_port="${FLUSS_REAL_COORDINATOR_PORT:-9223}"
tablet_port="${FLUSS_REAL_TABLET_PORT:-9224}"
tablets="${FLUSS_REAL_TABLETS:-1}"
start_timeout_s="${FLUSS_REAL_START_TIMEOUT_S:-120}"
heap="${FLUSS_REAL_HEAP:-1g}"
sasl_users="${FLUSS_REAL_SASL_USERS:-}"
coordinator_sasl_port="${FLUSS_REAL_COORDINATOR_SASL_PORT:-9225}"
tablet_sasl_port="${FLUSS_REAL_TABLET_SASL_PORT:-9226}"
lib_dir="$cache_dir/lib"
readonly host=127.0.0.1

log() { echo "fluss-real: $*" >&2; }

# Tablet server i: its name (pid, log and conf files), plaintext port and SASL port. The first
# keeps the names of a one-node cluster.
tablet_name() { if (( $1 == 0 )); then echo tablet; else echo "tablet-$1"; fi; }
tablet_port_of() { echo $(( tablet_port + 10 * $1 )); }
tablet_sasl_port_of() { echo $(( tablet_sasl_port + 10 * $1 )); }
skip() { echo "SKIPPED: fluss-real: $*" >&2; exit "$EXIT_SKIP"; }
fail() { echo "fluss-real: error: $*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null; }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

command -v java >/dev/null 2>&1 || skip "java not found on PATH (Java 17 runs Fluss 0.9)"

# --- 1. jars ----------------------------------------------------------------------------
fetch_jars() {
    command -v mvn >/dev/null 2>&1 || skip "mvn not found on PATH and $lib_dir holds no jars"
    log "fetching jars from Maven Central into $lib_dir (first run: about 90 MB)"
    local repo_args=()
    [[ -n "${FLUSS_REAL_MAVEN_REPO:-}" ]] && repo_args=("-Dmaven.repo.local=$FLUSS_REAL_MAVEN_REPO")
    local tmp="$lib_dir.partial"
    rm -rf "$tmp"
    mkdir -p "$cache_dir"
    if ! mvn -B -q -f "$here/pom.xml" "${repo_args[@]}" \
        dependency:copy-dependencies -DoutputDirectory="$tmp" >"$cache_dir/mvn.log" 2>&1; then
        tail -n 20 "$cache_dir/mvn.log" >&2 || true
        skip "could not fetch the Fluss jars with Maven (log: $cache_dir/mvn.log)"
    fi
    rm -rf "$lib_dir"
    mv "$tmp" "$lib_dir"
}
compgen -G "$lib_dir/fluss-server-*.jar" >/dev/null || fetch_jars
classpath="$(printf '%s:' "$lib_dir"/*.jar)"
classpath="${classpath%:}"

# --- 2. already running? ----------------------------------------------------------------
target="${2:-0}"
[[ "$target" =~ ^[0-9]+$ ]] || fail "tablet server ${target} is not a number"
target_name="$(tablet_name "$target")"
case "$mode" in
    start|--start-tablet) ;;
    --restart-tablet|--crash-tablet|--kill-tablet)
        signal=TERM
        [[ "$mode" != "--restart-tablet" ]] && signal=KILL
        pid_alive "$work_dir/$target_name.pid" || fail "no tablet server $target of $work_dir is running"
        kill "-$signal" "$(cat "$work_dir/$target_name.pid")"
        while pid_alive "$work_dir/$target_name.pid"; do sleep 0.1; done
        log "stopped tablet server $target (SIG$signal)"
        if [[ "$mode" == "--kill-tablet" ]]; then exit 0; fi
        ;;
    *) fail "unknown argument $mode (use no argument, --restart-tablet, --crash-tablet, --kill-tablet or --start-tablet)" ;;
esac
if [[ "$mode" == "start" ]] && pid_alive "$work_dir/zk.pid" && pid_alive "$work_dir/coordinator.pid" \
    && pid_alive "$work_dir/tablet.pid" && port_open "$coordinator_port"; then
    log "already running from $work_dir"
    echo "$host:$coordinator_port"
    exit 0
fi
[[ "$mode" == "start" ]] && for pid_file in "$work_dir"/{zk,coordinator,tablet}.pid "$work_dir"/tablet-*.pid; do
    pid_alive "$pid_file" && fail "a part of a cluster from $work_dir is still running; run stop.sh first"
done
ports=("$zk_port" "$coordinator_port")
[[ -n "$sasl_users" ]] && ports+=("$coordinator_sasl_port")
for (( i = 0; i < tablets; i++ )); do
    ports+=("$(tablet_port_of "$i")")
    [[ -n "$sasl_users" ]] && ports+=("$(tablet_sasl_port_of "$i")")
done
[[ "$mode" == "start" ]] && for port in "${ports[@]}"; do
    port_open "$port" && fail "port $host:$port is in use; set FLUSS_REAL_*_PORT or stop what holds it"
done

# --- 3. config --------------------------------------------------------------------------
if [[ "$mode" == "start" ]]; then
# A fresh cluster every start: data, logs and ZooKeeper state from an earlier run are wiped.
rm -rf "$work_dir"
mkdir -p "$work_dir"/{conf/coordinator,zk-data,coordinator-data,remote-data,logs}

cat >"$work_dir/conf/zoo.cfg" <<EOF
dataDir=$work_dir/zk-data
clientPort=$zk_port
clientPortAddress=$host
tickTime=2000
maxClientCnxns=100
admin.enableServer=false
4lw.commands.whitelist=ruok,stat
EOF

# The listeners: FLUSS (plaintext, also the servers' internal one), and with SASL users a
# CLIENT listener that speaks SASL/PLAIN.
listeners_yaml() { # $1 = plaintext port, $2 = SASL port
    if [[ -z "$sasl_users" ]]; then
        echo "bind.listeners: FLUSS://$host:$1"
        return
    fi
    local users="" entry
    for entry in $sasl_users; do
        users+=" user_${entry%%:*}=\"${entry#*:}\""
    done
    echo "bind.listeners: FLUSS://$host:$1, CLIENT://$host:$2"
    echo "internal.listener.name: FLUSS"
    echo "security.protocol.map: CLIENT:sasl"
    echo "security.sasl.enabled.mechanisms: plain"
    echo "security.sasl.plain.jaas.config: org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required$users;"
}

write_server_yaml() { # $1 = role dir, $2 = listener port, $3 = data dir, $4 = extra lines, $5 = SASL port
    mkdir -p "$work_dir/conf/$1" "$3"
    cat >"$work_dir/conf/$1/server.yaml" <<EOF
zookeeper.address: $host:$zk_port
zookeeper.path.root: /fluss
$(listeners_yaml "$2" "$5")
data.dir: $3
remote.data.dir: $work_dir/remote-data
default.bucket.number: 1
default.replication.factor: $(( tablets < 3 ? tablets : 3 ))
$4
${FLUSS_REAL_EXTRA_CONF:-}
EOF
    cp "$work_dir/conf/log4j2.properties" "$work_dir/conf/$1/log4j2.properties"
}

cat >"$work_dir/conf/log4j2.properties" <<'EOF'
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
logger.zookeeper.name = org.apache.fluss.shaded.zookeeper3
logger.zookeeper.level = WARN
logger.curator.name = org.apache.fluss.shaded.curator5
logger.curator.level = WARN
EOF
write_server_yaml coordinator "$coordinator_port" "$work_dir/coordinator-data" "" "$coordinator_sasl_port"
for (( i = 0; i < tablets; i++ )); do
    name="$(tablet_name "$i")"
    write_server_yaml "$name" "$(tablet_port_of "$i")" "$work_dir/$name-data" \
        "tablet-server.id: $i" "$(tablet_sasl_port_of "$i")"
done
fi

# Arrow and Netty reach into java.nio; Fluss's own launcher passes the same opens.
jvm_opts=(
    "-Xmx$heap" "-Xms256m" "-XX:+UseG1GC" "-Djava.net.preferIPv4Stack=true"
    "--add-opens=java.base/java.lang=ALL-UNNAMED"
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED"
    "--add-opens=java.base/java.util=ALL-UNNAMED"
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED"
    "--add-opens=java.base/java.nio=ALL-UNNAMED"
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED"
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED"
    "-Dio.netty.tryReflectionSetAccessible=true"
)

launch() { # $1 = name, $2.. = main class and arguments
    local name="$1"; shift
    local log_file="$work_dir/logs/$name.log"
    # setsid + redirected stdio: the JVM outlives this script and holds no pipe of its caller.
    setsid java "${jvm_opts[@]}" \
        "-Dlog.file=$log_file" \
        "-Dlog4j.configurationFile=file:$work_dir/conf/log4j2.properties" \
        -cp "$classpath" "$@" </dev/null >"$work_dir/logs/$name.out" 2>&1 &
    echo $! >"$work_dir/$name.pid"
}

wait_port() { # $1 = name, $2 = port, $3 = deadline (epoch s)
    while ! port_open "$2"; do
        pid_alive "$work_dir/$1.pid" || {
            tail -n 30 "$work_dir/logs/$1.out" "$work_dir/logs/$1.log" >&2 2>/dev/null || true
            fail "$1 exited during start-up (logs in $work_dir/logs)"
        }
        (( $(date +%s) < $3 )) || fail "$1 did not listen on $host:$2 within ${start_timeout_s}s (logs in $work_dir/logs)"
        sleep 0.2
    done
}

# --- 4. start ---------------------------------------------------------------------------
started_ms=$(date +%s%3N)
deadline=$(( $(date +%s) + start_timeout_s ))
if [[ "$mode" != "start" ]]; then
    pid_alive "$work_dir/$target_name.pid" && fail "tablet server $target of $work_dir is running"
    [[ -d "$work_dir/conf/$target_name" ]] || fail "this cluster has no tablet server $target"
    log_file="$work_dir/logs/$target_name.log"
    registrations="$(grep -c "Registered tablet server" "$log_file" 2>/dev/null || true)"
    mv "$log_file" "$work_dir/logs/$target_name-before-restart-$(date +%s%3N).log" 2>/dev/null || true
    port="$(tablet_port_of "$target")"
    log "starting tablet server $target again on $host:$port"
    launch "$target_name" org.apache.fluss.server.tablet.TabletServer --configDir "$work_dir/conf/$target_name"
    wait_port "$target_name" "$port" "$deadline"
    until grep -q "Registered tablet server" "$log_file" 2>/dev/null; do
        (( $(date +%s) < deadline )) || fail "the restarted tablet server did not register within ${start_timeout_s}s"
        sleep 0.2
    done
    log "tablet server $target back in $(( $(date +%s%3N) - started_ms )) ms (was registered ${registrations:-0} time(s))"
    echo "$host:$coordinator_port"
    exit 0
fi
log "starting ZooKeeper on $host:$zk_port"
launch zk org.apache.fluss.shaded.zookeeper3.org.apache.zookeeper.server.ZooKeeperServerMain \
    "$work_dir/conf/zoo.cfg"
wait_port zk "$zk_port" "$deadline"

log "starting CoordinatorServer on $host:$coordinator_port"
launch coordinator org.apache.fluss.server.coordinator.CoordinatorServer \
    --configDir "$work_dir/conf/coordinator"
for (( i = 0; i < tablets; i++ )); do
    log "starting TabletServer $i on $host:$(tablet_port_of "$i")"
    launch "$(tablet_name "$i")" org.apache.fluss.server.tablet.TabletServer \
        --configDir "$work_dir/conf/$(tablet_name "$i")"
done
wait_port coordinator "$coordinator_port" "$deadline"
for (( i = 0; i < tablets; i++ )); do
    wait_port "$(tablet_name "$i")" "$(tablet_port_of "$i")" "$deadline"
done

# The coordinator accepts connections before it knows the tablet servers; a table can only be
# created once they have registered in ZooKeeper and the coordinator has loaded them.
registered() {
    local i
    for (( i = 0; i < tablets; i++ )); do
        grep -q "Registered tablet server" "$work_dir/logs/$(tablet_name "$i").log" 2>/dev/null || return 1
    done
    grep -qE "CHILD_ADDED event for server|Load tablet servers success" \
        "$work_dir/logs/coordinator.log" 2>/dev/null
}
until registered; do
    (( $(date +%s) < deadline )) || fail "the tablet servers did not register within ${start_timeout_s}s (logs in $work_dir/logs)"
    sleep 0.2
done

elapsed_ms=$(( $(date +%s%3N) - started_ms ))
echo "$elapsed_ms" >"$work_dir/start_ms"
log "ready in ${elapsed_ms} ms; data and logs in $work_dir; stop with $here/stop.sh"
[[ -n "$sasl_users" ]] && echo "$host:$coordinator_sasl_port"
echo "$host:$coordinator_port"
