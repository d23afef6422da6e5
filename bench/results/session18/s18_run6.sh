#!/usr/bin/env bash
# Session 18, run 6: issue 3's d 128 formats at the TMA code (kernel and e2e, same run as SDPA flash / cuDNN).
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export QATTN_BENCH_CACHE=/tmp/qb.db
timeout 400 bash bench/run_h100.sh $B --tune off --variants sdpa_flash,sdpa_cudnn,qattn_int8_per_token,qattn_int8_fp8,qattn_int8_fp8_2lvl --d 128 --n 4096,8192,16384 --out /tmp/f > /tmp/f.log 2>&1 || tail -5 /tmp/f.log
cp /tmp/f/prefill_*.md $OUT/prefill_formats_d128_tma.md; cp /tmp/f/prefill_*.json $OUT/prefill_formats_d128_tma.json
grep -E "\| (kernel|e2e|sdpa) \|" $OUT/prefill_formats_d128_tma.md | cut -d'|' -f2-12
