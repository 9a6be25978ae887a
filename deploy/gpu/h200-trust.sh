#!/usr/bin/env bash
# GPU privacy on a real GPU machine (the `device` tool's nvidia-h200-x2), release binaries
# in .device/bin: a --dev-local controller and one root agent with both GPUs (NVML
# discovery, cgroup v2 at /sys/fs/cgroup). Two jobs at once, one per GPU: one submitted
# by root (file permissions do not stop root, so only the BPF device filter can refuse
# it the other GPU) and one by an ordinary user. Each job tries to open every
# /dev/nvidiaN and then uses its own GPU through PyTorch. Device-node owners are listed
# before, during and after. Everything goes to $OUT/trust-summary.txt.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-trust
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GSCHED_CONTROLLERS=127.0.0.1:6817
SUM="$OUT/trust-summary.txt"
say() { echo "$*" | tee -a "$SUM"; }
wait_job() { # id -> final state
    local s
    for _ in $(seq 1 600); do
        s=$(gqueue -t all --json -j "$1" 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["state"] if j else "NONE")' 2>/dev/null)
        case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$s"; return;; esac
        sleep 0.2
    done
    echo "STUCK:$s"
}
say "== GPU privacy on $(hostname): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l), kernel $(uname -r), $(date -u)"
say "cgroup: $(stat -fc %T /sys/fs/cgroup) controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
id gsalice >/dev/null 2>&1 || useradd --no-create-home --shell /bin/sh gsalice
mkdir -p "$W/alice" && chown gsalice "$W/alice" && chmod 755 "$W"
say "-- device nodes before the agent:"; ls -l /dev/nvidia[0-9]* /dev/nvidiactl 2>&1 | tee -a "$SUM"

gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" --master-ports 29500-29599 >"$W/logs/gctld.log" 2>&1 &
sleep 2
gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name h200 --state-dir "$W/h200" \
    --kmsg "$W/kmsg" --job-env NCCL_NVLS_ENABLE=0 >"$W/logs/agent.log" 2>&1 &
for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q '"online": true' && break; sleep 0.2; done
say "-- driver: $(grep -E 'ModifyDeviceFiles|DeviceFileMode' /proc/driver/nvidia/params | tr '\n' ' ')"
say "-- agent start-up:"; grep -E "GPU device filter|cgroups|device nodes|ModifyDeviceFiles" "$W/logs/agent.log" | tee -a "$SUM"
say "-- device nodes with the agent running, no job:"; ls -l /dev/nvidia[0-9]* | tee -a "$SUM"

cat > "$W/probe.py" <<'PY'
import glob, os, sys, time
import torch
print("uid", os.getuid(), "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
for p in sorted(glob.glob("/dev/nvidia[0-9]*")):
    try:
        os.close(os.open(p, os.O_RDWR))
        print("open", p, flush=True)
    except OSError as e:
        print("refused", p, e.strerror, flush=True)
n = torch.cuda.device_count()
x = torch.ones(1 << 20, device="cuda")
print("torch sees", n, "GPU(s); sum on it:", float(x.sum()), flush=True)
time.sleep(8)
PY
chmod 644 "$W/probe.py"
A=$(cd "$W" && gsub --parsable --gpus-per-node 1 -o "$W/job-root.out" --wrap "python3 $W/probe.py")
B=$(cd "$W/alice" && runuser -u gsalice -- env GSCHED_CONTROLLERS=$GSCHED_CONTROLLERS PATH="$PATH" gsub --parsable --gpus-per-node 1 -o "$W/alice/job-alice.out" --wrap "python3 $W/probe.py")
sleep 5
say "-- device nodes while both jobs run (root's job $A, gsalice's job $B):"; ls -l /dev/nvidia[0-9]* | tee -a "$SUM"
for j in $A $B; do gqueue -t all --json -j $j | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print("job", j["job_id"], j["user"], "GPUs", j["allocation"]["nodes"][0]["gpus"])' | tee -a "$SUM"; done
say "job $A (root): $(wait_job $A)"; cat "$W/job-root.out" | tee -a "$SUM"
say "job $B (gsalice): $(wait_job $B)"; cat "$W/alice/job-alice.out" | tee -a "$SUM"
sleep 1
say "-- device nodes after both jobs:"; ls -l /dev/nvidia[0-9]* | tee -a "$SUM"
pkill gagentd; pkill gctld; sleep 1
chmod 666 /dev/nvidia[0-9]*
tar czf "$OUT/trust-logs.tar.gz" -C "$W" logs job-root.out alice/job-alice.out 2>/dev/null
