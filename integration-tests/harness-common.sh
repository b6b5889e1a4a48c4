# Sourced by the build and run scripts of the Maven-built Java harnesses (java-client/,
# flink-sql/, fluss-real/paimon-anchor/) once they have set HARNESS_NAME (and, to fetch, HARNESS_ENV): how they report,
# skip and fail, the JDK they need, the lock on their cache, the Maven fetch of their jars, the
# compile of their sources and the JVM that runs them.

# The exit code that means "skipped": the tests print the reason from the SKIPPED: line.
readonly EXIT_SKIP=77

log() { echo "$HARNESS_NAME: $*" >&2; }
skip() { echo "SKIPPED: $HARNESS_NAME: $*" >&2; exit "$EXIT_SKIP"; }
fail() { echo "$HARNESS_NAME: error: $*" >&2; exit 1; }

# require_jdk <what Java 17 runs>: skips unless java and javac are on PATH.
require_jdk() {
    command -v java >/dev/null 2>&1 || skip "java not found on PATH (Java 17 runs $1)"
    command -v javac >/dev/null 2>&1 || skip "javac not found on PATH (a JDK 17 is needed, not only a JRE)"
}

# lock_cache <dir>: creates <dir> and holds its lock (file descriptor 9) until the script
# exits. Two test binaries (or a test and a person) building at once must not interleave.
lock_cache() {
    mkdir -p "$1"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$1/.lock"
        flock 9
    fi
}

# require_args <least> <given> <usage>: exits 2 (a usage error) showing <usage> unless the
# script was given at least <least> arguments.
require_args() {
    if (($2 < $1)); then
        echo "usage: $3" >&2
        exit 2
    fi
}

# fetch_jars <lib> <mvn log> <jar> <what> <size> [mvn argument...]: fills <lib> with what the
# harness's pom.xml depends on and checks that a file matching <jar> came. <what> names the
# jars in messages, <size> is about how much a fetch downloads. The harness's variables are
# read under its prefix HARNESS_ENV: <prefix>_OFFLINE=1 skips rather than go online,
# <prefix>_MAVEN_REPO is Maven's local repository, and the fetch is bounded by
# $fetch_timeout_s (<prefix>_FETCH_TIMEOUT_S). Where the harness sets $fetch_failed (a file), a
# failed fetch is noted there and not tried again for 15 minutes.
fetch_jars() {
    local lib="$1" mvn_log="$2" jar="$3" what="$4" size="$5"
    shift 5
    command -v mvn >/dev/null 2>&1 || skip "mvn not found on PATH and $lib holds no jars"
    local tmp="$lib.partial" offline="${HARNESS_ENV}_OFFLINE" repo="${HARNESS_ENV}_MAVEN_REPO"
    local args=(-B -f "$here/pom.xml" "$@"
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies
        "-DoutputDirectory=$tmp")
    [[ -n "${!repo:-}" ]] && args+=("-Dmaven.repo.local=${!repo}")
    rm -rf "$tmp"
    # Offline first: when Maven's repository already holds the jars this takes seconds and no
    # network at all.
    if ! mvn -o "${args[@]}" >"$mvn_log" 2>&1; then
        [[ "${!offline:-0}" == 1 ]] \
            && skip "$what is not cached and $offline=1 (log: $mvn_log)"
        [[ -n "${fetch_failed:-}" && -n "$(find "$fetch_failed" -mmin -15 2>/dev/null)" ]] \
            && skip "Maven could not fetch $what less than 15 minutes ago ($(cat "$fetch_failed"); delete $fetch_failed to retry)"
        log "fetching $what from Maven Central (about $size; at most ${fetch_timeout_s}s)"
        local started=$SECONDS status=0
        timeout "$fetch_timeout_s" mvn "${args[@]}" >"$mvn_log" 2>&1 || status=$?
        if ((status != 0)) && [[ -n "${fetch_failed:-}" ]]; then
            echo "exit $status at $(date -u +%FT%TZ), log: $mvn_log" >"$fetch_failed"
        fi
        if ((status == 124)); then
            skip "Maven did not fetch $what within ${fetch_timeout_s}s (${HARNESS_ENV}_FETCH_TIMEOUT_S; log: $mvn_log)"
        elif ((status != 0)); then
            grep -m 3 -E '^\[ERROR\] [^ ]' "$mvn_log" >&2 || true
            skip "Maven could not fetch $what (exit $status; log: $mvn_log)"
        fi
        [[ -n "${fetch_failed:-}" ]] && rm -f "$fetch_failed"
        log "fetched $what in $((SECONDS - started))s"
    fi
    compgen -G "$tmp/$jar" >/dev/null \
        || fail "Maven succeeded but left no $jar in $tmp (log: $mvn_log)"
    rm -rf "$lib"
    mv "$tmp" "$lib"
}

