#!/usr/bin/env bash
# Live, READ-ONLY validation of `gpoeo-rt trace record` + `trace detect` beside real training jobs on a GPU host.
# Never changes a GPU setting: recording opens NVML with clock writes disallowed, and GPOEO_FORBID_CLOCK_WRITES makes
# the backend refuse any attempt to open it otherwise.
# Usage: scripts/h200/validate_detection.sh OUT_DIR [SECONDS]
set -euo pipefail
out="$1"; seconds="${2:-36}"
here="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONPATH="$here/runtime:${PYTHONPATH:-}" GPOEO_FORBID_CLOCK_WRITES=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
for spec in resnet:512 gpt:64 resnet:128:20 gpt:16+mlp:65536 mlp:65536; do
    tag="$(echo "$spec" | tr ':+' '_-')"
    python3 -m gpoeo_rt trace record "$out/$tag" --seconds "$((seconds + 6))" > "$out/$tag.record.log" 2>&1 &
    recorder=$!
    sleep 2
    python3 "$here/scripts/h200/train_workload.py" "$spec" "$out/$tag.iterations.csv" "$seconds" 2>&1 | grep -v Warn | tail -2
    wait "$recorder"
    cp "$out/$tag.iterations.csv" "$out/$tag/iterations.csv"
    python3 -m gpoeo_rt trace detect "$out/$tag" --json > "$out/$tag/detect.json" || echo "detect failed for $tag"
    echo "== $spec"; cat "$out/$tag/detect.json"
done
python3 "$here/scripts/bench_detection.py" "$out"
