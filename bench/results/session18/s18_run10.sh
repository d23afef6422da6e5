#!/usr/bin/env bash
# Session 18, run 10: the half last tile (TMA form). A B A B against d910a3b (no half tile), then the e2e GPU suite.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export QATTN_BENCH_CACHE=/tmp/qb.db
for r in a b; do for v in var/base build; do
  extra=""; [[ $r == a && $v == var/base ]] && extra="sdpa_flash,"
  LD_LIBRARY_PATH=dev/carry/$v/lib:/usr/local/cuda/lib64 timeout 150 bash bench/run_h100.sh dev/carry/$v --tune off --variants ${extra}qattn_int8_per_token,qattn_int8_fp8 --d 64,128 --n 4096 --out /tmp/h_${r}_${v//\//_} > /dev/null 2>&1
  grep -E "\| (kernel|sdpa) \|" /tmp/h_${r}_${v//\//_}/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9,13,14
done; done
for r in a b; do for v in var_base build; do echo "=== $r $v"; cat /tmp/h_${r}_$v/prefill_*.md; done; done > $OUT/half_tile_ab.md
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
for i in 0 1 2; do GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 500 $B/tests/e2e/qattn_e2e_gpu_tests > $OUT/gpu_test_e2e_half_shard$i.log 2>&1 & done
wait
for f in $OUT/gpu_test_e2e_half_shard*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $f | head -12; grep -c "^\[       OK" $f; done
echo "tma pairs equal: $(grep -h 'values differ' $OUT/gpu_test_e2e_half_shard*.log | grep -c ', 0 values differ') differing: $(grep -h 'values differ' $OUT/gpu_test_e2e_half_shard*.log | grep -vc ', 0 values differ')"
