#!/usr/bin/env bash
# Session 20, run 2: the d 64 4k point of issue 2, measured as a distribution: 10 rounds of the
# benchmark (flash and the INT8 kernel, causal and not), alternating which variant runs first, on one
# machine; the SM clock logged every 100 ms. Each round is the standard benchmark command.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export QATTN_BENCH_CACHE=/tmp/qb.db
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
smi=$!
for r in 0 1 2 3 4 5 6 7 8 9; do
  if (( r % 2 )); then v=qattn_int8_per_token,sdpa_flash; else v=sdpa_flash,qattn_int8_per_token; fi
  timeout 100 bash bench/run_h100.sh $B --tune off --variants $v --d 64 --n 4096 --out /tmp/r$r > /tmp/r$r.log 2>&1 || tail -3 /tmp/r$r.log
  echo "round $r ($v) $(date +%T)"; grep -E "\| (kernel|sdpa) \|" /tmp/r$r/prefill_*.md | cut -d'|' -f5-9
done
kill $smi
for r in 0 1 2 3 4 5 6 7 8 9; do echo "=== round $r"; cat /tmp/r$r/prefill_*.md; done > $OUT/d64_4k_rounds.md
mkdir -p $OUT/json; for r in 0 1 2 3 4 5 6 7 8 9; do cp /tmp/r$r/prefill_*.json $OUT/json/round$r.json; done
