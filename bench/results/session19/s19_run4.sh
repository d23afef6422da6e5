#!/usr/bin/env bash
# Session 19, run 4: the launch itself (e0: every CTA returns at once), no tiles (t0), no tiles and no
# V-scale / mean loads in the epilogue (t0c); d 64 4k, two rounds (timing only, wrong output).
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
rm -rf /tmp/s_*
for r in a b; do for v in e0 t0 t0c; do
  timeout 100 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token --d 64 --n 4096 --out /tmp/s_${r}_$v > /tmp/s_${r}_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$v.log; }
  grep -E "\| (kernel) \|" /tmp/s_${r}_$v/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9
done; done
for f in /tmp/s_[ab]_*/prefill_*.md; do echo "=== $f"; cat $f; done > $OUT/fixed_cost_launch.md
