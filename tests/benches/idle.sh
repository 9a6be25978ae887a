#!/usr/bin/env bash
# Idle CPU of 3 controllers (and optional agents), with builds compared in interleaved
# rounds. Each BUILD is a directory holding gctld (and gagentd), or a commit, built like
# compare.sh does (its own worktree and target directory under $TMPDIR). Prints, per round
# and build, each controller's CPU milliseconds in every 10 s window and their sum per
# 10 s, and the Raft term before and after (a change means an election happened).
#
#   tests/benches/idle.sh 89d8b2b target/release          # an earlier commit against now
#   CTL_ARGS="--tick-ms 1000" tests/benches/idle.sh target/release   # almost no heartbeats
#   HOGS=8 SECS=60 tests/benches/idle.sh target/release   # elections under CPU starvation?
#   JOBS=100000 SECS=90 ROUNDS=1 tests/benches/idle.sh target/release  # with held jobs
#
# ROUNDS (2), SECS measured after 10 s to settle (30), AGENTS fake 8-GPU agents (0),
# JOBS held 1-GPU jobs submitted first with gsub from 8 shells (0), HOGS busy loops during
# the measurement (0), CTL_ARGS more gctld arguments. The CLI is this tree's release build.
set -euo pipefail
[ $# -gt 0 ] || { sed -n '2,15p' "$0"; exit 2; }
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ROUNDS=${ROUNDS:-2} SECS=${SECS:-30} AGENTS=${AGENTS:-0} JOBS=${JOBS:-0} HOGS=${HOGS:-0}
CLI="$ROOT/target/release"
[ -x "$CLI/gsub" ] || (cd "$ROOT" && cargo build --release --quiet -p gsched-cli)
dirs=()
for b in "$@"; do
    if [ -d "$b" ]; then
        dirs+=("$(cd "$b" && pwd)")
        continue
    fi
    tree="${TMPDIR:-/tmp}/gsched-compare-$b"
    [ -d "$tree" ] || git -C "$ROOT" worktree add -f "$tree" "$b" >/dev/null
    (cd "$tree" && CARGO_TARGET_DIR="$tree-target" cargo build --release --quiet \
        -p gsched-controller -p gsched-agent --bins)
    dirs+=("$tree-target/release")
done
ticks() { # PID...: user+system clock ticks
    local t=0 s
    for p in "$@"; do
        s=($(cut -d')' -f2 "/proc/$p/stat"))
        t=$((t + s[11] + s[12]))
    done
    echo "$t"
}
hz=$(getconf CLK_TCK)
terms() { "$CLI/gctl" status 2>/dev/null | awk 'NR > 1 {printf "%s ", $4}'; }
measure() { # BINDIR
    local bin=$1 work p0 ctl=() agt=() i
    work=$(mktemp -d)
    p0=$((20000 + RANDOM % 20000))
    local peers="1=127.0.0.1:$p0,2=127.0.0.1:$((p0 + 1)),3=127.0.0.1:$((p0 + 2))"
    # Room for JOBS held jobs of one user (the defaults are 10,000 and half of it each).
    printf '[scheduler.limits]\nmax_job_count = 1000000\n[scheduler.user_limits]\nmax_queued_jobs = 1000000\n' \
        >"$work/limits.toml"
    export GSCHED_CONTROLLERS="127.0.0.1:$p0,127.0.0.1:$((p0 + 1)),127.0.0.1:$((p0 + 2))"
    for i in 1 2 3; do
        GSCHED_LOG=warn "$bin/gctld" --dev-local --id "$i" --listen "127.0.0.1:$((p0 + i - 1))" \
            --peers "$peers" --data-dir "$work/ctl$i" --config "$work/limits.toml" ${CTL_ARGS:-} >"$work/ctl$i.log" 2>&1 &
        ctl+=($!)
    done
    sleep 3
    for i in $(seq "$AGENTS"); do
        GSCHED_LOG=warn "$bin/gagentd" --dev-local --controllers "$GSCHED_CONTROLLERS" \
            --name "n$i" --state-dir "$work/a$i" --job-root "$work/jobs$i" \
            --fake-topology "$ROOT/tests/fixtures/topo/rtx4090-8gpu-pcie-2nic-tabs.txt" \
            --kmsg "$work/kmsg$i" --cgroup-root off --min-uid 0 --training-addr 127.0.0.1 >"$work/a$i.log" 2>&1 &
        agt+=($!)
    done
    local shells=()
    for i in $(seq 8); do
        (for _ in $(seq $((JOBS / 8))); do "$CLI/gsub" -H -G 1 --wrap true >/dev/null; done) &
        shells+=($!)
    done
    wait "${shells[@]}"
    sleep 10
    local before hogs=() windows=() last now c a0 a1
    before=$(terms)
    for i in $(seq "$HOGS"); do
        timeout "$SECS" sh -c 'while :; do :; done' &
        hogs+=($!)
    done
    a0=$( ((${#agt[@]})) && ticks "${agt[@]}" || echo 0)
    last=()
    for p in "${ctl[@]}"; do last+=("$(ticks "$p")"); done
    local total=0
    for _ in $(seq $((SECS / 10))); do
        sleep 10
        local row=""
        for i in 0 1 2; do
            now=$(ticks "${ctl[$i]}")
            c=$(((now - last[i]) * 1000 / hz))
            total=$((total + c))
            row+="$c "
            last[i]=$now
        done
        windows+=("[$row]")
    done
    a1=$( ((${#agt[@]})) && ticks "${agt[@]}" || echo 0)
    ((${#hogs[@]})) && wait "${hogs[@]}" 2>/dev/null || true
    echo "$bin: controllers $((total * 10 / SECS)) CPU-ms per 10 s," \
        "agents $(((a1 - a0) * 1000 / hz * 10 / SECS)); per 10 s window ${windows[*]};" \
        "terms before [$before] after [$(terms)]"
    kill "${ctl[@]}" "${agt[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
for round in $(seq "$ROUNDS"); do
    for d in "${dirs[@]}"; do
        echo -n "round $round, "
        measure "$d"
    done
done
