#!/usr/bin/env bash
# Session 20, run 9: the three attention tests whose output comparison moved into values_differ()
# (test code only): causal bands, TMA against cp.async, concurrent passes.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
timeout 500 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionCausalBands.*:AttentionTma.*:AttentionConcurrentPasses.*' > $OUT/gpu_test_values_differ.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/gpu_test_values_differ.log
echo "tma pairs equal: $(grep -c ', 0 values differ' $OUT/gpu_test_values_differ.log) differing: $(grep 'values differ' $OUT/gpu_test_values_differ.log | grep -vc ', 0 values differ')"
