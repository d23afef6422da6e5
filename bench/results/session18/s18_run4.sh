#!/usr/bin/env bash
# Session 18, run 4: the TMA form, after the context fix: e2e GPU suite (3 shards), pv and int4 suites (attention() runs _tma).
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 560 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_tma_shard$i.log 2>&1 & done
timeout 560 $B/tests/e2e/prefill_pv_gpu_test > $OUT/gpu_test_prefill_pv_tma.log 2>&1 &
timeout 560 $B/tests/e2e/prefill_int4_gpu_test > $OUT/gpu_test_prefill_int4_tma.log 2>&1 &
wait
for f in $OUT/gpu_test_*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f | head -12; grep -c "^\[       OK" $f; done
grep -h "values differ" $OUT/gpu_test_e2e_tma_shard*.log | awk '{print $3, $4, $5, $(NF-6), $(NF-5), $(NF-4), $(NF-3)}' | head -60
