#!/usr/bin/env bash
# The pretraining comparison on a CUDA machine, within a deadline, resumable.
#
#   DEADLINE=540 RUNS_LIST="bf16:0 nvfp4:0 ufp4:0" TRAIN_ARGS="--tokens 40e6" bash benchmarks/gpu_pretrain.sh
#
# Lays the package out as benchmarks/gpu_session.sh does, then runs `fp4spec train` once per
# recipe:seed of RUNS_LIST (in that order) into $RUNS/<recipe>-s<seed>, each with
# --time-budget = what is left of DEADLINE seconds minus a reserve (at most PER_RUN seconds);
# a run already completed is
# skipped, a paused one resumes (call the script again on the same machine: $RUNS, default
# .runs/ in the repository, stays while the machine is warm). Then `fp4spec train-summary`.
# With $OUT set: summary.md, loss_curves.png, gaps.png and comparison.tar.gz (every run's
# results.json, log.jsonl, probes.jsonl and the summary with its plots) are written there.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/benchmarks/gpu_session.sh" >/dev/null || exit 1   # no steps: only the package layout
export PYTHONPATH=${PKG:-/tmp/fp4spec-site} PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
RUNS=${RUNS:-$ROOT/.runs}
DEADLINE=${DEADLINE:-540}
RESERVE=${RESERVE:-45}
PER_RUN=${PER_RUN:-100000}
mkdir -p "$RUNS"
cd "$ROOT"
start=$SECONDS
for item in ${RUNS_LIST:-bf16:0 nvfp4:0 ufp4:0}; do
  recipe=${item%%:*}; seed=${item##*:}
  left=$((DEADLINE - (SECONDS - start) - RESERVE))
  [ $left -gt $PER_RUN ] && left=$PER_RUN
  if [ $left -lt 60 ]; then echo "=== $recipe seed $seed: not started (${left} s left)"; continue; fi
  echo "=== $recipe seed $seed: budget ${left} s"
  python3 -P -m fp4spec.training.pretrain --out "$RUNS/$recipe-s$seed" --recipe "$recipe" --seed "$seed" \
    --cache-dir "$RUNS/corpus" --time-budget "$left" ${TRAIN_ARGS:-} 2>&1 | grep -v '"train_loss"' | tail -n 5
  echo "=== $recipe seed $seed: rc=${PIPESTATUS[0]} after $((SECONDS - start)) s"
done
python3 -P -m fp4spec.training.summary "$RUNS" --out "$RUNS/summary" >/dev/null && head -n 30 "$RUNS/summary/summary.md"
if [ -n "${OUT:-}" ]; then
  cp "$RUNS/summary/summary.md" "$RUNS/summary/loss_curves.png" "$RUNS/summary/gaps.png" "$OUT/" 2>/dev/null
  (cd "$RUNS" && tar czf "$OUT/comparison.tar.gz" summary */results.json */log.jsonl */probes.jsonl 2>/dev/null)
fi
