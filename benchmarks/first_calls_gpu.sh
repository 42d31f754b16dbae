#!/usr/bin/env bash
# benchmarks/first_calls.py on the GPU machine, from an empty kernel cache, across two calls of its tool (a
# command may run 10 minutes; the background compiles take longer): `start` builds the default (builtin)
# install, runs the given tests, starts the benchmark in a session of its own and returns once its first calls
# are measured; `collect`, called right after on the same machine, waits for it and copies its results to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
state=/root/first-calls
case "${1:-}" in
  start)
    benchmarks/gpu_run.sh builtin "${2:-none}" || exit 1
    [ -d .whl ] && export PYTHONPATH=/tmp/site
    rm -rf "$state" && mkdir -p "$state"
    WAVETUNE_CACHE_DIR="$state/cache" setsid nohup python3 benchmarks/first_calls.py --out "$state" ${3:-} \
      > "$state/log" 2>&1 < /dev/null &
    for _ in $(seq 300); do grep -q "first calls measured\|Error" "$state/log" && break; sleep 2; done
    cp "$state/log" "$OUT/first_calls-start.log"; cp "$state/first_calls.json" "$OUT/" 2>/dev/null; tail -60 "$state/log" ;;
  collect)
    for _ in $(seq 280); do pgrep -f benchmarks/first_calls.py > /dev/null || break; sleep 2; done
    cp "$state/log" "$state/first_calls.json" "$OUT/"; tail -40 "$state/log" ;;
  *) echo "usage: $0 start [TESTS] [BENCHMARK ARGS] | collect" >&2; exit 2 ;;
esac
