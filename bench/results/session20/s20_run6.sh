#!/usr/bin/env bash
# Session 20, run 6: AttentionConcurrentPasses on the session's build and on the two broken builds
# (negative controls, must fail); then V's passes on the side stream against one stream at 8k / 16k
# (d 128, formats grid), same run, A B A B.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
timeout 200 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionConcurrentPasses.*' > $OUT/gpu_test_concurrent_passes.log 2>&1
echo "session build: rc $?"; grep -E "metrics|^\[  (PASSED|FAILED)" $OUT/gpu_test_concurrent_passes.log
for v in nofork nojoin; do
  timeout 200 dev/carry/var/$v/qattn_e2e_gpu_tests --gtest_filter='AttentionConcurrentPasses.*' > $OUT/negative_control_$v.log 2>&1
  echo "negative control $v: rc $?"; grep -E "metrics|values differ|Which is|^\[  (PASSED|FAILED)" $OUT/negative_control_$v.log | head -24
done
export PATH=/opt/torch/.venv/bin:$PATH QATTN_BENCH_CACHE=/tmp/qb6.db
for round in 1 2; do
  for mode in off:0 on:1; do
    n=${mode%%:*}; v=${mode#*:}
    QATTN_CONCURRENT_PASSES=$v timeout 100 bash bench/run_h100.sh $B --grid formats --tune off --variants qattn_int8_fp8,qattn_int8_per_token --d 128 --n 8192,16384 --out /tmp/c_${n}_$round > /tmp/c_${n}_$round.log 2>&1 || tail -3 /tmp/c_${n}_$round.log
  done
done
for f in /tmp/c_*_[12]; do echo "=== $f"; cat $f/prefill_*.md; done > $OUT/concurrent_passes_ab_8k16k.md
python3 bench/compare_runs.py /tmp/c_off_1/prefill_*.json /tmp/c_on_1/prefill_*.json
python3 bench/compare_runs.py /tmp/c_off_2/prefill_*.json /tmp/c_on_2/prefill_*.json
