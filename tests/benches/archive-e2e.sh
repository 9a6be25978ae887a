#!/usr/bin/env bash
# gacct and greport against a controller whose archive holds GSCHED_ARCHIVE_JOBS
# (1,000,000) jobs: writes the archive with the archive benchmark into a fresh data
# directory (or uses ARCHIVE_DIR, written by an earlier run), starts a release gctld
# --dev-local on it (no agents), and times one user's month, the whole month (paged over
# gRPC) and the month's report, then the controller's RSS. The month is the benchmark's
# seventh (2026-06-30 to 2026-07-30, UTC). With BASE_BIN set to another build's binaries
# (gctld, gctl, gacct, greport), the same steps run for that build and this tree's in
# turn, ROUNDS (2) times, on the same archive.
#
#   tests/benches/archive-e2e.sh
#   BASE_BIN=/path/to/old/release ARCHIVE_DIR=/path/to/data tests/benches/archive-e2e.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
DATA=${ARCHIVE_DIR:-}
if [ -z "$DATA" ]; then
    DATA=$(mktemp -d); chmod 700 "$DATA"
    trap 'kill $(cat "$DATA/pid" 2>/dev/null) 2>/dev/null; rm -rf "$DATA"' EXIT
    GSCHED_ARCHIVE_DIR="$DATA" cargo bench --quiet -p gsched-archive --bench archive | grep '^archive: [0-9]* jobs written'
else
    trap 'kill $(cat "$DATA/pid" 2>/dev/null) 2>/dev/null' EXIT
fi
cargo build --release --quiet -p gsched-controller -p gsched-cli
export TZ=UTC
MONTH=(-S 2026-06-30T00:00 -E 2026-07-30T00:00)
timed() { # LABEL COMMAND...: milliseconds and output lines
    local label=$1 t0 n; shift
    t0=$(date +%s%N); n=$("$@" | wc -l)
    echo "$label: $(( ($(date +%s%N) - t0) / 1000000 )) ms, $n lines"
}
measure() { # NAME BIN_DIR OUTPUT
    local name=$1 B=$2 out=$3 PORT
    PORT=$((40000 + RANDOM % 10000))
    "$B/gctld" --id 1 --listen 127.0.0.1:$PORT --peers 1=127.0.0.1:$PORT --data-dir "$DATA" --dev-local >"$DATA/gctld.log" 2>&1 &
    echo $! >"$DATA/pid"
    export GSCHED_CONTROLLERS=127.0.0.1:$PORT
    for _ in $(seq 50); do "$B/gctl" status >/dev/null 2>&1 && break; sleep 0.2; done
    echo "== $name"
    for i in 1 2 3; do timed "gacct one user's month ($i)" "$B/gacct" -u user03 "${MONTH[@]}" -X -n -P -o JobID; done
    for i in 1 2; do timed "gacct the whole month ($i)" "$B/gacct" "${MONTH[@]}" -X -n -P -o JobID,User,State; done
    timed "greport the month" "$B/greport" "${MONTH[@]}"
    echo "gctld RSS after the queries: $(( $(ps -o rss= -p "$(cat "$DATA/pid")") / 1024 )) MiB"
    "$B/gacct" "${MONTH[@]}" -X -P -o JobID,User,Account,State,Start,End,Elapsed,ExitCode >"$out"
    kill "$(cat "$DATA/pid")"; wait "$(cat "$DATA/pid")" 2>/dev/null || true
}
if [ -n "${BASE_BIN:-}" ]; then
    for r in $(seq "${ROUNDS:-2}"); do
        measure "baseline ($BASE_BIN), round $r" "$BASE_BIN" "$DATA/out-base.txt"
        measure "this tree, round $r" "$TARGET/release" "$DATA/out-this.txt"
        cmp -s "$DATA/out-base.txt" "$DATA/out-this.txt" && echo "gacct output identical ($(wc -l <"$DATA/out-this.txt") lines)" || echo "gacct OUTPUT DIFFERS"
    done
else
    measure "this tree" "$TARGET/release" /dev/null
fi
