#!/usr/bin/env bash
# The scheduler pass of an earlier commit against this tree's, in one sitting: builds gsim
# at REV in a worktree (its own target directory) and runs `gsim bench-pass` of the two
# alternately, ROUNDS times each (FIFO+backfill skipped; it is the same code in both).
#
#   tests/benches/compare-pass.sh REV [ROUNDS]      # e.g. 0cc3536 3
set -euo pipefail
REV=${1:?usage: compare-pass.sh REV [ROUNDS]}
ROUNDS=${2:-3}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BASE="${TMPDIR:-/tmp}/gsched-compare-$REV"
[ -d "$BASE" ] || git -C "$ROOT" worktree add -f "$BASE" "$REV" >/dev/null
(cd "$BASE" && CARGO_TARGET_DIR="$BASE-target" cargo build --release --quiet -p gsched-sim)
(cd "$ROOT" && cargo build --release --quiet -p gsched-sim)
for round in $(seq "$ROUNDS"); do
    for build in "$REV:$BASE-target" "now:$ROOT/target"; do
        line=$(GSIM_SKIP_BASELINE=1 "${build#*:}/release/gsim" bench-pass | tail -1)
        echo "round $round, ${build%%:*}: $(echo "$line" | grep -oE 'p50 [0-9.]+ ms \(min [0-9.]+, max [0-9.]+\), [0-9]+ starts')"
    done
done
