#!/usr/bin/env bash
# Session 22, run 9: the launched forms that ptxas now serializes (CPU twins test: per_tensor Q/K `_tma`
# and int4 per_thread `_qf_tma`, d 64, non-causal) against the committed kernel, same machine, A B B A.
set -o pipefail
export PATH=/opt/torch/.venv/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
i=0
for lib in dev/carry/var/base dev/carry/build dev/carry/build dev/carry/var/base; do
  i=$((i+1)); n=$(basename $lib)
  QATTN_LIBRARY=$lib/lib/libqattn.so PYTHONPATH=python:bench python3 -c "
import sys, bench_utils as bu, bench_prefill as bp
bu.QATTN_VARIANTS['qattn_int4_thread_int8pv'] = 'prefill qk=int4:per_thread pv=int8:per_channel out=fp16 d={d}{causal} smooth=kv'
bu.ALL_VARIANTS.append('qattn_int4_thread_int8pv')
sys.exit(bp.main(['--tune', 'off', '--variants', 'qattn_int8_per_tensor,qattn_int4_thread_int8pv', '--d', '64', '--n', '4096,16384', '--out', '/tmp/s' + sys.argv[1], '--cache', '/tmp/s' + sys.argv[1] + '.db']))
" $i > /tmp/s$i.log 2>&1
  echo "=== round $i $n rc $?" >> $OUT/serialized_forms_ab.md; cat /tmp/s$i/prefill_*.md >> $OUT/serialized_forms_ab.md
  echo "round $i $n"; grep -E "\| kernel \|" /tmp/s$i/prefill_*.md | cut -d'|' -f2-9
done
