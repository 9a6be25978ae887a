#!/usr/bin/env bash
# `gctl doctor` (with --probe) and `gctl burn-in` on the H200 test machine (the `device` tool), with
# release binaries in .device/bin and the machine's real NVML: first one agent with every
# GPU, then (with two or more GPUs) two agents splitting them (gagentd --gpus). Reports,
# plots and doctor output go to $OUT/burnin-*/ and $OUT/doctor-*.txt|json.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-burnin
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
# Never NVLink multicast on the shared machine.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SAFE="--job-env NCCL_NVLS_ENABLE=0 --job-env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --job-env NVSHMEM_DISABLE_NVLS=1"
export GSCHED_CONTROLLERS=127.0.0.1:6817
QUICK=${QUICK:-}
IP=$(hostname -I 2>/dev/null | awk '{print $1}'); IP=${IP:-127.0.0.1}
NGPU=$(nvidia-smi -L | wc -l)
echo "== $(hostname): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$NGPU, $(nproc) CPUs, $(date -u)"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
nvidia-smi -q -d PCIE,TEMPERATURE,PERFORMANCE > "$OUT/nvidia-smi-q.txt" 2>&1

agent_up() {
    local name=$1; shift
    gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name "$name" --state-dir "$W/$name" --training-addr "$IP" \
        --kmsg "$W/kmsg-$name" $SAFE "$@" >"$W/logs/agent-$name.log" 2>&1 &
    echo $! >"$W/agent-$name.pid"
    for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q "\"name\": \"$name\"" && return 0; sleep 0.2; done
    echo "agent $name did not register"; tail -20 "$W/logs/agent-$name.log"
}
agents_down() {
    for p in "$W"/agent-*.pid; do kill "$(cat "$p")" 2>/dev/null; rm -f "$p"; done
    sleep 2
}
# One layout: doctor, then burn-in; $1 names it.
layout() {
    local tag=$1
    ginfo | tee "$OUT/ginfo-$tag.txt"
    gctl doctor | tee "$OUT/doctor-$tag.txt"
    gctl doctor --json > "$OUT/doctor-$tag.json"
    gctl doctor --probe --paths /,/tmp,/models 2>&1 | tee "$OUT/doctor-probe-$tag.txt"
    gctl burn-in $QUICK --python python3 --out "$OUT/burnin-$tag" 2>&1 | tee "$OUT/burnin-$tag.log"
    echo "burn-in exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/burnin-$tag.log"
}

gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" --master-ports 29500-29599 >"$W/logs/gctld.log" 2>&1 &
sleep 1
cd "$W"
agent_up h200
layout one-agent
if [ "$NGPU" -ge 2 ]; then
    agents_down
    gctl node drain h200 --reason "replaced by split agents" >/dev/null 2>&1
    agent_up g0 --gpus 0
    agent_up g1 --gpus 1
    layout split
fi
tar czf "$OUT/burnin-logs.tar.gz" -C "$W" logs 2>/dev/null
# The reports as one file each (fewer files to fetch).
for d in "$OUT"/burnin-*/; do tar czf "${d%/}.tar.gz" -C "$OUT" "$(basename "$d")" && rm -rf "$d"; done
