set -u
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
bash benchmarks/gpu_run.sh "tables:grouped_bf16_*" "tests/test_abi.py" > $OUT/gpu_run.log 2>&1; tail -3 $OUT/gpu_run.log
stamp built
python3 -c "import wavetune; print(len(wavetune.grouped_configs()), 'grouped variants')"
python3 benchmarks/e2e.py --out "$OUT/moe" --layers 2 --modes eager --wavetune layers,grouped --lengths 2048 \
  --decode-batches 1,16 --context 1024 --reps 10 --time-budget-s 200 \
  --models mixtral-8x7b,qwen3-30b-a3b,qwen1.5-moe-a2.7b > $OUT/moe.log 2>&1
stamp moe
grep "batch" $OUT/moe.log | grep -v Warn
