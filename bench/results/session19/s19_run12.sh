#!/usr/bin/env bash
# Session 19, run 12: does the order of runs move the d 64 4k times? On a fresh machine, the same bench
# four times (flash and INT8 per token, d 64 4k): twice with the default 6 warm-up calls, twice with 60;
# the SM clock and power logged every 100 ms meanwhile.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export QATTN_BENCH_CACHE=/tmp/qb.db
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 > $OUT/clocks.csv 2>&1 &
smi=$!
for r in a:6 b:6 c:60 d:60; do
  n=${r%%:*}; w=${r#*:}
  timeout 150 bash bench/run_h100.sh $B --tune off --warmup $w --variants sdpa_flash,qattn_int8_per_token --d 64 --n 4096 --out /tmp/w_$n > /tmp/w_$n.log 2>&1 || tail -3 /tmp/w_$n.log
  echo "$(date +%T.%N | cut -c1-12) $n warmup=$w"; grep -E "\| (kernel|sdpa) \|" /tmp/w_$n/prefill_*.md | cut -d'|' -f2-10
done
kill $smi
for n in a b c d; do echo "=== $n"; cat /tmp/w_$n/prefill_*.md; done > $OUT/warmup_order.md
