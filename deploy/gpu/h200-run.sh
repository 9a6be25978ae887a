#!/usr/bin/env bash
# Real-GPU checks on a 2x H200 machine (the `device` tool's nvidia-h200-x2), with release
# binaries in .device/bin. Everything the run prints and saves goes under $OUT:
# summary.txt (the figures), discover-h200.json, nvidia-smi-topo.txt, gpu-run.tar.gz (logs).
#   (1) discovery: gagentd discover --json, raw nvidia-smi outputs
#   (2) one agent with both GPUs: a 2-GPU NCCL all-reduce job through gsub --torchrun
#       (busbw at 256 MB and 1 GB), a killed rank, a hung rank (PG timeout 10 s), and an
#       Xid on the job's GPU through the kernel-log watcher
#   (3) two agents with one GPU each (gagentd --gpus): the same all-reduce as 2 nodes x 1
#       GPU with NCCL over sockets (P2P and SHM off), and a killed rank across nodes
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-gpu
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
# Never use NVLink multicast on this shared hardware.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SAFE="--job-env NCCL_NVLS_ENABLE=0 --job-env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --job-env NVSHMEM_DISABLE_NVLS=1"
export GSCHED_CONTROLLERS=127.0.0.1:6817
SUM="$OUT/summary.txt"
# Extra torchrun flags, e.g. "--redirects 1 --tee 1" for the torch 1.13 torchrun of Debian.
TR=(); [ -n "${TORCHRUN_ARGS:-}" ] && TR=(--torchrun-args "$TORCHRUN_ARGS")
say() { echo "$*" | tee -a "$SUM"; }
wait_job() { # id timeout -> prints final state
    local id=$1 t=${2:-120} s
    for _ in $(seq 1 $((t*5))); do
        s=$(gqueue -t all --json -j "$id" 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["state"] if j else "NONE")' 2>/dev/null)
        case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$s"; return;; esac
        sleep 0.2
    done
    echo "STUCK:$s"
}
timing() { # id output-file: fault time (printed by the rank) -> gsched failure report -> all ranks stopped
    gqueue -t all --json -j "$1" > "$W/logs/job-$1.json"
    python3 - "$W/logs/job-$1.json" "$2" <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
text = open(sys.argv[2], errors="replace").read()
m = re.search(r"injecting failure '(\w+)' at ([0-9.]+)", text)
fault = float(m.group(2)) if m else None
f = j.get("failure") or {}
rep = f.get("at_ms", 0) / 1000 if f else None
end = (j.get("end_ms") or 0) / 1000
line = f"state={j['state']} reason={f.get('kind')} node={f.get('node')} evidence={f.get('evidence','')[:160]!r}"
if fault and rep:
    line += f" | fault->reported {rep - fault:.2f}s, fault->all ranks stopped {end - fault:.2f}s"
print(line)
PY
}
agent_up() { # name extra...
    local name=$1; shift
    gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name "$name" --state-dir "$W/$name" --training-addr "$IP" \
        --kmsg "$W/kmsg-$name" $SAFE "$@" >"$W/logs/agent-$name.log" 2>&1 &
    for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q "\"name\": \"$name\"" && return 0; sleep 0.2; done
    say "agent $name did not register"; tail -20 "$W/logs/agent-$name.log"
}

say "== gsched on $(hostname): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) CPUs, $(date -u)"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' 2>&1 | tee -a "$SUM"
nvidia-smi > "$W/logs/nvidia-smi.txt" 2>&1
nvidia-smi topo -m > "$OUT/nvidia-smi-topo.txt" 2>&1
nvidia-smi -q > "$W/logs/nvidia-smi-q.txt" 2>&1
nvidia-smi -L > "$W/logs/nvidia-smi-L.txt" 2>&1
ip -4 -o addr > "$W/logs/ip-addr.txt" 2>&1
IP=$(hostname -I 2>/dev/null | awk '{print $1}'); IP=${IP:-127.0.0.1}

say "== (1) discovery"
gagentd discover --json > "$OUT/discover-h200.json" 2>"$W/logs/discover.err"
gagentd discover 2>&1 | tee -a "$SUM"
for f in "$ROOT"/tests/fixtures/topo/h200-2gpu-nv18-vm-ansi-header.txt; do gagentd discover --nvidia-smi-topo "$f" >> "$W/logs/discover-fixture.txt" 2>&1; done

say "== (2) one agent, both GPUs"
gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" --master-ports 29500-29599 --node-timeout 3 >"$W/logs/gctld.log" 2>&1 &
sleep 1
agent_up h200
ginfo | tee -a "$SUM"
cd "$W"
J=$(gsub --parsable --gpus-per-node 2 -J allreduce-2gpu --export=ALL,ALLREDUCE_MB=256:1024,ALLREDUCE_ITERS=20,NCCL_DEBUG=INFO "${TR[@]}" --torchrun "$ROOT/examples/allreduce.py")
say "job $J (2 GPUs, one node): $(wait_job "$J" 180)"
grep -hE "allreduce size|expected=" "$W/gsched-$J.out" | tee -a "$SUM"
gctl show job "$J" | grep -E "Node\[|MasterAddr" | tee -a "$SUM"
grep -h "NCCL_\|CUDA_VISIBLE" "$W/$(ls "$W" | grep -m1 h200)/steps/$J.0/plan.json" 2>/dev/null | head -0
python3 - "$W/h200/steps/$J.0/plan.json" <<'PY' | tee -a "$SUM"
import json, sys
env = dict(json.load(open(sys.argv[1]))["tasks"][0])
for k in ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_IB_HCA", "MASTER_ADDR", "MASTER_PORT", "GSCHED_CPUS", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_NVLS_ENABLE"]:
    print(f"  env {k}={env.get(k, '<unset>')}")
