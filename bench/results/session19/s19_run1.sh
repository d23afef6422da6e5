#!/usr/bin/env bash
# Session 19, run 1: d 64 INT8 per token, bm 64 / 4 warps / 4 CTAs per SM (base) against bm 128 / 8 warps /
# 2 CTAs per SM (two warpgroups share each K / V^T tile) with 2, 3, 4 stages; A B A B, flash in round a.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
for r in a b; do for v in base w8s2 w8s3 w8s4; do
  extra=""; [[ $r == a && $v == base ]] && extra="sdpa_flash,"
  timeout 150 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants ${extra}qattn_int8_per_token --d 64 --n 4096,16384 --out /tmp/s_${r}_$v > /tmp/s_${r}_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$v.log; }
  grep -E "\| (kernel|sdpa) \|" /tmp/s_${r}_$v/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9,13,14
done; done
for r in a b; do for v in base w8s2 w8s3 w8s4; do echo "=== $r $v"; cat /tmp/s_${r}_$v/prefill_*.md; done; done > $OUT/w8_ab.md
