#!/usr/bin/env bash
# A Slurm-style batch script on a 2-GPU machine split by two agents (g0: GPU 0, g1:
# GPU 1; on a 1-GPU machine one agent and one node), with release binaries in .device/bin: the script runs once on the first node,
# finds the head node with `scontrol show hostnames` and `srun hostname`, and starts
# torchrun on both nodes with `srun` (c10d rendezvous, NCCL). $OUT gets the job's output.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/gsched-gpu-out}"
W=/tmp/gsched-slurm
rm -rf "$W"; mkdir -p "$W/logs" "$OUT"
export PATH="$ROOT/.device/bin:$PATH"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
SAFE="--job-env NCCL_NVLS_ENABLE=0 --job-env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --job-env NVSHMEM_DISABLE_NVLS=1"
export GSCHED_CONTROLLERS=127.0.0.1:6817
IP=$(hostname -I 2>/dev/null | awk '{print $1}'); IP=${IP:-127.0.0.1}
gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir "$W/ctl" >"$W/logs/gctld.log" 2>&1 &
sleep 1
gctl slurm-names "$W/slurm" >/dev/null
NG=$(nvidia-smi -L | wc -l); [ "$NG" -ge 2 ] && NG=2
for g in $(seq 0 $((NG-1))); do
    gagentd --dev-local --min-uid 0 --controllers $GSCHED_CONTROLLERS --name "g$g" --state-dir "$W/g$g" --gpus "$g" \
        --training-addr "$IP" --kmsg "$W/kmsg$g" --slurm-names "$W/slurm" $SAFE >"$W/logs/agent$g.log" 2>&1 &
done
for _ in $(seq 1 100); do [ "$(ginfo --json 2>/dev/null | grep -c '"online": true')" -ge "$NG" ] && break; sleep 0.2; done
cd "$W"
cat > ddp.sbatch <<SB
#!/bin/bash
#SBATCH --job-name=ddp
#SBATCH --nodes=$NG
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --time=00:10:00

nodes=( \$( scontrol show hostnames \$SLURM_JOB_NODELIST ) )
head_node_ip=\$(srun --nodes=1 --ntasks=1 -w "\${nodes[0]}" hostname --ip-address | awk '{print \$1}')
echo "nodes \${nodes[*]} head \$head_node_ip"
srun -l bash -c 'echo "\$SLURMD_NODENAME sees GPU \$CUDA_VISIBLE_DEVICES: \$(nvidia-smi -L | wc -l) visible"'
python3 -c "import torch; print('batch shell: cuda', torch.cuda.is_available(), torch.__file__)"
srun -l python3 -c "import torch; print('step task: cuda', torch.cuda.is_available(), torch.__file__)"
srun -l bash -c 'env | sort' > env-step.txt; env | sort > env-batch.txt
export ALLREDUCE_MB=256:1024
srun torchrun --nnodes $NG --nproc_per_node 1 --rdzv_id \$RANDOM --rdzv_backend c10d \
    --rdzv_endpoint \$head_node_ip:29500 $ROOT/examples/allreduce.py
SB
PATH="$W/slurm:$PATH" sbatch ddp.sbatch | tee "$OUT/submit.txt"
J=$(awk '{print $4}' "$OUT/submit.txt")
for _ in $(seq 1 300); do
    s=$(gqueue -t all --json -j "$J" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["state"] if j else "")')
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break;; esac
    sleep 0.5
done
echo "job $J $s" | tee "$OUT/state.txt"
cp "slurm-$J.out" "$OUT/job-output.txt" 2>/dev/null
cp env-step.txt env-batch.txt "$OUT/" 2>/dev/null
grep -v "^\[W\|Warning" "slurm-$J.out" | tail -30
