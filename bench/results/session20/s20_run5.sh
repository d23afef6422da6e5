#!/usr/bin/env bash
# Session 20, run 5: (1) the new AttentionConcurrentPasses test against two broken builds (negative
# controls: the side stream does not wait for the caller's earlier work / the caller does not wait for
# the side stream): both must fail; (2) the prefill GPU suites at the session's code (V's passes on the
# side stream by default): e2e (3 shards, the new test included), pv, int4, qsmooth, runtime, calibrate,
# pretune, in parallel.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for v in nofork nojoin; do
  timeout 200 dev/carry/var/$v/qattn_e2e_gpu_tests --gtest_filter='AttentionConcurrentPasses.*' > $OUT/negative_control_$v.log 2>&1
  echo "negative control $v: rc $?"; grep -E "metrics|values differ|Expected|Which is|^\[  (PASSED|FAILED)" $OUT/negative_control_$v.log | head -20
done
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 500 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_shard$i.log 2>&1 & done
timeout 500 $B/tests/e2e/prefill_pv_gpu_test > $OUT/gpu_test_prefill_pv.log 2>&1 &
timeout 500 $B/tests/e2e/prefill_int4_gpu_test > $OUT/gpu_test_prefill_int4.log 2>&1 &
timeout 500 $B/tests/e2e/prefill_qsmooth_gpu_test > $OUT/gpu_test_prefill_qsmooth.log 2>&1 &
timeout 500 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime.log 2>&1 &
timeout 500 $B/tests/e2e/calibrate_gpu_test > $OUT/gpu_test_calibrate.log 2>&1 &
timeout 500 $B/tests/e2e/pretune_gpu_test > $OUT/gpu_test_pretune.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]" $f | head -12; done
grep -h "concurrent passes" $OUT/gpu_test_e2e_shard*.log
