#!/usr/bin/env bash
# Live, READ-ONLY validation of step markers on a GPU host: `gpoeo-rt start --advise` beside real PyTorch jobs of
# 10-30 ms iterations that call gpoeo_rt.client.mark_step() after each step. Measures (1) how close the daemon's
# marker-timed period is to the job's true iteration time, (2) the markers' overhead on the job's throughput
# (in-process interleaved blocks without / with markers, the daemon running throughout), (3) the client's cost per
# call with and without a daemon. Never changes a GPU setting: --advise opens NVML read-only and
# GPOEO_FORBID_CLOCK_WRITES makes the backend refuse to open it any other way.
# Usage: scripts/h200/validate_markers.sh OUT_DIR [jobs|overhead|all] [SECONDS] [BLOCK_S]   (~5 min with defaults)
set -euo pipefail
out="$1"; what="${2:-all}"; seconds="${3:-35}"; block_s="${4:-2}"
here="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONPATH="$here/runtime:${PYTHONPATH:-}" GPOEO_FORBID_CLOCK_WRITES=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
rt() { python3 -m gpoeo_rt "$@"; }

# A job with the daemon beside it. The job finds the daemon's marker socket through GPOEO_RT_RUN_DIR.
job_with_daemon() {
    local spec="$1" dir="$2" mode="$3" secs="$4"
    mkdir -p "$dir"
    rt start --advise --run-dir "$dir/run" --state-dir "$dir/state" > "$dir/daemon.log" 2>&1 &
    local daemon=$!
    for _ in $(seq 1 100); do [ -S "$dir/run/markers.sock" ] && break; sleep 0.1; done
    GPOEO_RT_RUN_DIR="$dir/run" python3 "$here/scripts/h200/train_workload.py" "$spec" "$dir/iterations.csv" \
        "$secs" "$mode" > "$dir/train.log" 2>&1
    rt status --json --run-dir "$dir/run" > "$dir/status.json"
    rt stop --run-dir "$dir/run" > /dev/null
    wait "$daemon" || echo "daemon exit code $? for $spec" >> "$dir/daemon.log"
}

if [ "$what" = jobs ] || [ "$what" = all ]; then
    # ~9.8 ms (the memory-bound MLP of the shared traces), ~20 ms (twice its batch), ~28 ms (ResNet-50 b64).
    for spec in mlp:65536 mlp:131072 resnet:64; do
        tag="$(echo "$spec" | tr ':+' '_-')"
        job_with_daemon "$spec" "$out/jobs/$tag" on "$seconds"
        echo "== $spec"; grep -m 3 '"baseline"\|"known_phase"' "$out/jobs/$tag/state/decisions-gpu0.jsonl" | cut -c1-240 || true
    done
fi

if [ "$what" = overhead ] || [ "$what" = all ]; then
    # The fastest job shows a per-step cost most. 2 s blocks, off/on in turn, for 2 min: ~30 pairs.
    job_with_daemon "${OVERHEAD_SPEC:-mlp:65536}" "$out/overhead" "alternate:$block_s" "${OVERHEAD_S:-120}"
    # The client's own cost per call: with the daemon of a fresh advise run listening, and with none.
    dir="$out/client_cost"; mkdir -p "$dir"
    rt start --advise --run-dir "$dir/run" --state-dir "$dir/state" > "$dir/daemon.log" 2>&1 &
    daemon=$!
    for _ in $(seq 1 100); do [ -S "$dir/run/markers.sock" ] && break; sleep 0.1; done
    cost='import json, sys, timeit; from gpoeo_rt.client import mark_step; mark_step(0)
n = 200000; print(json.dumps({"case": sys.argv[1], "ns_per_call": 1e9 * min(timeit.repeat(lambda: mark_step(0), number=n, repeat=5)) / n}))'
    GPOEO_RT_RUN_DIR="$dir/run" python3 -c "$cost" daemon > "$dir/cost.jsonl"
    GPOEO_RT_RUN_DIR="$dir/none" python3 -c "$cost" no_daemon >> "$dir/cost.jsonl"
    rt stop --run-dir "$dir/run" > /dev/null
    wait "$daemon" || true
fi
python3 "$here/scripts/h200/markers_summary.py" "$out" | tee "$out/summary.txt"
