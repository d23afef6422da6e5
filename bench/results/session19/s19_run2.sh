#!/usr/bin/env bash
# Session 19, run 2: the per-CTA fixed cost of the d 64 INT8 kernel: builds that cap a CTA's KV tiles at
# 1, 2, 4, 8, 16 (wrong output: timing only) against the full 32 (base), 4k non-causal, two rounds.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
for r in a b; do for v in base t1 t2 t4 t8 t16; do
  timeout 100 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token --d 64 --n 4096 --causal no --out /tmp/s_${r}_$v > /tmp/s_${r}_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$v.log; }
  grep -E "\| (kernel|sdpa) \|" /tmp/s_${r}_$v/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9
done; done
for r in a b; do for v in base t1 t2 t4 t8 t16; do echo "=== $r $v"; cat /tmp/s_${r}_$v/prefill_*.md; done; done > $OUT/fixed_cost.md
