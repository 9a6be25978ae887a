#!/usr/bin/env bash
# The benchmark history: runs the benchmarks whose figures the README's Performance section
# quotes, each with its baseline measured in the same run, and appends one CSV line per
# figure to docs/results/bench-history.csv:
#
#   date,commit,figure,value,unit,baseline,baseline_value
#
#   tests/benches/history.sh            # scheduler pass, Philly trace, HA bench (+ Slurm)
#
# The Slurm baseline (sbatch one after another and from 8 shells, squeue) comes from the
# real Slurm in ../shared/peers/slurm when that directory exists (it installs and starts
# Slurm on 127.0.0.1; set GSCHED_HISTORY_SLURM=0 to skip it). GSCHED_HISTORY_TRACE=0 skips
# the Philly replay (about 6 minutes), GSCHED_HISTORY_HA=0 the HA bench,
# GSCHED_HISTORY_IDLE=0 the memory, idle-CPU and gqueue run at 10,000 and 100,000 jobs
# (about 8 minutes). The HA bench's
# own settings apply (GSCHED_BENCH_DISK_JOBS defaults to 5000 here, GSCHED_BENCH_TRIALS 20).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
CSV=docs/results/bench-history.csv
[ -f "$CSV" ] || echo "date,commit,figure,value,unit,baseline,baseline_value" >"$CSV"
DATE=$(date -u +%Y-%m-%dT%H:%MZ)
COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo "+dirty")
OUT=$(mktemp -d)
row() { # FIGURE VALUE UNIT [BASELINE BASELINE_VALUE]
    echo "$DATE,$COMMIT,$1,$2,$3,${4:-},${5:-}" | tee -a "$CSV"
}
num() { # FILE REGEX: the first number after REGEX on the first matching line
    /usr/bin/python3 - "$1" "$2" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    m = re.search(sys.argv[2], line)
    if m:
        n = re.search(r"[0-9]+(\.[0-9]+)?", line[m.end():])
        print(n.group(0) if n else "")
        break
PY
}

cargo build --release --quiet -p gsched-sim
# 1. One scheduling pass (issue 28's figure) and FIFO+backfill on the same snapshot.
./target/release/gsim bench-pass --json >"$OUT/pass.json"
py() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); $2" "$1"; }
row pass_ms_p50_1000x8_20000 "$(py "$OUT/pass.json" 'print(round(d["pass_ms_p50"],1))')" ms \
    fifo_backfill_pass_ms_p50 "$(py "$OUT/pass.json" 'print(round(d["baseline_fifo_backfill_ms_p50"],1))')"
row pass_starts_1000x8_20000 "$(py "$OUT/pass.json" 'print(d["started_per_pass"])')" jobs
# The large cluster of the same shape (issue 28: <=250 ms); FIFO+backfill takes ~5 s a pass.
./target/release/gsim bench-pass --nodes 10000 --pending 200000 --runs 3 --json >"$OUT/pass-large.json"
row pass_ms_p50_10000x8_200000 "$(py "$OUT/pass-large.json" 'print(round(d["pass_ms_p50"],1))')" ms \
    fifo_backfill_pass_ms_p50 "$(py "$OUT/pass-large.json" 'print(round(d["baseline_fifo_backfill_ms_p50"],1))')"
row pass_starts_10000x8_200000 "$(py "$OUT/pass-large.json" 'print(d["started_per_pass"])')" jobs

# 2. The Philly trace on the 760-GPU cluster: queueing against FIFO+backfill, placement.
if [ "${GSCHED_HISTORY_TRACE:-1}" != 0 ] && [ -f ../shared/traces/philly_2017_pollux.csv ]; then
    ./target/release/gsim --trace ../shared/traces/philly_2017_pollux.csv --cluster philly-760 \
        --policies gsched,fifo-backfill --json >"$OUT/philly.json"
    p='g=d["policies"]["gsched"]; f=d["policies"]["fifo-backfill"]'
    row philly_avg_queue_s "$(py "$OUT/philly.json" "$p; print(round(g['avg_queue_s']))")" s \
        fifo_backfill_avg_queue_s "$(py "$OUT/philly.json" "$p; print(round(f['avg_queue_s']))")"
    row philly_best_gpu_set_share "$(py "$OUT/philly.json" "$p; print(round(g['best_placement_share'],4))")" share \
        fifo_backfill_best_gpu_set_share "$(py "$OUT/philly.json" "$p; print(round(f['best_placement_share'],4))")"
fi

# 3. Real Slurm first (so the two never share the CPUs), then gsched's HA bench.
slurm_seq="" slurm_par="" slurm_squeue=""
if [ "${GSCHED_HISTORY_SLURM:-1}" != 0 ] && [ -d ../shared/peers/slurm ]; then
    if (cd ../shared/peers/slurm && bash setup.sh >"$OUT/slurm-setup.log" 2>&1); then
        (cd ../shared/peers/slurm && PHASES=a,b N_SUBMIT=1000 N_BIG=10000 bash bench.sh \
            >"$OUT/slurm.txt" 2>"$OUT/slurm.err") || true
        slurm_seq=$(num "$OUT/slurm.txt" '^submit_seq_throughput')
        slurm_par=$(num "$OUT/slurm.txt" '^submit_par8_throughput')
        slurm_squeue=$(num "$OUT/slurm.txt" '^squeue_10000_jobs_median')
        (cd ../shared/peers/slurm && bash teardown.sh >/dev/null 2>&1) || true
    else
        echo "# Slurm peer did not start (see $OUT/slurm-setup.log): no Slurm baseline" >&2
    fi
