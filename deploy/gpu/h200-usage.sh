#!/usr/bin/env bash
# Per-job usage and the idle-GPU policy on real GPUs, with release binaries in
# .device/bin: a controller with [idle_gpu] (after 20 s, cancel after 10 s more) and one
# agent sampling NVML every 2 s; a 1-GPU job that keeps its GPU busy for 40 s, then a
# 1-GPU job that holds the GPU (CUDA context, no work) and should be warned and
# cancelled with IdleGPUs. Efficiency reports, the idle job's record, greport and the
# accounting rows land in $OUT.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-usage
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
export GSCHED_CONTROLLERS=127.0.0.1:6817
SAFE="--job-env NCCL_NVLS_ENABLE=0 --job-env TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
cat > "$W/gctld.toml" <<'TOML'
[idle_gpu]
threshold_pct = 5
after_s = 20
action = "cancel"
grace_s = 10
TOML
gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" --config "$W/gctld.toml" >"$W/logs/gctld.log" 2>&1 &
sleep 1
gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name g0 --state-dir "$W/g0" \
    --gpu-sample-interval 2 $SAFE >"$W/logs/agent.log" 2>&1 &
for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q '"name": "g0"' && break; sleep 0.2; done
cd "$W"
cat > busy.py <<'PY'
import time, torch
x = torch.randn(8192, 8192, device="cuda")
end = time.time() + 40
while time.time() < end:
    y = x @ x
torch.cuda.synchronize()
print("busy done", flush=True)
PY
cat > idle.py <<'PY'
import time, torch
x = torch.zeros(1024, 1024, device="cuda")
print("holding the GPU", flush=True)
time.sleep(300)
PY
B=$(gsub --parsable --gpus 1 -J busy --wrap "python3 $W/busy.py")
I=$(gsub --parsable --gpus 1 -J idle --wrap "python3 $W/idle.py")
for _ in $(seq 1 240); do
    gacct -j "$I" -X -n -P -o State | grep -qE "CANCELLED|COMPLETED|FAILED" && break
    sleep 0.5
done
gctl show job "$B" > "$OUT/usage-busy-show.txt" 2>&1
gacct --eff "$B" > "$OUT/usage-busy-eff.txt" 2>&1
gacct --eff "$B" --json > "$OUT/usage-busy-eff.json" 2>&1
gctl show job "$I" > "$OUT/usage-idle-show.txt" 2>&1
gacct --eff "$I" > "$OUT/usage-idle-eff.txt" 2>&1
gacct --eff "$I" --json > "$OUT/usage-idle-eff.json" 2>&1
gacct -X -P -o JobID,JobName,State,Elapsed,Reason > "$OUT/usage-gacct.txt" 2>&1
gacct -j "$I" --json > "$OUT/usage-idle-row.json" 2>&1
greport -S now-1hour > "$OUT/usage-greport.txt" 2>&1
grep -i "idle" "$W/logs/gctld.log" | tail -5 > "$OUT/usage-gctld-idle.log"
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv > "$OUT/usage-smi.txt" 2>&1
for f in usage-busy-eff.txt usage-idle-eff.txt usage-gacct.txt usage-greport.txt; do echo "== $f"; cat "$OUT/$f"; done
