#!/usr/bin/env bash
# Session 20, run 11: the two GPU test files whose initializers changed (warnings only): the registry
# tests in qattn_e2e_gpu_tests and the FlashQ decode test.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
timeout 400 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='RegistryGpu.*' > $OUT/gpu_test_registry.log 2>&1 &
timeout 400 $B/tests/e2e/decode_flashq_gpu_test > $OUT/gpu_test_decode_flashq.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f; done
