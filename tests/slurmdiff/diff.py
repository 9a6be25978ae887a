#!/usr/bin/env python3
"""The differential harness: every corpus script, unmodified, on real Slurm and on
gsched (through the Slurm names), side by side on equal clusters; one row per script.

    tests/slurmdiff/run.sh [--only SUBSTRING] [--table FILE] [--keep]

Both clusters have 2 nodes x 8 GPUs, 32 CPUs on 2 NUMA nodes and 4096 MB, n1 with the
features rack1 and ib, n2 with rack2 and ib (Slurm:
tests/slurmdiff/slurm.sh; gsched: tests/slurmdiff/topology.json). Each script runs alone
on each cluster (the two clusters at the same time), so placement starts from the same
empty cluster. A row is `identical`, `by design` (every difference is one of DESIGN
below, each with the reason README "Coming from Slurm" gives), `open` (a difference
listed in open-differences.txt, not yet fixed) or `bug`. The exit status is 1 when any
row is `bug`.

What is compared, per script:
  * what sbatch printed and its exit status (a driver script: its output and status);
  * every file the job wrote in its directory: its name (%j %A %a %x %N %n %t %u %%
    expanded) and its lines (sorted: tasks write concurrently on both);
  * per task (the probe's record, from any step or the batch step): COMPARED_VARS,
    DIFF_* variables, the working directory, the arguments, the signals it received,
    the number of CPUs it may use and which fake GPU device nodes it can open;
  * each job's JobState and ExitCode as `scontrol show job` prints them.
Job ids are replaced by J1, J2... in numeric order (array tasks' own ids by JA), the run
directory by <RUN>; node names are the same on both (n1, n2), except in output file
names, where %N gives the Slurm side's one host name and both become <node>.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ROOT = Path(os.environ.get("SLURMDIFF_DIR", "/tmp/gsched-slurmdiff"))
HOST = os.uname().nodename.split(".")[0]
GSCHED_PORT = int(os.environ.get("SLURMDIFF_GSCHED_PORT", "17900"))
# The first job id of both clusters: large and odd enough that no number a script prints
# (a rank, a count, a seed, a task id plus 1000) is taken for a job id when ids are
# normalised.
FIRST_JOB_ID = 7340021

# Program names corpus scripts run; each is a link to probe.py in the run directory.
PROGRAMS = [
    "train.py",
    "pretrain_gpt.py",
    "finetune.py",
    "main.py",
    "serve.py",
    "eval.py",
    "probe.py",
    "run_train.py",
    "run.py",
]

COMPARED_VARS = [
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST",
    "SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NODEID",
    "SLURMD_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE", "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_NODE",
    "SLURM_GPU_BIND", "SLURM_NTASKS_PER_GPU", "SLURM_CPUS_PER_GPU", "SLURM_MEM_PER_NODE",
    "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_CPU", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP",
    "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_JOB_USER", "SLURM_JOB_UID",
    "SLURM_JOB_GID", "SLURM_RESTART_COUNT", "SLURM_GTIDS", "SLURM_EXPORT_ENV",
    "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HOME", "USER",
]

# Slurm's own wiring in a task's environment (src/common/env.c, srun, slurmstepd).
SLURM_INTERNALS = {
    "SLURM_WORKING_CLUSTER", "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN",
    "SLURM_TASK_PID", "SLURM_PRIO_PROCESS", "SLURM_NODE_ALIASES", "SLURM_CONF",
    "SRUN_DEBUG", "SLURM_STEP_LAUNCHER_PORT", "SLURM_SRUN_COMM_PORT",
    "SLURM_SRUN_COMM_HOST", "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0",
}

# A task's program that could not be started, as each side words it (slurmstepd's
# exec_task, gsched's agent).
EXEC_FAILED_SLURM = re.compile(r"^slurmstepd-\S+: error: execve\(\): "
                               r"(?:bad interpreter\((\S+)\)|(\S+)): .*$")
EXEC_FAILED_GSCHED = re.compile(r"^(?:grun: task \d+ could not start|gsched: error): "
                                r"(?:cannot start \S+: bad interpreter (\S+): .*"
                                r"|cannot start (\S+): .*"
                                r"|permission denied starting (\S+) in .*)$")


def exec_failures(text, pattern):
    """The text with each failed-exec line replaced by one naming only the program, its
    lines sorted again (a file's lines are compared sorted, and the rewritten lines sort
    elsewhere than the originals)."""
    def line(l):
        m = pattern.match(l)
        return f"<could not start {next(g for g in m.groups() if g)}>" if m else l
    return "\n".join(sorted(line(l) for l in text.split("\n")))


# Differences gsched makes on purpose: (name, test on (key, slurm value, gsched value),
# reason, scoped). A scoped one applies only to scripts that name it (`# design: NAME`).
# README "Coming from Slurm" explains each.
DESIGN = [
    ("cpu-share",
     lambda k, a, b: k.endswith(("SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE")),
     "a GPU job gets its GPUs' share of the node's CPUs, not one CPU per task (only for "
     "scripts that name no CPU count: one that does gets that count)", False),
    ("gpus-per-node-always",
     lambda k, a, b: k.endswith("SLURM_GPUS_PER_NODE") and a is None,
     "SLURM_GPUS_PER_NODE is set for every GPU job, whichever spelling asked for GPUs",
     False),
    ("no-gpu-hidden",
     lambda k, a, b: k.endswith("CUDA_VISIBLE_DEVICES") and a is None and b == "",
     "a job without GPUs gets CUDA_VISIBLE_DEVICES empty, so CUDA sees none even where "
     "no device cgroup hides them", False),
    ("array-task-ids",
     lambda k, a, b: k.endswith(("SLURM_JOB_ID", "SLURM_JOBID")) and {a, b} == {"JA", "J1"},
     "an array's first task has the array's own id; Slurm gives that id to the task it "
     "splits off last", False),
    ("peer-no-accounting",
     lambda k, a, b: k.startswith("file ") and "accounting storage is disabled" in (a or ""),
     "the Slurm side runs without slurmdbd, so its sacct has nothing to show; gsched "
     "keeps accounting without one", True),
    ("hetjob-refused",
     lambda k, a, b: k.startswith(("submit[", "jobs.state", "file ")),
     "heterogeneous jobs are refused at submission with a message naming the way out",
     True),
    ("output-dir-missing",
     lambda k, a, b: (k == "jobs.state" and bool(a)
                      and all(x.strip() == "FAILED 0:53" for x in a.split("|"))
                      and all(x.strip().startswith("FAILED") for x in (b or "").split("|")))
     or (k.startswith("submit[") and k.endswith(".stderr") and not a
         and "does not exist here" in (b or "")),
     "an --output/--error directory missing where the job is submitted is warned about "
     "at submission; the job fails on both, but Slurm's ExitCode 0:53 is its internal "
     "error number (the batch step could not open its output) and gsched's is 0:0, the "
     "reason naming the file", False),
    ("ntasks-per-gpu-one-cpus",
     lambda k, a, b: k.endswith(("SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE")),
     "with --ntasks-per-gpu=1, Slurm 22.05 allocates one CPU per task whatever "
     "--cpus-per-task says (4 GPUs, -c 4: 4 CPUs, where --ntasks-per-gpu=2 -c 2 gets 16); "
     "gsched gives each task the CPUs it asked for", True),
    ("torch-rendezvous-vars",
     lambda k, a, b: k.startswith("file ")
     and re.sub(r"MASTER_ADDR=\S*", "MASTER_ADDR=", a or "")
     == re.sub(r"MASTER_ADDR=\S*", "MASTER_ADDR=", b or ""),
     "every task of a gsched job has MASTER_ADDR and MASTER_PORT (torch.distributed's "
     "rendezvous), where Slurm sets neither: a script that prints its own unset "
     "MASTER_ADDR sees the first node's address", True),
    ("no-pmi-warning",
     lambda k, a, b: k.startswith("file ")
     and "\n".join(l for l in (b or "").split("\n")
                   if not re.match(r"^srun: warning: --mpi=\S+: gsched starts every task itself", l))
     == (a or ""),
     "srun --mpi=pmi2/pmix runs the step as Slurm does, and says once that gsched runs no "
     "PMI server (an MPI program that needs one fails in MPI_Init; mpirun inside the job "
     "works)", False),
    ("exec-failure-wording",
     lambda k, a, b: k.startswith("file ") and a is not None and b is not None
     and exec_failures(a, EXEC_FAILED_SLURM) == exec_failures(b, EXEC_FAILED_GSCHED),
     "a step task whose program cannot be started ends with the failed exec's errno on "
     "both (2 for a program not found); slurmstepd says 'error: execve(): PROG: No such "
     "file or directory', gsched's agent 'task N could not start: cannot start PROG: no "
     "such file (or the output directory does not exist)'", False),
    ("cpu-share-steps",
     lambda k, a, b: (k.startswith("file ") or k == "jobs.state")
     and (k == "jobs.state" or "More processors requested than permitted" in (a or ""))
     and "More processors requested than permitted" not in (b or ""),
     "a step that asks for more CPUs than Slurm gave its job (one per task) runs here, "
     "where a GPU job holds its GPUs' share of the node's CPUs (cpu-share); Slurm refuses "
     "it: 'More processors requested than permitted'. A step over what the job holds "
     "here is refused in those words", True),
    ("never-runs-wording",
     lambda k, a, b: k.startswith("submit[") and k.endswith(".stderr")
     and bool(re.search(r"Batch job submission failed: (Invalid feature specification|"
                        r"Requested node configuration is not available)", a or ""))
     and "can never run here" in (b or ""),
     "a job no node could ever run is refused at submission by both; gsched's message "
     "names what no node has (a feature, a GPU model, a count) instead of Slurm's "
     "'Invalid feature specification' or 'Requested node configuration is not "
     "available'", False),
    ("slurm-internals",
     lambda k, a, b: b is None and k.rpartition(".")[2] in SLURM_INTERNALS,
     "variables that describe Slurm's own daemons and wiring (srun's ports, slurmctld's "
     "address, the config file, the task's pid and scheduling priority, the topology "
     "plugin's address) have no gsched counterpart; no job script reads them", False),
    ("cluster-name",
     lambda k, a, b: k.endswith("SLURM_CLUSTER_NAME") and b is None,
     "gsched has one cluster per controller set and names none; SLURM_CLUSTER_NAME is "
     "not set", False),
    ("omp-threads",
     lambda k, a, b: k.endswith("OMP_NUM_THREADS") and a is None,
     "gsched sets OMP_NUM_THREADS to each process's share of the job's CPUs (as torchrun "
     "does), so OpenMP code does not start a thread per CPU of the machine", False),
    ("cuda-pci-order",
     lambda k, a, b: k.endswith("CUDA_DEVICE_ORDER") and a is None and b == "PCI_BUS_ID",
     "gsched sets CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA's GPU numbers are nvidia-smi's and "
     "CUDA_VISIBLE_DEVICES names the GPUs it was given", False),
    ("throttled-array-gpus",
     lambda k, a, b: k.endswith(("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS"))
     and bool(a) and bool(b) and a.count(",") == b.count(","),
     "a throttled array's (--array=...%N) next task takes GPUs an earlier task let go, and "
     "which task ended first is a race on both sides: the same number of GPUs, not the "
     "same ones", True),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), text=True,
                          capture_output=True, **kw)


# ------------------------------------------------------------------ clusters

def bin_dir():
    d = os.environ.get("GSCHED_BIN")
    if d:
        return Path(d)
    for p in ("debug", "release"):
        if (REPO / "target" / p / "gctld").exists():
            return REPO / "target" / p
    sys.exit("slurmdiff: no gsched binaries; run cargo build --bins first")


class Slurm:
    name = "slurm"

    def __init__(self):
        self.root = ROOT / "slurm"

    def up(self):
        r = sh([str(HERE / "slurm.sh"), "up"],
               env={**os.environ, "SLURMDIFF_ROOT": str(self.root),
                    "SLURMDIFF_FIRST_JOB_ID": str(FIRST_JOB_ID)})
        if r.returncode != 0:
            sys.exit("slurmdiff: Slurm did not start:\n" + r.stderr)

    def down(self):
        sh([str(HERE / "slurm.sh"), "down"],
           env={**os.environ, "SLURMDIFF_ROOT": str(self.root)})

    def env(self):
        return {"SLURM_CONF": str(self.root / "etc/slurm.conf"),
                "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
                "DIFF_DEV_DIR": str(self.root / "dev")}


class Gsched:
    name = "gsched"

    def __init__(self):
        self.root = ROOT / "gsched"
        self.bin = bin_dir()
        self.procs = []
        self.controllers = f"127.0.0.1:{GSCHED_PORT}"

    def up(self):
        shutil.rmtree(self.root, ignore_errors=True)
        (self.root / "log").mkdir(parents=True)
        logs = self.root / "log"
        # Job ids from FIRST_JOB_ID on both sides (Slurm's FirstJobId).
        config = self.root / "gctld.toml"
        config.write_text(f"[scheduler]\nfirst_job_id = {FIRST_JOB_ID}\n")
        self.procs.append(subprocess.Popen(
            [str(self.bin / "gctld"), "--dev-local", "--id", "1", "--listen",
             self.controllers, "--data-dir", str(self.root / "ctl"), "--config", str(config)],
            stdout=open(logs / "gctld.log", "w"), stderr=subprocess.STDOUT))
        sh([str(self.bin / "gctl"), "slurm-names", str(self.root / "slurm")], check=True)
        for n, features in (("n1", "rack1,ib"), ("n2", "rack2,ib")):
            self.procs.append(subprocess.Popen(
                [str(self.bin / "gagentd"), "--dev-local", "--min-uid", "0",
                 "--features", features,
                 "--controllers", self.controllers, "--name", n,
                 "--state-dir", str(self.root / n),
                 "--fake-topology", str(HERE / "topology.json"),
                 "--training-addr", "127.0.0.1", "--cgroup-root", "off",
                 "--kmsg", str(self.root / f"{n}.kmsg"),
                 "--slurm-names", str(self.root / "slurm")],
                stdout=open(logs / f"{n}.log", "w"), stderr=subprocess.STDOUT))
        env = {**os.environ, **self.env()}
        for _ in range(300):
            r = sh([str(self.bin / "ginfo"), "--json"], env=env)
            if r.returncode == 0 and r.stdout.count('"online": true') >= 2:
                break
            time.sleep(0.2)
        else:
            sys.exit(f"slurmdiff: gsched did not come up; see {logs}")

    def down(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def env(self):
        return {"GSCHED_CONTROLLERS": self.controllers,
                "PATH": f"{self.root / 'slurm'}:{self.bin}:/usr/bin:/bin:/usr/sbin:/sbin",
                "DIFF_DEV_DIR": str(self.root / "dev")}


# ------------------------------------------------------------------ corpus

def headers(text):
    h = {"source": [], "submit": "", "times": 1, "driver": False, "design": []}
    for line in text.splitlines():
        m = re.match(r"#\s*(source|submit|times|driver|design):\s*(.*)$", line)
        if not m:
            continue
        key, val = m.group(1), m.group(2).strip()
        if key == "source":
            h["source"].append(val)
        elif key == "submit":
            h["submit"] = val
        elif key == "times":
            h["times"] = int(val)
        elif key == "design":
            h["design"] += val.split()
        else:
            h["driver"] = True
    return h


TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def ended(job, env):
    """Whether every job (or array task) `scontrol show job` lists for `job` has ended."""
    r = sh(["scontrol", "show", "job", str(job)], env={**os.environ, **env})
    states = re.findall(r"JobState=(\S+)", r.stdout)
    return r.returncode == 0 and states and all(st in TERMINAL for st in states)


def run_one(cluster, script, timeout=180):
    """Runs one corpus script on one cluster; returns the raw observations."""
    text = script.read_text()
    h = headers(text)
    run = ROOT / "runs" / cluster.name / script.stem
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    (run / script.name).write_text(text)
    for p in PROGRAMS:
        os.symlink(HERE / "probe.py", run / p)
    (run / "data").mkdir()
    (run / "bin").mkdir()
    for py in ("python", "python3"):
        os.symlink("/usr/bin/python3", run / "bin" / py)
    # One empty home for both clusters: a login shell (#!/bin/bash -l) reads HOME's
    # startup files, and the machine's own (a pyenv rehash racing between array tasks)
    # are no part of either scheduler's behaviour.
    home = ROOT / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "LANG": "C.UTF-8",
           "USER": os.environ.get("USER", "root"), "DIFF_FROM_SUBMIT": "yes",
           **cluster.env()}
    env["PATH"] = f"{run / 'bin'}:{env['PATH']}"
    outs = []
    ids = []
    if h["driver"]:
        try:
            r = sh(["bash", script.name], cwd=run, env=env, timeout=timeout)
            outs.append((r.returncode, r.stdout, r.stderr))
        except subprocess.TimeoutExpired:
            outs.append((124, "", "timed out"))
    else:
        extra = h["submit"].split() if h["submit"] else []
        for _ in range(h["times"]):
            r = sh(["sbatch", *extra, script.name], cwd=run, env=env)
            outs.append((r.returncode, r.stdout, r.stderr))
    submitted = re.compile(r"Submitted batch job (\d+)")
    ids = sorted({int(m) for _, o, e in outs for m in submitted.findall(o + e)})
    deadline = time.time() + timeout
    waited = set()
    while True:
        for j in ids:
            while j not in waited and time.time() < deadline and not ended(j, env):
                time.sleep(0.2)
            waited.add(j)
        files, probes = read_run(run, script.name)
        # Jobs the jobs submitted (a script that resubmits itself): wait for them too,
        # and name their ids as the others'.
        more = {int(m) for text in files.values() for m in submitted.findall(text)}
        if more <= set(ids) or time.time() >= deadline:
            break
        ids = sorted(set(ids) | more)
    jobs = {}
    for j in ids:
        r = sh(["scontrol", "show", "job", str(j)], env={**os.environ, **env})
        jobs[j] = r.stdout
    return {"run": str(run), "outs": outs, "ids": ids, "jobs": jobs, "files": files,
            "probes": probes}


def read_run(run, script_name):
    """The run directory's files (name -> text) and the probes' records."""
    files, probes = {}, []
    for p in sorted(run.rglob("*")):
        if p.is_symlink() or p.is_dir() or p.name == script_name:
            continue
        if p.parent == run / "probes":
            probes.append(json.loads(p.read_text()))
            continue
        rel = str(p.relative_to(run))
        try:
            files[rel] = p.read_text(errors="replace")
        except OSError as e:
            files[rel] = f"<unreadable: {e}>"
    return files, probes


# ------------------------------------------------------------------ normalise

def id_map(obs):
    """Job ids seen (submitted, and in the probes' variables) -> J1, J2...; array
    tasks' own ids -> JA."""
    ids = set(obs["ids"])
    task_ids = set()
    for rec in obs["probes"]:
        env = rec["env"]
        for k in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID"):
            if env.get(k, "").isdigit():
                ids.add(int(env[k]))
        own, array = env.get("SLURM_JOB_ID", ""), env.get("SLURM_ARRAY_JOB_ID")
        if array and own != array and own.isdigit():
            task_ids.add(int(own))
    named = sorted(ids - task_ids)
    m = {j: f"J{i + 1}" for i, j in enumerate(named)}
    m.update({j: "JA" for j in task_ids})
    return m


# What Slurm's srun prints while it waits for a step's resources to be let go by the
# step before (a race on Slurm's side, with no counterpart in what a job does).
# The Slurm side runs TaskPlugin=task/none (a 2-CPU VM cannot bind tasks as a GPU node
# would), so its srun says so for every --cpu-bind; that line is the peer's, not Slurm's.
SRUN_WAITING = re.compile(r"^srun: (Job \S+ step creation (temporarily|still) disabled, retrying"
                          r" \(Requested nodes are busy\)|Step created for job \S+"
                          r"|cluster configuration lacks support for cpu binding)$")

# srun's line for the tasks of one node that ended alike. Slurm's srun names together
# those whose ends reached it in one message (`tasks 0-3`, `tasks 11-12,14`), which is a
# matter of timing; lines are compared one task at a time.
TASK_EXIT = re.compile(r"^(srun: error: \S+: )tasks ([\d,-]+)(: .*)$")


def task_exit_lines(line):
    m = TASK_EXIT.match(line)
    if not m:
        return [line]
    ranks = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        ranks.extend(range(int(lo), int(hi or lo) + 1))
    return [f"{m.group(1)}task {r}{m.group(3)}" for r in ranks]


DATE = re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                  r"[ \d]\d \d\d:\d\d:\d\d( [A-Z]{2,5})? \d{4}\b"
                  # ISO 8601 (`date +%Y-%m-%dT%H:%M:%S`, `date -Iseconds`, Python's isoformat,
                  # `date '+%F %T'`) and the compact run-name stamp (`date +%Y%m%d_%H%M%S`).
                  r"|\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"
                  r"|\b20\d{6}[_-]\d{6}\b")

