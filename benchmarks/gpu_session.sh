#!/usr/bin/env bash
# Run GPU checks and benchmarks on a CUDA machine where fp4spec is not installed and nothing can
# be fetched: the package is laid out on PYTHONPATH as the setuptools package-dir map installs
# it (emulator/, backends/, conformance/ -> fp4spec.emulator, .backends, .conformance).
#
#   bash benchmarks/gpu_session.sh STEP [STEP...]
#
# Steps (each logs to $OUT/STEP.log when OUT is set, else to ./gpu-logs/; JUnit XML of the test
# steps to $OUT/STEP.xml):
#   all       tests, then bench: everything below but probe and ncu
#   tests     gputests, then backendtests
#   bench     quant, rows, mma, gemm
#   info      GPU, torch, triton versions
#   gputests  pytest -m gpu tests/ (exactness at full size and on every input: the GPU-only
#             instructions, every variant, the fused RHT, the GEMM, backend="auto" on CUDA)
#   backendtests  the other triton tests (tests/backends/test_triton_*.py) on the GPU's kernels
#   quant     benchmarks/bench_gpu_quantize.py (quantize / dequantize timings; QUANT_ARGS passes flags)
#   api       benchmarks/bench_gpu_api.py (the public calls against copy and bf16 matmul; API_ARGS)
#   train     benchmarks/bench_gpu_training_step.py (a training step per recipe against bf16; TRAIN_ARGS)
#   rows      benchmarks/bench_gpu_rows.py (rowwise tiles and the experiments)
#   mma       benchmarks/bench_gpu_rht_mma.py (the RHT on the tensor cores; MMA_ARGS)
#   gemm      benchmarks/bench_gpu_gemm.py (8192^3 sweep; GEMM_ARGS)
#   conform   python -m fp4spec conform --backend triton (the full suite on the GPU; run from /tmp
#             so that the source folder fp4spec/ does not shadow the laid-out package)
#   probe     benchmarks/probe_gpu_zero_sign.py (the sign of zero results of Hopper's bf16 MMA)
#   ncu       Nsight Compute sections of the rowwise quantize kernels (profile_gpu_rows.py)
# Each step has its own time limit (STEP_TIMEOUT, seconds); the exit status is 1 if any failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PKG=${PKG:-/tmp/fp4spec-site}
LOG=${OUT:-$ROOT/gpu-logs}
mkdir -p "$LOG"
rm -rf "$PKG" && mkdir -p "$PKG"
cp -r "$ROOT/fp4spec" "$PKG/fp4spec"
cp -r "$ROOT/emulator" "$PKG/fp4spec/emulator"
cp -r "$ROOT/backends" "$PKG/fp4spec/backends"
cp -r "$ROOT/conformance" "$PKG/fp4spec/conformance"
# Wheels carried in .whl/ (e.g. torchao, absent from the device image) go beside the package.
if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$PKG" "$ROOT"/.whl/*.whl
fi
export PYTHONPATH=$PKG PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
cd "$ROOT"
status=0
run_step() {
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-40}" "$LOG/$name.log"
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || status=1
}
steps=()
for step in "$@"; do
  case $step in
    all) steps+=(info gputests backendtests quant rows mma gemm) ;;
    tests) steps+=(gputests backendtests) ;;
    bench) steps+=(quant rows mma gemm) ;;
    *) steps+=("$step") ;;
  esac
done
PYTEST="python3 -P -m pytest -q -p no:cacheprovider"
for step in "${steps[@]}"; do
  case $step in
    info) run_step info python3 -c "import torch, triton, numpy; print(torch.__version__, triton.__version__, numpy.__version__, torch.cuda.get_device_name())" ;;
    gputests) run_step gputests timeout "${GPUTESTS_TIMEOUT:-540}" $PYTEST -m gpu --junitxml="$LOG/gputests.xml" ${GPUTESTS_ARGS:-tests/backends} ;;
    backendtests) run_step backendtests timeout "${BACKENDTESTS_TIMEOUT:-420}" $PYTEST -m "not gpu" --junitxml="$LOG/backendtests.xml" \
                    ${BACKENDTESTS_ARGS:-tests/backends/test_triton_backend.py tests/backends/test_triton_rowwise.py tests/backends/test_triton_rht.py tests/backends/test_triton_rht_mma.py tests/backends/test_triton_gemm.py} ;;
    quant) run_step quant timeout "${QUANT_TIMEOUT:-300}" python3 benchmarks/bench_gpu_quantize.py ${QUANT_ARGS:-} ;;
    api) run_step api timeout "${API_TIMEOUT:-300}" python3 benchmarks/bench_gpu_api.py ${API_ARGS:-} ;;
    train) run_step train timeout "${TRAIN_TIMEOUT:-300}" python3 benchmarks/bench_gpu_training_step.py ${TRAIN_ARGS:-} ;;
    rows) run_step rows timeout "${ROWS_TIMEOUT:-240}" python3 benchmarks/bench_gpu_rows.py ${ROWS_ARGS:-} ;;
    mma) run_step mma timeout "${MMA_TIMEOUT:-300}" python3 benchmarks/bench_gpu_rht_mma.py ${MMA_ARGS:-} ;;
    gemm) run_step gemm timeout "${GEMM_TIMEOUT:-300}" python3 benchmarks/bench_gpu_gemm.py ${GEMM_ARGS:-} ;;
    conform) run_step conform timeout "${CONFORM_TIMEOUT:-400}" env -C /tmp python3 -P -m fp4spec conform --backend triton ${CONFORM_ARGS:-} ;;
    probe) run_step probe timeout 120 python3 benchmarks/probe_gpu_zero_sign.py ;;
    ncu) run_step ncu timeout "${NCU_TIMEOUT:-180}" ncu --clock-control none -k "regex:${NCU_KERNELS:-quantize_rows}" \
           --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
           --section WarpStateStats --section LaunchStats --section Occupancy --section InstructionStats --section SchedulerStats \
           python3 ${NCU_SCRIPT:-benchmarks/profile_gpu_rows.py} ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
