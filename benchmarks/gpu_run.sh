#!/usr/bin/env bash
# One call on a GPU machine with no network: install the wheels carried in .whl/ (nvidia-cutlass, the build's
# one missing requirement), build and install wavetune, run the test suite, then a benchmark if one is given.
# Everything it writes goes to $OUT (default ./gpu-out): build.log, pytest.log, and the benchmark's files.
#
#   benchmarks/gpu_run.sh [KERNEL_SET[:FILTER]] [PYTEST_ARGS] [-- BENCHMARK COMMAND...]
#   benchmarks/gpu_run.sh [KERNEL_SET[:FILTER]] [PYTEST_ARGS] -- --each COMMAND [COMMAND...]
#   benchmarks/gpu_run.sh ci "tests/test_capture.py" -- python3 benchmarks/hf_capture.py --out '$OUT'
#   benchmarks/gpu_run.sh "tables:grouped_bf16_*" "tests/test_grouped_gpu.py"
#   benchmarks/gpu_run.sh ci none -- --each "python3 benchmarks/e2e.py --models llama3-8b --out \$OUT/a" \
#       "python3 benchmarks/e2e.py --models mixtral-8x7b --out \$OUT/b"
#
# PYTEST_ARGS "none" runs no test. With --each, every COMMAND runs at once on a GPU of its own
# (CUDA_VISIBLE_DEVICES=i for the i-th, from 0), its output in $OUT/benchmark-<i>.log, while the tests run
# beside them on GPU 0: on a machine of several GPUs, a call's compile-heavy runs (torch.compile's
# max-autotune) share its device time instead of queueing.
#
# KERNEL_SET: ci (default; 2 minutes on 16 cores), tables (the default install; 8 minutes), full, or a name of
# cutlass_configs/; FILTER: comma-separated name patterns (WAVETUNE_KERNEL_FILTER) that narrow it. The build
# tree build/gpu-<set> is reused while the machine stays up.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export OUT=${OUT:-$repo/gpu-out} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
kernel_set=${1:-ci}
kernel_filter=""
case "$kernel_set" in *:*) kernel_filter=${kernel_set#*:}; kernel_set=${kernel_set%%:*} ;; esac
tests=${2:-tests}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if ! (time python3 -m pip install --no-build-isolation --no-deps . -Ccmake.define.WAVETUNE_KERNEL_SET="$kernel_set" \
      -Ccmake.define.WAVETUNE_KERNEL_FILTER="$kernel_filter" -Cbuild-dir="build/gpu-$kernel_set") \
      > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
tail -3 "$OUT/build.log"
run_tests() {  # from outside the source tree, so that tests import the installed package
  [ "$tests" = none ] || (cd /tmp && python3 -m pytest -q $(for t in $tests; do echo "$repo/$t"; done) 2>&1 |
    tee "$OUT/pytest.log" | tail -15)
}
if [ "${1:-}" = "--each" ]; then
  shift
  i=0
  for command in "$@"; do
    (export CUDA_VISIBLE_DEVICES=$i; eval "$command" > "$OUT/benchmark-$i.log" 2>&1) &
    i=$((i + 1))
  done
  (export CUDA_VISIBLE_DEVICES=0; run_tests)
  wait
  for ((j = 0; j < i; j++)); do echo "== benchmark $j"; tail -5 "$OUT/benchmark-$j.log"; done
else
  run_tests
  if [ $# -gt 0 ]; then
    eval "$*" 2>&1 | tee "$OUT/benchmark.log" | tail -40
  fi
fi
