#!/usr/bin/env bash
# Session 18, run 3: the TMA form. e2e GPU suite (3 shards, incl. AttentionTma bit-identity) and runtime GPU tests.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 560 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_tma_shard$i.log 2>&1 & done
timeout 560 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime_tma.log 2>&1 &
wait
for f in $OUT/gpu_test_e2e_tma_shard*.log $OUT/gpu_test_runtime_tma.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|SKIPPED \]" $f | head -20; grep -c "^\[       OK" $f; done
grep -h "values differ" $OUT/gpu_test_e2e_tma_shard*.log | head -60
