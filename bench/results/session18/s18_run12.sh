#!/usr/bin/env bash
# Session 18, run 12: the final code (TMA + the d 64 half last tile): e2e (3 shards), pv, int4 and runtime GPU suites.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 540 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_last_shard$i.log 2>&1 & done
timeout 540 $B/tests/e2e/prefill_pv_gpu_test > $OUT/gpu_test_prefill_pv_last.log 2>&1 &
timeout 540 $B/tests/e2e/prefill_int4_gpu_test > $OUT/gpu_test_prefill_int4_last.log 2>&1 &
timeout 540 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime_last.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f | head -8; grep -c "^\[       OK" $f; done
echo "tma pairs equal: $(grep -h 'values differ' $OUT/gpu_test_e2e_last_shard*.log | grep -c ', 0 values differ') differing: $(grep -h 'values differ' $OUT/gpu_test_e2e_last_shard*.log | grep -vc ', 0 values differ')"
