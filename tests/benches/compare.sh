#!/usr/bin/env bash
# Same-sitting comparison with an earlier commit: builds REV in a worktree (its own target
# directory), then runs the HA benchmark of both trees in interleaved rounds and a
# `gqueue` and `gqueue --json` A/B (each build's client against each build's controller,
# one --dev-local controller with a 10,000-task held array). Prints everything to stdout.
# ROUNDS 0 runs only the gqueue A/B.
#
#   tests/benches/compare.sh REV [ROUNDS]      # e.g. 4738451 2
#
# GSCHED_BENCH_DISK_JOBS (default here 5000) and the other ha bench settings apply.
set -euo pipefail
REV=${1:?usage: compare.sh REV [ROUNDS]}
ROUNDS=${2:-2}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BASE="${TMPDIR:-/tmp}/gsched-compare-$REV"
BASE_TARGET="$BASE-target"
export GSCHED_BENCH_DISK_JOBS=${GSCHED_BENCH_DISK_JOBS:-5000}
[ -d "$BASE" ] || git -C "$ROOT" worktree add -f "$BASE" "$REV" >/dev/null
# Both trees run today's ha bench (it sets its own queue limits).
cp "$ROOT/tests/benches/ha.rs" "$BASE/tests/benches/ha.rs"
build() { # TREE TARGET
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo build --release --quiet --bins \
        -p gsched-controller -p gsched-agent -p gsched-cli \
        && CARGO_TARGET_DIR="$2" cargo bench --quiet -p gsched-tests --bench ha --no-run)
}
build "$BASE" "$BASE_TARGET"
build "$ROOT" "$ROOT/target"
ha() { # NAME TREE TARGET
    echo "-- $1"
    (cd "$2" && GSCHED_BIN_DIR="$3/release" CARGO_TARGET_DIR="$3" \
        cargo bench --quiet -p gsched-tests --bench ha 2>/dev/null) \
        | grep -E "committed/s|gsub|gqueue|p50"
}
for round in $(seq "$ROUNDS"); do
    ha "base $REV, round $round" "$BASE" "$BASE_TARGET"
    ha "now, round $round" "$ROOT" "$ROOT/target"
done
work=$(mktemp -d)
printf '[scheduler.limits]\nmax_array_size = 10001\nmax_job_count = 1000000\n' >"$work/cfg.toml"
printf '#!/bin/sh\ntrue\n' >"$work/s.sh"
port=17300
label() { [ "$1" = "$ROOT/target/release" ] && echo "now" || echo "$REV"; }
for ctl in "$BASE_TARGET/release" "$ROOT/target/release"; do
    port=$((port + 1))
    "$ctl/gctld" --dev-local --id 1 --listen "127.0.0.1:$port" --data-dir "$work/d$port" \
        --config "$work/cfg.toml" >"$work/ctl$port.log" 2>&1 &
    pid=$!
    sleep 1.5
    export GSCHED_CONTROLLERS="127.0.0.1:$port"
    "$ctl/gsub" --hold --array 0-9999 "$work/s.sh" >/dev/null
    for form in "" --json; do
        for client in "$BASE_TARGET/release" "$ROOT/target/release" "$BASE_TARGET/release" "$ROOT/target/release"; do
            t0=$(date +%s%N)
            for _ in 1 2 3 4 5; do "$client/gqueue" $form >/dev/null; done
            t1=$(date +%s%N)
            echo "gqueue${form:+ $form}, controller $(label "$ctl"), client $(label "$client"): $(( (t1 - t0) / 5000000 )) ms (mean of 5)"
        done
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
rm -rf "$work"
