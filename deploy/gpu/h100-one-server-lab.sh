#!/usr/bin/env bash
# Run from a folder holding bin.tgz (stripped release binaries) and, for the lab script,
# one-server.tgz (deploy/one-server and deploy/systemd/one-server), as the device tool does.
# Wave 4, device call B (issue 54) on the real machine: the one-server install as root,
# then the controller and the agent started as its units say; alice's job on the GPU while
# bob's Python in his own shell opens it (reported within one sampling interval; the next
# job does not land on it); a CPU-only job starts while the GPU job holds the node's default
# share; gctl burn-in run by root goes through the service user; install.sh again (0 changed).
set -u
D="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B=/tmp/w4bin
SUM="$OUT/wave4-b.txt"
say() { echo "$*" | tee -a "$SUM"; }
say "== $(hostname) $(date -u)"
for u in gsalice gsbob; do id $u >/dev/null 2>&1 || useradd --create-home --shell /bin/bash $u; done
rm -rf $B; mkdir -p $B; tar xzf "$D/bin.tgz" -C $B
tar xzf "$D/one-server.tgz" -C /tmp   # deploy/ of this wave (install.sh and the units)
say "-- install.sh (first run)"
bash /tmp/deploy/one-server/install.sh --bin-dir $B --account lab --no-start 2>&1 | tail -6 | tee -a "$SUM"
say "-- install.sh (second run)"
bash /tmp/deploy/one-server/install.sh --bin-dir $B --account lab --no-start 2>&1 | tail -3 | tee -a "$SUM"
say "-- modprobe option: $(cat /etc/modprobe.d/gsched*.conf 2>/dev/null)"
say "-- driver now: $(grep -E 'ModifyDeviceFiles' /proc/driver/nvidia/params)"
# Start the daemons as the units say (no systemd here): HTTP on loopback instead of the socket unit.
CTL=$(grep ^ExecStart= /etc/systemd/system/gctld.service | sed 's/^ExecStart=//; s/--http systemd/--http 127.0.0.1:9817/')
AG=$(grep ^ExecStart= /etc/systemd/system/gagentd.service | sed 's/^ExecStart=//')
say "gctld: $CTL"; say "gagentd: $AG"
mkdir -p /run/gsched /var/lib/gsched; chmod 755 /run/gsched
mkdir -p -m 700 /var/lib/gsched/agent /var/lib/gsched/controller
$CTL > /tmp/gctld.log 2>&1 &
sleep 2
$AG > /tmp/gagentd.log 2>&1 &
for _ in $(seq 1 150); do ginfo --json 2>/dev/null | grep -q '"online": true' && break; sleep 0.2; done
ginfo | tee -a "$SUM"
as() { local u=$1; shift; su - $u -c "$*"; }
say "-- CPU-only beside a GPU job (default share)"
mkdir -p /tmp/jobs && chmod 1777 /tmp/jobs
cat > /tmp/jobs/cuda.py <<'PY'
import ctypes, os, sys, time
cu = ctypes.CDLL("libcuda.so.1")
ok = lambda r, what: (r == 0) or sys.exit(f"{what} failed: {r}")
ok(cu.cuInit(0), "cuInit")
dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p(); ok(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
ptr = ctypes.c_uint64(); ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)), "cuMemAlloc")
print(os.environ.get("USER", os.getuid()), "holds 1 GiB on the GPU, CUDA_VISIBLE_DEVICES=", os.environ.get("CUDA_VISIBLE_DEVICES"), "nproc", len(os.sched_getaffinity(0)), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 60)
PY
cat > /tmp/jobs/hold.sh <<'SH'
#!/bin/bash
exec python3 /tmp/jobs/cuda.py 90
SH
cat > /tmp/jobs/cpu.sh <<'SH'
#!/bin/bash
echo "cpu job on $(hostname): nproc=$(nproc)"
SH
cat > /tmp/jobs/smi.sh <<'SH'
#!/bin/bash
nvidia-smi -L
SH
chmod 755 /tmp/jobs/*
A1=$(as gsalice "cd /tmp && gsub --parsable --gpus 1 -t 10 -o /tmp/jobs/a1-%j.out /tmp/jobs/hold.sh")
sleep 6
C1=$(as gsbob "cd /tmp && gsub --parsable -c 2 -t 5 -o /tmp/jobs/c1-%j.out /tmp/jobs/cpu.sh")
sleep 5
gqueue -t all -o '%i %u %T %r' | tee -a "$SUM"
gqueue -t all --json | python3 -c 'import json,sys; d=json.load(sys.stdin); [print("job", j.get("job_id"), j.get("user"), j.get("state"), "cpus", [n.get("cpus") and len(n["cpus"]) for n in (j.get("allocation") or {}).get("nodes", [])]) for j in d["jobs"]]' | tee -a "$SUM"
cat /tmp/jobs/a1-*.out 2>/dev/null | tee -a "$SUM"
cat /tmp/jobs/c1-*.out 2>/dev/null | tee -a "$SUM"
say "-- bob's Python in his shell on alice's GPU"
as gsbob "cd /tmp && nohup python3 /tmp/jobs/cuda.py 60 > /tmp/bob.out 2>&1 &"
T0=$(date +%s.%N)
outside() { ginfo --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); ns=d["nodes"] if isinstance(d,dict) else d; sys.exit(0 if any(n.get("outside_jobs") for n in ns) else 1)'; }
for _ in $(seq 1 150); do outside && break; sleep 0.2; done
T1=$(date +%s.%N)
cat /tmp/bob.out | tee -a "$SUM"
say "reported after $(python3 -c "print(round($T1-$T0,2))") s (bob's python needs ~seconds to init CUDA)"
ginfo --json | python3 -c 'import json,sys; d=json.load(sys.stdin); ns=d["nodes"] if isinstance(d,dict) else d; [print(n["name"], json.dumps(n.get("outside_jobs"))) for n in ns]' | tee -a "$SUM"
gctl show node "$(hostname -s)" 2>/dev/null | grep -i outside | tee -a "$SUM"
curl -s http://127.0.0.1:9817/metrics | grep outside_jobs | tee -a "$SUM"
A2=$(as gsalice "cd /tmp && gsub --parsable --gpus 1 -t 5 -o /tmp/jobs/a2-%j.out /tmp/jobs/smi.sh")
sleep 4
gqueue -t all -o '%i %u %T %r' | tee -a "$SUM"
gctl doctor 2>&1 | tail -15 | tee -a "$SUM"
gcancel $A1 $A2 >/dev/null 2>&1; pkill -u gsbob python3; sleep 3
say "-- gctl burn-in as root (service user gsched-admin)"
( cd /tmp && timeout 240 gctl burn-in --quick --python python3 --out /tmp/burnin 2>&1 | tail -20 | tee -a "$SUM"; echo "burn-in exit: ${PIPESTATUS[0]}" | tee -a "$SUM" )
gacct -S now-1hours -o JobID,User,JobName,State,ExitCode,Reason 2>&1 | tail -12 | tee -a "$SUM"
pkill -f "$B/gagentd"; pkill -f "$B/gctld"; sleep 1
say "-- install.sh --uninstall"
bash /tmp/deploy/one-server/install.sh --uninstall 2>&1 | tail -4 | tee -a "$SUM"
tar czf "$OUT/wave4-b-logs.tgz" /tmp/gctld.log /tmp/gagentd.log /tmp/bob.out 2>/dev/null
