#!/usr/bin/env bash
# Session 19, run 9: the GPU suites not run in run 8: decode (gemv, flashq, tuning, unified max, flashq
# pack), calibrate, pretune; prefill_int4 again (fresh draws) and on run 8's failing draw (QATTN_SEED).
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for t in decode_gemv_gpu_test decode_flashq_gpu_test decode_tuning_gpu_test decode_umax_gpu_test qattn_flashq_gpu_tests calibrate_gpu_test pretune_gpu_test prefill_int4_gpu_test; do
  timeout 560 $B/tests/e2e/$t > $OUT/gpu_test_$t.log 2>&1 &
done
QATTN_SEED=5188256669669019225 timeout 560 $B/tests/e2e/prefill_int4_gpu_test --gtest_filter='*per_block*' > $OUT/gpu_test_prefill_int4_seed_replay.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]" $f | head -12; grep -c "^\[       OK" $f; done
grep -h "d=256 causal gqa=2 smooth=k arch=sm_90a default .*q=63" $OUT/gpu_test_prefill_int4_seed_replay.log | head -3
