#!/usr/bin/env bash
# Session 19, run 7: the bound of a persistent kernel's gain: every other CTA exits and the others run
# their KV loop twice in one pipeline (same work, half the CTA prologues / epilogues; wrong output,
# timing only; non-causal), A B A B against base, d 64 4k / 16k.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
rm -rf /tmp/s_*
for r in a b; do for v in base pair; do
  timeout 200 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token --d 64 --n 4096,16384 --causal no --out /tmp/s_${r}_$v > /tmp/s_${r}_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$v.log; }
  grep -E "\| (kernel|sdpa) \|" /tmp/s_${r}_$v/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9,13,14
done; done
for f in /tmp/s_*/prefill_*.md; do echo "=== $f"; cat $f; done > $OUT/pair_bound.md
