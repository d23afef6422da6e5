#!/usr/bin/env bash
# Session 22, run 3: v2h (run 2) against l2q (v2h + no Σ P̂ register with the exact sum + the one-warpgroup Q address uniform), same machine.
# A B B A B A A B on d 64 4k (flash beside), then d 64 / 128 at 4k and 16k with int8 and fp8 P·V; SASS of both.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
mkdir -p /tmp/j
(export PATH=$PATH:/usr/local/cuda/bin; cd dev/carry/sass && for f in *.cubin; do cuobjdump -sass $f > /tmp/${f%.cubin}.sass 2>&1; echo "$f $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' /tmp/${f%.cubin}.sass) instructions"; done; tar -C /tmp -czf $OUT/sass.tgz $(cd /tmp && ls *.sass))
i=0
for v in v2h l2q l2q v2h l2q v2h v2h l2q; do
  i=$((i+1))
  QATTN_BENCH_CACHE=/tmp/qb_$v.db timeout 120 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants sdpa_flash,qattn_int8_per_token --d 64 --n 4096 --out /tmp/r$i > /tmp/r$i.log 2>&1
  echo "=== round $i $v rc $?" >> $OUT/ab_d64_4k.md
  cat /tmp/r$i/prefill_*.md >> $OUT/ab_d64_4k.md
  cp /tmp/r$i/prefill_*.json /tmp/j/r${i}_$v.json
  echo "round $i $v"; grep -E "\| (kernel|sdpa) \|" /tmp/r$i/prefill_*.md | cut -d'|' -f2-10
done
for v in v2h l2q; do
  QATTN_BENCH_CACHE=/tmp/qb_$v.db timeout 200 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token,qattn_int8_fp8 --d 64,128 --n 4096,16384 --out /tmp/w$v > /tmp/w$v.log 2>&1
  echo "=== wide $v rc $?" >> $OUT/ab_wide.md
  cat /tmp/w$v/prefill_*.md >> $OUT/ab_wide.md
  cp /tmp/w$v/prefill_*.json /tmp/j/wide_$v.json
  echo "wide $v"; grep -E "\| (kernel) \|" /tmp/w$v/prefill_*.md | cut -d'|' -f2-10,13-16
done
tar -C /tmp/j -czf $OUT/json.tgz .