# compile_classes <out> <lib> <what> [javac option...]: compiles src/main/java into
# <out>/classes against the jars in <lib> (<what>, for messages), unless the classes there were
# compiled from the same sources and jars.
compile_classes() {
    local out="$1" lib="$2" what="$3"
    shift 3
    local sources
    mapfile -t sources < <(find "$here/src/main/java" -name '*.java' | sort)
    # What the classes depend on: every source file and the jars compiled against.
    local fingerprint
    fingerprint="$( (cat "${sources[@]}"; ls -l "$lib") | sha256sum | cut -d' ' -f1)"
    [[ -f "$out/classes.fingerprint" && "$(cat "$out/classes.fingerprint")" == "$fingerprint" ]] \
        && return 0
    rm -rf "$out/classes" "$out/classes.fingerprint"
    javac --release 17 -encoding UTF-8 -Werror "$@" -d "$out/classes" -cp "$lib/*" \
        "${sources[@]}" || fail "javac failed against $what"
    echo "$fingerprint" >"$out/classes.fingerprint"
    log "compiled against $what"
}

# What Flink opens on Java 17 (its config.yaml's env.java.opts.all), for the JVMs that run it.
FLINK_JAVA17_OPTIONS=(
    --add-exports=java.base/sun.net.util=ALL-UNNAMED
    --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
    --add-exports=jdk.compiler/com.sun.tools.javac.api=ALL-UNNAMED
    --add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
    --add-exports=jdk.compiler/com.sun.tools.javac.parser=ALL-UNNAMED
    --add-exports=jdk.compiler/com.sun.tools.javac.tree=ALL-UNNAMED
    --add-exports=jdk.compiler/com.sun.tools.javac.util=ALL-UNNAMED
    --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
    --add-opens=java.base/java.lang=ALL-UNNAMED
    --add-opens=java.base/java.net=ALL-UNNAMED
    --add-opens=java.base/java.io=ALL-UNNAMED
    --add-opens=java.base/java.nio=ALL-UNNAMED
    --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
    --add-opens=java.base/java.text=ALL-UNNAMED
    --add-opens=java.base/java.time=ALL-UNNAMED
    --add-opens=java.base/java.util=ALL-UNNAMED
    --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
    --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
    --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
)

# exec_jvm <out> <heap> <main class> [JVM option...] -- [argument...]: replaces this shell
# with a JVM running <main class> from <out>/classes and <out>/lib. C1 only
# (TieredStopAtLevel=1): these runs are short, and full JIT costs more than it saves on two
# cores.
exec_jvm() {
    local out="$1" heap="$2" main="$3"
    shift 3
    local options=()
    while [[ $# -gt 0 && "$1" != -- ]]; do
        options+=("$1")
        shift
    done
    [[ "${1:-}" == -- ]] || fail "exec_jvm: no -- before the program's arguments"
    shift
    exec java "-Xmx$heap" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "${options[@]}" \
        -Dio.netty.tryReflectionSetAccessible=true \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
        -Dorg.slf4j.simpleLogger.log.org.apache.fluss.client.token=error \
        -cp "$out/classes:$out/lib/*" "$main" "$@"
}