PY

J=$(gsub --parsable --gpus-per-node 2 -J kill-2gpu --export=ALL,FAIL_RANK=1,FAIL_MODE=kill "${TR[@]}" --torchrun "$ROOT/examples/allreduce.py")
say "job $J (rank 1 SIGKILLed): $(wait_job "$J" 120)"
timing "$J" "$W/gsched-$J.out" | tee -a "$SUM"

J=$(gsub --parsable --gpus-per-node 2 -J hang-2gpu --export=ALL,FAIL_RANK=1,FAIL_MODE=hang,PG_TIMEOUT_S=10 "${TR[@]}" --torchrun "$ROOT/examples/allreduce.py")
say "job $J (rank 1 stops calling all_reduce, PG timeout 10 s): $(wait_job "$J" 180)"
timing "$J" "$W/gsched-$J.out" | tee -a "$SUM"

GPU1_PCI=$(python3 -c 'import json; t=json.load(open("'"$OUT"'/discover-h200.json")); print(t["gpus"][1]["pci_bus_id"] or "")')
J=$(gsub --parsable --gpus-per-node 1 -J victim --requeue --wrap 'nvidia-smi -L; sleep 300')
wait_job_running() { for _ in $(seq 1 100); do gqueue --json -j "$1" | grep -q '"RUNNING"' && return; sleep 0.2; done; }
wait_job_running "$J"
J2=$(gsub --parsable --gpus-per-node 1 -J neighbour --wrap 'sleep 300')
wait_job_running "$J2"
PCI_SHORT=$(echo "$GPU1_PCI" | sed 's/^0000\(0000\)\?://; s/\.0$//; s/^/0000:/' | tr 'A-F' 'a-f')
XID_T=$(date +%s.%N)
echo "[$(date)] NVRM: Xid (PCI:$PCI_SHORT): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." >> "$W/kmsg-h200"
sleep 3
say "Xid 79 written for GPU 1 ($GPU1_PCI) at $XID_T:"
ginfo | tee -a "$SUM"
for j in $J $J2; do gqueue -t all --json -j $j > "$W/logs/xid-job-$j.json"; python3 - "$W/logs/xid-job-$j.json" "$XID_T" <<'PY' | tee -a "$SUM"
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
f = j.get("failure") or {}
alloc = j.get("allocation") or {}
gpus = [n["gpus"] for n in alloc.get("nodes", [])]
lat = f"{f['at_ms'] / 1000 - float(sys.argv[2]):.2f}s after the Xid line" if f.get("at_ms") else "-"
print(f"  job {j['job_id']} {j['name']}: state={j['state']} restarts={j['restarts']} gpus={gpus} failure={f.get('kind')} reported {lat} evidence={f.get('evidence', '')[:120]!r}")
PY
done
gcancel $J $J2; sleep 2
pkill -f "gagentd .*--name h200" ; sleep 1

say "== (3) two agents with one GPU each (NCCL over sockets)"
agent_up h200-g0 --gpus 0
agent_up h200-g1 --gpus 1
ginfo | tee -a "$SUM"
J=$(gsub --parsable -N 2 --gpus-per-node 1 -J allreduce-2x1 -x h200 --export=ALL,ALLREDUCE_MB=256:1024,ALLREDUCE_ITERS=10,NCCL_DEBUG=INFO,NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1 "${TR[@]}" --torchrun "$ROOT/examples/allreduce.py")
say "job $J (2 nodes x 1 GPU, sockets): $(wait_job "$J" 240)"
grep -hE "allreduce size|expected=" "$W/gsched-$J.out" | tee -a "$SUM"
gctl show job "$J" | grep -E "Node\[" | tee -a "$SUM"
for n in 0 1; do python3 - "$W/h200-g$n/steps/$J.0/plan.json" <<'PY' | tee -a "$SUM"
import json, sys
env = dict(json.load(open(sys.argv[1]))["tasks"][0])
print("  " + " ".join(f"{k}={env.get(k)}" for k in ["SLURMD_NODENAME", "GSCHED_NODEID", "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT"]))
PY
done
J=$(gsub --parsable -N 2 --gpus-per-node 1 -J kill-2x1 -x h200 --export=ALL,FAIL_RANK=1,FAIL_MODE=kill,NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1 "${TR[@]}" --torchrun "$ROOT/examples/allreduce.py")
say "job $J (2 nodes, rank 1 SIGKILLed): $(wait_job "$J" 120)"
timing "$J" "$W/gsched-$J.out" | tee -a "$SUM"
J=$(gsub --parsable -N 2 --gpus-per-node 1 -J hang-2x1 -x h200 --export=ALL,FAIL_RANK=1,FAIL_MODE=hang,PG_TIMEOUT_S=10,NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1 "${TR[@]}" --torchrun "$ROOT/examples/allreduce.py")
say "job $J (2 nodes, rank 1 hangs, PG timeout 10 s): $(wait_job "$J" 180)"
timing "$J" "$W/gsched-$J.out" | tee -a "$SUM"

gacct --json > "$W/logs/gacct.json"
gacct | tee -a "$SUM"
cp "$W"/gsched-*.out "$W/logs/" 2>/dev/null
for d in "$W"/h200*/steps/*/logs; do [ -d "$d" ] && cp -r "$d" "$W/logs/nccl-$(basename "$(dirname "$d")")-$(basename "$(dirname "$(dirname "$(dirname "$d")")")")" 2>/dev/null; done
tar czf "$OUT/gpu-run.tar.gz" -C "$W" logs
pkill gagentd; pkill gctld
echo "done"
