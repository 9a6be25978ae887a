#!/usr/bin/env bash
# Runs the differential harness (tests/slurmdiff/diff.py: every corpus script on real
# Slurm and on gsched, one row each); builds gsched's binaries first unless GSCHED_BIN
# names them. Arguments go to diff.py (--only NAME, --table FILE, --keep, -v).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${GSCHED_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q --bins -p gsched-controller -p gsched-agent -p gsched-cli)
fi
exec python3 "$ROOT/tests/slurmdiff/diff.py" "$@"
