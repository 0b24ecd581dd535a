#!/usr/bin/env bash
# Run GPU checks and benchmarks on a CUDA machine where fp4spec is not installed and nothing can
# be fetched: the package is laid out on PYTHONPATH as the setuptools package-dir map installs
# it (emulator/, backends/, conformance/ -> fp4spec.emulator, .backends, .conformance).
#
#   bash benchmarks/gpu_session.sh STEP [STEP...]
#
# Steps (each logs to $OUT/STEP.log when OUT is set, else to ./gpu-logs/):
#   info     GPU, torch, triton versions
#   gemm     benchmarks/bench_gpu_gemm.py (bit-exact checks, then 8192^3 timing)
#   rows     benchmarks/bench_gpu_rows.py (rowwise quantize variants)
#   quant    benchmarks/bench_gpu_quantize.py (checks + table; QUANT_ARGS passes flags)
#   conform  python -m fp4spec conform --backend triton (the full suite on the GPU; run from /tmp
#            so that the source folder fp4spec/ does not shadow the laid-out package)
#   diag     benchmarks/diag_gpu_rht.py (fused RHT + quantize vs the emulator, per tensor kind)
#   mma      benchmarks/bench_gpu_rht_mma.py (the RHT on the tensor cores: checks + timing; MMA_ARGS)
#   probe    benchmarks/probe_gpu_zero_sign.py (the sign of zero results of Hopper's bf16 MMA)
#   auto     backend="auto" on CUDA tensors picks triton and returns CUDA tensors, bit-exact
#   e4m3     the hardware UE4M3 conversion against the integer rounding, every non-negative float32
#   pytest   the GPU-marked tests (tests/backends) with TRITON_INTERPRET=0
#   ncu      Nsight Compute sections of the rowwise quantize kernels (profile_gpu_rows.py)
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
for step in "$@"; do
  case $step in
    info) run_step info python3 -c "import torch, triton, numpy; print(torch.__version__, triton.__version__, numpy.__version__, torch.cuda.get_device_name())" ;;
    gemm) run_step gemm timeout "${GEMM_TIMEOUT:-300}" python3 benchmarks/bench_gpu_gemm.py ${GEMM_ARGS:-} ;;
    rows) run_step rows timeout "${ROWS_TIMEOUT:-240}" python3 benchmarks/bench_gpu_rows.py ${ROWS_ARGS:-} ;;
    quant) run_step quant timeout "${QUANT_TIMEOUT:-300}" python3 benchmarks/bench_gpu_quantize.py ${QUANT_ARGS:-} ;;
    conform) run_step conform timeout "${CONFORM_TIMEOUT:-400}" env -C /tmp python3 -P -m fp4spec conform --backend triton ${CONFORM_ARGS:-} ;;
    diag) run_step diag timeout "${DIAG_TIMEOUT:-120}" python3 benchmarks/diag_gpu_rht.py ${DIAG_ARGS:-mxfp4 nvfp4} ;;
    mma) run_step mma timeout "${MMA_TIMEOUT:-400}" python3 benchmarks/bench_gpu_rht_mma.py ${MMA_ARGS:-} ;;
    probe) run_step probe timeout 120 python3 benchmarks/probe_gpu_zero_sign.py ;;
    auto) run_step auto timeout 120 python3 benchmarks/check_gpu_auto.py ;;
    e4m3) run_step e4m3 timeout 120 python3 benchmarks/check_gpu_e4m3.py ;;
    pytest) run_step pytest timeout "${PYTEST_TIMEOUT:-300}" python3 -P -m pytest -q -x -p no:cacheprovider ${PYTEST_ARGS:-tests/backends} ;;
    ncu) run_step ncu timeout "${NCU_TIMEOUT:-180}" ncu --clock-control none -k "regex:${NCU_KERNELS:-quantize_rows}" \
           --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
           --section WarpStateStats --section LaunchStats --section Occupancy --section InstructionStats --section SchedulerStats \
           python3 ${NCU_SCRIPT:-benchmarks/profile_gpu_rows.py} ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
done
exit $status
