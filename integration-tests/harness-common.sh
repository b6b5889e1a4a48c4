# Sourced by the build scripts of the Maven-built Java harnesses (java-client/build.sh,
# flink-sql/build.sh) once they have set HARNESS_NAME: how they report, skip and fail, the JDK
# they need, and the lock on their cache.

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
