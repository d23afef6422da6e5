#!/usr/bin/env bash
# Session 18, run 5: issue 2's benchmark at the TMA code (same run as SDPA), A/B against QATTN_TMA=0, the main job.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export QATTN_BENCH_CACHE=/tmp/qb.db
timeout 200 bash bench/run_h100.sh $B --tune off --variants sdpa_flash,sdpa_cudnn,qattn_fp16,qattn_int8_per_token --d 64,128 --n 4096,16384 --out /tmp/i2 > /tmp/i2.log 2>&1 || tail -5 /tmp/i2.log
cp /tmp/i2/prefill_*.md $OUT/prefill_issue2_tma.md; cp /tmp/i2/prefill_*.json $OUT/prefill_issue2_tma.json
grep -E "\| (kernel|sdpa) \|" $OUT/prefill_issue2_tma.md | cut -d'|' -f2-11
for r in a b; do for tma in 0 1; do
  QATTN_TMA=$tma timeout 150 bash bench/run_h100.sh $B --tune off --variants qattn_int8_per_token --d 64,128 --n 4096,16384 --out /tmp/ab_${r}_$tma > /dev/null 2>&1
  grep -E "\| kernel \|" /tmp/ab_${r}_$tma/prefill_*.md | sed "s/^/$r tma=$tma /" | cut -d'|' -f1-9
done; done
for r in a b; do for tma in 0 1; do echo "=== $r QATTN_TMA=$tma"; cat /tmp/ab_${r}_$tma/prefill_*.md; done; done > $OUT/tma_ab_int8.md
timeout 200 $B/examples/qattn_example_llama3_layer > $OUT/main_job.log 2>&1; echo "main job rc=$?"; tail -12 $OUT/main_job.log
