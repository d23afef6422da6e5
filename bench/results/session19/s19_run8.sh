#!/usr/bin/env bash
# Session 19, run 8: the prefill GPU suites at the session's code (layout checks, tensor maps encoded once
# per prepared call): e2e (3 shards, incl. AttentionLayout and the TMA bit-identity pairs), pv, int4,
# qsmooth and runtime, in parallel.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 560 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_shard$i.log 2>&1 & done
timeout 560 $B/tests/e2e/prefill_pv_gpu_test > $OUT/gpu_test_prefill_pv.log 2>&1 &
timeout 560 $B/tests/e2e/prefill_int4_gpu_test > $OUT/gpu_test_prefill_int4.log 2>&1 &
timeout 560 $B/tests/e2e/prefill_qsmooth_gpu_test > $OUT/gpu_test_prefill_qsmooth.log 2>&1 &
timeout 560 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]" $f | head -12; grep -c "^\[       OK" $f; done
echo "tma pairs equal: $(grep -h 'values differ' $OUT/gpu_test_e2e_shard*.log | grep -c ', 0 values differ') differing: $(grep -h 'values differ' $OUT/gpu_test_e2e_shard*.log | grep -vc ', 0 values differ')"
grep -h "layout" $OUT/gpu_test_e2e_shard*.log | grep metrics
