#!/usr/bin/env bash
# Run from a folder holding bin.tgz (stripped release binaries) and, for the lab script,
# one-server.tgz (deploy/one-server and deploy/systemd/one-server), as the device tool does.
# Wave 4, device call A: (53) the GPU health probe on a healthy GPU, timed; (55) nothing of
# a job outlives it with real cgroup v2 (setsid, double fork, TERM ignored; as a second user).
set -u
D="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B=/tmp/w4bin; rm -rf $B; mkdir -p $B
tar xzf "$D/bin.tgz" -C $B
export PATH="$B:$PATH"
SUM="$OUT/wave4-a.txt"
say() { echo "$*" | tee -a "$SUM"; }
say "== $(hostname): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) CPUs, kernel $(uname -r), $(date -u)"
say "cgroup: $(stat -fc %T /sys/fs/cgroup)"
say "-- 53: gagentd probe --json, three times (first includes CUDA's start)"
for i in 1 2 3; do
  s=$(date +%s.%N); gagentd probe --json > "$OUT/probe-$i.json" 2>"$OUT/probe-$i.err"; rc=$?; e=$(date +%s.%N)
  say "probe $i: rc=$rc wall=$(python3 -c "print(round($e-$s,3))") s"
done
python3 - "$OUT/probe-2.json" <<'PY' | tee -a "$SUM"
import json,sys
r=json.load(open(sys.argv[1]))
print(json.dumps({k:v for k,v in r.items() if k!="states"}, indent=1)[:3000])
PY
say "-- 55: strays with real cgroups"
W=/tmp/w4; rm -rf $W; mkdir -p $W/logs; chmod 755 $W
id gsalice >/dev/null 2>&1 || useradd --no-create-home --shell /bin/sh gsalice
mkdir -p $W/alice && chown gsalice $W/alice
export GSCHED_CONTROLLERS=127.0.0.1:6817
gctld --dev-local --id 1 --listen 127.0.0.1:6817 --data-dir $W/ctl --master-ports 29500-29599 >$W/logs/gctld.log 2>&1 &
sleep 2
gagentd --dev-local --controllers $GSCHED_CONTROLLERS --name gpu0 --state-dir $W/agent --kmsg $W/kmsg >$W/logs/agent.log 2>&1 &
for _ in $(seq 1 100); do ginfo --json 2>/dev/null | grep -q '"online": true' && break; sleep 0.2; done
ginfo | tee -a "$SUM"
grep -E "cgroup" $W/logs/agent.log | head -3 | tee -a "$SUM"
cd $W/alice
for tag in ended cancelled; do
  then=true; [ $tag = cancelled ] && then="sleep 300"
  su -s /bin/sh gsalice -c "cd $W/alice && GSCHED_CONTROLLERS=$GSCHED_CONTROLLERS $B/gsub --parsable --gpus 1 --wrap \"setsid bash -c 'echo \\\$\\\$ > $W/alice/$tag-setsid.pid; exec sleep 300' & ( trap '' TERM; bash -c 'echo \\\$\\\$ > $W/alice/$tag-double.pid; exec sleep 301' & ) ; sleep 2; $then\"" > $W/$tag.id 2>>"$SUM"
  say "$tag job: $(cat $W/$tag.id)"
done
sleep 6
su -s /bin/sh gsalice -c "GSCHED_CONTROLLERS=$GSCHED_CONTROLLERS $B/gcancel $(cat $W/cancelled.id)"
sleep 6
gacct -j "$(cat $W/ended.id),$(cat $W/cancelled.id)" 2>&1 | tee -a "$SUM"
for f in $W/alice/*.pid; do p=$(cat $f); if kill -0 $p 2>/dev/null; then say "ALIVE $(basename $f) pid $p: $(ps -o user,pid,cmd -p $p | tail -1)"; else say "gone $(basename $f) pid $p"; fi; done
say "-- agent log lines about strays:"; grep -E "killed process|left behind" $W/logs/agent.log | tee -a "$SUM"
ls /sys/fs/cgroup/gsched* -d 2>/dev/null | tee -a "$SUM"
pkill -f "$B/gagentd"; pkill -f "$B/gctld"; sleep 1
tar czf "$OUT/wave4-a-logs.tgz" -C $W logs
