#!/usr/bin/env bash
# Session 21, run 4: what ptxas's wgmma serialization (C7511) costs, on one form against itself. The
# committed kernel (base) and a variant that keeps the TMA form's load coordinates in shared memory
# (places) flip which d 64 causal forms ptxas serializes: base serializes _tma (QATTN_FUSE_Q=0) and not
# _qf_tma (the default); places the reverse. A B B A B A A B, both forms each round.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
mkdir -p /tmp/j
i=0
for v in base places places base places base base places; do
  for fq in 1 0; do
    i=$((i+1))
    QATTN_FUSE_Q=$fq QATTN_BENCH_CACHE=/tmp/qb_${v}_$fq.db timeout 120 bash bench/run_h100.sh dev/carry/var/$v --tune off --variants qattn_int8_per_token --d 64 --n 4096 --out /tmp/r$i > /tmp/r$i.log 2>&1
    echo "=== run $i $v QATTN_FUSE_Q=$fq rc $?" >> $OUT/serialization_ab_d64_4k.md
    cat /tmp/r$i/prefill_*.md >> $OUT/serialization_ab_d64_4k.md
    cp /tmp/r$i/prefill_*.json /tmp/j/r${i}_${v}_fq$fq.json
    echo "run $i $v fuse_q=$fq $(grep -E '\| kernel \|' /tmp/r$i/prefill_*.md | cut -d'|' -f5,8 | tr '\n' ' ')"
  done
done
tar -C /tmp/j -czf $OUT/json.tgz .
