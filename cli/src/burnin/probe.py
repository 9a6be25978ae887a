# gsched burn-in probe: one task of a `gctl burn-in` step (grun sets SLURM_PROCID,
# SLURM_NTASKS, SLURM_LOCALID; the job sets CUDA_VISIBLE_DEVICES, MASTER_ADDR, MASTER_PORT).
# Results go to stdout as lines "GSCHED_BURNIN {json}"; anything else is commentary.
#   probe.py gpu QUICK          memory pattern and matmul on this task's GPU (or the CPU)
#   probe.py allreduce QUICK    all-reduce bus bandwidth over message sizes (NCCL, or gloo)
import json
import os
import socket
import sys
import time


def emit(doc):
    print("GSCHED_BURNIN " + json.dumps(doc), flush=True)


def fail(msg):
    emit({"error": msg, "rank": int(os.environ.get("SLURM_PROCID", "0")),
          "node": os.environ.get("SLURMD_NODENAME", socket.gethostname())})
    sys.exit(3)


try:
    import torch
except Exception as e:  # noqa: BLE001
    fail("PyTorch is not importable by python3 on this node (%s): install it (pip install torch, or Debian's python3-torch)" % e)

stage, quick = sys.argv[1], sys.argv[2] == "1"
rank = int(os.environ.get("SLURM_PROCID", "0"))
world = int(os.environ.get("SLURM_NTASKS", "1"))
local = int(os.environ.get("SLURM_LOCALID", "0"))
node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v != ""]
cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
if cuda:
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
else:
    dev = torch.device("cpu")
gpu_label = visible[local % len(visible)] if visible else str(local)


def sync():
    if cuda:
        torch.cuda.synchronize()


def gpu_stage():
    name = torch.cuda.get_device_name(dev) if cuda else "cpu (no CUDA device: fake or GPU-less node)"
    # Memory: fill a buffer with a pattern, read it back.
    if cuda:
        free, _ = torch.cuda.mem_get_info(dev)
        nbytes = min(free // 2, (1 << 30) if quick else (16 << 30))
    else:
        nbytes = 16 << 20
    n = max(nbytes // 8, 1)
    t0 = time.perf_counter()
    buf = torch.arange(n, dtype=torch.int64, device=dev)
    ok = int(buf[-1].item()) == n - 1
    ok = ok and int(buf.sum().item()) == n * (n - 1) // 2
    sync()
    mem_s = time.perf_counter() - t0
    del buf
    # Compute: square matmuls.
    size = (4096 if quick else 8192) if cuda else 256
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(size, size, device=dev, dtype=dtype)
    b = torch.randn(size, size, device=dev, dtype=dtype)
    for _ in range(2):
        a @ b
    sync()
    iters = (10 if quick else 50) if cuda else 3
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync()
    dt = time.perf_counter() - t0
    tflops = 2 * size ** 3 * iters / dt / 1e12
    emit({"stage": "gpu", "rank": rank, "node": node, "gpu": gpu_label, "device": name,
          "backend": "cuda" if cuda else "cpu", "memory_bytes": n * 8,
          "memory_ok": ok, "memory_seconds": round(mem_s, 4), "tflops": round(tflops, 3),
          "matmul": "%dx%d %s" % (size, size, str(dtype).replace("torch.", ""))})


def allreduce_stage():
    import torch.distributed as dist
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world)
    os.environ["LOCAL_RANK"] = str(local)
    backend = "nccl" if cuda else "gloo"
    kwargs = {"device_id": dev} if cuda else {}
    try:
        dist.init_process_group(backend=backend, init_method="env://", **kwargs)
    except TypeError:
        dist.init_process_group(backend=backend, init_method="env://")
    if cuda:
        top = (64 << 20) if quick else (1 << 30)
    else:
        top = (1 << 20) if quick else (64 << 20)
    size = 1 << 10
    sizes = []
    while size <= top:
        sizes.append(size)
        size *= 4 if quick else 2
    check = torch.ones(1024, device=dev)
    dist.all_reduce(check)
    if int(check[0].item()) != world:
        fail("all-reduce of ones gave %s, not %d: the collective is broken" % (check[0].item(), world))
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev, dtype=torch.float32)
        for _ in range(2):
            dist.all_reduce(x)
        sync()
        iters = 5 if quick else 20
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()
        dt = (time.perf_counter() - t0) / iters
        # Slowest rank's time, as nccl-tests reports.
        t = torch.tensor([dt], device=dev, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dt = float(t.item())
        algbw = nbytes / dt / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            # Four significant digits: a 1 KiB all-reduce over gloo on a loaded CPU is
            # 0.00004 GB/s, which four decimals would report as none at all.
            emit({"stage": "allreduce", "bytes": nbytes, "seconds": dt,
                  "algbw_gbps": float("%.4g" % algbw), "busbw_gbps": float("%.4g" % busbw),
                  "backend": backend, "world": world})
    dist.destroy_process_group()


try:
    if stage == "gpu":
        gpu_stage()
    elif stage == "allreduce":
        allreduce_stage()
    else:
        fail("unknown stage " + stage)
except SystemExit:
    raise
except Exception as e:  # noqa: BLE001
    fail("%s: %s" % (type(e).__name__, e))
