#!/usr/bin/env bash
# Session 20, run 4: V's quantization passes on a side stream beside K's (RuntimeOptions::concurrent_passes,
# default on in this build) against one stream (QATTN_CONCURRENT_PASSES=0), same run, A B A B: INT8 + FP8
# P·V and INT8 per token, d 64 / 128, 4k / 8k, causal and not, kernel only and end to end.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb4.db
B=dev/carry/build
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
for round in 1 2; do
  for mode in off:0 on:1; do
    n=${mode%%:*}; v=${mode#*:}
    QATTN_CONCURRENT_PASSES=$v timeout 140 bash bench/run_h100.sh $B --tune off --variants qattn_int8_fp8,qattn_int8_per_token --d 64,128 --n 4096,8192 --out /tmp/c_${n}_$round > /tmp/c_${n}_$round.log 2>&1 || tail -3 /tmp/c_${n}_$round.log
    echo "== $n round $round $(date +%T)"
  done
done
for f in /tmp/c_*_[12]; do echo "=== $f"; cat $f/prefill_*.md; done > $OUT/concurrent_passes_ab.md
mkdir -p $OUT/json; for f in /tmp/c_*_[12]; do cp $f/prefill_*.json $OUT/json/$(basename $f).json; done
python3 bench/compare_runs.py /tmp/c_off_1/prefill_*.json /tmp/c_on_1/prefill_*.json
python3 bench/compare_runs.py /tmp/c_off_2/prefill_*.json /tmp/c_on_2/prefill_*.json
