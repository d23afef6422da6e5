#!/usr/bin/env bash
# Session 18, run 1: upper bounds at d 64 / 4k (INT8 per token): headroom 0.5 / 1.0, no K/V loads in the
# loop, no R shifts, no exact sum; two rounds A B C ..., the flash baseline in round 1.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
vars="base h05 h10 noload noraise nosum"
for r in 1 2; do
  for v in $vars; do
    extra=""; [[ $r == 1 && $v == base ]] && extra="sdpa_flash,"
    timeout 150 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants ${extra}qattn_int8_per_token --d 64 --n 4096 --out /tmp/r${r}_$v > /tmp/r${r}_$v.log 2>&1 || echo "$v r$r failed"
    grep -E "\| (kernel|sdpa) \|" /tmp/r${r}_$v/prefill_*.md | sed "s/^/r$r $v /" | cut -d'|' -f1-8,11,12
  done
done
for r in 1 2; do for v in $vars; do echo "=== r$r $v"; cat /tmp/r${r}_$v/prefill_*.md; done; done > $OUT/s18_run1_all.md 2>&1
tail -5 /tmp/r1_base.log
