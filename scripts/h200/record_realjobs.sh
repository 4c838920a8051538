#!/usr/bin/env bash
# READ-ONLY recordings of real training jobs on a GPU host for issues 17 and 20: `gpoeo-rt trace record` (buffered
# 50 Hz power, polled energy/GPM) and record_thermal.py (temperature, clocks, throttle reasons) beside each job of
# train_workload.py, whose iterations.csv is the ground truth. Never changes a GPU setting.
# Usage: scripts/h200/record_realjobs.sh OUT_DIR SPEC:SECONDS [SPEC:SECONDS ...]   (SPEC as in train_workload.py;
#        the last ':'-field is the job's seconds, e.g. resnet:512:240 or resnet:256:15-45:70)
set -euo pipefail
out="$1"; shift
here="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONPATH="$here/runtime:${PYTHONPATH:-}" GPOEO_FORBID_CLOCK_WRITES=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
for item in "$@"; do
    spec="${item%:*}"; seconds="${item##*:}"
    tag="$(echo "$spec" | tr ':+' '_-')"
    mkdir -p "$out/$tag"
    # 10 s of lead-in before the job (the GPU idle, or cooling from the last job) and 5 s after it
    python3 "$here/scripts/h200/record_thermal.py" "$out/$tag/thermal.csv" "$((seconds + 40))" &
    thermal=$!
    python3 -m gpoeo_rt trace record "$out/$tag" --seconds "$((seconds + 40))" > "$out/$tag/record.log" 2>&1 &
    recorder=$!
    sleep 10
    python3 "$here/scripts/h200/train_workload.py" "$spec" "$out/$tag/iterations.csv" "$seconds" 2>&1 \
        | grep -v Warn | tail -2
    wait "$recorder" "$thermal"
    python3 -m gpoeo_rt trace detect "$out/$tag" --json > "$out/$tag/detect.json" 2>&1 || echo "detect failed: $tag"
    echo "== $spec"; head -c 600 "$out/$tag/detect.json"; echo
done