JOB_DIR = re.compile(r"/[^\s'\"]*/spool/n\d+/job\d+|/tmp/gsched-jobs/[\w.-]+")


def normaliser(obs):
    ids = id_map(obs)
    run = obs["run"]
    pat = re.compile(r"(?<!\d)(" + "|".join(str(j) for j in sorted(ids, reverse=True))
                     + r")(?!\d)") if ids else None

    def norm(s):
        s = s.replace(run, "<RUN>")
        # What `date` prints: the two sides run a script at slightly different moments.
        s = DATE.sub("<DATE>", s)
        # Where each keeps its private copy of the batch script (both named slurm_script).
        s = JOB_DIR.sub("<JOBDIR>", s)
        return pat.sub(lambda m: ids[int(m.group(1))], s) if pat else s
    return norm


def facts(obs):
    norm = normaliser(obs)
    f = {}
    for i, (code, out, err) in enumerate(obs["outs"]):
        f[f"submit[{i}].exit"] = str(code)
        f[f"submit[{i}].stdout"] = norm(out.strip())
        f[f"submit[{i}].stderr"] = norm(err.strip())
    states = []
    for text in obs["jobs"].values():
        for st, ec in re.findall(r"JobState=(\S+).*?ExitCode=(\S+)", text, re.S):
            states.append(f"{st} {ec}")
    f["jobs.state"] = " | ".join(sorted(states))
    for name, text in obs["files"].items():
        # The Slurm side's nodes share this host's name, which %N gives there.
        name = re.sub(rf"(?<![A-Za-z0-9])({HOST}|n1|n2)(?![A-Za-z0-9])", "<node>", name)
        lines = (norm(one) for line in text.splitlines() if not SRUN_WAITING.match(line)
                 for one in task_exit_lines(line))
        f[f"file {norm(name)}"] = "\n".join(sorted(lines))
    tasks = [task_fact(rec, norm) for rec in obs["probes"]]
    # Concurrent steps number themselves in the order they reach the controller, on
    # either side: tasks are matched by what they ran and where, not by step number.
    tasks.sort(key=lambda t: (t.get("SLURM_ARRAY_TASK_ID", ""), "SLURM_STEP_ID" in t,
                              t["argv"], t.get("SLURMD_NODENAME", ""),
                              t.get("SLURM_PROCID", ""), json.dumps(t, sort_keys=True)))
    for i, t in enumerate(tasks):
        kind = "step" if "SLURM_STEP_ID" in t else "batch"
        label = f"task[{t.get('SLURM_ARRAY_TASK_ID', '-')}/{kind}" \
                f"/{t.get('SLURM_PROCID', '?')}#{i}]"
        for k, v in t.items():
            f[f"{label}.{k}"] = v
    return f


