#!/usr/bin/env python3
"""What one task of a corpus script sees, as a JSON file in the run directory's probes/.

The harness links this file under the program names the corpus scripts run
(train.py, pretrain_gpt.py, ...), so the scripts stay as their repositories wrote them.
It records the task's Slurm and CUDA variables, variables the scripts export (DIFF_*,
and the common training ones), its working directory, arguments, the CPUs it may use,
which fake GPU device nodes it can open, and the signals it was sent while it slept
(`--sleep S`).
"""
import json
import os
import signal
import sys
import time

KEEP_PREFIXES = ("SLURM", "SBATCH_", "SRUN_", "SALLOC_", "CUDA_", "GPU_", "OMP_", "DIFF_")
KEEP = {
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "OMP_NUM_THREADS",
    "HOME",
    "USER",
}

received = []


def on_signal(num, _frame):
    received.append(signal.Signals(num).name)
    if num == signal.SIGTERM:
        report()
        sys.exit(143)


def devices():
    """The GPU device nodes this task can open (the harness's fake ones, if any)."""
    root = os.environ.get("DIFF_DEV_DIR", "")
    if not root or not os.path.isdir(root):
        return None
    ok = []
    for name in sorted(os.listdir(root)):
        try:
            os.close(os.open(os.path.join(root, name), os.O_RDONLY))
            ok.append(name)
        except OSError:
            pass
    return ok


def report():
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(KEEP_PREFIXES) or k in KEEP
    }
    cpus = sorted(os.sched_getaffinity(0))
    record = {
        "prog": os.path.basename(sys.argv[0]),
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "env": env,
        "ncpus": len(cpus),
        "devices": devices(),
        "signals": received,
    }
    # Beside the link that ran (the run directory), not on stdout: tasks' output
    # interleaves, and the output files are compared as the script wrote them.
    where = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "probes")
    os.makedirs(where, exist_ok=True)
    name = f"{os.uname().nodename}-{os.getpid()}-{time.time_ns()}.json"
    with open(os.path.join(where, name), "w") as f:
        json.dump(record, f, sort_keys=True)


def main():
    for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    args = sys.argv[1:]
    if "--sleep" in args:
        i = args.index("--sleep")
        deadline = time.time() + float(args[i + 1])
        while time.time() < deadline:
            time.sleep(0.05)
    report()
    code = os.environ.get("DIFF_EXIT")
    sys.exit(int(code) if code else 0)


if __name__ == "__main__":
    main()
