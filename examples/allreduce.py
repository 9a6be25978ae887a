"""All-reduce sanity check for gsched jobs: every rank contributes its rank number; the sum
must be n*(n-1)/2. Uses NCCL on GPUs when present, gloo otherwise. Prints bus bandwidth when
ALLREDUCE_MB is set, e.g. "256:1024" (the NCCL benchmark used for the GPU runs)."""
import os
import sys
import time

import torch
import torch.distributed as dist

backend = "nccl" if torch.cuda.is_available() and os.environ.get("FORCE_GLOO") != "1" else "gloo"
timeout = os.environ.get("PG_TIMEOUT_S")
if timeout:
    import datetime
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout)))
else:
    dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", "0"))
device = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(device)

x = torch.tensor([float(rank)], device=device)
dist.all_reduce(x)
expected = world * (world - 1) / 2
ok = abs(x.item() - expected) < 1e-6
print(f"rank {rank}/{world} backend={backend} node={os.environ.get('SLURMD_NODENAME')} allreduce={x.item():.0f} expected={expected:.0f} {'OK' if ok else 'WRONG'}", flush=True)

mb = os.environ.get("ALLREDUCE_MB")
if mb:
    for size_mb in [int(s) for s in mb.replace(":", ",").split(",")]:
        n = size_mb * 1024 * 1024 // 4
        buf = torch.ones(n, dtype=torch.float32, device=device)
        for _ in range(3):
            dist.all_reduce(buf)
        if backend == "nccl":
            torch.cuda.synchronize()
        iters = int(os.environ.get("ALLREDUCE_ITERS", "20"))
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        if backend == "nccl":
            torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / iters
        algbw = size_mb * 1024 * 1024 / dt / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print(f"allreduce size={size_mb}MB world={world} time={dt*1e3:.2f}ms algbw={algbw:.2f}GB/s busbw={busbw:.2f}GB/s", flush=True)

fail_rank = os.environ.get("FAIL_RANK")
if fail_rank is not None and int(fail_rank) == rank:
    mode = os.environ.get("FAIL_MODE", "kill")
    print(f"rank {rank}: injecting failure '{mode}' at {time.time():.3f}", flush=True)
    if mode == "kill":
        os.kill(os.getpid(), 9)
    elif mode == "hang":
        time.sleep(3600)
elif fail_rank is not None:
    # Keep communicating so the failing rank's peers notice.
    for i in range(int(os.environ.get("FAIL_STEPS", "100000"))):
        dist.all_reduce(x)
        if backend == "nccl":
            torch.cuda.synchronize()
        time.sleep(0.05)

dist.barrier()
dist.destroy_process_group()
sys.exit(0 if ok else 3)
