#!/bin/sh
# Checks that a product build of `silt` carries none of the test-only fault hooks (the
# `fault-injection` feature of silt-jobs and silt-hotstore): none of their marker strings is in
# the binary, and `silt up --crash-at` is an unknown flag (a usage error, exit 2).
#
#   jobs/check-no-fault-hooks.sh                  # builds and checks target/release/silt
#   jobs/check-no-fault-hooks.sh path/to/silt     # checks that binary
#   jobs/check-no-fault-hooks.sh --expect-hooks path/to/silt
#                                                 # the reverse, for a test build's silt: all
#                                                 # markers are there (the check can see them)
set -eu

expect_hooks=false
if [ "${1:-}" = "--expect-hooks" ]; then
    expect_hooks=true
    shift
fi
silt=${1:-}
if [ -z "$silt" ]; then
    cargo build --release -p silt-jobs
    silt="${CARGO_TARGET_DIR:-target}/release/silt"
fi

# One string of each hook: the failing lake store (lake_faults.rs), the abort at a tiering commit
# (tiering/job.rs, `silt up --crash-at`), and the hot store's abort after a durable write.
markers='SILTTEST_LAKE_FAULTS
crash injected at
SILT_FAULT_ABORT_AFTER_DURABLE_WRITE'

echo "$markers" | while IFS= read -r marker; do
    echo "$(grep -a -c -F -e "$marker" "$silt" || true)  $marker"
done
found=$(echo "$markers" | while IFS= read -r m; do grep -a -q -F -e "$m" "$silt" && echo x; done | wc -l)
missing=$(($(echo "$markers" | wc -l) - found))

set +e
"$silt" up --crash-at before-commit --help >/dev/null 2>&1
crash_at=$?
set -e

if $expect_hooks; then
    if [ "$missing" -ne 0 ] || [ "$crash_at" -ne 0 ]; then
        echo "FAIL: $silt lacks fault hooks ($missing markers missing, --crash-at exit $crash_at)"
        exit 1
    fi
    echo "ok: $silt has the fault hooks"
    exit 0
fi
if [ "$found" -ne 0 ] || [ "$crash_at" -ne 2 ]; then
    echo "FAIL: $silt carries fault hooks ($found markers found, --crash-at exit $crash_at, want 2)"
    exit 1
fi
echo "ok: $silt has no fault hooks"
