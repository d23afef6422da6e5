#!/usr/bin/env bash
# Session 22, run 4: the committed kernel (base), v2h (run 2), l2q (run 3) and l2qs (l2q with the TMA form's K-scale address kept in
# shared memory instead of spilled), same machine, interleaved rounds on d 64 4k (flash beside), then
# d 64 / 128 at 4k and 16k with int8 and fp8 P·V for l2qs.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
mkdir -p /tmp/j
i=0
for v in base l2qs l2q v2h l2qs base l2q v2h l2qs base; do
  i=$((i+1))
  QATTN_BENCH_CACHE=/tmp/qb_$v.db timeout 120 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants sdpa_flash,qattn_int8_per_token --d 64 --n 4096 --out /tmp/r$i > /tmp/r$i.log 2>&1
  echo "=== round $i $v rc $?" >> $OUT/ab_d64_4k.md
  cat /tmp/r$i/prefill_*.md >> $OUT/ab_d64_4k.md
  cp /tmp/r$i/prefill_*.json /tmp/j/r${i}_$v.json
  echo "round $i $v"; grep -E "\| (kernel|sdpa) \|" /tmp/r$i/prefill_*.md | cut -d'|' -f2-10
done
for v in l2qs; do
  QATTN_BENCH_CACHE=/tmp/qb_$v.db timeout 200 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token,qattn_int8_fp8 --d 64,128 --n 4096,16384 --out /tmp/w$v > /tmp/w$v.log 2>&1
  echo "=== wide $v rc $?" >> $OUT/ab_wide.md
  cat /tmp/w$v/prefill_*.md >> $OUT/ab_wide.md
  cp /tmp/w$v/prefill_*.json /tmp/j/wide_$v.json
  echo "wide $v"; grep -E "\| (kernel) \|" /tmp/w$v/prefill_*.md | cut -d'|' -f2-10,13-16
done
tar -C /tmp/j -czf $OUT/json.tgz .
