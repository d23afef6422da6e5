#!/usr/bin/env bash
# Session 19, run 11: at the last commit (the refusal check shared by the tests): the layout and TMA tests
# of the e2e suite, and the runtime GPU tests.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
timeout 400 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionLayout.*:AttentionTma.*' > $OUT/gpu_test_e2e_layout_tma_last.log 2>&1 &
timeout 400 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime_last.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]" $f | head -8; grep -c "^\[       OK" $f; done
echo "tma pairs equal: $(grep -h 'values differ' $OUT/gpu_test_e2e_layout_tma_last.log | grep -c ', 0 values differ') differing: $(grep -h 'values differ' $OUT/gpu_test_e2e_layout_tma_last.log | grep -vc ', 0 values differ')"
