#!/usr/bin/env bash
# Session 18, run 8: the final code (d910a3b): e2e GPU suite in 3 shards, runtime GPU tests.
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 560 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_final_shard$i.log 2>&1 & done
timeout 560 $B/tests/runtime/qattn_runtime_gpu_tests > $OUT/gpu_test_runtime_final.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f | head -12; grep -c "^\[       OK" $f; done
grep -h "values differ" $OUT/gpu_test_e2e_final_shard*.log | grep -c ", 0 values differ"
grep -h "values differ" $OUT/gpu_test_e2e_final_shard*.log | grep -vc ", 0 values differ"
