#!/usr/bin/env bash
# Session 18, run 9: d 64 INT8 on int8 Q (QATTN_FUSE_Q=0, the plain form, with TMA) against the fused-Q default, A B A B, with flash.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export QATTN_BENCH_CACHE=/tmp/qb.db
for r in a b; do for fq in 1 0; do
  QATTN_FUSE_Q=$fq timeout 150 bash bench/run_h100.sh $B --tune off --variants sdpa_flash,qattn_int8_per_token --d 64 --n 4096 --out /tmp/q_${r}_$fq > /dev/null 2>&1
  grep -E "\| (kernel|sdpa) \|" /tmp/q_${r}_$fq/prefill_*.md | sed "s/^/$r fuse_q=$fq /" | cut -d'|' -f1-10
done; done
for r in a b; do for fq in 1 0; do echo "=== $r QATTN_FUSE_Q=$fq"; cat /tmp/q_${r}_$fq/prefill_*.md; done; done > $OUT/fuse_q_ab_d64_tma.md
