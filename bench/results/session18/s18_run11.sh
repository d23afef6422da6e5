#!/usr/bin/env bash
# Session 18, run 11: the half last tile at d 64 only: the d 64 benchmark rows with flash, then the TMA / d 64 GPU tests.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export QATTN_BENCH_CACHE=/tmp/qb.db
timeout 100 bash bench/run_h100.sh $B --tune off --variants sdpa_flash,qattn_int8_per_token --d 64 --n 4096 --out /tmp/h11 > /dev/null 2>&1
cp /tmp/h11/prefill_*.md $OUT/prefill_d64_half_tile.md; grep -E "\| (kernel|sdpa) \|" $OUT/prefill_d64_half_tile.md | cut -d'|' -f2-12
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
F='AttentionTma.*:Kernels/AttentionVsReference.*/qki8*_d64*:AttentionCausalBands.*'
for i in 0 1; do GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i timeout 170 $B/tests/e2e/qattn_e2e_gpu_tests --gtest_filter="$F" > $OUT/gpu_test_half_shard$i.log 2>&1 & done
wait
for f in $OUT/gpu_test_half_shard*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f | head -8; grep -c "^\[       OK" $f; done
echo "tma pairs equal: $(grep -h 'values differ' $OUT/gpu_test_half_shard*.log | grep -c ', 0 values differ') differing: $(grep -h 'values differ' $OUT/gpu_test_half_shard*.log | grep -vc ', 0 values differ')"
