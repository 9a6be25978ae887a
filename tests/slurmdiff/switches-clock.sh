#!/usr/bin/env bash
# When does real Slurm start the clock of `--switches=COUNT@MAX-TIME`? (README, "Waiting for
# the right GPUs": gsched counts from the first pass that found the job short, Slurm does
# not.) Uses the Slurm 22.05 peer in ../shared/peers/slurm with topology/tree: two leaf
# switches of two nodes each, all four nodes busy with one exclusive job each, then a
# 2-node exclusive job with --switches=1@MAX-TIME; after WAIT seconds the jobs on n2 and n3
# end, freeing one node per switch. Prints the job's state 3, 10 and 30 s later.
#
#   tests/slurmdiff/switches-clock.sh      # two cases: 1@1:00 freed after 90 s, 1@4:00 after 15 s
#
# Leaves the peer's slurm.conf as setup.sh writes it and stops its daemons.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PEER="$ROOT/../shared/peers/slurm"
R=${SLURMPEER_ROOT:-/tmp/slurmpeer}
export SLURM_CONF=$R/etc/slurm.conf

restart() {
    SLURMPEER_KEEP_MUNGE=1 bash "$PEER/teardown.sh" >/dev/null 2>&1 || true
    slurmctld -f "$SLURM_CONF"
    for i in 1 2 3 4; do slurmd -f "$SLURM_CONF" -N "n$i"; done
    for _ in $(seq 30); do
        [ "$(sinfo -h -o %t | sort -u)" = "idle" ] && return
        sleep 1
    done
    echo "switches-clock.sh: the Slurm nodes did not come back idle" >&2
    exit 1
}
cleanup() {
    sed -i '/^TopologyPlugin=topology\/tree$/d' "$SLURM_CONF" 2>/dev/null || true
    rm -f "$R/etc/topology.conf"
    bash "$PEER/teardown.sh" >/dev/null 2>&1 || true
}
trap cleanup EXIT

SLURMPEER_NODES=4 bash "$PEER/setup.sh" >/dev/null
printf 'SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4]\nSwitchName=top Switches=s[1-2]\n' \
    >"$R/etc/topology.conf"
chmod 644 "$R/etc/topology.conf"
echo "TopologyPlugin=topology/tree" >>"$SLURM_CONF"
restart

case_run() { # MAX-TIME WAIT
    scancel -u "$(id -un)" 2>/dev/null || true
    sleep 2
    local fill=()
    for i in 1 2 3 4; do
        fill+=("$(sbatch --parsable -N1 -w "n$i" --exclusive -t 30 -o /dev/null --wrap 'sleep 1000')")
    done
    sleep 1
    local j
    j=$(sbatch --parsable -N2 --exclusive --switches="1@$1" -t 10 -o /dev/null --wrap 'sleep 100')
    sleep "$2"
    scancel "${fill[1]}" "${fill[2]}"
    local prev=0
    for t in 3 10 30; do
        sleep $((t - prev))
        prev=$t
        echo "--switches=1@$1, n2 and n3 freed ${2} s after submission, +${t} s: $(squeue -h -j "$j" -o '%T %r %N')"
    done
}
case_run 1:00 90
case_run 4:00 15
scancel -u "$(id -un)" 2>/dev/null || true
