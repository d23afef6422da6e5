#!/usr/bin/env bash
# Session 22, run 8, at the final code: whether the per_tensor / per_tensor smooth=k kernel (the main job's
# row that measured cos 0.99464 < 0.995 in run 6, 0.9961 / 0.9959 in run 7) computes the same as the
# committed kernel on the same seeded inputs (bench harness, both libraries); issue 2's benchmark; ten
# rounds of the d 64 4k point (flash and the INT8 kernel; the order of the two alternates).
set -o pipefail
B=dev/carry/build
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export PATH=/opt/torch/.venv/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.csv 2>&1
mkdir -p /tmp/j
for lib in dev/carry/var/base dev/carry/build; do
  n=$(basename $(dirname $lib/x))
  QATTN_LIBRARY=$lib/lib/libqattn.so PYTHONPATH=python:bench python3 -c "
import sys, bench_utils as bu, bench_prefill as bp
bu.QATTN_VARIANTS['qattn_int8_per_tensor_k'] = 'prefill qk=int8:per_tensor pv=int8:per_tensor out=fp16 d={d}{causal} smooth=k'
bu.ALL_VARIANTS.append('qattn_int8_per_tensor_k')
sys.exit(bp.main(['--tune', 'off', '--variants', 'qattn_int8_per_tensor_k,qattn_int8_per_token', '--d', '64,128', '--n', '4096', '--out', '/tmp/pt_' + sys.argv[1], '--cache', '/tmp/pt_' + sys.argv[1] + '.db']))
" $n > /tmp/pt_$n.log 2>&1
  echo "== same inputs, $lib rc $?"; grep -E "\| kernel \|" /tmp/pt_$n/prefill_*.md | cut -c1-200
  cat /tmp/pt_$n/prefill_*.md >> $OUT/per_tensor_same_inputs.md
done
timeout 240 bash bench/run_h100.sh $B --tune off --variants sdpa_flash,sdpa_cudnn,qattn_fp16,qattn_int8_per_token --d 64,128 --n 1024,4096,16384 --out /tmp/i2 > /tmp/i2.log 2>&1; echo "issue2 rc $?"
cp /tmp/i2/prefill_*.md $OUT/prefill_issue2.md; cp /tmp/i2/prefill_*.json /tmp/j/prefill_issue2.json
grep -E "\| (kernel|e2e|sdpa) \|" $OUT/prefill_issue2.md | grep -E "\| (4096|16384) \|" | cut -d'|' -f2-12
for i in 1 2 3 4 5 6 7 8 9 10; do
  if (( i % 2 )); then vs=sdpa_flash,qattn_int8_per_token; else vs=qattn_int8_per_token,sdpa_flash; fi
  QATTN_BENCH_CACHE=/tmp/qb_r.db timeout 120 bash bench/run_h100.sh $B --tune off --variants $vs --d 64 --n 4096 --out /tmp/d$i > /tmp/d$i.log 2>&1
  echo "=== round $i ($vs) rc $?" >> $OUT/d64_4k_rounds.md
  cat /tmp/d$i/prefill_*.md >> $OUT/d64_4k_rounds.md
  cp /tmp/d$i/prefill_*.json /tmp/j/round$i.json
  echo "round $i"; grep -E "\| (kernel|sdpa) \|" /tmp/d$i/prefill_*.md | cut -d'|' -f5-10
done
tar -C /tmp/j -czf $OUT/json.tgz .
