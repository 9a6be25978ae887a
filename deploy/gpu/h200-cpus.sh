#!/usr/bin/env bash
# CPU binding and NCCL over sockets on a 2x H200 machine (the `device` tool's
# nvidia-h200-x2), with release binaries in .device/bin. Two agents split the machine
# (gagentd --gpus 0 / --gpus 1, so each also gets half the CPUs), and a 2-node x 1-GPU
# all-reduce runs with NCCL over sockets (P2P and SHM off) under three CPU bindings:
#   default   no CPU flag: the GPUs' share of the node's CPUs (gsched's default)
#   one-cpu   -c 1: one CPU per task (gsched's old default, Slurm's without DefCpuPerGPU)
#   generous  --cpus-per-gpu 8: a hand-picked generous binding
# $OUT/cpus-summary.txt gets each variant's CPUs per node and bus bandwidth. On a 1-GPU
# machine a 1-GPU job fed by an 8-worker DataLoader (examples/dataloader_feed.py) runs
# under the same three bindings instead.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-cpus
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SAFE="--job-env NCCL_NVLS_ENABLE=0 --job-env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --job-env NVSHMEM_DISABLE_NVLS=1"
export GSCHED_CONTROLLERS=127.0.0.1:6817
SUM="$OUT/cpus-summary.txt"
say() { echo "$*" | tee -a "$SUM"; }
wait_job() {
    local id=$1 t=${2:-180} s
    for _ in $(seq 1 $((t*5))); do
        s=$(gqueue -t all --json -j "$id" 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["state"] if j else "NONE")' 2>/dev/null)
        case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$s"; return;; esac
        sleep 0.2
    done
    echo "STUCK:$s"
}
agent_up() {
    local name=$1; shift
    gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name "$name" --state-dir "$W/$name" --training-addr "$IP" \
        --kmsg "$W/kmsg-$name" $SAFE "$@" >"$W/logs/agent-$name.log" 2>&1 &
    for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q "\"name\": \"$name\"" && return 0; sleep 0.2; done
    say "agent $name did not register"; tail -20 "$W/logs/agent-$name.log"
}
IP=$(hostname -I 2>/dev/null | awk '{print $1}'); IP=${IP:-127.0.0.1}
say "== CPU binding on $(hostname): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l), $(nproc) CPUs, $(date -u)"
nvidia-smi topo -m > "$W/logs/topo.txt" 2>&1
gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" --master-ports 29500-29599 >"$W/logs/gctld.log" 2>&1 &
sleep 1
cd "$W"
VARIANTS=("default|" "one-cpu|-c 1" "generous|--cpus-per-gpu 8")
if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then
    # One GPU: a 1-GPU job fed by an 8-worker DataLoader under each binding.
    agent_up g0
    ginfo | tee -a "$SUM"
    for variant in "${VARIANTS[@]}"; do
        name=${variant%%|*}; flags=${variant#*|}
        for rep in 1 2; do
            J=$(gsub --parsable --gpus 1 -J "feed-$name" $flags --torchrun "$ROOT/examples/dataloader_feed.py")
            st=$(wait_job "$J" 300)
            say "$name rep$rep job $J $st $(grep -h 'samples_per_s' gsched-"$J".out 2>/dev/null | tr '\n' ' ')"
            cp gsched-"$J".out "$W/logs/" 2>/dev/null
        done
    done
    tar czf "$OUT/cpus-run.tar.gz" -C "$W" logs 2>/dev/null
    exit 0
fi
agent_up g0 --gpus 0
agent_up g1 --gpus 1
ginfo | tee -a "$SUM"
for variant in "${VARIANTS[@]}"; do
    name=${variant%%|*}; flags=${variant#*|}
    for rep in 1 2; do
        J=$(gsub --parsable -N 2 --gpus-per-node 1 -J "cpus-$name" $flags \
            --export=ALL,ALLREDUCE_MB=64:256:1024,ALLREDUCE_ITERS=${ITERS:-10},NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1,NCCL_DEBUG=WARN \
            --torchrun "$ROOT/examples/allreduce.py")
        st=$(wait_job "$J" 300)
        cpus=$(gqueue -t all --json -j "$J" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(",".join(str(len(n["cpus"])) for n in (j.get("allocation") or {}).get("nodes",[])))')
        bw=$(grep -ho 'size=[0-9]*MB.*busbw=[0-9.]*GB/s' gsched-"$J".out 2>/dev/null | sed 's/ world=.*busbw=/ busbw=/' | tr '\n' ' ')
        say "$name rep$rep job $J $st cpus/node=$cpus $bw"
        cp gsched-"$J".out "$W/logs/" 2>/dev/null
    done
done
tar czf "$OUT/cpus-run.tar.gz" -C "$W" logs 2>/dev/null
