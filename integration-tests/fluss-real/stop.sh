#!/usr/bin/env bash
# Stops the cluster that start.sh started from the same work dir: TERM, a bounded wait, then
# KILL. Only the process ids recorded in the work dir are signalled, and only while their
# command line still names that work dir (a recycled pid is left alone).
#
# Exit codes: 0 stopped or nothing running, 1 a process survived KILL.
# Environment: FLUSS_REAL_CACHE_DIR, FLUSS_REAL_WORK_DIR as for start.sh;
#   FLUSS_REAL_STOP_TIMEOUT_S (default 20) before KILL; FLUSS_REAL_KEEP_DATA=1 keeps the work dir.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_dir="${FLUSS_REAL_CACHE_DIR:-$here/.cache}"
work_dir="${FLUSS_REAL_WORK_DIR:-$cache_dir/run}"
stop_timeout_s="${FLUSS_REAL_STOP_TIMEOUT_S:-20}"

log() { echo "fluss-real: $*" >&2; }

ours() { # $1 = pid: alive and started from this work dir
    [[ -r "/proc/$1/cmdline" ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF "$work_dir"
}

status=0
# Tablet first, ZooKeeper last, so the servers can deregister cleanly.
shopt -s nullglob
for pid_file in "$work_dir"/tablet-*.pid "$work_dir"/{tablet,coordinator,zk}.pid; do
    name="$(basename "$pid_file" .pid)"
    [[ -f "$pid_file" ]] || continue
    pid="$(cat "$pid_file")"
    if ours "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        for (( i = 0; i < stop_timeout_s * 10; i++ )); do
            ours "$pid" || break
            sleep 0.1
        done
        if ours "$pid"; then
            log "$name ($pid) ignored TERM for ${stop_timeout_s}s; sending KILL"
            kill -KILL "$pid" 2>/dev/null
            sleep 0.5
            ours "$pid" && { log "$name ($pid) survived KILL"; status=1; }
        fi
        log "stopped $name ($pid)"
    fi
    rm -f "$pid_file"
done

if [[ "$status" == 0 && "${FLUSS_REAL_KEEP_DATA:-0}" != 1 ]]; then
    rm -rf "$work_dir"/{zk-data,coordinator-data,remote-data} "$work_dir"/tablet*-data
fi
exit "$status"
