#!/usr/bin/env bash
# Session 20, run 7 (final runtime code: V's passes on side stream 0, Q's on side stream 1 where Q and K
# both have passes): AttentionConcurrentPasses (5 specs, one with Q, K and V passes) and its negative
# control (no fork wait, must fail); the prefill GPU suites in parallel; then the A/B of the side streams
# against one stream at d 128, N 1k / 4k, with the INT4 + FP8 format (smooth=qkv: three operands' passes).
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
timeout 200 dev/carry/var/nofork/qattn_e2e_gpu_tests --gtest_filter='AttentionConcurrentPasses.*' > $OUT/negative_control_nofork.log 2>&1
echo "negative control nofork: rc $?"; grep -E "values differ|Which is: [1-9]|^\[  (PASSED|FAILED)" $OUT/negative_control_nofork.log | head -12
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 500 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_shard$i.log 2>&1 & done
timeout 500 $B/tests/e2e/prefill_pv_gpu_test > $OUT/gpu_test_prefill_pv.log 2>&1 &
timeout 500 $B/tests/e2e/prefill_int4_gpu_test > $OUT/gpu_test_prefill_int4.log 2>&1 &
timeout 500 $B/tests/e2e/prefill_qsmooth_gpu_test > $OUT/gpu_test_prefill_qsmooth.log 2>&1 &
timeout 500 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime.log 2>&1 &
timeout 500 $B/tests/e2e/calibrate_gpu_test > $OUT/gpu_test_calibrate.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]" $f | head -12; done
grep -h "concurrent passes" $OUT/gpu_test_e2e_shard*.log
export PATH=/opt/torch/.venv/bin:$PATH QATTN_BENCH_CACHE=/tmp/qb7.db
for round in 1 2; do
  for mode in off:0 on:1; do
    n=${mode%%:*}; v=${mode#*:}
    QATTN_CONCURRENT_PASSES=$v timeout 100 bash bench/run_h100.sh $B --grid formats --tune off --variants qattn_int8_fp8,qattn_int8_per_token,qattn_int4_fp8 --d 128 --n 1024,4096 --out /tmp/c_${n}_$round > /tmp/c_${n}_$round.log 2>&1 || tail -3 /tmp/c_${n}_$round.log
  done
done
for f in /tmp/c_*_[12]; do echo "=== $f"; cat $f/prefill_*.md; done > $OUT/concurrent_passes_ab_1k4k_int4.md
python3 bench/compare_runs.py /tmp/c_off_1/prefill_*.json /tmp/c_on_1/prefill_*.json
python3 bench/compare_runs.py /tmp/c_off_2/prefill_*.json /tmp/c_on_2/prefill_*.json