fi
if [ "${GSCHED_HISTORY_HA:-1}" != 0 ]; then
    GSCHED_BENCH_DISK_JOBS=${GSCHED_BENCH_DISK_JOBS:-5000} \
        cargo bench --quiet -p gsched-tests --bench ha >"$OUT/ha.txt" 2>"$OUT/ha.err"
    row grpc_submit_per_s_1_client "$(num "$OUT/ha.txt" '1 gRPC client:')" jobs/s
    row grpc_submit_per_s_64_clients "$(num "$OUT/ha.txt" '64 gRPC clients:')" jobs/s
    row gsub_per_s_sequential "$(num "$OUT/ha.txt" 'sequential: ')" jobs/s \
        ${slurm_seq:+sbatch_per_s_sequential "$slurm_seq"}
    row gsub_per_s_8_shells "$(num "$OUT/ha.txt" 'submissions/s, 8 shells:')" jobs/s \
        ${slurm_par:+sbatch_per_s_8_shells "$slurm_par"}
    row gqueue_ms "$(num "$OUT/ha.txt" 'reads/s, sequential: +[0-9.]+ +\(')" ms
    row failover_p50_s "$(num "$OUT/ha.txt" ' p50')" s
    row failover_p99_s "$(num "$OUT/ha.txt" ' p99')" s
    [ -n "$slurm_par" ] && row sbatch_per_s_8_shells "$slurm_par" jobs/s
    [ -n "$slurm_squeue" ] && row squeue_s_10000_queued "$slurm_squeue" s
fi
# 4. Memory, idle CPU and gqueue with 10,000 held jobs, then memory and gqueue with 100,000
#    (the scale bench's memory-only run), against slurmctld and its 4 slurmd with the
#    same 10,000 (Slurm's MaxJobCount here is 50,000) when the Slurm peer starts.
if [ "${GSCHED_HISTORY_IDLE:-1}" != 0 ]; then
    slurm_up=0
    if [ "${GSCHED_HISTORY_SLURM:-1}" != 0 ] && [ -d ../shared/peers/slurm ] &&
        (cd ../shared/peers/slurm && bash setup.sh >>"$OUT/slurm-setup.log" 2>&1); then
        slurm_up=1
    fi
    GSCHED_BENCH_MEMORY_ONLY=1 GSCHED_BENCH_SIZES=10000,100000 GSCHED_BENCH_SLURM=$slurm_up \
        cargo bench --quiet -p gsched-tests --bench scale >"$OUT/scale.txt" 2>"$OUT/scale.err"
    [ "$slurm_up" = 1 ] && { (cd ../shared/peers/slurm && bash teardown.sh >/dev/null 2>&1) || true; }
    rss_max() { # SIZE: the largest replica's RSS at that queue size
        /usr/bin/python3 -c '
import re, sys
print(max(float(m.group(1)) for m in re.finditer(r"^gsched rss_" + sys.argv[2] + r"_replica\d ([0-9.]+)", open(sys.argv[1]).read(), re.M)))' "$OUT/scale.txt" "$1"
    }
    rss_max=$(rss_max 10000)
    slurm_rss="" slurm_idle="" slurm_squeue=""
    if [ "$slurm_up" = 1 ]; then
        slurm_rss=$(num "$OUT/scale.txt" '^slurm rss_10000 ')
        slurm_idle=$(num "$OUT/scale.txt" '^slurm idle_cpu_10000_per_10s ')
        slurm_squeue=$(num "$OUT/scale.txt" '^slurm gqueue_10000_ms ')
    fi
    row rss_mib_largest_replica_10000_queued "$rss_max" MiB \
        ${slurm_rss:+slurmctld_rss_mib_10000_queued "$slurm_rss"}
    row idle_cpu_ms_per_10s_10000_queued "$(num "$OUT/scale.txt" '^gsched idle_cpu_10000_per_10s ')" CPU-ms \
        ${slurm_idle:+slurm_daemons_idle_cpu_ms_per_10s "$slurm_idle"}
    row gqueue_ms_10000_queued "$(num "$OUT/scale.txt" '^gsched gqueue_10000_ms ')" ms \
        ${slurm_squeue:+squeue_ms_10000_queued "$slurm_squeue"}
    row rss_mib_largest_replica_100000_queued "$(rss_max 100000)" MiB
    row gqueue_ms_100000_queued "$(num "$OUT/scale.txt" '^gsched gqueue_100000_ms ')" ms
fi
echo "# raw outputs in $OUT" >&2
