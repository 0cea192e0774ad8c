#!/usr/bin/env bash
# tools/demo.sh BUILD_DIR [extra train flags] - the main job: two ranks (CPU processes, or GPUs when present)
# train the small GPT on Moby Dick with ddprun, then print the validation loss, the throughput, a text sample,
# and where the checkpoint and the Chrome trace are. Called by `tools/ddp demo` after set-up and build.
set -euo pipefail
BUILD="$1"
shift
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${DDP_DEMO_DIR:-$ROOT/runs/demo}"
mkdir -p "$OUT"
rm -f "$OUT"/trace.json* "$OUT"/trace.rank*.json  # the merged trace, each rank's (and the old trace.json.rank<R>)
STEPS="${DDP_DEMO_STEPS:-1000}"
echo "ddp demo: 2-rank GPT on Moby Dick, $STEPS steps; checkpoints and trace in $OUT"
set -x
"$BUILD/bin/ddprun" --nproc-per-node 2 --standalone \
  "$BUILD/bin/train" --model gpt --data moby-dick --batch-size 16 --steps "$STEPS" --lr 3e-3 --warmup-steps 20 \
  --log-interval 100 --eval-interval 250 --eval-batches 40 --checkpoint-dir "$OUT" --trace "$OUT/trace.json" \
  --sample-tokens 200 "$@"
{ set +x; } 2>/dev/null
if [ -x "$BUILD/bin/trace_summary" ] && [ -f "$OUT/trace.json" ]; then
  echo
  echo "ddp demo: where the time went (medians over the steps, from the trace; bwd = backward compute):"
  "$BUILD/bin/trace_summary" "$OUT/trace.json" | grep -E '^ *rank|median'
  echo "ddp demo: a picture of one step: python3 tools/plot_trace.py $OUT/trace.json step.png (needs python3-matplotlib)"
fi
