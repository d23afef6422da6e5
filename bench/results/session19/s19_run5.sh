#!/usr/bin/env bash
# Session 19, run 5: the output tile staged in shared memory, stored as 16-byte chunks of whole rows (st)
# against the fragment stores (base): no-tile launches (t0 / t0st) and the INT8 kernel at d 64 / 128, 4k / 16k, A B A B.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
rm -rf /tmp/s_*
for v in t0 t0st; do
  timeout 100 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token --d 64 --n 4096 --out /tmp/s_$v > /tmp/s_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_$v.log; }
  grep -E "\| (kernel) \|" /tmp/s_$v/prefill_*.md | sed "s/^/$v /" | cut -d'|' -f1-9
done
for r in a b; do for v in base st; do
  extra=""; [[ $r == a && $v == base ]] && extra="sdpa_flash,"
  timeout 200 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants ${extra}qattn_int8_per_token --d 64,128 --n 4096,16384 --out /tmp/s_${r}_$v > /tmp/s_${r}_$v.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$v.log; }
  grep -E "\| (kernel|sdpa) \|" /tmp/s_${r}_$v/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9,13,14
done; done
for f in /tmp/s_*/prefill_*.md; do echo "=== $f"; cat $f; done > $OUT/staged_out_ab.md