# Every variable of these families either system sets in a task is compared.
COMPARED_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_", "SALLOC_", "CUDA_", "GPU_",
                     "OMP_", "DIFF_")


def task_fact(rec, norm):
    env = rec["env"]
    t = {}
    keys = set(COMPARED_VARS) | {k for k in env if k.startswith(COMPARED_PREFIXES)}
    for k in sorted(keys):
        if k in env and k != "DIFF_DEV_DIR":
            t[k] = norm(env[k])
    for k in ("SLURM_STEP_ID", "SLURM_STEPID"):
        if k in t:
            t[k] = "<step>"
    t["prog"] = rec["prog"]
    t["argv"] = norm(" ".join(rec["argv"]))
    t["cwd"] = norm(rec["cwd"])
    t["ncpus"] = str(rec["ncpus"])
    if rec["signals"]:
        t["signals"] = ",".join(rec["signals"])
    return t


# ------------------------------------------------------------------ compare

def compare(a, b):
    diffs = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            diffs.append((k, a.get(k), b.get(k)))
    return diffs


# A script that names a CPU count gets that count on both: cpu-share does not apply.
NAMES_CPUS = re.compile(r"--cpus-per-task|--cpus-per-gpu|--mincpus|(^|\s)-c\s*\d", re.M)


def classify(name, diffs, open_diffs, declared, names_cpus=False):
    if not diffs:
        return "identical", []
    reasons, bugs = set(), []
    for k, sv, gv in diffs:
        rule = next((r for r in DESIGN
                     if (not r[3] or r[0] in declared)
                     and not (r[0] == "cpu-share" and names_cpus)
                     and r[1](k, sv, gv)), None)
        if rule:
            reasons.add(rule[0])
        else:
            bugs.append((k, sv, gv))
    if not bugs:
        return "by design", sorted(reasons)
    if name in open_diffs:
        return "open", [open_diffs[name]]
    return "bug", [f"{k}: slurm={sv!r} gsched={gv!r}" for k, sv, gv in bugs[:6]]


