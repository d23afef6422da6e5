#!/usr/bin/env bash
# Session 20, run 12: after the review mend of attention_call.cpp (one env_off(), the fork / join loop
# over the side streams in use; behaviour unchanged): the concurrent-pass test (1 and 2 side streams) and
# the runtime tests.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
timeout 300 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter='AttentionConcurrentPasses.*' > $OUT/gpu_test_concurrent_passes_review.log 2>&1 &
timeout 300 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime_review.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f; done
