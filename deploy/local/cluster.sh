#!/usr/bin/env bash
# A local gsched cluster on 127.0.0.1: 3 controllers (one Raft group, sled storage) and
# 2 node agents with fake 8-GPU topologies, everything under ./.gsched.
#
#   deploy/local/cluster.sh up      build (if needed) and start it
#   deploy/local/cluster.sh down    stop every process and keep the state
#   deploy/local/cluster.sh clean   stop and delete ./.gsched (and examples/gsched-*.out)
#   deploy/local/cluster.sh env     print the export line for the CLI tools
#
# Settings: GSCHED_HOME (./.gsched), GSCHED_BASE_PORT (16800), GSCHED_TOPOLOGY
# (deploy/local/topologies/rtx4090-8gpu.json), GSCHED_PROFILE (debug|release).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOME_DIR="${GSCHED_HOME:-$ROOT/.gsched}"
BASE="${GSCHED_BASE_PORT:-16800}"
TOPO="${GSCHED_TOPOLOGY:-$ROOT/deploy/local/topologies/rtx4090-8gpu.json}"
PROFILE="${GSCHED_PROFILE:-debug}"
BIN="$ROOT/target/$PROFILE"
CONTROLLERS="127.0.0.1:$((BASE+1)),127.0.0.1:$((BASE+2)),127.0.0.1:$((BASE+3))"
PEERS="1=127.0.0.1:$((BASE+1)),2=127.0.0.1:$((BASE+2)),3=127.0.0.1:$((BASE+3))"

build() {
    local flag=""
    [ "$PROFILE" = release ] && flag="--release"
    (cd "$ROOT" && cargo build $flag --bins -p gsched-controller -p gsched-agent -p gsched-cli)
}

start() {
    mkdir -p "$HOME_DIR/log"
    for id in 1 2 3; do
        if [ -f "$HOME_DIR/gctld$id.pid" ] && kill -0 "$(cat "$HOME_DIR/gctld$id.pid")" 2>/dev/null; then continue; fi
        "$BIN/gctld" --dev-local --id "$id" --listen "127.0.0.1:$((BASE+id))" --peers "$PEERS" \
            --data-dir "$HOME_DIR/controller$id" >>"$HOME_DIR/log/gctld$id.log" 2>&1 &
        echo $! >"$HOME_DIR/gctld$id.pid"
    done
    # Slurm's command names (sbatch, srun, squeue...), for the CLI and inside jobs.
    "$BIN/gctl" slurm-names "$HOME_DIR/slurm" >/dev/null
    for n in 1 2; do
        if [ -f "$HOME_DIR/node$n.pid" ] && kill -0 "$(cat "$HOME_DIR/node$n.pid")" 2>/dev/null; then continue; fi
        # A development cluster runs jobs as whoever submits them, root included (a real
        # node's agent refuses uids below 1000: see README "Security model").
        "$BIN/gagentd" --dev-local --min-uid 0 --controllers "$CONTROLLERS" --name "node$n" --state-dir "$HOME_DIR/node$n" \
            --fake-topology "$TOPO" --training-addr 127.0.0.1 --cgroup-root off \
            --kmsg "$HOME_DIR/node$n.kmsg" --slurm-names "$HOME_DIR/slurm" >>"$HOME_DIR/log/node$n.log" 2>&1 &
        echo $! >"$HOME_DIR/node$n.pid"
    done
    export GSCHED_CONTROLLERS="$CONTROLLERS"
    for _ in $(seq 1 200); do
        if "$BIN/ginfo" --json 2>/dev/null | grep -q '"online": true' && \
           [ "$("$BIN/ginfo" --json 2>/dev/null | grep -c '"online": true')" -ge 2 ]; then
            echo "gsched: 3 controllers and 2 nodes up (state in $HOME_DIR)"
            echo "export GSCHED_CONTROLLERS=$CONTROLLERS PATH=$BIN:$HOME_DIR/slurm:\$PATH"
            return 0
        fi
        sleep 0.2
    done
    echo "gsched: the cluster did not come up; see $HOME_DIR/log" >&2
    return 1
}

stop() {
    for f in "$HOME_DIR"/*.pid; do
        [ -e "$f" ] || continue
        kill "$(cat "$f")" 2>/dev/null || true
        rm -f "$f"
    done
}

case "${1:-up}" in
    up) build && start ;;
    start) start ;;
    down) stop ;;
    # Job ids start again at 1 after a clean: drop the old demo outputs with them.
    clean) stop; rm -rf "$HOME_DIR"; rm -f "$ROOT"/examples/gsched-*.out ;;
    env) echo "export GSCHED_CONTROLLERS=$CONTROLLERS PATH=$BIN:$HOME_DIR/slurm:\$PATH" ;;
    *) echo "usage: $0 up|down|clean|env" >&2; exit 2 ;;
esac
