#!/usr/bin/env bash
# The Slurm side of the differential harness: real Slurm (Debian's slurm-wlm) with
# 2 nodes x 8 fake GPUs, 32 CPUs on 2 sockets and 4096 MB each (the size of
# tests/slurmdiff/topology.json), private daemons on 127.0.0.1, everything under $ROOT.
#
#   tests/slurmdiff/slurm.sh up      install if missing, configure, start, wait idle
#   tests/slurmdiff/slurm.sh down    stop the daemons (by their pid files)
#
# Clients then need SLURM_CONF=$ROOT/etc/slurm.conf. Settings: SLURMDIFF_ROOT
# (/tmp/gsched-slurmdiff/slurm), SLURMDIFF_PORT (17817; slurmd take the next two),
# SLURMDIFF_FIRST_JOB_ID (1000).
set -euo pipefail
ROOT=${SLURMDIFF_ROOT:-/tmp/gsched-slurmdiff/slurm}
PORT=${SLURMDIFF_PORT:-17817}
CONF=$ROOT/etc/slurm.conf
log() { echo "# slurm.sh: $*" >&2; }

alive() { # PIDFILE COMM
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$2" ]
}

down() {
    for pf in "$ROOT"/run/slurmd-*.pid "$ROOT"/run/slurmctld.pid "$ROOT"/munge/munged.pid; do
        [ -e "$pf" ] || continue
        local comm=slurmd
        case "$pf" in *slurmctld.pid) comm=slurmctld ;; *munged.pid) comm=munged ;; esac
        if alive "$pf" "$comm"; then kill "$(cat "$pf")"; fi
    done
    for _ in $(seq 1 50); do
        pgrep -f "$ROOT/etc/slurm.conf" >/dev/null || break
        sleep 0.1
    done
}

up() {
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        log "installing slurm-wlm munge"
        DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >&2 || {
            DEBIAN_FRONTEND=noninteractive apt-get update >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >&2
        }
    fi
    down
    rm -rf "$ROOT"
    mkdir -p "$ROOT"/{etc,state,spool/n1,spool/n2,log,run,dev,munge}
    # Slurm 22.05 drops a GPU without File=, and File= must stat as a device.
    for g in 0 1 2 3 4 5 6 7; do
        mknod -m 666 "$ROOT/dev/nvidia$g" c 195 "$g" 2>/dev/null || ln -s /dev/null "$ROOT/dev/nvidia$g"
    done
    local host addr comm=""
    host=$(hostname -s)
    addr=$(getent ahostsv4 "$host" | awk 'NR==1{print $1}')
    # Bind loopback only where the host name resolves there; elsewhere slurmd listens
    # on all addresses of this (test) machine.
    [ "$addr" = 127.0.0.1 ] && comm="CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"
    cat >"$CONF" <<EOF
ClusterName=slurmdiff
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$ROOT/munge/munge.socket
$comm
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool/%n
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd-%n.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd-%n.log
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
GresTypes=gpu
SlurmdParameters=config_overrides
MinJobAge=3600
FirstJobId=${SLURMDIFF_FIRST_JOB_ID:-1000}
InactiveLimit=0
KillWait=5
Waittime=0
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT + 4)) CPUs=32 Sockets=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=4096 Gres=gpu:8 Features=rack1,ib State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT + 5)) CPUs=32 Sockets=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=4096 Gres=gpu:8 Features=rack2,ib State=UNKNOWN
PartitionName=gpu Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$ROOT/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=n[1-2] Name=gpu File=$ROOT/dev/nvidia[0-7]
EOF
    chmod 644 "$CONF" "$ROOT/etc/gres.conf"
    chown munge:munge "$ROOT/munge"
    chmod 755 "$ROOT/munge"
    runuser -u munge -- mungekey -c -k "$ROOT/munge/munge.key" -b 1024
    runuser -u munge -- munged --socket="$ROOT/munge/munge.socket" \
        --key-file="$ROOT/munge/munge.key" --pid-file="$ROOT/munge/munged.pid" \
        --log-file="$ROOT/munge/munged.log" --seed-file="$ROOT/munge/munged.seed"
    export SLURM_CONF=$CONF
    slurmctld -f "$CONF"
    for n in n1 n2; do slurmd -f "$CONF" -N "$n"; done
    for _ in $(seq 1 300); do
        if [ "$(sinfo -h -o '%t' 2>/dev/null | sort -u)" = idle ]; then
            log "ready: 2 nodes x 8 GPUs idle (SLURM_CONF=$CONF)"
            return 0
        fi
        sinfo -h -o '%N %t' 2>/dev/null | grep -qE 'drain|down' &&
            scontrol update nodename=n1,n2 state=resume 2>/dev/null || true
        sleep 0.2
    done
    log "Slurm did not come up: see $ROOT/log"
    sinfo >&2 || true
    return 1
}

case "${1:-up}" in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
