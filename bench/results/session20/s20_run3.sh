#!/usr/bin/env bash
# Session 20, run 3: the running-max headroom (QATTN_INT8_HEADROOM 0 / 0.5 / 1.0, variant libraries
# dev/carry/var/h05, h10), same run, A B C A B C: INT8 per token (int8 P·V, smooth=kv) and INT8 + FP8 P·V
# (smooth=kv), d 64 / 128, 4k / 16k, kernel only, with the bench's accuracy columns.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb3.db
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
for round in 1 2; do
  for lib in base:dev/carry/build h05:dev/carry/var/h05 h10:dev/carry/var/h10; do
    n=${lib%%:*}; b=${lib#*:}
    timeout 120 bash bench/run_h100.sh $b --tune off --variants sdpa_flash,qattn_int8_per_token,qattn_int8_fp8 --d 64,128 --n 4096,16384 --out /tmp/h_${n}_$round > /tmp/h_${n}_$round.log 2>&1 || tail -3 /tmp/h_${n}_$round.log
    echo "== $n round $round $(date +%T)"; grep -E "\| (kernel|sdpa) \|" /tmp/h_${n}_$round/prefill_*.md | cut -d'|' -f2-10,12-13
  done
done
for f in /tmp/h_*_[12]; do echo "=== $f"; cat $f/prefill_*.md; done > $OUT/headroom_ab.md
