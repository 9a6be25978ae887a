#!/usr/bin/env bash
# The quick start: build, start a local 3-controller / 2-node cluster with fake 8-GPU
# nodes, run `gsub -N 2 --gpus-per-node 8 examples/train.sh` to completion, and show the
# queue, the nodes and the job's output. The cluster keeps running afterwards
# (`deploy/local/cluster.sh down` stops it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
"$ROOT/deploy/local/cluster.sh" up
eval "$("$ROOT/deploy/local/cluster.sh" env)"
cd "$ROOT/examples"
echo
echo "\$ gsub -N 2 --gpus-per-node 8 examples/train.sh"
JOB=$(gsub --parsable -N 2 --gpus-per-node 8 train.sh)
echo "Submitted job $JOB"
echo
echo "\$ gqueue"
gqueue
for _ in $(seq 1 600); do
    STATE=$(gqueue -t all --json -j "$JOB" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["state"] if j else "GONE")')
    case "$STATE" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|GONE) break ;; esac
    sleep 0.5
done
echo
echo "\$ gqueue -t all"
gqueue -t all
echo
echo "\$ ginfo"
ginfo
echo
echo "\$ cat examples/gsched-$JOB.out"
cat "gsched-$JOB.out"
echo
echo "\$ gacct -j $JOB"
gacct -j "$JOB"
echo
echo "\$ gctl status"
gctl status
[ "$STATE" = COMPLETED ] || { echo "job $JOB ended $STATE" >&2; exit 1; }
echo
echo "The cluster is still running: eval \"\$(deploy/local/cluster.sh env)\" to use it, deploy/local/cluster.sh down to stop it."
