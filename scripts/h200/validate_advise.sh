#!/usr/bin/env bash
# Live, READ-ONLY validation of `gpoeo-rt start --advise` beside real PyTorch training jobs on a GPU host, plus the
# runtime's overhead on the job (interleaved pairs without / with the daemon). Never changes a GPU setting: --advise
# opens NVML read-only and GPOEO_FORBID_CLOCK_WRITES makes the backend refuse to open it any other way.
# Usage: scripts/h200/validate_advise.sh OUT_DIR [jobs|pairs|all] [SECONDS] [PAIRS]
# Environment: JOB_SPECS (the jobs to run), PAIR_SPEC (the pairs' job, default resnet:512), PAIR_SECONDS.
set -euo pipefail
out="$1"; what="${2:-all}"; seconds="${3:-40}"; pairs="${4:-5}"
here="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONPATH="$here/runtime:${PYTHONPATH:-}" GPOEO_FORBID_CLOCK_WRITES=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
rt() { python3 -m gpoeo_rt "$@"; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# One training job with the daemon beside it: the daemon's decision log, status and CPU/RSS, the job's iterations.
job_with_daemon() {
    local spec="$1" dir="$2"
    mkdir -p "$dir"
    # python3 directly (not the rt function), so that $! is the daemon's own pid for its CPU time
    python3 -m gpoeo_rt start --advise --run-dir "$dir/run" --state-dir "$dir/state" > "$dir/daemon.log" 2>&1 &
    local daemon=$! t0 c0 sampler
    t0=$(date +%s.%N); c0=$(cpu_ticks "$daemon")
    # The daemon's CPU ticks every 5 s, for its steady state: the whole-run average is dominated by start-up.
    { echo "clk_tck $(getconf CLK_TCK)"
      while kill -0 "$daemon" 2> /dev/null; do echo "$(date +%s.%N) $(cpu_ticks "$daemon")"; sleep 5; done
    } > "$dir/cpu_trace.txt" 2> /dev/null &
    sampler=$!
    python3 "$here/scripts/h200/train_workload.py" "$spec" "$dir/iterations.csv" "$3" > "$dir/train.log" 2>&1
    local c1 t1
    c1=$(cpu_ticks "$daemon"); t1=$(date +%s.%N)
    kill "$sampler" 2> /dev/null || true
    python3 -m gpoeo_rt status --json --run-dir "$dir/run" > "$dir/status.json"
    : > "$dir/status_time.txt"
    for _ in 1 2 3 4 5; do  # wall time of the whole `gpoeo-rt status` command, interpreter start-up included
        local s e; s=$(date +%s.%N); python3 -m gpoeo_rt status --run-dir "$dir/run" > /dev/null; e=$(date +%s.%N)
        python3 -c "print($e - $s)" >> "$dir/status_time.txt"
    done
    python3 -c "import json; print(json.dumps({'cpu_s': ($c1 - $c0) / $(getconf CLK_TCK), 'wall_s': $t1 - $t0}))" \
        > "$dir/daemon_cpu.json"
    rt stop --run-dir "$dir/run" > /dev/null
    wait "$daemon" || echo "daemon exit code $? for $spec" >> "$dir/daemon.log"
}

if [ "$what" = jobs ] || [ "$what" = all ]; then
    for spec in ${JOB_SPECS:-resnet:512 gpt:64 resnet:128:20 gpt:16+mlp:65536 mlp:65536}; do
        tag="$(echo "$spec" | tr ':+' '_-')"
        job_with_daemon "$spec" "$out/jobs/$tag" "$seconds"
        echo "== $spec"; tail -n 3 "$out/jobs/$tag/state/decisions-gpu0.jsonl" | cut -c1-300
    done
fi

if [ "$what" = pairs ] || [ "$what" = all ]; then
    # Interleaved (ABBA...) so drift in clocks or temperature hits both arms alike.
    spec="${PAIR_SPEC:-resnet:512}"
    for i in $(seq 1 "$pairs"); do
        for arm in $([ $((i % 2)) -eq 1 ] && echo "off on" || echo "on off"); do
            dir="$out/pairs/$i-$arm"; mkdir -p "$dir"
            if [ "$arm" = on ]; then
                job_with_daemon "$spec" "$dir" "${PAIR_SECONDS:-$seconds}"
            else
                python3 "$here/scripts/h200/train_workload.py" "$spec" "$dir/iterations.csv" "${PAIR_SECONDS:-$seconds}" \
                    > "$dir/train.log" 2>&1
            fi
        done
    done
fi
python3 "$here/scripts/h200/advise_summary.py" "$out" | tee "$out/summary.txt"
