#!/usr/bin/env bash
# Session 19, run 6: upper bounds (wrong output, timing only) of two loop synchronisations of the TMA form:
# no __syncthreads per tile (nobar), no wait for P·V at the end of a tile (nopvwait, deferred to the next
# Q·K^T wait); d 64 4k / 16k, A B A B against base.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
rm -rf /tmp/s_*
for r in a b; do for v in base nobar nopvwait; do
  timeout 200 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token --d 64 --n 4096,16384 --out /tmp/s_${r}_$v > /tmp/s_${r}_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$v.log; }
  grep -E "\| (kernel|sdpa) \|" /tmp/s_${r}_$v/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9,13,14
done; done
for f in /tmp/s_*/prefill_*.md; do echo "=== $f"; cat $f; done > $OUT/sync_bounds.md
