#!/usr/bin/env bash
# Session 19, run 3: what the per-CTA fixed cost is made of: no KV tile at all (t0), one tile (t1), with the
# fused Q off (QATTN_FUSE_Q=0: int8 Q by cp.async) and TMA off; d 64 4k non-causal, two rounds.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
export QATTN_BENCH_CACHE=/tmp/qb.db
for r in a b; do for v in t0 t1 t1:QATTN_FUSE_Q=0 t1:QATTN_TMA=0 t0:QATTN_FUSE_Q=0 base:QATTN_FUSE_Q=0 t16:QATTN_FUSE_Q=0; do
  lib=${v%%:*}; envs=""; [[ $v == *:* ]] && envs=${v#*:}
  n=${v//[:=]/_}
  env $envs timeout 100 bash bench/run_h100.sh dev/carry/var/$lib --tune off --variants qattn_int8_per_token --d 64 --n 4096 --causal no --out /tmp/s_${r}_$n > /tmp/s_${r}_$n.log 2>&1 || { echo "$v failed"; tail -3 /tmp/s_${r}_$n.log; }
  grep -E "\| (kernel|e2e) \|" /tmp/s_${r}_$n/prefill_*.md | sed "s/^/$r $v /" | cut -d'|' -f1-9
done; done
for f in /tmp/s_[ab]_*/prefill_*.md; do echo "=== $f"; cat $f; done > $OUT/fixed_cost_parts.md