def load_open():
    out = {}
    p = HERE / "open-differences.txt"
    if p.exists():
        for line in p.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, why = line.partition(" ")
                out[name] = why.strip()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--table", help="also write the table (markdown) here")
    ap.add_argument("--keep", action="store_true", help="leave both clusters running")
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus",
                    help="the directory of scripts (a held-out batch before it joins the corpus)")
    args = ap.parse_args()
    scripts = sorted(p for p in args.corpus.iterdir()
                     if p.suffix in (".sbatch", ".sh") and args.only in p.name)
    for s in scripts:
        if not headers(s.read_text())["source"]:
            sys.exit(f"slurmdiff: {s.name} names no source (# source: ...)")
    slurm, gsched = Slurm(), Gsched()
    slurm.up()
    gsched.up()
    open_diffs = load_open()
    rows = []
    started = time.time()
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for s in scripts:
                fs, fg = pool.submit(run_one, slurm, s), pool.submit(run_one, gsched, s)
                a, b = facts(fs.result()), facts(fg.result())
                diffs = compare(a, b)
                declared = headers(s.read_text())["design"]
                live = "\n".join(line for line in s.read_text().splitlines()
                                 if not line.lstrip().startswith("##"))
                names_cpus = bool(NAMES_CPUS.search(live))
                verdict, notes = classify(s.stem, diffs, open_diffs, declared, names_cpus)
                rows.append((s.stem, verdict, notes))
                print(f"{s.stem:40} {verdict:10} {'; '.join(notes)}", flush=True)
                if args.verbose and diffs:
                    for k, sv, gv in diffs:
                        print(f"    {k}\n      slurm : {sv!r}\n      gsched: {gv!r}")
    finally:
        if not args.keep:
            gsched.down()
            slurm.down()
    counts = {}
    for _, v, _ in rows:
        counts[v] = counts.get(v, 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    print(f"# {len(rows)} scripts in {time.time() - started:.0f} s: {summary}")
    if args.table:
        # What the file says above its table (how it was made, what it means) stays.
        try:
            intro = Path(args.table).read_text().split("| script | verdict |")[0]
        except OSError:
            intro = ""
        with open(args.table, "w") as t:
            t.write(intro)
            t.write("| script | verdict | notes |\n|---|---|---|\n")
            for name, v, notes in rows:
                t.write(f"| {name} | {v} | {'; '.join(notes)} |\n")
            t.write(f"\n{len(rows)} scripts: {summary}.\n")
    return 1 if counts.get("bug") else 0


if __name__ == "__main__":
    sys.exit(main())
