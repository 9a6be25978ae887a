#!/bin/bash
# A multi-node training job in gsched's per-node model: #GSUB lines (read like #SBATCH
# lines) make the script run on every node of the job, each node its own rank, with the
# SLURM_*/MASTER_* variables set by gsched. (A script with #SBATCH lines runs once, on the
# first node, as on Slurm, and fans out with srun/grun.)
#GSUB --job-name=train-demo
#GSUB --time=00:10:00
#GSUB --cpus-per-gpu=2
#GSUB --output=gsched-%j.out

echo "[$SLURMD_NODENAME] node rank $SLURM_NODEID of $SLURM_NNODES, job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"
echo "[$SLURMD_NODENAME] GPUs $CUDA_VISIBLE_DEVICES (order $CUDA_DEVICE_ORDER), CPUs $GSCHED_CPUS"
echo "[$SLURMD_NODENAME] rendezvous $MASTER_ADDR:$MASTER_PORT, NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME NCCL_IB_HCA=${NCCL_IB_HCA:-<none>} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-0}"

# The batch script runs from a copy, as on Slurm: find allreduce.py where it was submitted.
HERE="${GSCHED_EXAMPLE_DIR:-$SLURM_SUBMIT_DIR}"
if python3 -c 'import torch' 2>/dev/null && [ -f "$HERE/allreduce.py" ]; then
    # Real collective on CPUs (gloo): 2 processes per node.
    exec torchrun --nnodes "$SLURM_NNODES" --nproc_per_node 2 --node_rank "$SLURM_NODEID" \
        --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --rdzv_id "$SLURM_JOB_ID" \
        ${TORCHRUN_EXTRA_ARGS:-} "$HERE/allreduce.py"
fi
for step in 1 2 3; do
    echo "[$SLURMD_NODENAME] step $step (no PyTorch here: simulating)"
    sleep 1
done
echo "[$SLURMD_NODENAME] done"
