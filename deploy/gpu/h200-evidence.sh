#!/usr/bin/env bash
# Field evidence from a machine with GPUs (issue 14), with release binaries in .device/bin:
# this machine's own `nvidia-smi -L`, a `--query-gpu` CSV with its header, `ip addr`,
# `ip link` and whatever InfiniBand tools exist, saved for `gagentd diagnose`; then a
# controller and one agent run a 1-GPU torchrun all-reduce with gsched's default NCCL
# settings (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV into the step's private debug
# file): the job must complete with no warning, and the debug file must name the network
# NCCL chose. Everything lands in $OUT.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-evidence
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
export GSCHED_CONTROLLERS=127.0.0.1:6817
# Few files: the device returns a handful.
nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1
nvidia-smi --query-gpu=index,pci.bus_id,name,temperature.gpu,power.draw,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.errors.uncorrected.volatile.total,retired_pages.pending --format=csv > "$OUT/query-gpu.csv" 2>&1
for t in "ip addr" "ip link" ibdev2netdev ibstat ibstatus ibv_devinfo ifconfig; do
    if command -v ${t%% *} >/dev/null; then echo "### $t"; $t 2>&1; else echo "### $t: not installed"; fi
done > "$OUT/network.txt"
SAFE="--job-env NCCL_NVLS_ENABLE=0 --job-env TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" >"$W/logs/gctld.log" 2>&1 &
sleep 1
gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name g0 --state-dir "$W/g0" --kmsg "$W/kmsg" \
    $SAFE >"$W/logs/agent.log" 2>&1 &
for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q '"name": "g0"' && break; sleep 0.2; done
cd "$W"
cat > job.sh <<JOB
#!/bin/bash
torchrun --nproc_per_node 1 $ROOT/examples/allreduce.py
rc=\$?
env | grep -E '^NCCL_DEBUG' | sort > $W/nccl-env.txt
cat "\$(dirname "\$NCCL_DEBUG_FILE")"/nccl.*.log > $W/nccl-debug.txt 2>/dev/null
exit \$rc
JOB
chmod +x job.sh
start=$(date +%s.%N)
J=$(gsub --parsable --gpus 1 -o "$W/job.out" ./job.sh)
for _ in $(seq 1 240); do gqueue -t all --json -j "$J" | grep -qE '"(COMPLETED|FAILED|CANCELLED)"' && break; sleep 0.5; done
end=$(date +%s.%N)
gctl show job "$J" > "$OUT/show-job.txt" 2>&1
cp "$W/job.out" "$W/nccl-debug.txt" "$OUT/" 2>/dev/null
echo "job $J (1-GPU torchrun all-reduce, default NCCL settings) ended after $(awk "BEGIN{print $end - $start}") s; lines in its NCCL debug file:" > "$OUT/summary.txt"
grep -c . "$W/nccl-debug.txt" >> "$OUT/summary.txt" 2>&1
grep -E "Using network|NET/|Assigned NET" "$W/nccl-debug.txt" | head -5 >> "$OUT/summary.txt"
echo "Warning lines in gctl show job: $(grep -c "Warning\[" "$OUT/show-job.txt")" >> "$OUT/summary.txt"
cat "$W/nccl-env.txt" >> "$OUT/summary.txt" 2>/dev/null
cat "$OUT/summary.txt"; grep -E "State|Failure|Warning" "$OUT/show-job.txt"; tail -3 "$OUT/job.out"
