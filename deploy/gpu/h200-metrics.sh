#!/usr/bin/env bash
# The agent's metrics endpoint and `gagentd diagnose` on a machine with GPUs, with
# release binaries in .device/bin: a controller and one agent (--metrics), a 1-GPU job
# that keeps the GPU busy for a few seconds, /metrics scraped while it runs and after;
# then `gagentd diagnose` on this machine's own nvidia-smi, -q, topo -m and kernel log.
# Everything lands in $OUT.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-metrics
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
export GSCHED_CONTROLLERS=127.0.0.1:6817
SAFE="--job-env NCCL_NVLS_ENABLE=0 --job-env TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" --http 127.0.0.1:9817 >"$W/logs/gctld.log" 2>&1 &
sleep 1
gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name g0 --state-dir "$W/g0" --kmsg "$W/kmsg" \
    --metrics 127.0.0.1:9818 $SAFE >"$W/logs/agent.log" 2>&1 &
for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q '"name": "g0"' && break; sleep 0.2; done
cd "$W"
cat > busy.py <<'PY'
import time, torch
x = torch.randn(8192, 8192, device="cuda")
end = time.time() + 12
while time.time() < end:
    y = x @ x
torch.cuda.synchronize()
print("done", flush=True)
PY
J=$(gsub --parsable --gpus 1 --wrap "python3 $W/busy.py")
sleep 8
curl -s 127.0.0.1:9818/metrics > "$OUT/agent-metrics-busy.txt"
curl -s 127.0.0.1:9817/metrics > "$OUT/controller-metrics-busy.txt"
for _ in $(seq 1 100); do gqueue -t all --json -j "$J" | grep -q '"COMPLETED"' && break; sleep 0.5; done
sleep 3
curl -s 127.0.0.1:9818/metrics > "$OUT/agent-metrics-idle.txt"
gqueue -t all -j "$J" > "$OUT/job.txt"
nvidia-smi > "$W/smi.txt" 2>&1
nvidia-smi -q > "$W/smi-q.txt" 2>&1
nvidia-smi topo -m > "$W/topo.txt" 2>&1
(dmesg 2>/dev/null || journalctl -k -n 2000 2>/dev/null) > "$W/kernel.txt"
gagentd diagnose "$W/smi.txt" "$W/smi-q.txt" "$W/topo.txt" "$W/kernel.txt" > "$OUT/diagnose.txt" 2>&1
gagentd diagnose --json "$W/smi.txt" "$W/smi-q.txt" "$W/topo.txt" "$W/kernel.txt" > "$OUT/diagnose.json" 2>&1
cp "$W/smi.txt" "$W/topo.txt" "$OUT/"
grep -E "^gsched_(gpu|agent)" "$OUT/agent-metrics-busy.txt" | head -40
echo ---; cat "$OUT/diagnose.txt" | head -20
