#!/usr/bin/env bash
# gacct and greport against a controller whose archive holds GSCHED_ARCHIVE_JOBS
# (1,000,000) jobs: writes the archive with the archive benchmark into a fresh data
# directory, starts a release gctld --dev-local on it (no agents), and times one user's
# month, the whole month (paged over gRPC) and the month's report, then the controller's
# RSS. The month is the benchmark's seventh (2026-06-30 to 2026-07-30, UTC).
#
#   tests/benches/archive-e2e.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
DATA=$(mktemp -d); chmod 700 "$DATA"
trap 'kill $(cat "$DATA/pid" 2>/dev/null) 2>/dev/null; rm -rf "$DATA"' EXIT
GSCHED_ARCHIVE_DIR="$DATA" cargo bench --quiet -p gsched-archive --bench archive | grep '^archive: [0-9]* jobs written'
cargo build --release --quiet -p gsched-controller -p gsched-cli
B="$ROOT/target/release"
PORT=$((40000 + RANDOM % 10000))
"$B/gctld" --id 1 --listen 127.0.0.1:$PORT --peers 1=127.0.0.1:$PORT --data-dir "$DATA" --dev-local >"$DATA/gctld.log" 2>&1 &
echo $! >"$DATA/pid"
export GSCHED_CONTROLLERS=127.0.0.1:$PORT TZ=UTC
for _ in $(seq 50); do "$B/gctl" status >/dev/null 2>&1 && break; sleep 0.2; done
MONTH=(-S 2026-06-30T00:00 -E 2026-07-30T00:00)
timed() { # LABEL COMMAND...: milliseconds and output lines
    local label=$1 t0 n; shift
    t0=$(date +%s%N); n=$("$@" | wc -l)
    echo "$label: $(( ($(date +%s%N) - t0) / 1000000 )) ms, $n lines"
}
for i in 1 2 3; do timed "gacct one user's month ($i)" "$B/gacct" -u user03 "${MONTH[@]}" -X -n -P -o JobID; done
for i in 1 2; do timed "gacct the whole month ($i)" "$B/gacct" "${MONTH[@]}" -X -n -P -o JobID,User,State; done
timed "greport the month" "$B/greport" "${MONTH[@]}"
echo "gctld RSS after the queries: $(( $(ps -o rss= -p "$(cat "$DATA/pid")") / 1024 )) MiB"
