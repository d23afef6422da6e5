#!/usr/bin/env bash
# Session 18, run 7: exact row sums on the tensor cores (kSumOnTensorCores) against HADD2s, A B A B.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
for r in a b; do for v in summma0 summma1; do
  extra=""; [[ $r == a && $v == summma0 ]] && extra="sdpa_flash,"
  timeout 150 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants ${extra}qattn_int8_per_token --d 64,128 --n 4096,16384 --out /tmp/s_${r}_$v > /tmp/s_${r}_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$v.log; }
  grep -E "\| (kernel|sdpa) \|" /tmp/s_${r}_$v/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9,13,14
done; done
for r in a b; do for v in summma0 summma1; do echo "=== $r $v"; cat /tmp/s_${r}_$v/prefill_*.md; done; done > $OUT/summma_ab.md
